//! Access by client address: `allow` and `deny` lists of networks, 403 for the rest.
//!
//! [`IpFilterLayer`] answers `403 Forbidden` (without calling the service) for a client
//! in a `deny` network, and, when there is an `allow` list, for one in none of its
//! networks. The client is the peer ([`ConnectInfo`]), or with [`TrustedProxies`] the
//! client a trusted proxy forwarded for. A request without `ConnectInfo` (a service run
//! outside scb's server without it) is refused when any list is set: who it is from is
//! unknown.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::client_ip::Networks;
//! use scb_core::ip_filter::IpFilterLayer;
//! use scb_core::respond::Respond;
//! use scb_core::connection::ConnectInfo;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let admin = IpFilterLayer::new()
//!     .allow(Networks::new(["10.0.0.0/8", "127.0.0.1"]).unwrap())
//!     .layer(Respond::new(StatusCode::OK));
//! let mut req = Request::get("/admin/").body(Body::empty()).unwrap();
//! req.extensions_mut().insert(ConnectInfo {
//!     remote: "192.0.2.1:5000".parse().unwrap(),
//!     local: "127.0.0.1:80".parse().unwrap(),
//!     secure: false,
//! });
//! assert_eq!(admin.oneshot(req).await.unwrap().status(), StatusCode::FORBIDDEN);
//! # }
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::Body;
use crate::client_ip::{Networks, TrustedProxies, client_ip};
use crate::connection::ConnectInfo;

#[derive(Debug, Default)]
struct Lists {
    allow: Option<Networks>,
    deny: Networks,
    trusted: TrustedProxies,
}

/// Applies [`IpFilter`] to a service.
#[derive(Clone, Debug, Default)]
pub struct IpFilterLayer {
    lists: Arc<Lists>,
}

impl IpFilterLayer {
    /// No lists: every client passes.
    pub fn new() -> Self {
        Self::default()
    }

    fn lists_mut(&mut self) -> &mut Lists {
        if Arc::get_mut(&mut self.lists).is_none() {
            self.lists = Arc::new(Lists {
                allow: self.lists.allow.clone(),
                deny: self.lists.deny.clone(),
                trusted: self.lists.trusted.clone(),
            });
        }
        Arc::get_mut(&mut self.lists).expect("just made unique")
    }

    /// Only clients in `networks` pass (unless denied). Defaults to everyone.
    #[must_use]
    pub fn allow(mut self, networks: Networks) -> Self {
        self.lists_mut().allow = Some(networks);
        self
    }

    /// Clients in `networks` get 403, allowed or not. Defaults to nobody.
    #[must_use]
    pub fn deny(mut self, networks: Networks) -> Self {
        self.lists_mut().deny = networks;
        self
    }

    /// Whether the layer has no lists (and so lets everyone through).
    pub fn is_empty(&self) -> bool {
        self.lists.allow.is_none() && self.lists.deny.is_empty()
    }

    /// Whose `X-Forwarded-For` names the client. Defaults to nobody's.
    #[must_use]
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.lists_mut().trusted = trusted;
        self
    }
}

impl<S> Layer<S> for IpFilterLayer {
    type Service = IpFilter<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IpFilter {
            inner,
            lists: Arc::clone(&self.lists),
        }
    }
}

/// Refuses clients by address; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct IpFilter<S> {
    inner: S,
    lists: Arc<Lists>,
}

impl<S> IpFilter<S> {
    fn admits<B>(&self, req: &Request<B>) -> bool {
        let lists = &*self.lists;
        if lists.allow.is_none() && lists.deny.is_empty() {
            return true;
        }
        let Some(info) = req.extensions().get::<ConnectInfo>() else {
            return false;
        };
        let ip = client_ip(info.remote.ip(), req.headers(), &lists.trusted);
        !lists.deny.contains(ip) && lists.allow.as_ref().is_none_or(|allow| allow.contains(ip))
    }
}

impl<S, ReqB> Service<Request<ReqB>> for IpFilter<S>
where
    S: Service<Request<ReqB>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        if self.admits(&req) {
            ResponseFuture::admitted(self.inner.call(req))
        } else {
            ResponseFuture::refused(crate::respond::reason(StatusCode::FORBIDDEN))
        }
    }
}

/// Response future of [`IpFilter`]: the inner service's, or the 403.
pub type ResponseFuture<F> = crate::admission::ResponseFuture<F>;

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;
    use crate::respond::Respond;

    async fn status(layer: &IpFilterLayer, peer: &str, forwarded: Option<&str>) -> StatusCode {
        let mut req = Request::get("/");
        if let Some(f) = forwarded {
            req = req.header("x-forwarded-for", f);
        }
        let mut req = req.body(Body::empty()).unwrap();
        req.extensions_mut().insert(ConnectInfo {
            remote: format!("{peer}:5000").parse().unwrap(),
            local: "127.0.0.1:80".parse().unwrap(),
            secure: false,
        });
        layer
            .layer(Respond::new(StatusCode::OK))
            .oneshot(req)
            .await
            .unwrap()
            .status()
    }

    #[tokio::test]
    async fn deny_wins_allow_limits_and_trusted_proxies_name_the_client() {
        let layer = IpFilterLayer::new()
            .allow(Networks::new(["10.0.0.0/8", "192.0.2.7"]).unwrap())
            .deny(Networks::new(["10.9.0.0/16"]).unwrap())
            .trusted_proxies(TrustedProxies::new(["127.0.0.1"]).unwrap());
        assert_eq!(status(&layer, "10.1.2.3", None).await, StatusCode::OK);
        assert_eq!(status(&layer, "192.0.2.7", None).await, StatusCode::OK);
        assert_eq!(
            status(&layer, "10.9.1.1", None).await,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(&layer, "198.51.100.1", None).await,
            StatusCode::FORBIDDEN
        );
        // Through the trusted proxy, the forwarded-for client decides...
        assert_eq!(
            status(&layer, "127.0.0.1", Some("10.1.1.1")).await,
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, "127.0.0.1", Some("198.51.100.1")).await,
            StatusCode::FORBIDDEN
        );
        // ...but an untrusted peer cannot claim to be an allowed one.
        assert_eq!(
            status(&layer, "198.51.100.1", Some("10.1.1.1")).await,
            StatusCode::FORBIDDEN
        );
    }

    #[tokio::test]
    async fn without_lists_all_pass_and_without_a_peer_none_do() {
        assert_eq!(
            status(&IpFilterLayer::new(), "198.51.100.1", None).await,
            StatusCode::OK
        );
        let allow = IpFilterLayer::new().allow(Networks::new(["0.0.0.0/0"]).unwrap());
        let res = allow
            .layer(Respond::new(StatusCode::OK))
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FORBIDDEN);
    }
}
