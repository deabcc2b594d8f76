//! `POST /cache/purge` on the metrics listener (never on a public one): drops stored
//! responses of the routes' caches.
//!
//! The query names what: `path=/a?b` (that path and query exactly) or `prefix=/img/`
//! (every path beginning with it), optionally `host=example.com` (any host otherwise)
//! and `route=NAME` (every cached route otherwise). The answer is
//! `{"purged": N}`; a query that says neither `path` nor `prefix`, or names a route
//! without a cache, is a 400 that says why; another method is a 405.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use scb_core::Body;
use scb_proxy::cache::CacheLayer;
use tower::Service;

/// Where the purge endpoint is on the metrics listener.
pub(crate) const PURGE_PATH: &str = "/cache/purge";

/// The caches a purge reaches, by route name.
#[derive(Clone, Debug)]
pub(crate) struct PurgeCaches {
    caches: Arc<[(Arc<str>, CacheLayer)]>,
}

impl PurgeCaches {
    pub(crate) fn new(caches: Vec<(Arc<str>, CacheLayer)>) -> Self {
        Self {
            caches: caches.into(),
        }
    }

    fn purge(&self, query: &str) -> Result<usize, String> {
        let (mut path, mut prefix, mut host, mut route) = (None, None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8()
                .map_err(|_| format!("`{name}` is not UTF-8 once decoded"))?
                .into_owned();
            let slot = match name {
                "path" => &mut path,
                "prefix" => &mut prefix,
                "host" => &mut host,
                "route" => &mut route,
                other => return Err(format!("unknown parameter `{other}`")),
            };
            *slot = Some(value);
        }
        let (target, is_prefix) = match (path, prefix) {
            (Some(path), None) => (path, false),
            (None, Some(prefix)) => (prefix, true),
            _ => return Err("give exactly one of `path` and `prefix`".to_owned()),
        };
        if !target.starts_with('/') {
            return Err("`path` and `prefix` start with `/`".to_owned());
        }
        let chosen: Vec<&CacheLayer> = self
            .caches
            .iter()
            .filter(|(name, _)| route.as_deref().is_none_or(|r| **name == *r))
            .map(|(_, cache)| cache)
            .collect();
        if let Some(route) = &route
            && chosen.is_empty()
        {
            return Err(format!("no cached route is named `{route}`"));
        }
        Ok(chosen
            .iter()
            .map(|cache| cache.purge(host.as_deref(), &target, is_prefix))
            .sum())
    }
}

impl Service<Request<Body>> for PurgeCaches {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if req.method() != Method::POST {
            let mut res = scb_core::respond::reason(StatusCode::METHOD_NOT_ALLOWED);
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            return ready(Ok(res));
        }
        let res = match self.purge(req.uri().query().unwrap_or("")) {
            Ok(n) => {
                tracing::info!(
                    query = req.uri().query().unwrap_or(""),
                    purged = n,
                    "cache purge"
                );
                let mut res = Response::new(Body::from(format!("{{\"purged\": {n}}}\n")));
                res.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                res
            }
            Err(why) => {
                let mut res = Response::new(Body::from(format!("{why}\n")));
                *res.status_mut() = StatusCode::BAD_REQUEST;
                res
            }
        };
        ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    #[tokio::test]
    async fn a_purge_is_a_post_with_exactly_one_of_path_and_prefix() {
        let svc = PurgeCaches::new(vec![("api".into(), CacheLayer::new(1 << 20))]);
        let call = |method: Method, uri: &str| {
            svc.clone().oneshot(
                Request::builder()
                    .method(method)
                    .uri(uri)
                    .body(Body::empty())
                    .unwrap(),
            )
        };
        let res = call(Method::POST, "/cache/purge?prefix=%2Fimg%2F&route=api")
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "{\"purged\": 0}\n");
        for bad in [
            "/cache/purge",
            "/cache/purge?path=/a&prefix=/b",
            "/cache/purge?path=a",
            "/cache/purge?path=/a&route=nope",
            "/cache/purge?path=/a&what=1",
        ] {
            let res = call(Method::POST, bad).await.unwrap();
            assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{bad}");
        }
        let res = call(Method::GET, "/cache/purge?path=/a").await.unwrap();
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
