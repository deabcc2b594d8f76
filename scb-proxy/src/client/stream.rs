//! The socket under an upstream connection: TCP, or a Unix domain socket for an app
//! server on the same machine (`unix:/run/app.sock`).
//!
//! An enum rather than a trait object or a type parameter: the pool holds connections to
//! both kinds side by side, and the client needs more than `AsyncRead + AsyncWrite` (the
//! readiness checks that tell an idle connection the upstream closed, and a split that
//! reads while the body is written), which tokio gives both types under the same names.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream, tcp, unix};

/// A connected upstream socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects to `upstream`: its Unix socket, or TCP with `TCP_NODELAY` (requests and
    /// responses are written whole; Nagle would only hold the last segment).
    pub(crate) async fn connect(upstream: &crate::upstream::Upstream) -> io::Result<Self> {
        match &upstream.unix {
            Some(path) => Ok(Self::Unix(UnixStream::connect(path).await?)),
            None => {
                let stream = TcpStream::connect(upstream.authority.as_str()).await?;
                let _ = stream.set_nodelay(true);
                Ok(Self::Tcp(stream))
            }
        }
    }

    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Self::Tcp(s) => s.poll_read_ready(cx),
            Self::Unix(s) => s.poll_read_ready(cx),
        }
    }

    /// Waits until the socket is readable (or closed).
    #[cfg(test)]
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.readable().await,
            Self::Unix(s) => s.readable().await,
        }
    }

    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.try_read(buf),
            Self::Unix(s) => s.try_read(buf),
        }
    }

    /// Borrowed halves, to read while writing.
    pub(crate) fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        match self {
            Self::Tcp(s) => {
                let (r, w) = s.split();
                (ReadHalf::Tcp(r), WriteHalf::Tcp(w))
            }
            Self::Unix(s) => {
                let (r, w) = s.split();
                (ReadHalf::Unix(r), WriteHalf::Unix(w))
            }
        }
    }
}

/// The reading half of [`Stream::split`].
pub(crate) enum ReadHalf<'a> {
    Tcp(tcp::ReadHalf<'a>),
    Unix(unix::ReadHalf<'a>),
}

impl ReadHalf<'_> {
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(r) => r.readable().await,
            Self::Unix(r) => r.readable().await,
        }
    }

    pub(crate) fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Self::Tcp(r) => r.try_read_buf(buf),
            Self::Unix(r) => r.try_read_buf(buf),
        }
    }
}

/// The writing half of [`Stream::split`].
pub(crate) enum WriteHalf<'a> {
    Tcp(tcp::WriteHalf<'a>),
    Unix(unix::WriteHalf<'a>),
}

macro_rules! delegate_write {
    ($ty:ty) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    Self::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_flush(cx),
                    Self::Unix(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

delegate_write!(Stream);
delegate_write!(WriteHalf<'_>);

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}
