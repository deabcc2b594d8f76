//! The socket under an upstream connection: TCP, TLS over TCP for `https://` upstreams,
//! or a Unix domain socket for an app server on the same machine (`unix:/run/app.sock`).
//!
//! An enum rather than a trait object or a type parameter: the pool holds connections to
//! both kinds side by side, and the client needs more than `AsyncRead + AsyncWrite` (the
//! readiness checks that tell an idle connection the upstream closed, and a split that
//! reads while the body is written), which tokio gives both types under the same names.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpStream, UnixStream, tcp, unix};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Connects to the Unix socket at `path`.
///
/// On Linux a Unix socket's `connect` completes at once or fails at once (`EAGAIN` when
/// the listener's backlog is full: the application server is overloaded, which is a
/// failed connect, as with nginx), so the socket is connected here without waiting for
/// the runtime to report it writable and asking `SO_ERROR` (tokio's `connect` does both,
/// as it must for TCP): one system call and one turn of the event loop less for each
/// FastCGI request on a connection of its own.
#[cfg(target_os = "linux")]
async fn connect_unix(path: &std::path::Path) -> io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)?;
    socket.connect(&SockAddr::unix(path)?)?;
    UnixStream::from_std(std::os::unix::net::UnixStream::from(
        std::os::fd::OwnedFd::from(socket),
    ))
}

#[cfg(not(target_os = "linux"))]
async fn connect_unix(path: &std::path::Path) -> io::Result<UnixStream> {
    UnixStream::connect(path).await
}

/// A connected upstream socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Connects to `upstream`: its Unix socket, or TCP with `TCP_NODELAY` (requests and
    /// responses are written whole; Nagle would only hold the last segment).
    ///
    /// `preface` (a PROXY header) goes first, before any TLS. An `https://` upstream is
    /// secured with `tls`, its certificate verified for its host name (sent as SNI).
    pub(crate) async fn connect(
        upstream: &crate::upstream::Upstream,
        tls: Option<&TlsConnector>,
        preface: Option<&[u8]>,
    ) -> io::Result<Self> {
        if let Some(path) = &upstream.unix {
            let mut stream = connect_unix(path).await?;
            if let Some(preface) = preface {
                stream.write_all(preface).await?;
            }
            return Ok(Self::Unix(stream));
        }
        let mut stream = TcpStream::connect(upstream.authority.as_str()).await?;
        let _ = stream.set_nodelay(true);
        if let Some(preface) = preface {
            stream.write_all(preface).await?;
        }
        if !upstream.tls {
            return Ok(Self::Tcp(stream));
        }
        let Some(tls) = tls else {
            return Err(io::Error::other("an https upstream without a TLS client"));
        };
        let host = upstream.authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Self::Tls(Box::new(tls.connect(name, stream).await?)))
    }

    /// The protocol the upstream agreed to in the TLS handshake (ALPN), if any.
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        match self {
            Self::Tls(tls) => tls.get_ref().1.alpn_protocol(),
            Self::Tcp(_) | Self::Unix(_) => None,
        }
    }

    /// Whether an idle connection is no use any more: the upstream closed it, or sent
    /// bytes nobody asked for.
    ///
    /// No system call in the common case for TCP and Unix sockets: the runtime was told
    /// by epoll when the socket turned readable, and reading a response to its end
    /// cleared that. Over TLS, a read with a waker that ignores wake-ups: rustls takes
    /// what is not application data (session tickets) itself and reports nothing.
    pub(crate) fn is_closed(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if let Self::Tls(tls) = self {
            let mut byte = [0u8; 1];
            let mut buf = ReadBuf::new(&mut byte);
            return !matches!(
                Pin::new(&mut **tls).poll_read(&mut cx, &mut buf),
                Poll::Pending
            );
        }
        match self.poll_read_ready(&mut cx) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(())) => {
                !matches!(self.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Self::Tcp(s) => s.poll_read_ready(cx),
            Self::Unix(s) => s.poll_read_ready(cx),
            Self::Tls(s) => s.get_ref().0.poll_read_ready(cx),
        }
    }

    /// Waits until the socket is readable (or closed).
    #[cfg(test)]
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.readable().await,
            Self::Unix(s) => s.readable().await,
            Self::Tls(s) => s.get_ref().0.readable().await,
        }
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.try_read(buf),
            Self::Unix(s) => s.try_read(buf),
            Self::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
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
            Self::Tls(s) => {
                let (r, w) = tokio::io::split(&mut **s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

/// The reading half of [`Stream::split`].
pub(crate) enum ReadHalf<'a> {
    Tcp(tcp::ReadHalf<'a>),
    Unix(unix::ReadHalf<'a>),
    Tls(tokio::io::ReadHalf<&'a mut TlsStream<TcpStream>>),
}

impl ReadHalf<'_> {
    /// Reads what has arrived into `buf` (waiting until something has); 0 at the end.
    pub(crate) async fn read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            let read = match self {
                Self::Tcp(r) => {
                    r.readable().await?;
                    r.try_read_buf(buf)
                }
                Self::Unix(r) => {
                    r.readable().await?;
                    r.try_read_buf(buf)
                }
                Self::Tls(r) => return r.read_buf(buf).await,
            };
            match read {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
    }
}

/// The writing half of [`Stream::split`].
pub(crate) enum WriteHalf<'a> {
    Tcp(tcp::WriteHalf<'a>),
    Unix(unix::WriteHalf<'a>),
    Tls(tokio::io::WriteHalf<&'a mut TlsStream<TcpStream>>),
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
                    Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
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
                    Self::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_flush(cx),
                    Self::Unix(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
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
            Self::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}
