//! Virtual hosts: one service per site, chosen by the host a request names.
//!
//! [`VirtualHosts`] matches the request's host (the target's authority, which is
//! `:authority` on HTTP/2, else the `Host` field) against each site's names: exact names
//! first, then wildcards `*.example.com` (exactly one label more), then the default site.
//! Matching ignores case, the port and a trailing dot. A request no site takes gets
//! `421 Misdirected Request` (RFC 9110 15.5.20: this server has no such site), or what
//! [`fallback`](VirtualHosts::fallback) answers.
//!
//! Lookups are two hash lookups at most, on a lower-cased copy of the host on the stack:
//! no allocation, and no cost that grows with the number of sites. The hash is FxHash
//! (`rustc-hash`): a client chooses the host, but not the table, which holds only the
//! config's names, so it cannot be made to collide; SipHash measured ~500 instructions a
//! request, a binary search over 100 names ~700 (a `memcmp` call per step).
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::respond::Respond;
//! use scb_core::virtual_hosts::VirtualHosts;
//! use scb_core::Body;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let sites = VirtualHosts::new()
//!     .site(["example.com", "www.example.com"], Respond::new(StatusCode::OK).body("main"))
//!     .unwrap()
//!     .site(["*.example.org"], Respond::new(StatusCode::OK).body("org"))
//!     .unwrap();
//! let req = Request::get("/").header("host", "Blog.Example.ORG:8443").body(Body::empty()).unwrap();
//! let res = sites.clone().oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! let req = Request::get("/").header("host", "other.test").body(Body::empty()).unwrap();
//! assert_eq!(sites.oneshot(req).await.unwrap().status(), StatusCode::MISDIRECTED_REQUEST);
//! # }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode, header};
use rustc_hash::FxHashMap;
use tower::Service;

use crate::Body;

/// The longest host name DNS allows; longer ones match no site.
const MAX_HOST: usize = 253;

/// Why a site cannot be added.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VirtualHostsError {
    /// A name is not a host name, or a wildcard is not `*.` followed by one.
    #[error("{name:?} is not a host name or a `*.example.com` wildcard")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// Another site already has this name.
    #[error("{name:?} names two sites")]
    Duplicate {
        /// The name, lower-cased.
        name: String,
    },
    /// A second default site.
    #[error("there is a default site already")]
    TwoDefaults,
}

struct Table<S> {
    sites: Vec<S>,
    exact: FxHashMap<Box<[u8]>, usize>,
    /// By the name after `*.`.
    wildcard: FxHashMap<Box<[u8]>, usize>,
    /// Whether a wildcard's name ends in a digit (`*.0.1`): only then can an IPv4
    /// address match a wildcard.
    numeric_wildcard: bool,
    default: Option<usize>,
}

impl<S: Clone> Clone for Table<S> {
    fn clone(&self) -> Self {
        Self {
            sites: self.sites.clone(),
            exact: self.exact.clone(),
            wildcard: self.wildcard.clone(),
            numeric_wildcard: self.numeric_wildcard,
            default: self.default,
        }
    }
}

/// Routes requests to sites by host; see the [module documentation](self).
pub struct VirtualHosts<S, F = Misdirected> {
    table: Arc<Table<S>>,
    fallback: F,
}

impl<S> VirtualHosts<S> {
    /// No sites: every request gets 421 until sites are added.
    pub fn new() -> Self {
        Self {
            table: Arc::new(Table {
                sites: Vec::new(),
                exact: FxHashMap::default(),
                wildcard: FxHashMap::default(),
                numeric_wildcard: false,
                default: None,
            }),
            fallback: Misdirected,
        }
    }
}

impl<S> Default for VirtualHosts<S> {
    fn default() -> Self {
        Self::new()
    }
}

/// `name` lower-cased, checked: letters, digits, `-`, `.` and `_`, at most 253 bytes,
/// no empty label.
fn normalize(name: &str) -> Option<Box<[u8]>> {
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        // An IPv6 literal, as a Host field carries it.
        let ip: std::net::Ipv6Addr = inner.parse().ok()?;
        return Some(format!("[{ip}]").into_bytes().into_boxed_slice());
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let ok = !name.is_empty()
        && name.len() <= MAX_HOST
        && name.split('.').all(|label| !label.is_empty())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    ok.then(|| name.to_ascii_lowercase().into_bytes().into_boxed_slice())
}

impl<S: Clone, F> VirtualHosts<S, F> {
    /// Adds a site answering for `names`: host names (`example.com`) and wildcards of one
    /// label (`*.example.com` takes `a.example.com`, not `example.com` nor
    /// `a.b.example.com`).
    ///
    /// # Errors
    ///
    /// A name that is neither, or one another site has.
    pub fn site<'a>(
        mut self,
        names: impl IntoIterator<Item = &'a str>,
        service: S,
    ) -> Result<Self, VirtualHostsError> {
        let table = Arc::make_mut(&mut self.table);
        let index = table.sites.len();
        let mut exact = Vec::new();
        let mut wildcard = Vec::new();
        for name in names {
            let invalid = || VirtualHostsError::InvalidName {
                name: name.to_owned(),
            };
            match name.strip_prefix("*.") {
                Some(parent) => {
                    let parent = normalize(parent).ok_or_else(invalid)?;
                    table.numeric_wildcard |= parent.last().is_some_and(u8::is_ascii_digit);
                    wildcard.push(parent);
                }
                None => exact.push(normalize(name).ok_or_else(invalid)?),
            }
        }
        for (names, map) in [(exact, &mut table.exact), (wildcard, &mut table.wildcard)] {
            for name in names {
                if map.contains_key(&name) {
                    let shown = String::from_utf8_lossy(&name).into_owned();
                    return Err(VirtualHostsError::Duplicate { name: shown });
                }
                map.insert(name, index);
            }
        }
        table.sites.push(service);
        Ok(self)
    }

    /// Adds the site for requests no other site takes (and for requests without a host:
    /// HTTP/1.0). Defaults to none.
    ///
    /// # Errors
    ///
    /// When there is one already.
    pub fn default_site(mut self, service: S) -> Result<Self, VirtualHostsError> {
        let table = Arc::make_mut(&mut self.table);
        if table.default.is_some() {
            return Err(VirtualHostsError::TwoDefaults);
        }
        table.default = Some(table.sites.len());
        table.sites.push(service);
        Ok(self)
    }
}

impl<S, F> VirtualHosts<S, F> {
    /// What answers a request no site takes. Defaults to [`Misdirected`] (421).
    pub fn fallback<G>(self, fallback: G) -> VirtualHosts<S, G> {
        VirtualHosts {
            table: self.table,
            fallback,
        }
    }

    /// The index (in the order added, default site included) of the site `host` goes
    /// to; `None` for the fallback.
    pub fn site_for(&self, host: Option<&str>) -> Option<usize> {
        self.site_for_bytes(host.map(str::as_bytes))
    }

    /// [`site_for`](Self::site_for) on the field's bytes, as the request path needs it:
    /// no UTF-8 check, no copy unless the name has capitals, and no wildcard lookup for an
    /// IPv4 address (no wildcard can name one, unless one ends in a number).
    fn site_for_bytes(&self, host: Option<&[u8]>) -> Option<usize> {
        let table = &*self.table;
        if table.exact.is_empty() && table.wildcard.is_empty() {
            return table.default;
        }
        let Some(host) = host else {
            return table.default;
        };
        let end = if host.first() == Some(&b'[') {
            // An IPv6 literal: whole, brackets included.
            match host.iter().position(|&b| b == b']') {
                Some(close) => close + 1,
                None => return table.default,
            }
        } else {
            host.iter().position(|&b| b == b':').unwrap_or(host.len())
        };
        let name = &host[..end];
        let name = name.strip_suffix(b".").unwrap_or(name);
        if name.is_empty() || name.len() > MAX_HOST {
            return table.default;
        }
        // Names are ASCII (IDNA's punycode), visible characters only. One pass, with no
        // branch per byte.
        let (mut visible, mut capitals) = (true, false);
        for &b in name {
            visible &= b.is_ascii_graphic();
            capitals |= b.is_ascii_uppercase();
        }
        if !visible {
            return table.default;
        }
        let mut buf: [u8; MAX_HOST];
        let lower: &[u8] = if capitals {
            buf = [0; MAX_HOST];
            let lower = &mut buf[..name.len()];
            lower.copy_from_slice(name);
            lower.make_ascii_lowercase();
            lower
        } else {
            name
        };
        if let Some(&i) = table.exact.get(lower) {
            return Some(i);
        }
        if table.wildcard.is_empty()
            || (lower.last().is_some_and(u8::is_ascii_digit) && !table.numeric_wildcard)
        {
            return table.default;
        }
        if let Some(dot) = lower.iter().position(|&b| b == b'.')
            && let Some(&i) = table.wildcard.get(&lower[dot + 1..])
        {
            return Some(i);
        }
        table.default
    }
}

/// The host a request names: the target's authority (HTTP/2's `:authority`, or an
/// absolute-form target), else the `Host` field.
pub fn request_host<B>(req: &Request<B>) -> Option<&str> {
    req.uri()
        .authority()
        .map(http::uri::Authority::as_str)
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
        })
}

impl<S: Clone, F: Clone> Clone for VirtualHosts<S, F> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            fallback: self.fallback.clone(),
        }
    }
}

impl<S, F: fmt::Debug> fmt::Debug for VirtualHosts<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualHosts")
            .field("sites", &self.table.sites.len())
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

impl<S, F, ReqB, ResB> Service<Request<ReqB>> for VirtualHosts<S, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    F: Service<Request<ReqB>, Response = Response<ResB>, Error = S::Error> + Clone,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S, F, Request<ReqB>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let host = match req.uri().authority() {
            Some(authority) => Some(authority.as_str().as_bytes()),
            None => req.headers().get(header::HOST).map(HeaderValue::as_bytes),
        };
        match self.site_for_bytes(host) {
            Some(i) => ResponseFuture::chosen(self.table.sites[i].clone(), req),
            None => ResponseFuture::fallback(self.fallback.clone(), req),
        }
    }
}

/// Response future of [`VirtualHosts`]: the router's, which is the same choice of a
/// service or the fallback.
pub type ResponseFuture<S, F, Req> = crate::router::ResponseFuture<S, F, Req>;

/// The default fallback: `421 Misdirected Request`, `text/plain`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Misdirected;

impl<B> Service<Request<B>> for Misdirected {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        ready(Ok(crate::respond::reason(StatusCode::MISDIRECTED_REQUEST)))
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, ServiceExt as _};

    use super::*;
    use crate::request_id::RequestIdLayer;
    use crate::respond::Respond;

    fn sites() -> VirtualHosts<Respond> {
        VirtualHosts::new()
            .site(
                ["example.com", "www.example.com"],
                Respond::new(StatusCode::OK).body("main"),
            )
            .unwrap()
            .site(["*.example.com"], Respond::new(StatusCode::OK).body("sub"))
            .unwrap()
            .site(
                ["[::1]", "127.0.0.1"],
                Respond::new(StatusCode::OK).body("ip"),
            )
            .unwrap()
    }

    async fn answer<S>(svc: S, host: Option<&str>, uri: &str) -> (StatusCode, String)
    where
        S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
    {
        let mut req = Request::get(uri);
        if let Some(host) = host {
            req = req.header("host", host);
        }
        let res = svc.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn exact_names_then_one_label_wildcards_then_the_default() {
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .service(sites());
        for (host, want) in [
            ("example.com", "main"),
            ("EXAMPLE.com:8080", "main"),
            ("www.example.com.", "main"),
            ("blog.example.com", "sub"),
            ("127.0.0.1:80", "ip"),
        ] {
            assert_eq!(answer(svc.clone(), Some(host), "/").await.1, want, "{host}");
        }
        // A wildcard takes one label, not more, not none beyond the exact names.
        for host in ["a.b.example.com", "example.org", "xexample.com"] {
            assert_eq!(
                answer(svc.clone(), Some(host), "/").await.0,
                StatusCode::MISDIRECTED_REQUEST,
                "{host}"
            );
        }
        // The authority of an absolute-form or HTTP/2 target wins over Host.
        assert_eq!(
            answer(svc.clone(), Some("other.test"), "http://www.example.com/x")
                .await
                .1,
            "main"
        );
        let with_default = sites()
            .default_site(Respond::new(StatusCode::OK).body("default"))
            .unwrap();
        assert_eq!(
            answer(with_default.clone(), Some("nope.test"), "/").await.1,
            "default"
        );
        assert_eq!(answer(with_default, None, "/").await.1, "default");
    }

    #[tokio::test]
    async fn addresses_match_exact_names_and_wildcards_only_when_one_ends_in_a_number() {
        for (host, want) in [("[::1]:8443", "ip"), ("[::1]", "ip"), ("127.0.0.1.", "ip")] {
            assert_eq!(answer(sites(), Some(host), "/").await.1, want, "{host}");
        }
        // `*.0.1` is an odd name, but a name: it takes `10.0.1` (and the address-looking
        // shortcut must not skip it), while `*.example.com` takes no address.
        let numeric = sites()
            .site(["*.0.1"], Respond::new(StatusCode::OK).body("numeric"))
            .unwrap();
        assert_eq!(
            answer(numeric.clone(), Some("10.0.1"), "/").await.1,
            "numeric"
        );
        assert_eq!(answer(numeric, Some("127.0.0.1"), "/").await.1, "ip");
        assert_eq!(
            answer(sites(), Some("10.0.1"), "/").await.0,
            StatusCode::MISDIRECTED_REQUEST
        );
    }

    #[tokio::test]
    async fn hostile_hosts_match_nothing_and_never_panic() {
        let long = "a".repeat(300);
        for host in [
            long.as_str(),
            "",
            ":",
            "[",
            "[::1",
            "é.example.com",
            "a\tb",
            "...",
        ] {
            let (status, _) = answer(sites(), Some(host), "/").await;
            assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{host:?}");
        }
        let answered = sites().fallback(Respond::new(StatusCode::NOT_FOUND));
        assert_eq!(
            answer(answered, Some("nope.test"), "/").await.0,
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn names_are_checked_and_unique() {
        let ok = Respond::new(StatusCode::OK);
        for bad in ["", "*.", "a..b", "exa mple.com", "*.*.example.com", "a/b"] {
            assert!(
                matches!(
                    VirtualHosts::new().site([bad], ok.clone()),
                    Err(VirtualHostsError::InvalidName { .. })
                ),
                "{bad:?}"
            );
        }
        let twice = VirtualHosts::new()
            .site(["Example.com"], ok.clone())
            .unwrap()
            .site(["example.COM"], ok.clone());
        assert!(matches!(twice, Err(VirtualHostsError::Duplicate { .. })));
        let defaults = VirtualHosts::new()
            .default_site(ok.clone())
            .unwrap()
            .default_site(ok);
        assert_eq!(defaults.unwrap_err(), VirtualHostsError::TwoDefaults);
    }
}
