//! Header rules: fields set, added or removed on requests before the service and on
//! responses after it.
//!
//! [`HeaderRulesLayer`] applies two [`HeaderRules`], one to the request and one to the
//! response. Each rule names a field and, for `set` and `add`, a value template whose
//! placeholders take parts of the request: `{request_id}` (the
//! [`Id`] extension), `{client_ip}` (the peer, or through
//! [`TrustedProxies`] the client it forwarded for) and `{host}` (the host the request
//! named). A value that comes out invalid (a client's Host cannot, once scb's server has
//! checked it) is left out rather than sent.
//!
//! `set` replaces the field, `add` appends a value, `remove` deletes it; rules run in
//! that order: removes, then sets, then adds. [`HeaderRules::security`] holds the usual
//! security fields (`X-Content-Type-Options: nosniff`, `Referrer-Policy:
//! strict-origin-when-cross-origin`, `X-Frame-Options: SAMEORIGIN`), set only where the
//! response has none of its own.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::header_rules::{HeaderRules, HeaderRulesLayer};
//! use scb_core::respond::Respond;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rules = HeaderRulesLayer::new()
//!     .response(HeaderRules::new().set("x-served-for", "{host}").unwrap().remove("server").unwrap());
//! let app = Respond::new(StatusCode::OK).header(
//!     http::header::SERVER,
//!     http::HeaderValue::from_static("app"),
//! );
//! let svc = rules.layer(app);
//! let req = Request::get("/").header("host", "example.com").body(Body::empty()).unwrap();
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.headers()["x-served-for"], "example.com");
//! assert!(!res.headers().contains_key("server"));
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::client_ip::{TrustedProxies, client_ip};
use crate::connection::ConnectInfo;
use crate::request_id::Id;

/// Why a rule cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderRuleError {
    /// Not a field name.
    #[error("{name:?} is not a header field name")]
    Name {
        /// The name as given.
        name: String,
    },
    /// Text a field value cannot hold, or an unknown placeholder.
    #[error(
        "{value:?} is not a field value (placeholders: {{request_id}}, {{client_ip}}, {{host}})"
    )]
    Value {
        /// The value as given.
        value: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Box<str>),
    RequestId,
    ClientIp,
    Host,
}

/// A value: fixed, or made per request from its pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Fixed(HeaderValue),
    Template(Box<[Piece]>),
}

impl Value {
    fn parse(text: &str) -> Result<Self, HeaderRuleError> {
        let invalid = || HeaderRuleError::Value {
            value: text.to_owned(),
        };
        let pieces = crate::template::split(
            text,
            Piece::Text,
            |name| match name {
                "request_id" => Ok(Piece::RequestId),
                "client_ip" => Ok(Piece::ClientIp),
                "host" => Ok(Piece::Host),
                _ => Err(invalid()),
            },
            invalid,
        )?;
        let texts_ok = pieces.iter().all(|p| match p {
            Piece::Text(t) => HeaderValue::from_str(t).is_ok(),
            _ => true,
        });
        if !texts_ok {
            return Err(invalid());
        }
        match pieces.as_slice() {
            [] => Ok(Self::Fixed(HeaderValue::from_static(""))),
            [Piece::Text(t)] => HeaderValue::from_str(t)
                .map(Self::Fixed)
                .map_err(|_| invalid()),
            _ => Ok(Self::Template(pieces.into())),
        }
    }

    fn render(&self, facts: &Facts) -> Option<HeaderValue> {
        let pieces = match self {
            Self::Fixed(value) => return Some(value.clone()),
            Self::Template(pieces) => pieces,
        };
        let mut out = String::with_capacity(32);
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::RequestId => out.push_str(facts.request_id.as_ref()?.as_str()),
                Piece::ClientIp => out.push_str(&facts.client.as_ref()?.to_string()),
                Piece::Host => out.push_str(facts.host.as_ref()?.to_str().ok()?),
            }
        }
        HeaderValue::from_str(&out).ok()
    }

    fn is_template(&self) -> bool {
        matches!(self, Self::Template(_))
    }
}

/// What placeholders are made from.
#[derive(Clone, Debug, Default)]
struct Facts {
    request_id: Option<Id>,
    client: Option<std::net::IpAddr>,
    host: Option<HeaderValue>,
}

impl Facts {
    fn of<B>(req: &Request<B>, trusted: &TrustedProxies) -> Self {
        Self {
            request_id: req.extensions().get::<Id>().cloned(),
            client: req
                .extensions()
                .get::<ConnectInfo>()
                .map(|info| client_ip(info.remote.ip(), req.headers(), trusted)),
            host: crate::virtual_hosts::request_host(req)
                .and_then(|h| HeaderValue::from_str(h).ok()),
        }
    }
}

/// Rules for one header map; see the [module documentation](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderRules {
    remove: Vec<HeaderName>,
    set: Vec<(HeaderName, Value)>,
    add: Vec<(HeaderName, Value)>,
    set_if_absent: Vec<(HeaderName, Value)>,
}

fn name(text: &str) -> Result<HeaderName, HeaderRuleError> {
    HeaderName::try_from(text).map_err(|_| HeaderRuleError::Name {
        name: text.to_owned(),
    })
}

impl HeaderRules {
    /// No rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// `X-Content-Type-Options: nosniff`, `Referrer-Policy:
    /// strict-origin-when-cross-origin` and `X-Frame-Options: SAMEORIGIN`, each set where
    /// the response has none.
    pub fn security() -> Self {
        let fixed = |n: &'static str, v: &'static str| {
            (
                HeaderName::from_static(n),
                Value::Fixed(HeaderValue::from_static(v)),
            )
        };
        Self {
            set_if_absent: vec![
                fixed("x-content-type-options", "nosniff"),
                fixed("referrer-policy", "strict-origin-when-cross-origin"),
                fixed("x-frame-options", "SAMEORIGIN"),
            ],
            ..Self::default()
        }
    }

    /// Sets `field` to `value` (a template), replacing what is there.
    ///
    /// # Errors
    ///
    /// An invalid name or value.
    pub fn set(mut self, field: &str, value: &str) -> Result<Self, HeaderRuleError> {
        self.set.push((name(field)?, Value::parse(value)?));
        Ok(self)
    }

    /// Adds a `field: value` line, keeping those there.
    ///
    /// # Errors
    ///
    /// An invalid name or value.
    pub fn add(mut self, field: &str, value: &str) -> Result<Self, HeaderRuleError> {
        self.add.push((name(field)?, Value::parse(value)?));
        Ok(self)
    }

    /// Removes every `field` line.
    ///
    /// # Errors
    ///
    /// An invalid name.
    pub fn remove(mut self, field: &str) -> Result<Self, HeaderRuleError> {
        self.remove.push(name(field)?);
        Ok(self)
    }

    /// These rules, then `other`'s (a route's after its site's).
    #[must_use]
    pub fn and(mut self, other: &Self) -> Self {
        self.remove.extend(other.remove.iter().cloned());
        self.set.extend(other.set.iter().cloned());
        self.add.extend(other.add.iter().cloned());
        self.set_if_absent
            .extend(other.set_if_absent.iter().cloned());
        self
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty()
            && self.set.is_empty()
            && self.add.is_empty()
            && self.set_if_absent.is_empty()
    }

    fn needs_facts(&self) -> bool {
        self.set
            .iter()
            .chain(&self.add)
            .chain(&self.set_if_absent)
            .any(|(_, v)| v.is_template())
    }

    fn apply(&self, headers: &mut HeaderMap, facts: &Facts) {
        for field in &self.remove {
            headers.remove(field);
        }
        for (field, value) in &self.set {
            match value.render(facts) {
                Some(value) => {
                    headers.insert(field.clone(), value);
                }
                None => {
                    headers.remove(field);
                }
            }
        }
        for (field, value) in &self.add {
            if let Some(value) = value.render(facts) {
                headers.append(field.clone(), value);
            }
        }
        for (field, value) in &self.set_if_absent {
            if !headers.contains_key(field)
                && let Some(value) = value.render(facts)
            {
                headers.insert(field.clone(), value);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Rules {
    request: HeaderRules,
    response: HeaderRules,
    trusted: TrustedProxies,
}

/// Applies [`HeaderRules`] to a service's requests and responses.
#[derive(Clone, Debug, Default)]
pub struct HeaderRulesLayer {
    rules: Arc<Rules>,
}

impl HeaderRulesLayer {
    /// No rules.
    pub fn new() -> Self {
        Self::default()
    }

    fn rules_mut(&mut self) -> &mut Rules {
        if Arc::get_mut(&mut self.rules).is_none() {
            self.rules = Arc::new(Rules {
                request: self.rules.request.clone(),
                response: self.rules.response.clone(),
                trusted: self.rules.trusted.clone(),
            });
        }
        Arc::get_mut(&mut self.rules).expect("just made unique")
    }

    /// The rules for requests, before the service. Defaults to none.
    #[must_use]
    pub fn request(mut self, rules: HeaderRules) -> Self {
        self.rules_mut().request = rules;
        self
    }

    /// The rules for responses. Defaults to none.
    #[must_use]
    pub fn response(mut self, rules: HeaderRules) -> Self {
        self.rules_mut().response = rules;
        self
    }

    /// These rules, then `other`'s, on both sides (a route's after its site's); the
    /// trusted proxies are this layer's.
    #[must_use]
    pub fn and(&self, other: &Self) -> Self {
        if other.is_empty() {
            return self.clone();
        }
        Self {
            rules: Arc::new(Rules {
                request: self.rules.request.clone().and(&other.rules.request),
                response: self.rules.response.clone().and(&other.rules.response),
                trusted: self.rules.trusted.clone(),
            }),
        }
    }

    /// Whether the layer has no rules (and so would change nothing).
    pub fn is_empty(&self) -> bool {
        self.rules.request.is_empty() && self.rules.response.is_empty()
    }

    /// Whose `X-Forwarded-For` `{client_ip}` believes. Defaults to nobody's.
    #[must_use]
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.rules_mut().trusted = trusted;
        self
    }
}

impl<S> Layer<S> for HeaderRulesLayer {
    type Service = HeaderRulesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        HeaderRulesService {
            inner,
            rules: Arc::clone(&self.rules),
        }
    }
}

/// Applies header rules; see [`HeaderRulesLayer`].
#[derive(Clone)]
pub struct HeaderRulesService<S> {
    inner: S,
    rules: Arc<Rules>,
}

impl<S: fmt::Debug> fmt::Debug for HeaderRulesService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeaderRulesService")
            .field("inner", &self.inner)
            .field("rules", &self.rules)
            .finish()
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for HeaderRulesService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let rules = &*self.rules;
        let wants = rules.request.needs_facts() || rules.response.needs_facts();
        let facts = wants.then(|| Box::new(Facts::of(&req, &rules.trusted)));
        let empty = Facts::default();
        rules
            .request
            .apply(req.headers_mut(), facts.as_deref().unwrap_or(&empty));
        ResponseFuture {
            inner: self.inner.call(req),
            rules: Arc::clone(&self.rules),
            facts,
        }
    }
}

pin_project! {
    /// Response future of [`HeaderRulesService`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        rules: Arc<Rules>,
        facts: Option<Box<Facts>>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut result = ready!(this.inner.poll(cx));
        if let Ok(res) = &mut result {
            let empty = Facts::default();
            this.rules
                .response
                .apply(res.headers_mut(), this.facts.as_deref().unwrap_or(&empty));
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use tower::{ServiceBuilder, ServiceExt as _, service_fn};

    use super::*;
    use crate::Body;
    use crate::request_id::RequestIdLayer;

    /// Echoes the request's `x-client` and `x-gone` fields in the response.
    fn echo() -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = std::convert::Infallible,
        Future = impl Future<Output = Result<Response<Body>, std::convert::Infallible>>,
    > + Clone {
        service_fn(|req: Request<Body>| async move {
            let mut res = Response::new(Body::empty());
            for field in ["x-client", "x-gone"] {
                if let Some(v) = req.headers().get(field) {
                    res.headers_mut().insert(field, v.clone());
                }
            }
            res.headers_mut()
                .insert("server", HeaderValue::from_static("app"));
            res.headers_mut()
                .insert("x-frame-options", HeaderValue::from_static("DENY"));
            Ok(res)
        })
    }

    #[tokio::test]
    async fn request_and_response_rules_with_placeholders() {
        let layer = HeaderRulesLayer::new()
            .request(
                HeaderRules::new()
                    .set("x-client", "{client_ip} via {host}")
                    .unwrap()
                    .remove("x-gone")
                    .unwrap(),
            )
            .response(
                HeaderRules::new()
                    .remove("server")
                    .unwrap()
                    .add("x-id", "{request_id}")
                    .unwrap()
                    .and(&HeaderRules::security()),
            )
            .trusted_proxies(TrustedProxies::new(["10.0.0.0/8"]).unwrap());
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .layer(layer)
            .service(echo());
        let mut req = Request::get("/")
            .header("host", "example.com")
            .header("x-request-id", "r-7")
            .header("x-forwarded-for", "198.51.100.3")
            .header("x-gone", "secret")
            .header("x-client", "forged")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut().insert(ConnectInfo {
            remote: "10.1.1.1:4000".parse().unwrap(),
            local: "127.0.0.1:80".parse().unwrap(),
            secure: false,
        });
        let res = svc.oneshot(req).await.unwrap();
        let h = res.headers();
        assert_eq!(h["x-client"], "198.51.100.3 via example.com");
        assert!(!h.contains_key("x-gone") && !h.contains_key("server"));
        assert_eq!(h["x-id"], "r-7");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "strict-origin-when-cross-origin");
        // The application's own stays.
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(res.status(), StatusCode::OK);
    }

    #[test]
    fn injection_and_unknown_placeholders_are_refused_at_build() {
        assert!(HeaderRules::new().set("x", "a\r\nset-cookie: b").is_err());
        assert!(HeaderRules::new().set("x", "{cookie}").is_err());
        assert!(HeaderRules::new().set("bad name", "v").is_err());
        assert!(HeaderRules::new().remove("").is_err());
    }
}
