use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use nix::{setsockopt_impl, sockopt_impl};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use tokio::io::Interest;

use super::PlainSocket;
use crate::FileRegion;
use crate::body::FileShrunk;

/// The most one `sendfile` call is asked to move; the kernel caps it near 2 GiB anyway, and
/// a bounded count keeps one huge file from starving the worker's other connections.
const MAX_SENDFILE_CHUNK: u64 = 1 << 20;

/// Raises the soft open-file limit to the hard limit: each connection is a descriptor and
/// the common soft default (1024) is far below what one worker can serve.
pub(crate) fn raise_nofile_limit() {
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "could not raise the open-file limit");
        }
    }
}

sockopt_impl!(
    /// `TCP_DEFER_ACCEPT`: rustix and socket2 have no setter for it and std's
    /// `set_deferaccept` is unstable (rust-lang/rust#119639), so it is defined with nix's
    /// macro for the options nix does not list (nix's own code makes the call).
    TcpDeferAccept,
    SetOnly,
    libc::IPPROTO_TCP,
    libc::TCP_DEFER_ACCEPT,
    usize
);

/// Has the kernel hand the listener's connections over only once their clients have sent
/// their first bytes (an HTTP request, a TLS ClientHello, a PROXY header: every client of
/// scb speaks first), or once `seconds` have passed without them (rounded up by the kernel
/// to its next SYN-ACK retransmission; a connection that has sent nothing by then is
/// accepted as without the option).
pub(crate) fn set_defer_accept(listener: BorrowedFd<'_>, seconds: u32) -> io::Result<()> {
    let seconds = usize::try_from(seconds).unwrap_or(usize::MAX);
    nix::sys::socket::setsockopt(&listener, TcpDeferAccept, &seconds).map_err(io::Error::from)
}

/// Holds back partial segments (`TCP_CORK`) while `corked`, so that a response head and
/// the file sent after it leave in full-sized segments, as nginx's `tcp_nopush` does.
///
/// Without it the head's own small segment and the region's odd-sized tail leave most of
/// the transmission to be driven by the client's acknowledgements, and on loopback the
/// client's softirq time becomes the limit (a third of the corked rate for 1 MiB files;
/// bench/RESULTS.md).
pub(crate) fn cork(socket: BorrowedFd<'_>, corked: bool) {
    if let Err(e) = rustix::net::sockopt::set_tcp_cork(socket, corked) {
        tracing::debug!(error = %e, "TCP_CORK could not be changed");
    }
}

/// Sends `region` to `stream` with `sendfile(2)`.
///
/// `sendfile` has no non-blocking mode for the file side: a page-cache miss blocks the
/// worker, the same trade nginx makes. A file that shrank under us ends with `FileShrunk`,
/// one whose stamp changed (rewritten in place) with `FileChanged`, checked before the
/// last byte goes out; either way the caller closes the connection rather than complete
/// a response that is short or mixes two versions.
pub(crate) async fn send_file(
    stream: PlainSocket<'_>,
    region: &FileRegion,
    send_timeout: Duration,
) -> io::Result<()> {
    let file = region.file();
    let mut offset = region.offset();
    let end = offset + region.len();
    if region.stamp().is_some() && region.len() > 1 {
        send_range(stream, file, &mut offset, end - 1, send_timeout).await?;
        region.verify()?;
    }
    send_range(stream, file, &mut offset, end, send_timeout).await
}

async fn send_range(
    stream: PlainSocket<'_>,
    file: &File,
    offset: &mut u64,
    end: u64,
    send_timeout: Duration,
) -> io::Result<()> {
    while *offset < end {
        let count = (end - *offset).min(MAX_SENDFILE_CHUNK) as usize;
        let result = stream.try_io(Interest::WRITABLE, |socket| {
            rustix::fs::sendfile(socket, file, Some(&mut *offset), count).map_err(io::Error::from)
        });
        match result {
            Ok(0) => {
                return Err(io::Error::other(FileShrunk {
                    missing: end - *offset,
                }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::timeout(send_timeout, stream.writable())
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "send timeout"))??;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsFd as _;
    use std::time::{Duration, Instant};

    #[test]
    fn a_connection_is_accepted_once_its_client_has_sent_something() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_defer_accept(listener.as_fd(), 1).unwrap();
        listener.set_nonblocking(true).unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // Connected on the client's side, yet nothing to accept: the kernel holds it.
        let held = listener.accept();
        assert!(
            held.as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
            "{held:?}"
        );
        client.write_all(b"GET").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut accepted, _) = loop {
            match listener.accept() {
                Ok(accepted) => break accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        };
        // The bytes that released it are there to read at once.
        accepted.set_nonblocking(true).unwrap();
        let mut got = [0u8; 3];
        assert_eq!(accepted.read(&mut got).unwrap(), 3);
        assert_eq!(&got, b"GET");
    }
}
