use std::fs::File;
use std::io;
use std::time::Duration;

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

/// Holds back partial segments (`TCP_CORK`) while `corked`, so that a response head and
/// the file sent after it leave in full-sized segments, as nginx's `tcp_nopush` does.
///
/// Without it the head's own small segment and the region's odd-sized tail leave most of
/// the transmission to be driven by the client's acknowledgements, and on loopback the
/// client's softirq time becomes the limit (a third of the corked rate for 1 MiB files;
/// bench/RESULTS.md).
pub(crate) fn cork(socket: std::os::fd::BorrowedFd<'_>, corked: bool) {
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
