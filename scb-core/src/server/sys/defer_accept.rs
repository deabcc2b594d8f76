//! `TCP_DEFER_ACCEPT` on a listening socket: the one system call of the workspace that
//! needs `unsafe`. Neither rustix nor socket2 sets this option, and std's
//! `TcpStreamExt::set_deferaccept` is unstable (rust-lang/rust#119639); the call is one
//! `setsockopt` with an integer.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd};

/// Has the kernel hand the listener's connections over only once their clients have sent
/// their first bytes (an HTTP request, a TLS ClientHello, a PROXY header: every client of
/// scb speaks first), or once `seconds` have passed without them (rounded up by the kernel
/// to its next SYN-ACK retransmission; a connection that has sent nothing by then is
/// accepted as without the option).
pub(crate) fn set_defer_accept(listener: BorrowedFd<'_>, seconds: u32) -> io::Result<()> {
    let value = libc::c_int::try_from(seconds).unwrap_or(libc::c_int::MAX);
    let len = libc::socklen_t::try_from(size_of::<libc::c_int>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `listener` is borrowed for the whole call, so the descriptor stays open; the
    // option value is an initialized `c_int` that outlives the call, passed with its exact
    // size, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&raw const value).cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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
