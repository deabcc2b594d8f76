//! Internal rewrites: the path a service sees, changed before it sees it.
//!
//! [`RewriteLayer`] changes the request's path (the query stays) by a prefix or a regular
//! expression, before the inner service runs: the client sees no redirect. A prefix rule
//! replaces a leading prefix (`/old/` to `/new/`); a regex rule (the `regex` crate, so no
//! backtracking blow-up on hostile paths) replaces a path that matches with its template,
//! where `{1}`, `{2}`... are the captures. A path the rule does not match passes as it
//! is. A route-captures rule ([`RewriteLayer::route_captures`]) fills its template from
//! what the route's own expression captured ([`PathCaptures`], set by the router for a
//! [`PathMatch::Regex`](crate::router::PathMatch::Regex) route), by name (`{id}`) or
//! number.
//!
//! The client's own URI stays in the request's extensions as [`OriginalUri`] (the first
//! rewrite's, when there are several), for what must report what the client asked for:
//! CGI's `REQUEST_URI`, say.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::rewrite::RewriteLayer;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rewrite = RewriteLayer::regex(r"^/blog/(\d+)$", "/posts/{1}.html").unwrap();
//! let svc = rewrite.layer(service_fn(|req: Request<Body>| async move {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(Body::from(req.uri().to_string())))
//! }));
//! let res = svc.oneshot(Request::get("/blog/42?x=1").body(Body::empty()).unwrap()).await.unwrap();
//! # use http_body_util::BodyExt;
//! let body = res.into_body().collect().await.unwrap().to_bytes();
//! assert_eq!(body, "/posts/42.html?x=1");
//! # }
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use http::uri::{PathAndQuery, Uri};
use tower::{Layer, Service};

use crate::router::PathCaptures;

pub use crate::original_uri::OriginalUri;

/// Why a rewrite cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// The regular expression does not compile.
    #[error("not a regular expression: {0}")]
    Regex(String),
    /// The target does not start with `/`, holds bytes a path cannot, or names a
    /// capture the expression does not have.
    #[error("{to:?} is not a path template ({reason})")]
    Template {
        /// The template as given.
        to: String,
        /// What is wrong.
        reason: &'static str,
    },
}

#[derive(Debug)]
enum Rule {
    Prefix {
        from: Box<str>,
        to: Box<str>,
    },
    Regex {
        regex: regex::Regex,
        to: Box<[Piece]>,
    },
    RouteCaptures {
        to: Box<[Piece]>,
    },
}

#[derive(Debug)]
enum Piece {
    Text(Box<str>),
    Capture(usize),
    Named(Box<str>),
}

/// Rewrites request paths; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct RewriteLayer {
    rule: Arc<Rule>,
}

/// Whether `text` can stand in a path as it is (RFC 3986 pchar, `/` and `%`).
fn path_text(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b))
}

impl RewriteLayer {
    /// Paths starting with `from` have it replaced by `to`.
    ///
    /// # Errors
    ///
    /// When either does not start with `/` or holds bytes a path cannot.
    pub fn prefix(from: &str, to: &str) -> Result<Self, RewriteError> {
        for text in [from, to] {
            if !text.starts_with('/') || !path_text(text) {
                return Err(RewriteError::Template {
                    to: text.to_owned(),
                    reason: "a path starting with `/`",
                });
            }
        }
        Ok(Self {
            rule: Arc::new(Rule::Prefix {
                from: from.into(),
                to: to.into(),
            }),
        })
    }

    /// Paths matching `regex` become `to`, with `{N}` replaced by capture N.
    ///
    /// # Errors
    ///
    /// An expression that does not compile, or a template that is not a path or names a
    /// capture the expression does not have.
    pub fn regex(regex: &str, to: &str) -> Result<Self, RewriteError> {
        let regex = regex::Regex::new(regex).map_err(|e| RewriteError::Regex(e.to_string()))?;
        let bad = |reason| RewriteError::Template {
            to: to.to_owned(),
            reason,
        };
        if !to.starts_with('/') {
            return Err(bad("a path starting with `/`"));
        }
        let pieces = crate::template::split(
            to,
            Piece::Text,
            |name| {
                let n: usize = name
                    .parse()
                    .map_err(|_| bad("placeholders are capture numbers, `{1}`"))?;
                if n >= regex.captures_len() {
                    return Err(bad("a capture the expression does not have"));
                }
                Ok(Piece::Capture(n))
            },
            || bad("a `{` without its `}`"),
        )?;
        let texts_ok = pieces.iter().all(|p| match p {
            Piece::Text(t) => path_text(t),
            Piece::Capture(_) | Piece::Named(_) => true,
        });
        if !texts_ok {
            return Err(bad("bytes a path cannot hold"));
        }
        Ok(Self {
            rule: Arc::new(Rule::Regex {
                regex,
                to: pieces.into(),
            }),
        })
    }

    /// Paths become `to`, its placeholders filled from what the route's expression
    /// `route_regex` captured (the [`PathCaptures`] the router gives the request): `{id}`
    /// is the group named `id`, `{1}` the first group. A request without captures (the
    /// layer on a route that is not a regex route) passes as it is.
    ///
    /// # Errors
    ///
    /// An expression that does not compile, or a template that is not a path or names a
    /// group the expression does not have.
    pub fn route_captures(route_regex: &str, to: &str) -> Result<Self, RewriteError> {
        let regex =
            regex::Regex::new(route_regex).map_err(|e| RewriteError::Regex(e.to_string()))?;
        let bad = |reason| RewriteError::Template {
            to: to.to_owned(),
            reason,
        };
        if !to.starts_with('/') {
            return Err(bad("a path starting with `/`"));
        }
        let pieces = crate::template::split(
            to,
            Piece::Text,
            |name| match name.parse::<usize>() {
                Ok(n) if n < regex.captures_len() => Ok(Piece::Capture(n)),
                Ok(_) => Err(bad("a capture the expression does not have")),
                Err(_) if regex.capture_names().flatten().any(|n| n == name) => {
                    Ok(Piece::Named(name.into()))
                }
                Err(_) => Err(bad("a group name the route's expression does not have")),
            },
            || bad("a `{` without its `}`"),
        )?;
        if !pieces.iter().all(|p| match p {
            Piece::Text(t) => path_text(t),
            Piece::Capture(_) | Piece::Named(_) => true,
        }) {
            return Err(bad("bytes a path cannot hold"));
        }
        Ok(Self {
            rule: Arc::new(Rule::RouteCaptures { to: pieces.into() }),
        })
    }

    /// The new path for `path`, or `None` to leave it.
    fn rewrite(&self, path: &str, captured: Option<&PathCaptures>) -> Option<String> {
        match &*self.rule {
            Rule::Prefix { from, to } => {
                let rest = path.strip_prefix(&**from)?;
                Some(format!("{to}{rest}"))
            }
            Rule::Regex { regex, to } => {
                let captures = regex.captures(path)?;
                let mut out = String::with_capacity(path.len() + 16);
                for piece in &**to {
                    match piece {
                        Piece::Text(t) => out.push_str(t),
                        Piece::Capture(n) => {
                            out.push_str(captures.get(*n).map_or("", |m| m.as_str()));
                        }
                        Piece::Named(name) => {
                            out.push_str(captures.name(name).map_or("", |m| m.as_str()));
                        }
                    }
                }
                Some(out)
            }
            Rule::RouteCaptures { to } => {
                let captured = captured?;
                let mut out = String::with_capacity(path.len() + 16);
                for piece in &**to {
                    match piece {
                        Piece::Text(t) => out.push_str(t),
                        Piece::Capture(n) => out.push_str(captured.get(*n).unwrap_or("")),
                        Piece::Named(name) => out.push_str(captured.name(name).unwrap_or("")),
                    }
                }
                Some(out)
            }
        }
    }
}

impl<S> Layer<S> for RewriteLayer {
    type Service = Rewrite<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Rewrite {
            inner,
            layer: self.clone(),
        }
    }
}

/// Rewrites the request path; see [`RewriteLayer`].
#[derive(Clone, Debug)]
pub struct Rewrite<S> {
    inner: S,
    layer: RewriteLayer,
}

impl<S, B> Service<Request<B>> for Rewrite<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> S::Future {
        let captured = req.extensions().get::<PathCaptures>();
        if let Some(path) = self.layer.rewrite(req.uri().path(), captured) {
            let with_query = match req.uri().query() {
                Some(query) => format!("{path}?{query}"),
                None => path,
            };
            // The pieces are path text and parts of a valid path: this parses. If it did
            // not, the request would go on unchanged rather than fail.
            if let Ok(pq) = PathAndQuery::try_from(with_query) {
                let mut parts = req.uri().clone().into_parts();
                parts.path_and_query = Some(pq);
                if let Ok(uri) = Uri::from_parts(parts) {
                    OriginalUri::rewrite(&mut req, uri);
                }
            }
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt as _;
    use tower::{ServiceExt as _, service_fn};

    use super::*;
    use crate::Body;

    async fn seen(layer: &RewriteLayer, uri: &str) -> String {
        let svc = layer.layer(service_fn(|req: Request<Body>| async move {
            Ok::<_, Infallible>(http::Response::new(Body::from(req.uri().to_string())))
        }));
        let res = svc
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn prefix_and_regex_rules_rewrite_what_they_match_and_keep_the_query() {
        let prefix = RewriteLayer::prefix("/old/", "/new/").unwrap();
        assert_eq!(seen(&prefix, "/old/a/b?q=1").await, "/new/a/b?q=1");
        assert_eq!(seen(&prefix, "/other").await, "/other");
        let regex = RewriteLayer::regex(r"^/u/([a-z]+)/(\d+)$", "/users/{2}/{1}").unwrap();
        assert_eq!(seen(&regex, "/u/ann/7").await, "/users/7/ann");
        assert_eq!(seen(&regex, "/u/ann/x").await, "/u/ann/x");
        // Percent-encoded bytes stay encoded: the captures are parts of a valid path.
        let all = RewriteLayer::regex(r"^/f/(.*)$", "/files/{1}").unwrap();
        assert_eq!(seen(&all, "/f/a%20b").await, "/files/a%20b");
    }

    #[tokio::test]
    async fn route_captures_fill_the_template_and_the_client_uri_is_kept() {
        let layer =
            RewriteLayer::route_captures(r"^/users/(?<id>\d+)(/.*)?$", "/u/{id}{2}").unwrap();
        let svc = layer.layer(service_fn(|req: Request<Body>| async move {
            let original = req
                .extensions()
                .get::<OriginalUri>()
                .map(|o| o.0.to_string());
            Ok::<_, Infallible>(http::Response::new(Body::from(format!(
                "{} {original:?}",
                req.uri()
            ))))
        }));
        let names: Arc<[Option<Box<str>>]> = vec![None, Some("id".into()), None].into();
        let mut req = Request::get("/users/7/posts?x=1")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut().insert(PathCaptures::new(
            "/users/7/posts",
            [Some(0..14), Some(7..8), Some(8..14)],
            names,
        ));
        let res = svc.clone().oneshot(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "/u/7/posts?x=1 Some(\"/users/7/posts?x=1\")");
        // No captures (not a regex route): the path stays, and nothing is noted.
        let req = Request::get("/users/7").body(Body::empty()).unwrap();
        let res = svc.oneshot(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "/users/7 None");
        for to in ["/u/{name}", "/u/{3}", "u/{id}", "/u/{id"] {
            assert!(
                matches!(
                    RewriteLayer::route_captures(r"^/users/(?<id>\d+)(/.*)?$", to),
                    Err(RewriteError::Template { .. })
                ),
                "{to}"
            );
        }
    }

    #[test]
    fn the_first_rewrite_keeps_the_client_uri() {
        let mut req = Request::get("/a?q").body(()).unwrap();
        OriginalUri::rewrite(&mut req, "/b".parse().unwrap());
        OriginalUri::rewrite(&mut req, "/c".parse().unwrap());
        assert_eq!(req.uri(), "/c");
        assert_eq!(req.extensions().get::<OriginalUri>().unwrap().0, "/a?q");
    }

    #[test]
    fn bad_rules_are_refused_at_build() {
        assert!(matches!(
            RewriteLayer::regex("(", "/x"),
            Err(RewriteError::Regex(_))
        ));
        for to in ["x", "/{2}", "/{a}", "/{1", "/a b", "/a\r\n"] {
            assert!(
                matches!(
                    RewriteLayer::regex("^/(a)$", to),
                    Err(RewriteError::Template { .. })
                ),
                "{to:?}"
            );
        }
        assert!(RewriteLayer::prefix("old", "/new").is_err());
        assert!(RewriteLayer::prefix("/old", "/n\new").is_err());
    }
}
