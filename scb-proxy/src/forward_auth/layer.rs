//! [`ForwardAuthLayer`] and its builder.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use http::uri::PathAndQuery;
use tower::Layer;

use super::check::Rules;
use super::service::ForwardAuth;
use crate::{
    ActiveHealth, Balance, BuildError, PassiveHealth, ProxyHeader, ReverseProxy,
    ReverseProxyBuilder, TrustedProxies, Upstream, UpstreamProtocol, UpstreamTls,
};

/// Applies [`ForwardAuth`] to a service: each request is let through only when the auth
/// service answers 2xx to its subrequest. See the [module documentation](super).
///
/// Cloning is cheap and clones share everything, the connection pool included; under
/// scb's per-core server each worker takes [`with_own_pool`](Self::with_own_pool).
#[derive(Clone, Debug)]
pub struct ForwardAuthLayer {
    proxy: ReverseProxy,
    rules: Arc<Rules>,
}

impl ForwardAuthLayer {
    /// A builder for checks sent to `upstreams` (the auth service's instances) at `uri`
    /// (a path, with a query if the service wants one: `/api/verify?rd=https://auth.example.com`).
    pub fn builder(
        upstreams: impl IntoIterator<Item = Upstream>,
        uri: impl Into<String>,
    ) -> ForwardAuthBuilder {
        ForwardAuthBuilder {
            proxy: ReverseProxy::builder(upstreams),
            uri: uri.into(),
            copy_headers: Vec::new(),
        }
    }

    /// Checks sent through `proxy`, a [`ReverseProxy`] to the auth service built with any
    /// of its settings, at `uri` (a path, with a query if the service wants one). Build
    /// the proxy without `strip_prefix`, which would apply to `uri` too.
    ///
    /// # Errors
    ///
    /// [`BuildError::AuthUri`] when `uri` is not a path starting with `/` (with an
    /// optional query and no fragment).
    pub fn new(proxy: ReverseProxy, uri: &str) -> Result<Self, BuildError> {
        Ok(Self {
            proxy,
            rules: Arc::new(Rules {
                uri: auth_uri(uri)?,
                copy_headers: Box::default(),
            }),
        })
    }

    /// The fields copied from a 2xx answer onto the request (every value of each, in
    /// order); a client's own copies of them are always removed first, pass or not.
    /// Defaults to none.
    #[must_use]
    pub fn copy_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let rules = Rules {
            uri: self.rules.uri.clone(),
            copy_headers: names.into_iter().collect(),
        };
        self.rules = Arc::new(rules);
        self
    }

    /// A layer sharing this one's settings and auth upstream state (health, balancing)
    /// with a connection pool of its own: one per worker of a per-core server, as
    /// [`ReverseProxy::with_own_pool`].
    #[must_use]
    pub fn with_own_pool(&self) -> Self {
        Self {
            proxy: self.proxy.with_own_pool(),
            rules: Arc::clone(&self.rules),
        }
    }

    /// The proxy the subrequests go through.
    pub fn proxy(&self) -> &ReverseProxy {
        &self.proxy
    }

    /// The subrequests' target.
    pub fn uri(&self) -> &PathAndQuery {
        &self.rules.uri
    }

    /// The fields copied from a 2xx answer onto the request.
    pub fn copied_headers(&self) -> &[HeaderName] {
        &self.rules.copy_headers
    }
}

impl<S> Layer<S> for ForwardAuthLayer {
    type Service = ForwardAuth<S>;

    fn layer(&self, inner: S) -> ForwardAuth<S> {
        ForwardAuth::from_parts(inner, self.proxy.clone(), Arc::clone(&self.rules))
    }
}

// Here rather than beside the service: `service` then needs nothing of `layer`, and
// the two modules do not import each other (`cargo xtask circles`).
impl<S> ForwardAuth<S> {
    /// A [`ForwardAuthLayer`] checking through `proxy` at `uri`: see
    /// [`ForwardAuthLayer::new`].
    ///
    /// # Errors
    ///
    /// [`BuildError::AuthUri`] when `uri` is not a path starting with `/`.
    pub fn layer(proxy: ReverseProxy, uri: &str) -> Result<ForwardAuthLayer, BuildError> {
        ForwardAuthLayer::new(proxy, uri)
    }
}

/// `uri` as the subrequest's target: a path starting with `/`, maybe a query, no
/// fragment (which the `http` crate would drop without a word).
fn auth_uri(uri: &str) -> Result<PathAndQuery, BuildError> {
    let invalid = || BuildError::AuthUri(uri.to_owned());
    if !uri.starts_with('/') || uri.contains('#') {
        return Err(invalid());
    }
    uri.parse().map_err(|_| invalid())
}

/// Builds a [`ForwardAuthLayer`]; see [`ForwardAuthLayer::builder`]. The upstream settings
/// are [`ReverseProxyBuilder`]'s, with the defaults it documents (those about a request
/// body or its path, `max_body` and `strip_prefix`, have no use here). For a proxy built
/// elsewhere, use [`ForwardAuthLayer::new`].
#[derive(Clone, Debug)]
#[must_use]
pub struct ForwardAuthBuilder {
    proxy: ReverseProxyBuilder,
    uri: String,
    copy_headers: Vec<HeaderName>,
}

/// Builder methods handed to the proxy builder underneath.
macro_rules! upstream_setting {
    ($(#[$doc:meta])* $name:ident($ty:ty)) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.proxy = self.proxy.$name(value);
            self
        }
    };
}

impl ForwardAuthBuilder {
    /// The fields copied from a 2xx answer onto the request, such as `Remote-User` and
    /// `Remote-Groups` (every value of each, in order); a client's own copies of them are
    /// always removed first, pass or not. Defaults to none.
    pub fn copy_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.copy_headers = names.into_iter().collect();
        self
    }

    upstream_setting! {
        /// How checks are spread over the auth upstreams. Defaults to round robin.
        balance(Balance)
    }
    upstream_setting! {
        /// Connecting to an auth upstream; past it the next is tried, and when none is
        /// left the client gets 504. Defaults to 5 s.
        connect_timeout(Duration)
    }
    upstream_setting! {
        /// From the subrequest sent to the answer's head; past it the client gets 504.
        /// Defaults to 60 s (the tries' own bound, `try_timeout`, comes first).
        response_timeout(Duration)
    }
    upstream_setting! {
        /// The longest pause in an answer's body (a refusal's, streamed to the client, or
        /// a pass's, read before the request goes on). Defaults to 60 s.
        idle_timeout(Duration)
    }
    upstream_setting! {
        /// All tries of a check together. Defaults to 15 s.
        try_timeout(Duration)
    }
    upstream_setting! {
        /// Tries per check, counting the first, 1 to 8: a failed connect moves to another
        /// upstream, and a check on a reused connection that broke is sent once more.
        /// Defaults to 3.
        max_tries(usize)
    }
    upstream_setting! {
        /// Whether the auth service sees the client's `Host` (true) or its own
        /// `host:port`; `X-Forwarded-Host` names the client's either way. Defaults to
        /// true.
        preserve_host(bool)
    }
    upstream_setting! {
        /// Peers whose `X-Forwarded-For`, `-Proto` and `-Host` are passed on to the auth
        /// service (and appended to); everyone else's are replaced. Defaults to none.
        trusted_proxies(TrustedProxies)
    }
    upstream_setting! {
        /// When an auth upstream counts as failing. Defaults to
        /// [`PassiveHealth::default`].
        passive_health(PassiveHealth)
    }
    upstream_setting! {
        /// Active health checks of the auth upstreams. Defaults to none.
        active_health(ActiveHealth)
    }
    upstream_setting! {
        /// Idle connections kept per auth upstream and worker. Defaults to 64.
        max_idle_per_upstream(usize)
    }
    upstream_setting! {
        /// How long an idle connection is kept. Defaults to 30 s.
        pool_idle_timeout(Duration)
    }
    upstream_setting! {
        /// The largest answer head. Defaults to 64 KiB.
        max_response_head(usize)
    }
    upstream_setting! {
        /// How `https://` auth upstreams are verified. Defaults to the system's roots.
        upstream_tls(UpstreamTls)
    }
    upstream_setting! {
        /// HTTP/1.1 or HTTP/2 to the auth upstreams. Defaults to
        /// [`UpstreamProtocol::Http1`].
        protocol(UpstreamProtocol)
    }
    upstream_setting! {
        /// A PROXY protocol header at the start of each connection. Defaults to none.
        send_proxy_protocol(ProxyHeader)
    }
    upstream_setting! {
        /// The verified client certificate as `X-Client-Cert-Subject` and
        /// `X-Client-Cert-San`. Defaults to off.
        forward_client_cert(bool)
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`BuildError::AuthUri`] for a `uri` that is not a path, and the proxy's own:
    /// no upstream, an unusable TLS setting, a protocol that does not fit the upstreams.
    pub fn build(self) -> Result<ForwardAuthLayer, BuildError> {
        let uri = auth_uri(&self.uri)?;
        let proxy = self.proxy.build()?;
        Ok(ForwardAuthLayer {
            proxy,
            rules: Arc::new(Rules {
                uri,
                copy_headers: self.copy_headers.into(),
            }),
        })
    }
}
