//! The per-core server runtime.
//!
//! [`Server`] runs `workers` OS threads. Each thread owns a `current_thread` tokio runtime,
//! its own `SO_REUSEPORT` listener per configured address (the kernel spreads connections
//! across them), and its own service stack built by the `make_service` closure: per-worker
//! state needs no locks and may use `Rc`. Nothing hops to another thread on the request
//! path: a work-stealing runtime spends its kernel time waking threads.
//!
//! HTTP/1.1 connections, plain and TLS, are driven by scb's own connection driver
//! (`conn::h1`): it parses each request head with `httparse`, enforces the limits, refuses
//! framing ambiguities, and writes responses itself, so that a response body that is a
//! [`FileRegion`](crate::FileRegion) can go out with `sendfile(2)` on plain TCP. HTTP/2
//! (prior knowledge on plain listeners, ALPN `h2` on TLS) and HTTP/1.1 upgrades
//! (`Upgrade` listed in `Connection`, or CONNECT) are handed to hyper, with the bytes
//! already read.
//!
//! ```no_run
//! use scb_core::{respond::Respond, server::Server};
//! use std::time::Duration;
//!
//! let server = Server::builder()
//!     .workers(1)
//!     .grace_period(Duration::from_secs(5))
//!     .listen("127.0.0.1:8080".parse().unwrap())
//!     .bind()
//!     .expect("bind");
//! let handle = server.start(|_worker| Respond::new(http::StatusCode::OK).body("Hello, world!"));
//! // ... later, e.g. on SIGTERM:
//! handle.shutdown();
//! handle.join();
//! ```

// `pub(crate)` so that `crate::fuzzing` can reach the parsers; nothing outside the crate can.
pub(crate) mod conn;
mod handshake;
mod io;
mod lazy_tcp;
mod limits;
pub mod metrics;
mod open_connections;
pub mod proxy_protocol;
pub(crate) mod shutdown;
mod sys;
mod unix;
mod worker;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response};
use tower::Service;

pub use crate::connection::{ClientCertificate, ConnectInfo, TlsInfo, WorkerInfo};
pub use conn::BodyError;
pub use handshake::{Handshake, HandshakeFuture, Protocol, SecureIo, Secured, SocketOf};
pub use limits::Limits;
pub use proxy_protocol::ProxyProtocol;
/// The QUIC library [`Http3`] is configured with.
#[cfg(feature = "http3")]
pub use quinn;
pub use shutdown::shutdown_signal;
pub use unix::UnixListen;

use crate::{Body, BoxError};

/// What a [`Server`] is configured with apart from its listeners and metrics, read back
/// with [`Server::settings`]: what a second server that must answer like the first (a
/// metrics endpoint's, say) starts from, with [`Server::from_settings`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerSettings {
    /// [`Server::workers`].
    pub workers: usize,
    /// [`Server::grace_period`].
    pub grace_period: Duration,
    /// [`Server::limits`].
    pub limits: Limits,
    /// [`Server::request_id_header`].
    pub request_id_header: HeaderName,
}

/// Configures a [`Server`]; see [`Server::builder`].
#[derive(Clone, Debug)]
pub struct Server {
    workers: usize,
    grace_period: Duration,
    limits: Limits,
    request_id_header: HeaderName,
    addrs: Vec<(SocketAddr, ListenOptions)>,
    unix: Vec<UnixListen>,
    replace_unix: bool,
    inherited: Arc<std::sync::Mutex<Vec<std::net::TcpListener>>>,
    metrics: Option<Arc<metrics::ServerMetrics>>,
    /// The workers' QUIC sockets, for datagrams that reach the wrong one.
    #[cfg(feature = "http3")]
    quic_peers: Arc<worker::QuicPeers>,
}

/// A listener's handshake.
#[derive(Clone)]
pub(crate) struct Secure(pub(crate) Arc<dyn Handshake>);

/// How a listener's connections start: a TLS handshake, a PROXY protocol header, both
/// (the header comes first) or neither. For [`Server::listen_with`].
#[derive(Clone, Debug, Default)]
pub struct ListenOptions {
    pub(crate) secure: Option<Secure>,
    pub(crate) proxy_protocol: Option<Arc<ProxyProtocol>>,
    #[cfg(feature = "http3")]
    pub(crate) http3: Option<Http3>,
}

/// HTTP/3 beside a TLS listener, on the same port over UDP: the QUIC server
/// configuration (certificates, ALPN `h3`) its handshakes use. For
/// [`ListenOptions::http3`]. Feature `http3`.
///
/// 0-RTT is whatever the configuration's rustls `max_early_data_size` says; scb-tls
/// leaves it at 0 (off), because early data can be replayed.
#[cfg(feature = "http3")]
#[derive(Clone)]
pub struct Http3 {
    pub(crate) config: quinn::ServerConfig,
    pub(crate) client_certificate: Option<ParseCertificate>,
    pub(crate) retry_above: usize,
}

/// Reads a client's end-entity certificate (DER) into what requests carry.
#[cfg(feature = "http3")]
pub type ParseCertificate = fn(&[u8]) -> Option<ClientCertificate>;

#[cfg(feature = "http3")]
impl Http3 {
    /// QUIC handshakes with `config`. Its transport settings are replaced by the
    /// server's [`Limits`]: `h2_max_concurrent_streams` bounds the streams a client may
    /// open at once, `keep_alive_timeout` is the idle timeout.
    pub fn new(config: quinn::ServerConfig) -> Self {
        Self {
            config,
            client_certificate: None,
            retry_above: 64,
        }
    }

    /// How a client's certificate (the first of the chain it presented, DER) becomes the
    /// [`ClientCertificate`] its requests carry, as on TCP. Defaults to none: requests
    /// carry no certificate even when the handshake verified one.
    #[must_use]
    pub fn client_certificates(mut self, parse: ParseCertificate) -> Self {
        self.client_certificate = Some(parse);
        self
    }

    /// Past this many handshakes in progress on a worker, a client whose address is not
    /// yet validated is sent a stateless Retry first (RFC 9000 §8.1): it must echo the
    /// token from its address before the server spends a handshake on it, so spoofed
    /// sources cannot make the server amplify or burn CPU. Defaults to 64; 0 retries
    /// every new client (one round trip more for each).
    #[must_use]
    pub fn retry_above(mut self, handshakes: usize) -> Self {
        self.retry_above = handshakes;
        self
    }
}

#[cfg(feature = "http3")]
impl fmt::Debug for Http3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http3")
            .field("retry_above", &self.retry_above)
            .finish_non_exhaustive()
    }
}

impl ListenOptions {
    /// Plain HTTP, no PROXY header.
    pub fn new() -> Self {
        Self::default()
    }

    /// Connections are secured by `handshake` (see [`Server::listen_secure`]). Defaults
    /// to none: plain HTTP.
    #[must_use]
    pub fn secure(mut self, handshake: Arc<dyn Handshake>) -> Self {
        self.secure = Some(Secure(handshake));
        self
    }

    /// Also serves HTTP/3 on the listener's port over UDP, each worker with its own
    /// socket (`SO_REUSEPORT`) and QUIC endpoint. Defaults to none. A reload that keeps
    /// the listener gives new handshakes the new configuration; open connections keep
    /// theirs. Feature `http3`.
    #[cfg(feature = "http3")]
    #[must_use]
    pub fn http3(mut self, http3: Http3) -> Self {
        self.http3 = Some(http3);
        self
    }

    /// Connections from the trusted peers of `proxy_protocol` begin with a PROXY header
    /// that names the client (see [`proxy_protocol`]).
    /// Defaults to none.
    #[must_use]
    pub fn proxy_protocol(mut self, proxy_protocol: ProxyProtocol) -> Self {
        self.proxy_protocol = Some(Arc::new(proxy_protocol));
        self
    }
}

impl fmt::Debug for Secure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secure")
    }
}

impl Default for Server {
    fn default() -> Self {
        Self::builder()
    }
}

impl Server {
    /// The settings set so far (every one at its default when not set).
    pub fn settings(&self) -> ServerSettings {
        ServerSettings {
            workers: self.workers,
            grace_period: self.grace_period,
            limits: self.limits.clone(),
            request_id_header: self.request_id_header.clone(),
        }
    }

    /// A server with `settings` and no listener yet.
    pub fn from_settings(settings: ServerSettings) -> Self {
        Self::builder()
            .workers(settings.workers)
            .grace_period(settings.grace_period)
            .limits(settings.limits)
            .request_id_header(settings.request_id_header)
    }

    /// A server with default settings and no listener yet.
    pub fn builder() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(1, usize::from),
            grace_period: Duration::from_secs(10),
            limits: Limits::default(),
            request_id_header: HeaderName::from_static("x-request-id"),
            addrs: Vec::new(),
            unix: Vec::new(),
            replace_unix: false,
            inherited: Arc::default(),
            metrics: None,
            #[cfg(feature = "http3")]
            quic_peers: Arc::default(),
        }
    }

    /// Whether the server counts its own answers, open connections and TLS handshakes
    /// (see [`metrics`]): the handles are registered with the recorder in effect now, so
    /// install it first. Defaults to off: nothing recorded, no handle touched.
    #[must_use]
    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on.then(|| Arc::new(metrics::ServerMetrics::new()));
        self
    }

    /// How many worker threads to run, each with its own runtime and listeners.
    ///
    /// Values below 1 are raised to 1. Defaults to the number of available CPUs.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// How long in-flight requests may run after shutdown begins before their
    /// connections are closed. Defaults to 10 seconds.
    pub fn grace_period(mut self, grace_period: Duration) -> Self {
        self.grace_period = grace_period;
        self
    }

    /// Size limits and timeouts for connections. Defaults to [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The header that carries the request id on responses the server makes itself
    /// (400, 408, 413, 431, 500) before or after the service stack. Use the same name as
    /// the [`RequestIdLayer`](crate::request_id::RequestIdLayer). Defaults to `x-request-id`.
    pub fn request_id_header(mut self, header: HeaderName) -> Self {
        self.request_id_header = header;
        self
    }

    /// Adds an address to listen on. Port 0 picks a free port (the same one for every
    /// worker); see [`BoundServer::local_addrs`].
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.addrs.push((addr, ListenOptions::new()));
        self
    }

    /// Adds an address whose connections start as `options` say: a TLS handshake, a
    /// PROXY protocol header, or both.
    pub fn listen_with(mut self, addr: SocketAddr, options: ListenOptions) -> Self {
        self.addrs.push((addr, options));
        self
    }

    /// Adds an address whose connections are secured by `handshake` (TLS, from
    /// `scb-tls`) before HTTP is spoken: HTTP/2 when the handshake's ALPN chose it,
    /// HTTP/1.1 otherwise, with the same limits, service and graceful shutdown as plain
    /// listeners. A handshake that takes longer than
    /// [`Limits::handshake_timeout`] closes the connection.
    pub fn listen_secure(mut self, addr: SocketAddr, handshake: Arc<dyn Handshake>) -> Self {
        self.addrs
            .push((addr, ListenOptions::new().secure(handshake)));
        self
    }

    /// Adds a Unix domain socket to listen on, for plain HTTP (HTTP/1.1, and HTTP/2 with
    /// prior knowledge). Its peers are [`ConnectInfo::UNIX_PEER`]. The socket file is
    /// removed when the server ends (unless another process took the path over).
    pub fn listen_unix(mut self, listen: UnixListen) -> Self {
        self.unix.push(listen);
        self
    }

    /// Whether a Unix socket path where another process still accepts is taken over (the
    /// new socket renamed over it) instead of refused: for a process upgrade, whose
    /// predecessor keeps serving what it accepted while new connections come here.
    /// Defaults to false.
    pub fn replace_unix_sockets(mut self, replace: bool) -> Self {
        self.replace_unix = replace;
        self
    }

    /// Listening sockets opened by someone else (systemd's socket activation, the scb
    /// process being upgraded): a listener whose address one of them has takes it
    /// instead of binding, so connections that waited in its queue are served. Several
    /// sockets of one address (one per worker of the process before) are spread over
    /// the workers; with fewer sockets than workers, the others bind their own beside
    /// them when the sockets have `SO_REUSEPORT`, and share them otherwise. Sockets no
    /// listener takes are closed by [`bind`](Self::bind). Defaults to none.
    pub fn inherit(self, sockets: Vec<std::net::TcpListener>) -> Self {
        self.inherited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(sockets);
        self
    }

    /// Takes the inherited sockets bound to `addr`.
    fn take_inherited(&self, addr: SocketAddr) -> Vec<std::net::TcpListener> {
        if addr.port() == 0 {
            return Vec::new();
        }
        let mut inherited = self
            .inherited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (ours, rest) = std::mem::take(&mut *inherited)
            .into_iter()
            .partition(|socket| socket.local_addr().is_ok_and(|local| local == addr));
        *inherited = rest;
        ours
    }

    /// Opens every listener now, one `SO_REUSEPORT` socket per worker and address, so
    /// that an address in use is an error here and not in a worker thread later.
    ///
    /// `SO_REUSEPORT` would let a second server (a second `scb run` by mistake) share an
    /// address the first one serves, silently taking part of its traffic. So before the
    /// workers' sockets are bound, each address is first bound once without it: when
    /// another process listens there, that fails, as it does for nginx. What remains is
    /// the moment between that check and the workers' binds.
    ///
    /// # Errors
    ///
    /// When no address was given, another process listens on one, or a socket cannot be
    /// created, bound or listened on; the error names the address (same
    /// [`ErrorKind`](std::io::ErrorKind), e.g. `AddrInUse`).
    pub fn bind(self) -> std::io::Result<BoundServer> {
        if self.addrs.is_empty() && self.unix.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "server has no listen address",
            ));
        }
        sys::raise_nofile_limit();
        let mut bound = Vec::with_capacity(self.addrs.len());
        let mut dups = Vec::new();
        let mut per_worker: Vec<Vec<worker::Listener>> =
            (0..self.workers).map(|_| Vec::new()).collect();
        for (addr, options) in &self.addrs {
            let inherited = self.take_inherited(*addr);
            let (local, sockets) = if inherited.is_empty() {
                bind_everywhere(*addr, self.workers)?
            } else {
                spread(*addr, inherited, self.workers)?
            };
            let mut quic = worker::quic_sockets(local, options, self.workers)?.into_iter();
            for (i, socket) in sockets.into_iter().enumerate() {
                dups.push((local, socket.try_clone()?));
                per_worker[i % self.workers].push(worker::Listener {
                    socket: worker::ListenSocket::Tcp(socket),
                    options: options.clone(),
                    quic: quic.next().unwrap_or_default(),
                });
            }
            bound.push(BoundAddr {
                configured: *addr,
                local,
            });
        }
        let mut unix = Vec::with_capacity(self.unix.len());
        for listen in &self.unix {
            let (bound, sockets) = BoundUnix::bind(listen, self.replace_unix, self.workers)?;
            for (listeners, socket) in per_worker.iter_mut().zip(sockets) {
                listeners.push(socket);
            }
            unix.push(bound);
        }
        // What no listener took: closed here, so that the queues of sockets nobody
        // accepts on do not fill up unseen.
        for unused in self
            .inherited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            tracing::warn!(
                addr = ?unused.local_addr().ok(),
                "an inherited socket matches no listener; closing it"
            );
        }
        Ok(BoundServer {
            config: Arc::new(self),
            local_addrs: bound.iter().map(|b| b.local).collect(),
            bound,
            unix,
            dups,
            per_worker,
        })
    }
}

/// Binds `addr` once per worker (`SO_REUSEPORT`), after checking that no other process
/// listens there. Returns the bound address (port 0 resolved) and the sockets.
fn bind_everywhere(
    addr: SocketAddr,
    workers: usize,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("binding {addr}: {e}"));
    if addr.port() != 0 {
        worker::check_unclaimed(addr).map_err(named)?;
    }
    let mut sockets = Vec::with_capacity(workers);
    let mut local = addr;
    for _ in 0..workers {
        let socket = worker::reuseport_listener(local).map_err(named)?;
        // Port 0: the first bind picks the port, the others must share it.
        local = socket.local_addr()?;
        sockets.push(socket);
    }
    Ok((local, sockets))
}

/// The sockets of an address for `workers` workers, from `inherited` ones (all bound to
/// `addr`): each inherited socket goes to a worker (several to one when there are more
/// sockets than workers), and workers left without one get a socket of their own
/// (`SO_REUSEPORT`) or, when the inherited sockets cannot share their port that way, a
/// duplicate of one.
fn spread(
    addr: SocketAddr,
    inherited: Vec<std::net::TcpListener>,
    workers: usize,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("binding {addr}: {e}"));
    let reuseport = inherited
        .iter()
        .all(|socket| socket2::SockRef::from(socket).reuse_port().unwrap_or(false));
    let mut sockets = Vec::with_capacity(inherited.len().max(workers));
    for socket in &inherited {
        socket.set_nonblocking(true).map_err(named)?;
        worker::defer_accept(socket, addr);
    }
    for i in inherited.len()..workers {
        let socket = if reuseport {
            worker::reuseport_listener(addr).map_err(named)?
        } else {
            inherited[i % inherited.len()].try_clone().map_err(named)?
        };
        sockets.push(socket);
    }
    // The inherited ones first: worker i gets socket i.
    let mut all = inherited;
    all.append(&mut sockets);
    Ok((addr, all))
}

/// A listener as configured and as bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BoundAddr {
    configured: SocketAddr,
    local: SocketAddr,
}

/// A Unix-socket listener as configured, and the socket file bound for it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct BoundUnix {
    listen: UnixListen,
    id: unix::FileId,
}

impl BoundUnix {
    /// Binds `listen`, and gives each of `workers` a duplicate of its socket.
    fn bind(
        listen: &UnixListen,
        replace_live: bool,
        workers: usize,
    ) -> std::io::Result<(Self, Vec<worker::Listener>)> {
        let (socket, id) = unix::bind(listen, replace_live)?;
        let sockets = (0..workers)
            .map(|_| {
                Ok(worker::Listener {
                    socket: worker::ListenSocket::Unix(
                        socket.try_clone()?,
                        listen.path().to_owned(),
                    ),
                    quic: Default::default(),
                    options: ListenOptions::new(),
                })
            })
            .collect::<std::io::Result<_>>()?;
        let bound = Self {
            listen: listen.clone(),
            id,
        };
        Ok((bound, sockets))
    }
}

/// A [`Server`] whose listeners are open; [`start`](BoundServer::start) runs it.
#[derive(Debug)]
pub struct BoundServer {
    config: Arc<Server>,
    local_addrs: Vec<SocketAddr>,
    bound: Vec<BoundAddr>,
    unix: Vec<BoundUnix>,
    /// A duplicate of every worker's socket, by bound address: for handing them over.
    dups: Vec<(SocketAddr, std::net::TcpListener)>,
    per_worker: Vec<Vec<worker::Listener>>,
}

impl BoundServer {
    /// The addresses actually bound, in the order they were added (port 0 resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// How many workers [`start`](Self::start) runs.
    pub fn workers(&self) -> usize {
        self.config.workers
    }

    /// The Unix socket paths listened on, in the order they were added.
    pub fn unix_paths(&self) -> Vec<&std::path::Path> {
        self.unix.iter().map(|u| u.listen.path()).collect()
    }

    /// Starts the workers and returns at once.
    ///
    /// `make_service` runs once on each worker thread, so the stack it builds is that
    /// worker's own: it need not be `Send`, and clones of it serve the worker's
    /// connections.
    pub fn start<F, S, B>(self, make_service: F) -> ServerHandle
    where
        F: Fn(&WorkerInfo) -> S + Send + Sync + 'static,
        S: Service<Request<Body>, Response = Response<B>> + Clone + 'static,
        S::Error: Into<BoxError>,
        S::Future: 'static,
        B: http_body::Body<Data = Bytes> + 'static,
        B::Error: Into<BoxError>,
    {
        let make_service = Arc::new(make_service);
        let shutdown = shutdown::Trigger::new();
        let workers = self.per_worker.len();
        let mut updates = Vec::with_capacity(workers);
        let threads = self
            .per_worker
            .into_iter()
            .enumerate()
            .map(|(index, listeners)| {
                let info = WorkerInfo { index, workers };
                let make_service = Arc::clone(&make_service);
                let config = Arc::clone(&self.config);
                let shutdown = shutdown.clone();
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                updates.push(tx);
                std::thread::Builder::new()
                    .name(format!("scb-worker-{index}"))
                    .spawn(move || {
                        worker::run(info, &config, listeners, &shutdown, rx, |i| make_service(i));
                    })
                    .expect("spawning a worker thread")
            })
            .collect();
        ServerHandle {
            local_addrs: self.local_addrs,
            bound: self.bound,
            unix: self.unix,
            dups: std::sync::Mutex::new(self.dups),
            shutdown,
            updates,
            threads,
        }
    }
}

/// A running server's next listeners and settings, bound by [`ServerHandle::prepare`]
/// and switched to by [`ServerHandle::apply`]. Dropped, it closes the sockets it opened.
#[derive(Debug)]
pub struct Prepared {
    bound: Vec<BoundAddr>,
    unix: Vec<BoundUnix>,
    dups: Vec<(SocketAddr, std::net::TcpListener)>,
    per_worker: Vec<Vec<worker::ListenerUpdate>>,
    limits: Limits,
    request_id_header: HeaderName,
    grace_period: Duration,
    metrics: Option<Arc<metrics::ServerMetrics>>,
}

impl Prepared {
    /// The addresses the server will listen on, in the order they were added (port 0
    /// resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.bound.iter().map(|b| b.local).collect()
    }
}

/// A running server: stop it with [`shutdown`](Self::shutdown), wait with
/// [`join`](Self::join).
pub struct ServerHandle {
    local_addrs: Vec<SocketAddr>,
    bound: Vec<BoundAddr>,
    /// The Unix-socket listeners, whose files go when the server ends.
    unix: Vec<BoundUnix>,
    /// A duplicate of every worker's socket, by bound address, until shutdown: what
    /// [`listening_sockets`](Self::listening_sockets) hands over.
    dups: std::sync::Mutex<Vec<(SocketAddr, std::net::TcpListener)>>,
    shutdown: shutdown::Trigger,
    updates: Vec<tokio::sync::mpsc::UnboundedSender<worker::Update>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addrs", &self.local_addrs)
            .field("workers", &self.threads.len())
            .finish()
    }
}

impl ServerHandle {
    /// The addresses the server listens on.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The Unix socket paths the server listens on.
    pub fn unix_paths(&self) -> Vec<&std::path::Path> {
        self.unix.iter().map(|u| u.listen.path()).collect()
    }

    /// Binds what `server` adds to the running server's listeners, without changing
    /// anything yet: [`apply`](Self::apply) the result to switch over, or drop it to
    /// close the new sockets again. Two steps, so that a caller changing several things
    /// at once (two servers, the service stack) can fail before any of them changed.
    ///
    /// A listener of `server` whose address is one the server listens on already keeps
    /// that socket, so no connection is refused while the listeners change; listeners
    /// on port 0 are matched in the order they were added, or by the port they were
    /// given. `server`'s worker count is
    /// ignored: the threads stay as they are.
    ///
    /// # Errors
    ///
    /// As [`Server::bind`]: no address, or one that cannot be bound (in use by another
    /// process). Nothing changed then.
    pub fn prepare(&self, server: &Server) -> std::io::Result<Prepared> {
        if server.addrs.is_empty() && server.unix.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "server has no listen address",
            ));
        }
        let workers = self.updates.len();
        let mut unclaimed: Vec<Option<BoundAddr>> = self.bound.iter().copied().map(Some).collect();
        let mut bound = Vec::with_capacity(server.addrs.len());
        let mut dups = Vec::new();
        let mut per_worker: Vec<Vec<worker::ListenerUpdate>> =
            (0..workers).map(|_| Vec::new()).collect();
        for (addr, options) in &server.addrs {
            // The same configured address, or the address a port-0 listener was given.
            let found = unclaimed
                .iter()
                .position(|b| b.is_some_and(|b| b.configured == *addr))
                .or_else(|| {
                    unclaimed
                        .iter()
                        .position(|b| b.is_some_and(|b| addr.port() != 0 && b.local == *addr))
                });
            let kept = found.and_then(|i| unclaimed[i].take());
            if let Some(kept) = kept {
                for listeners in &mut per_worker {
                    listeners.push(worker::ListenerUpdate::Keep {
                        local: worker::ListenKey::Tcp(kept.local),
                        options: options.clone(),
                    });
                }
                bound.push(kept);
                continue;
            }
            let inherited = server.take_inherited(*addr);
            let (local, sockets) = if inherited.is_empty() {
                bind_everywhere(*addr, workers)?
            } else {
                spread(*addr, inherited, workers)?
            };
            let mut quic = worker::quic_sockets(local, options, workers)?.into_iter();
            for (i, socket) in sockets.into_iter().enumerate() {
                dups.push((local, socket.try_clone()?));
                per_worker[i % workers].push(worker::ListenerUpdate::Open(worker::Listener {
                    socket: worker::ListenSocket::Tcp(socket),
                    options: options.clone(),
                    quic: quic.next().unwrap_or_default(),
                }));
            }
            bound.push(BoundAddr {
                configured: *addr,
                local,
            });
        }
        // Unix sockets by path: a path listened on already keeps its socket (its mode and
        // owner set anew), a new one is bound.
        let mut unix = Vec::with_capacity(server.unix.len());
        for listen in &server.unix {
            if let Some(kept) = self.unix.iter().find(|u| u.listen.path() == listen.path()) {
                unix::restyle(listen, kept.id)?;
                for listeners in &mut per_worker {
                    listeners.push(worker::ListenerUpdate::Keep {
                        local: worker::ListenKey::Unix(listen.path().to_owned()),
                        options: ListenOptions::new(),
                    });
                }
                unix.push(BoundUnix {
                    listen: listen.clone(),
                    id: kept.id,
                });
                continue;
            }
            let (bound, sockets) = BoundUnix::bind(listen, false, workers)?;
            for (listeners, socket) in per_worker.iter_mut().zip(sockets) {
                listeners.push(worker::ListenerUpdate::Open(socket));
            }
            unix.push(bound);
        }
        Ok(Prepared {
            unix,
            bound,
            dups,
            per_worker,
            limits: server.limits.clone(),
            request_id_header: server.request_id_header.clone(),
            grace_period: server.grace_period,
            metrics: server.metrics.clone(),
        })
    }

    /// Switches the running server to what [`prepare`](Self::prepare) bound: each
    /// worker's new connections get the new limits, request-id header and handshakes,
    /// listeners left out stop accepting (the connections they accepted carry on and
    /// drain), and new ones start. The grace period of a later shutdown is the new one.
    ///
    /// Resolves once every worker has switched: from then on the listeners left out
    /// refuse connections and the new ones accept them.
    pub async fn apply(&mut self, prepared: Prepared) {
        let Prepared {
            bound,
            unix,
            dups,
            per_worker,
            limits,
            request_id_header,
            grace_period,
            metrics,
        } = prepared;
        let mut switched = Vec::with_capacity(self.updates.len());
        for (tx, listeners) in self.updates.iter().zip(per_worker) {
            let (done, done_rx) = tokio::sync::oneshot::channel();
            switched.push(done_rx);
            // A worker that has exited (after shutdown) has nothing left to update.
            let _ = tx.send(worker::Update {
                listeners,
                ctx: conn::ConnCtx {
                    limits: limits.clone(),
                    request_id_header: request_id_header.clone(),
                    shutdown: self.shutdown.clone(),
                    metrics: metrics.clone(),
                },
                grace_period,
                done,
            });
        }
        self.local_addrs = bound.iter().map(|b| b.local).collect();
        {
            let mut held = self
                .dups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            held.retain(|(addr, _)| self.local_addrs.contains(addr));
            held.extend(dups);
        }
        self.bound = bound;
        for done in switched {
            // An error is a worker that exited without switching: nothing to wait for.
            let _ = done.await;
        }
        // The sockets left out are closed now: their files go too.
        for gone in &self.unix {
            if !unix.iter().any(|u| u.listen.path() == gone.listen.path()) {
                unix::remove(gone.listen.path(), gone.id);
            }
        }
        self.unix = unix;
    }

    /// Begins graceful shutdown: every worker stops accepting, closes idle connections,
    /// lets in-flight requests finish within the grace period, then exits.
    pub fn shutdown(&self) {
        // The duplicates would keep the sockets open (queueing connections nobody
        // accepts) until the handle is dropped.
        self.dups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.shutdown.fire();
    }

    /// Duplicates of every worker's listening socket (several per address, one per
    /// worker), for handing the listeners to a new process in an upgrade: given to its
    /// [`Server::inherit`], they keep serving the same queues, so no connection waiting
    /// in one is lost when this server shuts down. Empty after
    /// [`shutdown`](Self::shutdown).
    ///
    /// # Errors
    ///
    /// When a descriptor cannot be duplicated (out of descriptors).
    pub fn listening_sockets(&self) -> std::io::Result<Vec<std::net::TcpListener>> {
        self.dups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(_, socket)| socket.try_clone())
            .collect()
    }

    /// Waits until every worker has exited.
    pub fn join(self) {
        for thread in self.threads {
            if thread.join().is_err() {
                tracing::error!("a worker thread panicked outside a request");
            }
        }
        for bound in &self.unix {
            unix::remove(bound.listen.path(), bound.id);
        }
    }
}
