//! [`ReverseProxyBuilder`]: every setting of a proxy, with its default.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::balance::{Balance, Balancer};
use crate::client::pool::Pool;
use crate::forward::TrustedProxies;
use crate::health::{ActiveHealth, PassiveHealth};
use crate::service::{ReverseProxy, Shared};
use crate::settings::{MAX_TRIES, ProxyHeader, ProxySettings, UpstreamProtocol};
use crate::tls::UpstreamTls;
use crate::upstream::{Upstream, UpstreamState};

impl ReverseProxy {
    /// A builder for a proxy to `upstreams`.
    ///
    /// ```no_run
    /// use scb_proxy::{Balance, ReverseProxy, Upstream};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let proxy = ReverseProxy::builder([Upstream::new("127.0.0.1:8081")?, Upstream::new("127.0.0.1:8082")?])
    ///     .balance(Balance::LeastConn)
    ///     .build()?;
    /// # let _ = proxy;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(upstreams: impl IntoIterator<Item = Upstream>) -> ReverseProxyBuilder {
        ReverseProxyBuilder::new(upstreams.into_iter().collect())
    }
}

/// Why a proxy could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The upstream list is empty.
    #[error("a proxy needs at least one upstream")]
    NoUpstreams,
    /// The active health check's path is not an absolute path.
    #[error("health check path {0:?} must start with '/'")]
    HealthPath(String),
    /// The TLS client for `https://` upstreams could not be set up (a file unreadable or
    /// not PEM, no usable root, a CA file that can never verify).
    #[error("upstream TLS: {0}")]
    Tls(#[from] crate::tls::UpstreamTlsError),
    /// The protocol does not fit the upstreams or another setting: `h2` to an upstream
    /// that is not `https://`, `h2c` to one that is, PROXY headers on HTTP/2.
    #[error("{0}")]
    Protocol(String),
    /// A forward-auth `uri` that is not a path starting with `/` (a query may follow; a
    /// fragment may not).
    #[error("forward auth uri {0:?} must be a path starting with '/'")]
    AuthUri(String),
    /// A FastCGI root that cannot be opened as a directory.
    #[error("root {path}: {source}")]
    Root {
        /// The root as given.
        path: std::path::PathBuf,
        /// Why it cannot be opened.
        #[source]
        source: std::io::Error,
    },
}

/// Builds a [`ReverseProxy`]; see [`ReverseProxy::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ReverseProxyBuilder {
    upstreams: Vec<Upstream>,
    balance: Balance,
    active: Option<ActiveHealth>,
    settings: ProxySettings,
}

impl ReverseProxyBuilder {
    pub(crate) fn new(upstreams: Vec<Upstream>) -> Self {
        Self {
            upstreams,
            balance: Balance::default(),
            active: None,
            settings: ProxySettings {
                connect_timeout: Duration::from_secs(5),
                response_timeout: Duration::from_secs(60),
                idle_timeout: Duration::from_secs(60),
                max_body: Some(16 * 1024 * 1024),
                strip_prefix: None,
                preserve_host: true,
                trusted_proxies: TrustedProxies::default(),
                passive: PassiveHealth::default(),
                max_tries: 3,
                try_timeout: Duration::from_secs(15),
                max_idle: 64,
                pool_idle_timeout: Duration::from_secs(30),
                max_response_head: 64 * 1024,
                send_proxy_protocol: None,
                forward_client_cert: false,
                upstream_tls: None,
                protocol: UpstreamProtocol::Http1,
                propagate_trace: true,
            },
        }
    }

    /// How requests are spread over the upstreams. Defaults to [`Balance::RoundRobin`].
    pub fn balance(mut self, balance: Balance) -> Self {
        self.balance = balance;
        self
    }

    /// Longest wait for a TCP connection to an upstream; past it the next upstream is
    /// tried, and when none is left the client gets 504. Defaults to 5 seconds.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// Longest wait from sending a request to the upstream's response head; past it the
    /// client gets 504 (and the request is not retried: the upstream may be working on
    /// it). Defaults to 60 seconds.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// Longest pause between two pieces of a request or response body; past it the body
    /// fails (the client connection is closed if the response had started). Defaults to
    /// 60 seconds.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.settings.idle_timeout = timeout;
        self
    }

    /// Largest request body passed upstream; a larger `Content-Length` gets 413 before
    /// any upstream is contacted, a chunked body that grows past it fails with 413 if no
    /// response has started. `None`: no limit (the server's own limit still applies).
    /// Defaults to 16 MiB.
    pub fn max_body(mut self, bytes: Option<u64>) -> Self {
        self.settings.max_body = bytes;
        self
    }

    /// A path prefix removed before forwarding (`/api/users` becomes `/users` with
    /// `/api/`). Defaults to none: the path goes up unchanged.
    pub fn strip_prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.settings.strip_prefix = (!prefix.is_empty()).then_some(prefix);
        self
    }

    /// Whether the upstream sees the client's `Host` (true) or its own `host:port`.
    /// Defaults to true.
    pub fn preserve_host(mut self, preserve: bool) -> Self {
        self.settings.preserve_host = preserve;
        self
    }

    /// Clients whose `X-Forwarded-*` fields are kept (and appended to); everyone else's
    /// are replaced. Defaults to none.
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.settings.trusted_proxies = trusted;
        self
    }

    /// Passive health: how many failures in a row take an upstream out, and for how
    /// long. Defaults to [`PassiveHealth::default`].
    pub fn passive_health(mut self, passive: PassiveHealth) -> Self {
        self.settings.passive = passive;
        self
    }

    /// Active health checks. Defaults to none.
    pub fn active_health(mut self, active: ActiveHealth) -> Self {
        self.active = Some(active);
        self
    }

    /// Most tries per request, counting the first (at most 8). A failed connect moves
    /// to another upstream; an idempotent request without a body that failed on a reused
    /// connection before any response byte is replayed once. Defaults to 3.
    pub fn max_tries(mut self, tries: usize) -> Self {
        self.settings.max_tries = tries.clamp(1, MAX_TRIES);
        self
    }

    /// Longest time all tries of a request may take together (connects and waits for a
    /// head); past it the client gets 504. Defaults to 15 seconds.
    pub fn try_timeout(mut self, timeout: Duration) -> Self {
        self.settings.try_timeout = timeout;
        self
    }

    /// Most keep-alive connections kept per upstream and worker. Defaults to 64.
    pub fn max_idle_per_upstream(mut self, max: usize) -> Self {
        self.settings.max_idle = max;
        self
    }

    /// How long an unused pooled connection is kept. Defaults to 30 seconds (below the
    /// usual upstream keep-alive timeouts would race less; a stale connection is detected
    /// and the request replayed either way).
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.settings.pool_idle_timeout = timeout;
        self
    }

    /// Largest upstream response head (status line and fields); larger is a 502.
    /// Defaults to 64 KiB.
    pub fn max_response_head(mut self, bytes: usize) -> Self {
        self.settings.max_response_head = bytes;
        self
    }

    /// Begins every upstream connection with a PROXY protocol header (HAProxy's, v1 or
    /// v2) naming the client and the address it connected to, for an upstream that
    /// reads one (a proxy or server behind scb that needs the client's address at the
    /// connection level). A connection then belongs to its client: it is reused only for
    /// later requests of the same client connection. Active health checks send a header
    /// saying the connection is scb's own (`UNKNOWN`, `LOCAL`). Defaults to none.
    pub fn send_proxy_protocol(mut self, version: ProxyHeader) -> Self {
        self.settings.send_proxy_protocol = Some(version);
        self
    }

    /// How `https://` upstreams are verified and what the proxy presents to them.
    /// Defaults to the system's roots and no client certificate.
    pub fn upstream_tls(mut self, tls: UpstreamTls) -> Self {
        self.settings.upstream_tls = Some(tls);
        self
    }

    /// The HTTP version spoken to the upstreams: HTTP/1.1, or HTTP/2 over TLS (`H2`,
    /// every upstream `https://`) or in the clear (`H2c`). HTTP/2 is what gRPC services
    /// need: trailers pass both ways, and a failure the proxy answers reaches a gRPC client
    /// as a `grpc-status` (UNAVAILABLE, DEADLINE_EXCEEDED) instead of an HTTP error page.
    /// WebSocket upgrades are not carried over HTTP/2. Defaults to
    /// [`UpstreamProtocol::Http1`].
    pub fn protocol(mut self, protocol: UpstreamProtocol) -> Self {
        self.settings.protocol = protocol;
        self
    }

    /// Whether a request with a trace (a [`TraceContext`](scb_core::trace_context::TraceContext)
    /// from [`SpansLayer`](scb_core::spans::SpansLayer)) tells the upstream its place in it:
    /// `traceparent` names the exchange's span (a sampled request's) or the server's, and
    /// `tracestate` is what the client sent with a valid `traceparent`, else none. Off: the
    /// client's fields go up as it sent them. Defaults to on.
    pub fn propagate_trace(mut self, propagate: bool) -> Self {
        self.settings.propagate_trace = propagate;
        self
    }

    /// Sends the client certificate a mutual-TLS listener verified (scb-core's
    /// `ClientCertificate`) as `X-Client-Cert-Subject` (RFC 4514) and `X-Client-Cert-San`
    /// (comma-separated names). Those fields are removed from every client's request
    /// either way, so no client can claim a certificate. Defaults to off.
    pub fn forward_client_cert(mut self, forward: bool) -> Self {
        self.settings.forward_client_cert = forward;
        self
    }

    /// The upstreams given so far.
    pub(crate) fn upstream_list(&self) -> &[Upstream] {
        &self.upstreams
    }

    /// The proxy.
    ///
    /// # Errors
    ///
    /// [`BuildError::NoUpstreams`] for an empty upstream list.
    pub fn build(self) -> Result<ReverseProxy, BuildError> {
        if self.upstreams.is_empty() {
            return Err(BuildError::NoUpstreams);
        }
        if let Some(active) = &self.active
            && !active.path.starts_with('/')
        {
            return Err(BuildError::HealthPath(active.path.clone()));
        }
        self.check_protocol()?;
        let tls = if self.upstreams.iter().any(|u| u.tls) {
            let config = self.settings.upstream_tls.clone().unwrap_or_default();
            let alpn: &[u8] = match self.settings.protocol {
                UpstreamProtocol::H2 => b"h2",
                _ => b"http/1.1",
            };
            let hosts = self
                .upstreams
                .iter()
                .filter(|u| u.tls)
                .map(|u| u.authority().host())
                .collect::<Vec<_>>();
            Some(config.connector(alpn, &hosts)?)
        } else {
            None
        };
        let upstreams: Arc<[UpstreamState]> =
            self.upstreams.into_iter().map(UpstreamState::new).collect();
        let balancer = Balancer::new(self.balance, &upstreams);
        let pool = Pool::new(upstreams.len(), self.settings.pool());
        Ok(ReverseProxy::from_parts(
            Arc::new(Shared {
                upstreams,
                balancer,
                settings: self.settings,
                active: self.active,
                active_started: AtomicBool::new(false),
                tls,
                active_task: std::sync::OnceLock::new(),
            }),
            Arc::new(pool),
        ))
    }

    fn check_protocol(&self) -> Result<(), BuildError> {
        let protocol = self.settings.protocol;
        if protocol.is_h2() && self.settings.send_proxy_protocol.is_some() {
            return Err(BuildError::Protocol(
                "PROXY protocol headers cannot be sent to HTTP/2 upstreams: one connection \
                 carries many clients"
                    .into(),
            ));
        }
        let misfit = self.upstreams.iter().find(|u| match protocol {
            UpstreamProtocol::H2 => !u.tls,
            UpstreamProtocol::H2c => u.tls,
            UpstreamProtocol::Http1 => false,
        });
        match (misfit, protocol) {
            (Some(u), UpstreamProtocol::H2) => Err(BuildError::Protocol(format!(
                "protocol \"h2\" is HTTP/2 over TLS, and upstream {u} is not https://; \
                 \"h2c\" is HTTP/2 in the clear"
            ))),
            (Some(u), _) => Err(BuildError::Protocol(format!(
                "protocol \"h2c\" is HTTP/2 in the clear, and upstream {u} is https://; \
                 \"h2\" is HTTP/2 over TLS"
            ))),
            (None, _) => Ok(()),
        }
    }
}
