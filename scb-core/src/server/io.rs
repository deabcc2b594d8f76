//! I/O helpers for the connection drivers.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::sys::PlainSocket;
use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An I/O object that first yields bytes already read from it.
///
/// The HTTP/1.1 driver reads ahead while parsing; when it hands a connection to hyper
/// (HTTP/2 prior knowledge, an upgrade), hyper must see those bytes first. hyper-util has
/// such a wrapper but does not export it.
#[derive(Debug)]
pub(crate) struct Rewind<T> {
    pre: Option<Bytes>,
    inner: T,
}

impl<T> Rewind<T> {
    pub(crate) fn new(inner: T, pre: Bytes) -> Self {
        let pre = (!pre.is_empty()).then_some(pre);
        Self { pre, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(pre) = &mut self.pre {
            let n = pre.len().min(buf.remaining());
            buf.put_slice(&pre[..n]);
            pre.advance(n);
            if pre.is_empty() {
                self.pre = None;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The byte stream a connection driver speaks HTTP/1.1 on: a plain TCP or Unix socket, or
/// a secured stream (TLS) that a [`Handshake`](super::Handshake) produced.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin {
    /// The socket itself when bytes written to the transport go to it unchanged: only then
    /// can a file region go out with `sendfile` and a head with its body in one `writev`.
    /// `None` for TLS, whose records are encrypted in user space.
    fn plain_socket(&self) -> Option<PlainSocket<'_>> {
        None
    }

    /// The socket whose readiness says that a read of the transport has something to
    /// return, when a read that returned `Pending` leaves nothing buffered inside the
    /// transport: an idle connection waits on it holding no buffer. The plain socket
    /// itself, or the socket under a TLS session that says so ([`SecureStream`]).
    fn idle_socket(&self) -> Option<PlainSocket<'_>> {
        self.plain_socket()
    }
}

impl Transport for super::lazy_tcp::LazyTcpStream {
    fn plain_socket(&self) -> Option<PlainSocket<'_>> {
        Some(PlainSocket::LazyTcp(self))
    }
}

impl Transport for tokio::net::TcpStream {
    fn plain_socket(&self) -> Option<PlainSocket<'_>> {
        Some(PlainSocket::Tcp(self))
    }
}

impl Transport for tokio::net::UnixStream {
    fn plain_socket(&self) -> Option<PlainSocket<'_>> {
        Some(PlainSocket::Unix(self))
    }
}

impl Transport for Box<dyn super::SecureIo> {}

/// A secured stream and, when its handshake told how, the way to its TCP socket
/// ([`Secured::socket`](super::Secured::socket)): what the HTTP/1.1 driver speaks over a
/// secure listener.
pub(crate) struct SecureStream {
    pub(crate) io: Box<dyn super::SecureIo>,
    pub(crate) socket: Option<super::SocketOf>,
}

impl AsyncRead for SecureStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for SecureStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Transport for SecureStream {
    fn idle_socket(&self) -> Option<PlainSocket<'_>> {
        let socket = self.socket?;
        // `*`: the box itself is a `SecureIo` too, and would answer as itself.
        socket((*self.io).as_any()).map(PlainSocket::Tcp)
    }
}

/// Writes all of `buf`, failing with `TimedOut` when the transport stays unwritable for
/// `send_timeout`: a slow reader is given as long as it keeps reading, a stalled one is not.
pub(crate) async fn write_all_progress<T: Transport>(
    io: &mut T,
    buf: &[u8],
    send_timeout: Duration,
) -> io::Result<()> {
    write_all_vectored(io, buf, &[], send_timeout).await
}

/// [`write_all_progress`] of `head` then `data`, gathered by `writev` on plain TCP: a
/// response head goes out with a body that lives in a buffer of its own (a cached file's
/// bytes) in one call, without copying the body behind the head first. On other
/// transports, their own vectored write, then a flush (TLS keeps records buffered until
/// flushed).
pub(crate) async fn write_all_vectored<T: Transport>(
    io: &mut T,
    head: &[u8],
    data: &[u8],
    send_timeout: Duration,
) -> io::Result<()> {
    if let Some(socket) = io.plain_socket() {
        return write_all_plain(socket, head, data, send_timeout).await;
    }
    let timed_out = |_| io::Error::new(io::ErrorKind::TimedOut, "send timeout");
    let (mut head, mut data) = (head, data);
    while !head.is_empty() || !data.is_empty() {
        // Bounded per call, as on TCP: a TLS stream takes more plaintext only once the
        // socket has taken the records before it, so each call is progress.
        let bufs = [io::IoSlice::new(head), io::IoSlice::new(data)];
        let n = tokio::time::timeout(
            send_timeout,
            tokio::io::AsyncWriteExt::write_vectored(io, &bufs),
        )
        .await
        .map_err(timed_out)??;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        data = &data[n - from_head..];
    }
    tokio::time::timeout(send_timeout, tokio::io::AsyncWriteExt::flush(io))
        .await
        .map_err(timed_out)?
}

/// [`write_all_vectored`] on a plain socket: each write is tried first without waiting
/// (the socket usually has room), so the timer is only armed when a write would block.
async fn write_all_plain(
    io: PlainSocket<'_>,
    mut head: &[u8],
    mut data: &[u8],
    send_timeout: Duration,
) -> io::Result<()> {
    while !head.is_empty() || !data.is_empty() {
        let written = if data.is_empty() {
            io.try_write(head)
        } else if head.is_empty() {
            io.try_write(data)
        } else {
            io.try_write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(data)])
        };
        match written {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                let from_head = n.min(head.len());
                head = &head[from_head..];
                data = &data[n - from_head..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tokio::time::timeout(send_timeout, io.writable())
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
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn rewind_yields_the_prefix_then_the_inner_stream() {
        let inner: &[u8] = b" world";
        let mut io = Rewind::new(inner, Bytes::from_static(b"hello"));
        let mut out = Vec::new();
        io.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"hello world");
    }

    #[tokio::test]
    async fn a_vectored_write_sends_head_then_data_across_partial_writes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        // Larger than the socket buffers: the write completes only as the reader reads,
        // in many partial writes.
        let head: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 241) as u8).collect();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            got
        });
        write_all_vectored(&mut client, &head, &data, Duration::from_secs(10))
            .await
            .unwrap();
        drop(client);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), head.len() + data.len());
        assert!(got[..head.len()] == head[..] && got[head.len()..] == data[..]);
    }

    #[tokio::test]
    async fn write_times_out_when_the_peer_stops_reading() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (_server, _) = listener.accept().await.unwrap();
        // Far more than both socket buffers hold; the peer never reads.
        let big = vec![0u8; 64 << 20];
        let err = write_all_progress(&mut client, &big, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}

/// When bytes last moved on a connection. Shared with the I/O object, which hyper may
/// move into an upgrade (that must be `Send`), hence atomics rather than a `Cell`.
#[derive(Clone, Debug)]
pub(crate) struct Activity {
    inner: std::sync::Arc<ActivityInner>,
}

#[derive(Debug)]
struct ActivityInner {
    base: tokio::time::Instant,
    millis: std::sync::atomic::AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            inner: std::sync::Arc::new(ActivityInner {
                base: tokio::time::Instant::now(),
                millis: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn touch(&self) {
        let millis = u64::try_from(self.inner.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.inner
            .millis
            .store(millis, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn last(&self) -> tokio::time::Instant {
        let millis = self.inner.millis.load(std::sync::atomic::Ordering::Relaxed);
        self.inner.base + Duration::from_millis(millis)
    }
}

/// The send timeout and idle tracking for connections hyper drives.
///
/// A write that stays pending for `send_timeout` fails with `TimedOut` (hyper then closes
/// the connection); every read or write that moves bytes records the time in `activity`,
/// which the driver uses to close idle connections gracefully.
#[derive(Debug)]
pub(crate) struct TimedIo<T> {
    inner: T,
    send_timeout: Duration,
    /// Boxed so that `TimedIo` stays `Unpin`, as hyper wants its I/O.
    stall: Pin<Box<tokio::time::Sleep>>,
    stalled: bool,
    activity: Activity,
}

impl<T> TimedIo<T> {
    pub(crate) fn new(inner: T, send_timeout: Duration, activity: Activity) -> Self {
        Self {
            inner,
            send_timeout,
            stall: Box::pin(tokio::time::sleep(send_timeout)),
            stalled: false,
            activity,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> TimedIo<T> {
    fn poll_progress<R>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match op(Pin::new(&mut self.inner), cx) {
            Poll::Ready(result) => {
                self.stalled = false;
                self.activity.touch();
                Poll::Ready(result)
            }
            Poll::Pending => {
                if !self.stalled {
                    self.stalled = true;
                    let deadline = tokio::time::Instant::now() + self.send_timeout;
                    self.stall.as_mut().reset(deadline);
                }
                match self.stall.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timeout")))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_progress(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_progress(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_progress(cx, AsyncWrite::poll_flush)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod timed_io_tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    #[tokio::test]
    async fn a_stalled_write_fails_after_the_send_timeout() {
        let (a, _b) = tokio::io::duplex(16);
        let mut io = TimedIo::new(a, Duration::from_millis(50), Activity::new());
        let err = io.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn progress_is_recorded_as_activity() {
        let (a, mut b) = tokio::io::duplex(1024);
        let activity = Activity::new();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut io = TimedIo::new(a, Duration::from_secs(1), activity.clone());
        io.write_all(b"hello").await.unwrap();
        assert!(activity.last() >= activity.inner.base + Duration::from_millis(20));
        let mut buf = [0u8; 5];
        tokio::io::AsyncReadExt::read_exact(&mut b, &mut buf)
            .await
            .unwrap();
        assert_eq!(&buf, b"hello");
    }
}
