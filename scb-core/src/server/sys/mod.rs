//! Operating-system calls of the server runtime, one portable function per operation.
//!
//! The Linux versions (rustix) live in `linux.rs`; `portable.rs` keeps other Unix systems
//! compiling with plain std calls.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod portable;

#[cfg(target_os = "linux")]
pub(crate) use linux::{cork, raise_nofile_limit, send_file, set_defer_accept};
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::{cork, raise_nofile_limit, send_file, set_defer_accept};

use std::io;
use std::os::fd::{AsFd as _, BorrowedFd};

use super::lazy_tcp::LazyTcpStream;

/// A plain socket under a transport: the same readiness-based writes on TCP and on a Unix
/// socket, and `TCP_CORK` on TCP only.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PlainSocket<'a> {
    /// An accepted TCP connection, registered with the reactor on its first wait.
    LazyTcp(&'a LazyTcpStream),
    /// A TCP socket under a TLS session.
    Tcp(&'a tokio::net::TcpStream),
    Unix(&'a tokio::net::UnixStream),
}

impl PlainSocket<'_> {
    /// Runs `f` (a non-blocking syscall on the socket's descriptor) if the socket is ready
    /// for `interest`, clearing the readiness when it says `WouldBlock` (at once on a
    /// socket not registered yet).
    pub(crate) fn try_io<R>(
        &self,
        interest: tokio::io::Interest,
        f: impl FnOnce(BorrowedFd<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        match self {
            Self::LazyTcp(s) => s.try_io(interest, f),
            Self::Tcp(s) => s.try_io(interest, || f(s.as_fd())),
            Self::Unix(s) => s.try_io(interest, || f(s.as_fd())),
        }
    }

    /// Ready when the socket has input (or its end, or an error) to read. Through the
    /// socket's one reader waker, as a read is: `readable()` would queue on its waiter
    /// list, a lock and several hundred instructions more.
    pub(crate) fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            Self::LazyTcp(s) => s.poll_read_ready(cx),
            Self::Tcp(s) => s.poll_read_ready(cx),
            Self::Unix(s) => s.poll_read_ready(cx),
        }
    }

    /// Waits until the socket can take more bytes.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        match self {
            Self::LazyTcp(s) => s.writable().await,
            Self::Tcp(s) => s.writable().await,
            Self::Unix(s) => s.writable().await,
        }
    }

    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::LazyTcp(s) => s.try_write(buf),
            Self::Tcp(s) => s.try_write(buf),
            Self::Unix(s) => s.try_write(buf),
        }
    }

    pub(crate) fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::LazyTcp(s) => s.try_write_vectored(bufs),
            Self::Tcp(s) => s.try_write_vectored(bufs),
            Self::Unix(s) => s.try_write_vectored(bufs),
        }
    }

    /// Sends small segments at once (`TCP_NODELAY`: Nagle's algorithm off). Nothing to
    /// do on a Unix socket.
    pub(crate) fn nodelay(&self) {
        // Refused only on a socket that is no longer connected: its next write will say
        // so.
        let _ = match self {
            Self::LazyTcp(s) => s.set_nodelay(true),
            Self::Tcp(s) => s.set_nodelay(true),
            Self::Unix(_) => Ok(()),
        };
    }

    /// Holds partial segments back (`TCP_CORK`) until uncorked: a head and the file
    /// behind it go out in full segments. Nothing to do on a Unix socket.
    pub(crate) fn cork(&self, corked: bool) {
        match self {
            Self::LazyTcp(s) => {
                // As `nodelay`: a socket no longer there says so at its next write.
                let _ = s.with_fd(|fd| cork(fd, corked));
            }
            Self::Tcp(s) => cork(s.as_fd(), corked),
            Self::Unix(_) => {}
        }
    }
}
