//! I/O helpers for the connection drivers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

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

/// Writes all of `buf`, failing with `TimedOut` when one write makes no progress for
/// `send_timeout`: a slow reader is given as long as it keeps reading, a stalled one is not.
pub(crate) async fn write_all_progress<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut buf: &[u8],
    send_timeout: Duration,
) -> io::Result<()> {
    while !buf.is_empty() {
        let n = tokio::time::timeout(send_timeout, io.write(buf))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "send timeout"))??;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
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
    async fn write_times_out_when_the_peer_stops_reading() {
        let (mut a, _b) = tokio::io::duplex(16);
        let err = write_all_progress(&mut a, &[0u8; 64], Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
