//! Redirects: a response with `Location` made from a template and the request.
//!
//! [`Redirect`] answers every request with its status (308 by default) and a `Location`
//! built from a template whose placeholders take parts of the request:
//!
//! | placeholder | value |
//! |---|---|
//! | `{path}` | the path, as received (percent-encoded) |
//! | `{query}` | `?` and the query, or nothing when there is none |
//! | `{host}` | the host the request named, without its port |
//! | `{rest}` | the path after the route's prefix ([`Redirect::prefix`]) |
//!
//! The values are those of a valid request target, which can hold no byte that would end
//! a header field or start another; the host must be a valid `host[:port]` or the request
//! gets 400. `{host}` is what the client sent: use it only where the request was routed by
//! host ([`VirtualHosts`](crate::virtual_hosts::VirtualHosts) with named sites), or a
//! client choosing the Host could choose where it is sent.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::redirect::Redirect;
//! use scb_core::Body;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let moved = Redirect::to("https://example.com/new{rest}{query}")
//!     .unwrap()
//!     .status(StatusCode::MOVED_PERMANENTLY)
//!     .unwrap()
//!     .prefix("/old/");
//! let req = Request::get("/old/a/b?x=1").body(Body::empty()).unwrap();
//! let res = moved.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::MOVED_PERMANENTLY);
//! assert_eq!(res.headers()["location"], "https://example.com/new/a/b?x=1");
//! # }
//! ```

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode, header};
use tower::Service;

use crate::Body;

/// Why a redirect cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedirectError {
    /// A `{name}` that is not one of the placeholders, or a `{` without its `}`.
    #[error("unknown placeholder in {template:?}: use {{path}}, {{query}}, {{host}} or {{rest}}")]
    Placeholder {
        /// The template.
        template: String,
    },
    /// The template's text holds a byte a header value cannot.
    #[error("{template:?} cannot be a Location value")]
    Invalid {
        /// The template.
        template: String,
    },
    /// Not 301, 302, 303, 307 or 308.
    #[error("{status} is not a redirect status (301, 302, 303, 307, 308)")]
    Status {
        /// The status given.
        status: StatusCode,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(Box<str>),
    Path,
    Query,
    Host,
    Rest,
}

/// Answers every request with a redirect; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct Redirect {
    template: Arc<str>,
    parts: Arc<[Part]>,
    status: StatusCode,
    prefix: Arc<str>,
}

impl Redirect {
    /// A 308 to `template`.
    ///
    /// # Errors
    ///
    /// An unknown placeholder, or text that cannot be in a header value.
    pub fn to(template: &str) -> Result<Self, RedirectError> {
        let placeholder = || RedirectError::Placeholder {
            template: template.to_owned(),
        };
        let parts = crate::template::split(
            template,
            Part::Text,
            |name| match name {
                "path" => Ok(Part::Path),
                "query" => Ok(Part::Query),
                "host" => Ok(Part::Host),
                "rest" => Ok(Part::Rest),
                _ => Err(placeholder()),
            },
            placeholder,
        )?;
        // A `}` after the last placeholder closes nothing.
        if matches!(parts.last(), Some(Part::Text(text)) if text.contains('}')) {
            return Err(placeholder());
        }
        let text_ok = parts.iter().all(|p| match p {
            Part::Text(text) => HeaderValue::from_str(text).is_ok(),
            _ => true,
        });
        if !text_ok {
            return Err(RedirectError::Invalid {
                template: template.to_owned(),
            });
        }
        Ok(Self {
            template: template.into(),
            parts: parts.into(),
            status: StatusCode::PERMANENT_REDIRECT,
            prefix: Arc::from(""),
        })
    }

    /// The status: 301, 302, 303, 307 or 308. Defaults to 308.
    ///
    /// # Errors
    ///
    /// Any other status.
    pub fn status(mut self, status: StatusCode) -> Result<Self, RedirectError> {
        if !matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
            return Err(RedirectError::Status { status });
        }
        self.status = status;
        Ok(self)
    }

    /// The prefix `{rest}` is the path after (a `prefix` route's). Defaults to none:
    /// `{rest}` is the whole path.
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Arc::from(prefix.trim_end_matches('/'));
        self
    }

    /// The template, as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The status of the redirect.
    pub fn status_code(&self) -> StatusCode {
        self.status
    }

    /// Whether the template uses `{host}`.
    pub fn uses_host(&self) -> bool {
        self.parts.contains(&Part::Host)
    }

    fn location<B>(&self, req: &Request<B>) -> Option<HeaderValue> {
        let uri = req.uri();
        let path = uri.path();
        let mut out = String::with_capacity(64);
        for part in &*self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Path => out.push_str(path),
                Part::Query => {
                    if let Some(query) = uri.query() {
                        out.push('?');
                        out.push_str(query);
                    }
                }
                Part::Host => {
                    let host = crate::virtual_hosts::request_host(req)?;
                    if !crate::http1::is_valid_host(host.as_bytes()) {
                        return None;
                    }
                    let bare = match host.rfind(':') {
                        Some(colon) if !host[colon..].contains(']') => &host[..colon],
                        _ => host,
                    };
                    out.push_str(bare);
                }
                Part::Rest => {
                    let rest = path.strip_prefix(&*self.prefix).unwrap_or(path);
                    // One slash where the template and the rest meet: `/new{rest}` and
                    // `/new/{rest}` both give `/new/a`.
                    let rest = if out.ends_with('/') {
                        rest.trim_start_matches('/')
                    } else {
                        rest
                    };
                    if !rest.is_empty() && !rest.starts_with('/') && !out.ends_with('/') {
                        out.push('/');
                    }
                    out.push_str(rest);
                }
            }
        }
        HeaderValue::from_str(&out).ok()
    }
}

impl<B> Service<Request<B>> for Redirect {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let res = match self.location(&req) {
            Some(location) => {
                let mut res = Response::new(Body::empty());
                *res.status_mut() = self.status;
                res.headers_mut().insert(header::LOCATION, location);
                res
            }
            None => crate::respond::reason(StatusCode::BAD_REQUEST),
        };
        ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;

    async fn location(redirect: &Redirect, uri: &str, host: &str) -> (StatusCode, Option<String>) {
        let req = Request::get(uri)
            .header("host", host)
            .body(Body::empty())
            .unwrap();
        let res = redirect.clone().oneshot(req).await.unwrap();
        let location = res
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned());
        (res.status(), location)
    }

    #[tokio::test]
    async fn placeholders_take_the_parts_of_the_request() {
        let r = Redirect::to("https://{host}{path}{query}").unwrap();
        assert_eq!(
            location(&r, "/a%20b?x=1&y", "Example.com:8080").await,
            (
                StatusCode::PERMANENT_REDIRECT,
                Some("https://Example.com/a%20b?x=1&y".into())
            )
        );
        assert_eq!(
            location(&r, "/", "[::1]:8080").await.1.as_deref(),
            Some("https://[::1]/")
        );
        let r = Redirect::to("/new{rest}").unwrap().prefix("/old/");
        assert_eq!(
            location(&r, "/old/a/b", "h").await.1.as_deref(),
            Some("/new/a/b")
        );
        assert_eq!(location(&r, "/old", "h").await.1.as_deref(), Some("/new"));
        let r = Redirect::to("/new/{rest}").unwrap().prefix("/old/");
        assert_eq!(
            location(&r, "/old/a", "h").await.1.as_deref(),
            Some("/new/a")
        );
    }

    #[tokio::test]
    async fn a_host_that_is_not_one_gets_400_not_a_location() {
        let r = Redirect::to("https://{host}/").unwrap();
        for host in ["evil.com/x", "a b", "evil.com@x"] {
            assert_eq!(
                location(&r, "/", host).await,
                (StatusCode::BAD_REQUEST, None),
                "{host}"
            );
        }
    }

    #[test]
    fn templates_and_statuses_are_checked() {
        assert!(matches!(
            Redirect::to("/{nope}"),
            Err(RedirectError::Placeholder { .. })
        ));
        assert!(matches!(
            Redirect::to("/{path"),
            Err(RedirectError::Placeholder { .. })
        ));
        assert!(matches!(
            Redirect::to("/a}"),
            Err(RedirectError::Placeholder { .. })
        ));
        assert!(matches!(
            Redirect::to("/a\r\nx: y"),
            Err(RedirectError::Invalid { .. })
        ));
        let r = Redirect::to("/").unwrap();
        assert!(r.clone().status(StatusCode::OK).is_err());
        assert!(r.status(StatusCode::SEE_OTHER).is_ok());
    }
}
