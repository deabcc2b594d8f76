//! An accepted TCP connection that joins the runtime's reactor only when it first has to
//! wait.
//!
//! tokio registers every `TcpStream` with its epoll set when the stream is made, and takes
//! it out again (`epoll_ctl(EPOLL_CTL_DEL)`) when the stream is dropped: two system calls
//! and the reactor's bookkeeping for every connection, and a first poll of the
//! connection's task that only finds the socket not yet ready. When a connection's request
//! is there as it is accepted (a busy worker's backlog, or a listener that accepts only
//! once the client has sent something), the worker reads it, answers in one write and
//! closes without ever waiting on the socket. So an accepted connection starts outside the
//! epoll set: reads and writes go straight to the socket, and only one that would block
//! registers it (tokio's own `TcpStream` from then on, so a keep-alive connection waits
//! and reads exactly as before). Registering after a read found nothing loses no wake-up:
//! epoll reports a socket's present readiness when it is added.
//!
//! Written here because tokio has no such mode (its `TcpListener::accept` registers what
//! it accepts) and mio's registration is not reachable through tokio.

use std::cell::{OnceCell, RefCell};
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// The most an unregistered read asks for: a request head usually fits (nginx reads the
/// first one into 1 KiB).
const FIRST_READ: usize = 4096;

thread_local! {
    /// Where an unregistered read lands before its bytes are copied to the caller: safe
    /// code cannot read into uninitialized memory (tokio's registered reads do), and
    /// zeroing the caller's 4 KiB on every connection costs more than copying the few
    /// hundred bytes of a request. Zeroed once per worker thread.
    static SCRATCH: RefCell<Box<[u8; FIRST_READ]>> = RefCell::new(Box::new([0; FIRST_READ]));
}

/// A TCP connection registered with the runtime's reactor on its first wait (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct LazyTcpStream {
    /// The socket (non-blocking) until a wait needs the reactor; `None` from then on.
    unregistered: RefCell<Option<std::net::TcpStream>>,
    /// The socket once registered.
    registered: OnceCell<tokio::net::TcpStream>,
}

impl LazyTcpStream {
    /// `socket` must be non-blocking (accepted with `SOCK_NONBLOCK`).
    pub(crate) fn new(socket: std::net::TcpStream) -> Self {
        Self {
            unregistered: RefCell::new(Some(socket)),
            registered: OnceCell::new(),
        }
    }

    /// Whether the socket has joined the reactor.
    #[cfg(test)]
    pub(crate) fn is_registered(&self) -> bool {
        self.registered.get().is_some()
    }

    /// The registered socket, registering it now if it is not yet.
    pub(crate) fn registered(&self) -> io::Result<&tokio::net::TcpStream> {
        if let Some(registered) = self.registered.get() {
            return Ok(registered);
        }
        // A failed registration leaves neither: the connection is lost, and every use
        // after it says so.
        let socket = self
            .unregistered
            .borrow_mut()
            .take()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let registered = tokio::net::TcpStream::from_std(socket)?;
        Ok(self.registered.get_or_init(|| registered))
    }

    /// The socket as tokio's own stream (registering it): what a TLS handshake runs on.
    pub(crate) fn into_registered(self) -> io::Result<tokio::net::TcpStream> {
        match (self.registered.into_inner(), self.unregistered.into_inner()) {
            (Some(registered), _) => Ok(registered),
            (None, Some(socket)) => tokio::net::TcpStream::from_std(socket),
            (None, None) => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// [`registered`](Self::registered), mutably.
    fn registered_mut(&mut self) -> io::Result<&mut tokio::net::TcpStream> {
        self.registered()?;
        self.registered
            .get_mut()
            .ok_or_else(|| io::ErrorKind::NotConnected.into())
    }

    /// Runs `f` on the unregistered socket, or says `None` once it is registered.
    fn unregistered<R>(&self, f: impl FnOnce(&std::net::TcpStream) -> R) -> Option<R> {
        // Never held across a wait or a registration: `f` is one system call.
        self.unregistered.borrow().as_ref().map(f)
    }

    /// Runs `f` with the socket's descriptor.
    pub(crate) fn with_fd<R>(&self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> io::Result<R> {
        if let Some(registered) = self.registered.get() {
            return Ok(f(registered.as_fd()));
        }
        let socket = self.unregistered.borrow();
        let socket = socket.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        Ok(f(socket.as_fd()))
    }

    /// Runs `f` (a non-blocking system call on the socket's descriptor) at once if the
    /// socket is not registered, else as tokio's `try_io` does: only if the socket is ready
    /// for `interest`, clearing the readiness when it says `WouldBlock`.
    pub(crate) fn try_io<R>(
        &self,
        interest: Interest,
        f: impl FnOnce(BorrowedFd<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        match self.registered.get() {
            Some(registered) => registered.try_io(interest, || f(registered.as_fd())),
            None => self.with_fd(f)?,
        }
    }

    /// Ready when the socket has input (or its end, or an error) to read; registers it.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.registered()?.poll_read_ready(cx)
    }

    /// Waits until the socket can take more bytes; registers it.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.registered()?.writable().await
    }

    /// Writes what the socket takes now, without waiting.
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.either(
            |mut socket| socket.write(buf),
            |registered| registered.try_write(buf),
        )
    }

    /// [`try_write`](Self::try_write) of several buffers in one call.
    pub(crate) fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.either(
            |mut socket| socket.write_vectored(bufs),
            |registered| registered.try_write_vectored(bufs),
        )
    }

    /// Sets `TCP_NODELAY`.
    pub(crate) fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.either(
            |socket| socket.set_nodelay(nodelay),
            |registered| registered.set_nodelay(nodelay),
        )
    }

    /// `TCP_NODELAY`, as set.
    #[cfg(test)]
    pub(crate) fn nodelay(&self) -> io::Result<bool> {
        self.either(std::net::TcpStream::nodelay, tokio::net::TcpStream::nodelay)
    }

    /// `direct` on the socket while it is unregistered, `registered` on tokio's stream
    /// once it is (neither registers it).
    fn either<R>(
        &self,
        direct: impl FnOnce(&std::net::TcpStream) -> io::Result<R>,
        registered: impl FnOnce(&tokio::net::TcpStream) -> io::Result<R>,
    ) -> io::Result<R> {
        match self.unregistered(direct) {
            Some(done) => done,
            None => registered(self.registered()?),
        }
    }
}

impl From<tokio::net::TcpStream> for LazyTcpStream {
    /// A stream registered already.
    fn from(registered: tokio::net::TcpStream) -> Self {
        Self {
            unregistered: RefCell::new(None),
            registered: OnceCell::from(registered),
        }
    }
}

/// Whether an unregistered call's answer means the socket must wait, registered.
fn would_block<T>(result: &io::Result<T>) -> bool {
    matches!(result, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

impl AsyncRead for LazyTcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.registered.get().is_none() {
            // The task's budget, as tokio's own reads: a client that keeps the socket
            // full cannot keep the worker from its other connections.
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            let read = this.unregistered(|mut socket| {
                SCRATCH.with_borrow_mut(|scratch| {
                    let want = buf.remaining().min(FIRST_READ);
                    let n = socket.read(&mut scratch[..want])?;
                    buf.put_slice(&scratch[..n]);
                    Ok(())
                })
            });
            if let Some(read) = read
                && !would_block(&read)
            {
                coop.made_progress();
                return Poll::Ready(read);
            }
        }
        Pin::new(this.registered_mut()?).poll_read(cx, buf)
    }
}

impl LazyTcpStream {
    /// A write: `direct` on the socket while it is unregistered (within the task's budget,
    /// as tokio's own writes), `registered` on tokio's stream once it is registered or once
    /// the direct write would block.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        direct: impl FnOnce(&std::net::TcpStream) -> io::Result<usize>,
        registered: impl FnOnce(
            Pin<&mut tokio::net::TcpStream>,
            &mut Context<'_>,
        ) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if self.registered.get().is_none() {
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            if let Some(written) = self.unregistered(direct)
                && !would_block(&written)
            {
                coop.made_progress();
                return Poll::Ready(written);
            }
        }
        registered(Pin::new(self.registered_mut()?), cx)
    }
}

impl AsyncWrite for LazyTcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(
            cx,
            |mut socket| socket.write(buf),
            |registered, cx| registered.poll_write(cx, buf),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(
            cx,
            |mut socket| socket.write_vectored(bufs),
            |registered, cx| registered.poll_write_vectored(cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered above the socket.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.unregistered(|socket| socket.shutdown(std::net::Shutdown::Write)) {
            Some(shut) => Poll::Ready(shut),
            None => Pin::new(this.registered_mut()?).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A client and the server's end of one connection, the server's not registered.
    async fn pair() -> (tokio::net::TcpStream, LazyTcpStream) {
        let (client, accepted) = blocking_pair().await;
        (client, lazy(accepted))
    }

    /// A client and the server's end, blocking and outside tokio.
    async fn blocking_pair() -> (tokio::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (client, listener.accept().unwrap().0)
    }

    fn lazy(accepted: std::net::TcpStream) -> LazyTcpStream {
        accepted.set_nonblocking(true).unwrap();
        LazyTcpStream::new(accepted)
    }

    #[tokio::test]
    async fn a_request_there_when_accepted_is_read_and_answered_without_the_reactor() {
        let (mut client, accepted) = blocking_pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        // Blocks until the request is in the server's receive queue, as it is when a
        // busy worker gets to a connection.
        accepted.peek(&mut [0u8; 1]).unwrap();
        let mut server = lazy(accepted);
        let mut got = bytes::BytesMut::with_capacity(64);
        server.read_buf(&mut got).await.unwrap();
        assert_eq!(&got[..], b"GET / HTTP/1.1\r\n\r\n");
        server.set_nodelay(true).unwrap();
        assert!(server.nodelay().unwrap());
        server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        server.shutdown().await.unwrap();
        assert!(
            !server.is_registered(),
            "joined the reactor without waiting"
        );
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    #[tokio::test]
    async fn input_larger_than_one_read_comes_whole_in_reads_of_any_size() {
        let (mut client, accepted) = blocking_pair().await;
        let sent: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&sent).await.unwrap();
        // Blocks until all of it is in the server's receive queue.
        let mut peek = vec![0u8; sent.len()];
        while accepted.peek(&mut peek).unwrap() < sent.len() {
            std::thread::yield_now();
        }
        let mut server = lazy(accepted);
        // Reads smaller than a first read's scratch, then larger ones.
        let mut got = vec![0u8; 5];
        server.read_exact(&mut got).await.unwrap();
        let mut rest = vec![0u8; sent.len() - 5];
        server.read_exact(&mut rest).await.unwrap();
        got.extend_from_slice(&rest);
        assert!(got == sent);
        assert!(!server.is_registered(), "everything was there: no wait");
    }

    #[tokio::test]
    async fn a_read_that_finds_nothing_registers_and_wakes_when_input_comes() {
        let (mut client, mut server) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = [0u8; 5];
            server.read_exact(&mut got).await.unwrap();
            assert!(server.is_registered());
            got
        });
        // The reader has found nothing and waits on the reactor before this is sent: its
        // task runs first on this current-thread runtime.
        tokio::task::yield_now().await;
        client.write_all(b"hello").await.unwrap();
        assert_eq!(&reader.await.unwrap(), b"hello");
    }

    #[tokio::test]
    async fn a_write_that_would_block_registers_and_completes_as_the_client_reads() {
        let (mut client, mut server) = pair().await;
        // Far more than both socket buffers hold.
        let sent: Vec<u8> = (0..8_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            server.write_all(&sent).await.unwrap();
            assert!(server.is_registered());
            server.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(got == expected, "{} bytes of {}", got.len(), expected.len());
    }

    #[tokio::test]
    async fn plain_socket_writes_and_readiness_work_before_and_after_registration() {
        let (mut client, server) = pair().await;
        assert_eq!(server.try_write(b"one ").unwrap(), 4);
        let bufs = [io::IoSlice::new(b"two "), io::IoSlice::new(b"three")];
        assert_eq!(server.try_write_vectored(&bufs).unwrap(), 9);
        assert!(!server.is_registered());
        // Waiting for input registers the socket.
        let waiting = std::future::poll_fn(|cx| server.poll_read_ready(cx));
        let (ready, ()) = tokio::join!(waiting, async {
            client.write_all(b"x").await.unwrap();
        });
        ready.unwrap();
        assert!(server.is_registered());
        server.writable().await.unwrap();
        assert_eq!(server.try_write(b"!").unwrap(), 1);
        let mut tcp = server.into_registered().unwrap();
        let mut x = [0u8; 1];
        tcp.read_exact(&mut x).await.unwrap();
        assert_eq!(&x, b"x");
        // Closed with nothing unread: a FIN, not a reset.
        drop(tcp);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"one two three!");
    }
}
