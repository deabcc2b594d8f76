//! [`ProxySettings`]: what a proxy was built with, resolved, as every request reads it.

use std::time::Duration;

use crate::client::pool::PoolConfig;
use crate::forward::TrustedProxies;
use crate::health::PassiveHealth;
pub use scb_core::server::proxy_protocol::Version as ProxyHeader;

/// The most tries one request gets, whatever `max_tries` says: each try is a different
/// upstream or a replay on a fresh connection, and the bookkeeping lives on the stack.
pub(crate) const MAX_TRIES: usize = 8;

/// What a proxy was built with: every setting of
/// [`ReverseProxyBuilder`](crate::ReverseProxyBuilder) but the upstreams, their balancing
/// and active checks, resolved (defaults filled in). Shared by every clone and worker of
/// the proxy; read it with [`ReverseProxy::settings`](crate::ReverseProxy::settings).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxySettings {
    /// See [`ReverseProxyBuilder::connect_timeout`](crate::ReverseProxyBuilder::connect_timeout).
    pub connect_timeout: Duration,
    /// See [`ReverseProxyBuilder::response_timeout`](crate::ReverseProxyBuilder::response_timeout).
    pub response_timeout: Duration,
    /// See [`ReverseProxyBuilder::idle_timeout`](crate::ReverseProxyBuilder::idle_timeout).
    pub idle_timeout: Duration,
    /// See [`ReverseProxyBuilder::max_body`](crate::ReverseProxyBuilder::max_body).
    pub max_body: Option<u64>,
    /// See [`ReverseProxyBuilder::strip_prefix`](crate::ReverseProxyBuilder::strip_prefix).
    pub strip_prefix: Option<String>,
    /// See [`ReverseProxyBuilder::preserve_host`](crate::ReverseProxyBuilder::preserve_host).
    pub preserve_host: bool,
    /// See [`ReverseProxyBuilder::trusted_proxies`](crate::ReverseProxyBuilder::trusted_proxies).
    pub trusted_proxies: TrustedProxies,
    /// See [`ReverseProxyBuilder::passive_health`](crate::ReverseProxyBuilder::passive_health).
    pub passive: PassiveHealth,
    /// See [`ReverseProxyBuilder::max_tries`](crate::ReverseProxyBuilder::max_tries).
    pub max_tries: usize,
    /// See [`ReverseProxyBuilder::try_timeout`](crate::ReverseProxyBuilder::try_timeout).
    pub try_timeout: Duration,
    /// See [`ReverseProxyBuilder::max_idle_per_upstream`](crate::ReverseProxyBuilder::max_idle_per_upstream).
    pub max_idle: usize,
    /// See [`ReverseProxyBuilder::pool_idle_timeout`](crate::ReverseProxyBuilder::pool_idle_timeout).
    pub pool_idle_timeout: Duration,
    /// See [`ReverseProxyBuilder::max_response_head`](crate::ReverseProxyBuilder::max_response_head).
    pub max_response_head: usize,
    /// See [`ReverseProxyBuilder::send_proxy_protocol`](crate::ReverseProxyBuilder::send_proxy_protocol).
    pub send_proxy_protocol: Option<ProxyHeader>,
    /// See [`ReverseProxyBuilder::forward_client_cert`](crate::ReverseProxyBuilder::forward_client_cert).
    pub forward_client_cert: bool,
    /// See [`ReverseProxyBuilder::upstream_tls`](crate::ReverseProxyBuilder::upstream_tls).
    pub upstream_tls: Option<crate::UpstreamTls>,
    /// See [`ReverseProxyBuilder::protocol`](crate::ReverseProxyBuilder::protocol).
    pub protocol: UpstreamProtocol,
    /// See [`ReverseProxyBuilder::propagate_trace`](crate::ReverseProxyBuilder::propagate_trace).
    pub propagate_trace: bool,
}

/// The HTTP version a proxy speaks to its upstreams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamProtocol {
    /// HTTP/1.1 over TCP, TLS (`https://`) or a Unix socket, with keep-alive connections
    /// pooled per worker. The default.
    #[default]
    Http1,
    /// HTTP/2 over TLS, agreed by ALPN: every upstream is `https://`. One multiplexed
    /// connection per upstream and worker.
    H2,
    /// HTTP/2 in the clear with prior knowledge (RFC 9113 §3.3), over TCP or a Unix
    /// socket: what gRPC servers inside a network usually speak. One multiplexed
    /// connection per upstream and worker.
    H2c,
}

impl UpstreamProtocol {
    /// Whether this is HTTP/2, over TLS or not.
    pub fn is_h2(self) -> bool {
        matches!(self, Self::H2 | Self::H2c)
    }
}

impl ProxySettings {
    /// What the connection pool of each worker is built with.
    pub(crate) fn pool(&self) -> PoolConfig {
        PoolConfig {
            max_idle: self.max_idle,
            idle_timeout: self.pool_idle_timeout,
            connect_timeout: self.connect_timeout,
            max_response_head: self.max_response_head,
            proxy_header: self.send_proxy_protocol,
            multiplexed: self.protocol.is_h2(),
        }
    }
}
