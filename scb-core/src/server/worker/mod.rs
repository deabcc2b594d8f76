//! One worker: a thread, a `current_thread` runtime, its listeners and its connections.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::rc::Rc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use super::conn::{self, ConnCtx, ConnService, ResponseBody};
use super::lazy_tcp::LazyTcpStream;
use super::metrics::ListenerMetrics;
use super::shutdown::Trigger;
use super::{ConnectInfo, Server, WorkerInfo};
use parked::ParkedConnections;

mod parked;
#[cfg(feature = "http3")]
mod quic;
#[cfg(feature = "http3")]
mod steer;
#[cfg(feature = "http3")]
pub(super) use steer::Peers as QuicPeers;

/// How long the kernel holds a connection whose client has sent nothing before handing it
/// over anyway (`TCP_DEFER_ACCEPT`; the kernel waits for its next SYN-ACK retransmission):
/// the shortest, so that a client that connects ahead of its request (a browser's
/// preconnect) meets the header-read timeout about as it would without the option.
const DEFER_ACCEPT_SECONDS: u32 = 1;

/// How often, at most, an accept loop logs that it closes idle connections to stay under
/// `max_connections`.
const REUSE_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Listen backlog per worker socket: connections the kernel holds while the worker is busy
/// or at its connection limit.
const BACKLOG: i32 = 4096;

/// A listening socket that shares its address with the other workers' (`SO_REUSEPORT`):
/// the kernel spreads new connections across workers, no accept lock, no hand-off.
pub(super) fn reuseport_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = reuseport_socket(addr, Type::STREAM, Protocol::TCP)?;
    // Before `listen`: no connection is queued without it.
    defer_accept(&socket, addr);
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Has the kernel hand a TCP listener's connections over once their clients have sent
/// something (`TCP_DEFER_ACCEPT`, for [`DEFER_ACCEPT_SECONDS`]): on every listening socket,
/// scb's own and inherited ones.
///
/// Without it a connection is accepted before its request comes: the worker reads nothing,
/// registers the socket, waits, and takes it out of the epoll set again at close. With it
/// the request is there when the connection is accepted, and a connection answered in one
/// write never joins the epoll set ([`LazyTcpStream`]). A socket that refuses it works as
/// before.
pub(super) fn defer_accept(socket: &impl AsFd, addr: SocketAddr) {
    if let Err(e) = super::sys::set_defer_accept(socket.as_fd(), DEFER_ACCEPT_SECONDS) {
        tracing::debug!(%addr, error = %e, "TCP_DEFER_ACCEPT not set");
    }
}

/// A non-blocking socket of `kind` bound to `addr` with `SO_REUSEPORT` (and
/// `SO_REUSEADDR`; IPv6 only for an IPv6 address): TCP listeners and QUIC's UDP sockets.
pub(super) fn reuseport_socket(
    addr: SocketAddr,
    kind: Type,
    protocol: Protocol,
) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// Fails with `AddrInUse` when another process listens on `addr`: a socket bound without
/// `SO_REUSEPORT` cannot share the address with anyone's listener. `SO_REUSEADDR` keeps
/// connections of an earlier run lingering in `TIME_WAIT` from counting. The socket is
/// closed at once.
pub(super) fn check_unclaimed(addr: SocketAddr) -> std::io::Result<()> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            std::io::Error::new(
                e.kind(),
                "address already in use (another process listens on it)",
            )
        } else {
            e
        }
    })
}

/// One of a worker's listening sockets, and how its connections start.
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) socket: ListenSocket,
    pub(super) options: super::ListenOptions,
    /// This worker's UDP socket for the listener's HTTP/3, bound with the others.
    pub(super) quic: QuicSocket,
}

/// A worker's UDP socket for a listener's HTTP/3, if it has one.
#[cfg(feature = "http3")]
pub(super) type QuicSocket = Option<std::net::UdpSocket>;
/// Nothing without the `http3` feature.
#[cfg(not(feature = "http3"))]
pub(super) type QuicSocket = ();

/// The UDP sockets of `local`'s HTTP/3, one per worker in worker order, when `options`
/// ask for it (none otherwise). Bound together before any worker starts, so that the
/// kernel's `SO_REUSEPORT` group is whole before the first datagram: a socket joining
/// later would change which socket the 4-tuples of open connections hash to.
pub(super) fn quic_sockets(
    local: SocketAddr,
    options: &super::ListenOptions,
    workers: usize,
) -> std::io::Result<Vec<QuicSocket>> {
    #[cfg(feature = "http3")]
    if options.http3.is_some() {
        return (0..workers)
            .map(|_| quic::reuseport_udp(local).map(Some))
            .collect::<std::io::Result<_>>()
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("binding {local} (UDP, for HTTP/3): {e}"))
            });
    }
    let _ = (local, options);
    Ok((0..workers).map(|_| QuicSocket::default()).collect())
}

/// A listening socket: TCP (this worker's own `SO_REUSEPORT` socket, or a shared one), or
/// a Unix domain socket (one socket, a duplicate per worker: the kernel hands each
/// connection to one of the workers waiting on it).
#[derive(Debug)]
pub(super) enum ListenSocket {
    Tcp(std::net::TcpListener),
    /// The socket and its configured path (the socket's own name is the temporary one it
    /// was bound under before the rename).
    Unix(std::os::unix::net::UnixListener, std::path::PathBuf),
}

/// What a worker knows a listener by across updates: its bound address or its path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum ListenKey {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
}

/// A registered listening socket, as its accept loop uses it.
enum Acceptor {
    Tcp(ReadyListener, SocketAddr),
    Unix(tokio::net::UnixListener),
}

/// An accepted connection.
enum Accepted {
    /// The stream, the peer's address and the listener's.
    Tcp(LazyTcpStream, SocketAddr, SocketAddr),
    Unix(tokio::net::UnixStream),
}

impl Acceptor {
    fn register(socket: ListenSocket) -> std::io::Result<(ListenKey, Self)> {
        match socket {
            ListenSocket::Tcp(socket) => {
                let addr = socket.local_addr()?;
                Ok((
                    ListenKey::Tcp(addr),
                    Self::Tcp(ReadyListener::new(socket)?, addr),
                ))
            }
            ListenSocket::Unix(socket, path) => Ok((
                ListenKey::Unix(path),
                Self::Unix(tokio::net::UnixListener::from_std(socket)?),
            )),
        }
    }

    async fn accept(&self) -> std::io::Result<Accepted> {
        match self {
            Self::Tcp(listener, local) => {
                let (stream, remote) = listener.accept().await?;
                // No `TCP_NODELAY` yet: a TLS connection gets it before its handshake
                // (`conn::serve_secure`), a plain one before its second write
                // (`conn::h1`), so a connection that answers one request in one write
                // spends no system call on it.
                Ok(Accepted::Tcp(stream, remote, *local))
            }
            Self::Unix(listener) => Ok(Accepted::Unix(listener.accept().await?.0)),
        }
    }
}

/// A listening TCP socket registered with the reactor for its readiness alone, so that
/// what it accepts is not registered: tokio's `TcpListener` registers every connection it
/// accepts (see [`LazyTcpStream`]), and `AsyncFd`'s safe constructors are deprecated
/// (tokio#8587) while its `register` is `unsafe`. tokio's `TcpStream` waits and runs
/// `try_io` on any socket it owns, a listening one too; nothing else of it is used.
struct ReadyListener(tokio::net::TcpStream);

impl ReadyListener {
    fn new(socket: std::net::TcpListener) -> std::io::Result<Self> {
        let socket = std::net::TcpStream::from(std::os::fd::OwnedFd::from(socket));
        Ok(Self(tokio::net::TcpStream::from_std(socket)?))
    }

    /// Accepts a connection, non-blocking and outside the reactor: it joins the reactor
    /// only if it has to wait ([`LazyTcpStream`]).
    async fn accept(&self) -> std::io::Result<(LazyTcpStream, SocketAddr)> {
        use rustix::net::SocketFlags;
        let listener = &self.0;
        loop {
            // Through the socket's one reader waker (one accept loop a listener), not the
            // waiter list `readable()` locks.
            std::future::poll_fn(|cx| listener.poll_read_ready(cx)).await?;
            let accepted = listener.try_io(tokio::io::Interest::READABLE, || {
                let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
                Ok(rustix::net::acceptfrom_with(listener, flags)?)
            });
            match accepted {
                Ok((socket, Some(remote))) => {
                    // A TCP listener's peers have internet addresses; another is closed.
                    if let Ok(remote) = SocketAddr::try_from(remote) {
                        let stream = LazyTcpStream::new(std::net::TcpStream::from(socket));
                        return Ok((stream, remote));
                    }
                }
                Ok((_, None)) => {}
                // Nothing left to accept: the readiness is cleared, and awaited again.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A new configuration for a running worker, from [`ServerHandle::apply`]: the
/// listeners it keeps (by their bound address) with their possibly new handshake, the
/// sockets it opens, and the settings its new connections get.
///
/// [`ServerHandle::apply`]: super::ServerHandle::apply
#[derive(Debug)]
pub(super) struct Update {
    pub(super) listeners: Vec<ListenerUpdate>,
    pub(super) ctx: ConnCtx,
    pub(super) grace_period: Duration,
    /// Told once the worker has switched.
    pub(super) done: tokio::sync::oneshot::Sender<()>,
}

/// One listener of an [`Update`].
#[derive(Debug)]
pub(super) enum ListenerUpdate {
    /// The socket bound to `local` stays open; its connections from now on start as
    /// `options` say.
    Keep {
        local: ListenKey,
        options: super::ListenOptions,
    },
    /// A socket to start accepting on.
    Open(Listener),
}

/// A listener's accept loop, as the worker tracks it.
struct Accepting {
    task: tokio::task::JoinHandle<()>,
    options: Rc<RefCell<super::ListenOptions>>,
    /// The QUIC endpoint on the same address, with its accept loop.
    #[cfg(feature = "http3")]
    quic: Option<(quinn::Endpoint, tokio::task::JoinHandle<()>)>,
}

impl Accepting {
    /// Stops accepting on it (the socket closes when the loop's future is dropped);
    /// resolves once that is done.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        #[cfg(feature = "http3")]
        if let Some((endpoint, task)) = self.quic {
            endpoint.set_server_config(None);
            task.abort();
            let _ = task.await;
        }
    }

    /// New connections start as `options` say.
    fn update(&self, options: &super::ListenOptions, current: &Current) {
        *self.options.borrow_mut() = options.clone();
        #[cfg(feature = "http3")]
        if let Some((endpoint, _)) = &self.quic {
            let limits = &current.ctx.borrow().limits;
            endpoint.set_server_config(
                options
                    .http3
                    .as_ref()
                    .map(|http3| quic::server_config(http3, limits)),
            );
        }
        #[cfg(not(feature = "http3"))]
        let _ = current;
    }
}

/// What a worker's accept loops read for each new connection: replaced by an [`Update`],
/// while the connections already open keep the `ConnCtx` they started with.
struct Current {
    ctx: RefCell<Rc<ConnCtx>>,
    connections: Rc<Connections>,
}

/// Counts a worker's open connections and wakes whoever waits for a change.
#[derive(Debug, Default)]
struct Connections {
    changed: Notify,
}

impl Connections {
    fn open(&self) -> usize {
        super::open_connections::here()
    }

    fn opened(&self) {
        super::open_connections::opened();
    }
}

/// What an open connection holds until it closes: its place in the worker's count and in
/// its listener's metrics.
type Open = (ConnGuard, Option<super::metrics::OpenConnection>);

/// Decrements the count when a connection closes, however it ends (its task ends, or it
/// is closed while parked).
struct ConnGuard(Rc<Connections>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        super::open_connections::closed();
        self.0.changed.notify_waiters();
    }
}

/// Runs one worker to completion on the current thread.
pub(super) fn run<S, B>(
    info: WorkerInfo,
    config: &Server,
    listeners: Vec<Listener>,
    shutdown: &Trigger,
    mut updates: UnboundedReceiver<Update>,
    make_service: impl FnOnce(&WorkerInfo) -> S,
) where
    S: ConnService<B>,
    B: ResponseBody,
{
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = info.index, error = %e, "cannot start the worker runtime");
            shutdown.fire();
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let current = Rc::new(Current {
        ctx: RefCell::new(Rc::new(ConnCtx {
            limits: config.limits.clone(),
            request_id_header: config.request_id_header.clone(),
            shutdown: shutdown.clone(),
            metrics: config.metrics.clone(),
        })),
        connections: Rc::new(Connections::default()),
    });
    let mut grace_period = config.grace_period;

    local.block_on(&runtime, async {
        let svc = make_service(&info);
        let parked = ParkedConnections::start(svc.clone(), shutdown.clone());
        // By bound address: a worker may accept on several sockets of one address (those
        // an upgrade handed over).
        let mut accepting: HashMap<ListenKey, Vec<Accepting>> = HashMap::new();
        let start = |listener: Listener, accepting: &mut HashMap<ListenKey, Vec<Accepting>>| {
            let Listener {
                socket,
                options,
                quic: quic_socket,
            } = listener;
            #[cfg(not(feature = "http3"))]
            let () = quic_socket;
            let (key, listener) = match Acceptor::register(socket) {
                Ok(registered) => registered,
                Err(e) => {
                    tracing::error!(worker = info.index, error = %e, "cannot register listener");
                    return;
                }
            };
            let options = Rc::new(RefCell::new(options));
            #[cfg(feature = "http3")]
            let quic = match (&key, &options.borrow().http3) {
                (ListenKey::Tcp(addr), Some(http3)) => {
                    let limits = current.ctx.borrow().limits.clone();
                    let socket = match quic_socket {
                        Some(socket) => Ok(socket),
                        // A worker's second socket of one address (inherited ones).
                        None => quic::reuseport_udp(*addr),
                    };
                    match socket.and_then(|socket| {
                        quic::endpoint(socket, http3, &limits, info.index, &config.quic_peers)
                    }) {
                        Ok(endpoint) => {
                            let task = tokio::task::spawn_local(quic::accept_loop(
                                endpoint.clone(),
                                *addr,
                                svc.clone(),
                                Rc::clone(&current),
                                Rc::clone(&options),
                            ));
                            Some((endpoint, task))
                        }
                        Err(e) => {
                            tracing::error!(worker = info.index, %addr, error = %e, "cannot open the HTTP/3 (UDP) socket");
                            None
                        }
                    }
                }
                _ => None,
            };
            let name = match &key {
                ListenKey::Tcp(addr) => addr.to_string(),
                ListenKey::Unix(path) => format!("unix:{}", path.display()),
            };
            let task = tokio::task::spawn_local(accept_loop(
                listener,
                name,
                info.index,
                Rc::clone(&options),
                svc.clone(),
                Rc::clone(&current),
                Rc::clone(&parked),
            ));
            accepting
                .entry(key)
                .or_default()
                .push(Accepting {
                    task,
                    options,
                    #[cfg(feature = "http3")]
                    quic,
                });
        };
        for listener in listeners {
            start(listener, &mut accepting);
        }
        loop {
            let update = tokio::select! {
                () = shutdown.fired() => break,
                update = updates.recv() => update,
            };
            let Some(update) = update else {
                // The handle is gone; only shutdown is left to wait for.
                shutdown.fired().await;
                break;
            };
            grace_period = update.grace_period;
            *current.ctx.borrow_mut() = Rc::new(update.ctx);
            let mut kept = HashMap::with_capacity(update.listeners.len());
            for listener in update.listeners {
                match listener {
                    ListenerUpdate::Keep { local, options } => {
                        if let Some(loops) = accepting.remove(&local) {
                            for loop_ in &loops {
                                loop_.update(&options, &current);
                            }
                            kept.insert(local, loops);
                        }
                    }
                    ListenerUpdate::Open(listener) => start(listener, &mut kept),
                }
            }
            // The listeners left out stop accepting: their sockets close when the aborted
            // loops drop them, while the connections they accepted carry on.
            for removed in accepting.drain().flat_map(|(_, loops)| loops) {
                removed.stop().await;
            }
            accepting = kept;
            let _ = update.done.send(());
        }
        let connections = &current.connections;
        let drained = async {
            loop {
                let changed = connections.changed.notified();
                if connections.open() == 0 {
                    break;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(grace_period, drained).await.is_err() {
            tracing::warn!(
                worker = info.index,
                open = connections.open(),
                "grace period over; closing the remaining connections"
            );
        }
    });
    // Dropping the LocalSet cancels what is left, closing those sockets.
    drop(local);
}

async fn accept_loop<S, B>(
    listener: Acceptor,
    name: String,
    worker: usize,
    options: Rc<RefCell<super::ListenOptions>>,
    svc: S,
    current: Rc<Current>,
    parked: Rc<ParkedConnections<S, Open>>,
) where
    S: ConnService<B>,
    B: ResponseBody,
{
    let connections = &current.connections;
    // Registered the first time metrics are on for a connection of this listener (at
    // start, or after a reload turned them on).
    let mut counted: Option<Rc<ListenerMetrics>> = None;
    // When the worker last said it closes idle connections to make room.
    let mut reuse_warned: Option<tokio::time::Instant> = None;
    loop {
        let ctx = Rc::clone(&current.ctx.borrow());
        let max = ctx.limits.max_connections.max(1);
        // At the limit, wait for a connection to close or to be parked (or for shutdown).
        // With one parked, the next new connection takes its place: the parked one
        // nearest its deadline is closed once the new one is accepted, as nginx reuses
        // its idle connections.
        let mut reuse = false;
        while connections.open() >= max {
            let changed = connections.changed.notified();
            let parked_one = parked.parked_one();
            if parked.any() {
                reuse = true;
                break;
            }
            tokio::select! {
                () = changed => {}
                () = parked_one => {}
                () = ctx.shutdown.fired() => return,
            }
        }
        let accepted = tokio::select! {
            biased;
            () = ctx.shutdown.fired() => return,
            accepted = listener.accept() => accepted,
        };
        // Room made: the limit holds (over by one only if every parked connection woke or
        // closed while this one was awaited, and then none is left to close). A failed
        // accept closes nothing.
        if reuse
            && accepted.is_ok()
            && connections.open() >= max
            && parked.close_oldest()
            && reuse_warned.is_none_or(|at| at.elapsed() >= REUSE_WARNING_EVERY)
        {
            reuse_warned = Some(tokio::time::Instant::now());
            tracing::warn!(
                worker,
                max_connections = max,
                "at max_connections: closing idle keep-alive connections to accept new ones"
            );
        }
        // The settings as they are now, not as they were when the wait began.
        let ctx = Rc::clone(&current.ctx.borrow());
        let listener_metrics = ctx.metrics.as_ref().map(|_| {
            Rc::clone(
                counted.get_or_insert_with(|| Rc::new(ListenerMetrics::new(name.clone(), worker))),
            )
        });
        let open = || listener_metrics.as_ref().map(|m| m.accepted());
        match accepted {
            Ok(Accepted::Unix(stream)) => {
                connections.opened();
                let guard = (ConnGuard(Rc::clone(connections)), open());
                let (peer, local) = (ConnectInfo::UNIX_PEER, ConnectInfo::UNIX_LOCAL);
                // Boxed where it is made, as a TCP connection's below.
                let serving = Box::pin(conn::serve(stream, peer, local, svc.clone(), ctx));
                tokio::task::spawn_local(async move {
                    let _guard = guard;
                    serving.await;
                });
            }
            Ok(Accepted::Tcp(stream, remote, local)) => {
                connections.opened();
                let guard = (ConnGuard(Rc::clone(connections)), open());
                let svc = svc.clone();
                // What this connection needs of the options, not all of them (HTTP/3's
                // QUIC configuration is several `Arc`s to count up and down again).
                let (secure, proxy_protocol) = {
                    let options = options.borrow();
                    (options.secure.clone(), options.proxy_protocol.clone())
                };
                let options = conn::TcpOptions {
                    secure,
                    proxy_protocol,
                    listener: listener_metrics,
                };
                // The connection's future is boxed where it is made: it is kilobytes
                // (the service, buffers' handles, TLS state), and a task moves its future
                // more than once while spawning it; a box moves as a pointer. Measured on
                // a connection per request (callgrind, see bench/RESULTS.md).
                let serving = Box::pin(conn::serve_tcp(stream, remote, local, options, svc, ctx));
                parked.spawn(serving, guard);
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on a full table.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}
