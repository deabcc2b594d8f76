//! The property every other rule serves: a stored response is never answered to a request
//! it must not satisfy. Random sequences of requests (two methods, varied headers, with
//! and without credentials) over URLs whose origin answers with random storage
//! directives and `Vary`; every hit is checked against what the origin saw when it made
//! the response that was hit.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{HeaderMap, HeaderValue, Method, Request, Response};
use proptest::prelude::*;
use scb_core::Body;
use tower::{ServiceBuilder, ServiceExt as _};

use super::CacheLayer;

/// The origin's `Cache-Control` for a URL, and whether a shared cache may answer it
/// fresh to another request: to any request, and to one that carried `Authorization`.
const POLICIES: [(&str, bool, bool); 8] = [
    ("max-age=60", true, false),
    ("private, max-age=60", false, false),
    ("no-store, max-age=60", false, false),
    ("public, max-age=60", true, true),
    ("no-cache, max-age=60", false, false),
    ("s-maxage=60", true, true),
    ("max-age=60, must-revalidate", true, true),
    ("max-age=0", false, false),
];

/// The origin's `Vary` for a URL.
const VARIES: [Option<&str>; 4] = [
    None,
    Some("accept-language"),
    Some("Accept-Language, Accept-Encoding"),
    Some("*"),
];

const LANGUAGES: [Option<&str>; 3] = [None, Some("en"), Some("fr")];
const ENCODINGS: [Option<&str>; 2] = [None, Some("gzip")];

/// One request of a sequence.
#[derive(Clone, Debug)]
struct Step {
    url: usize,
    head: bool,
    language: Option<&'static str>,
    encoding: Option<&'static str>,
    authorized: bool,
}

fn step(urls: usize) -> impl Strategy<Value = Step> {
    (
        0..urls,
        any::<bool>(),
        proptest::sample::select(&LANGUAGES[..]),
        proptest::sample::select(&ENCODINGS[..]),
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(url, head, language, encoding, authorized)| Step {
            url,
            head,
            language,
            encoding,
            authorized,
        })
}

/// What the origin saw when it made a response: sent back in `x-origin`, so that a hit
/// shows which request it was made for.
fn seen(url: usize, headers: &HeaderMap, call: usize) -> String {
    let field = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    format!(
        "{url}|{}|{}|{}|{call}",
        field("accept-language"),
        field("accept-encoding"),
        headers.contains_key("authorization")
    )
}

/// Runs `steps` against an origin answering URL `i` with `urls[i]` (a policy and a
/// `Vary`), checking every answer; how many were hits.
fn run(urls: &[(usize, usize)], steps: &[Step]) -> Result<usize, TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let table: Arc<Vec<(usize, usize)>> = Arc::new(urls.to_vec());
        let calls = Arc::new(AtomicUsize::new(0));
        let origin = {
            let table = Arc::clone(&table);
            tower::service_fn(move |req: Request<Body>| {
                let url: usize = req.uri().path()[1..].parse().unwrap();
                let (policy, vary) = table[url];
                let call = calls.fetch_add(1, Ordering::SeqCst);
                let mut res = Response::new(Body::full("body"));
                let headers = res.headers_mut();
                headers.insert(
                    "cache-control",
                    HeaderValue::from_static(POLICIES[policy].0),
                );
                if let Some(vary) = VARIES[vary] {
                    headers.insert("vary", HeaderValue::from_static(vary));
                }
                headers.insert(
                    "x-origin",
                    HeaderValue::from_str(&seen(url, req.headers(), call)).unwrap(),
                );
                headers.insert("content-length", HeaderValue::from(4));
                async move { Ok::<_, Infallible>(res) }
            })
        };
        let svc = ServiceBuilder::new()
            .layer(CacheLayer::new(1 << 20))
            .service(origin);
        let mut hits = 0;
        for step in steps {
            let mut req = Request::builder()
                .method(if step.head { Method::HEAD } else { Method::GET })
                .uri(format!("/{}", step.url))
                .header("host", "example.com");
            if let Some(language) = step.language {
                req = req.header("accept-language", language);
            }
            if let Some(encoding) = step.encoding {
                req = req.header("accept-encoding", encoding);
            }
            if step.authorized {
                req = req.header("authorization", "Bearer x");
            }
            let req = req.body(Body::empty()).unwrap();
            let mine = seen(step.url, req.headers(), 0);
            let res = svc.clone().oneshot(req).await.unwrap();
            let status = res.headers()["cache-status"].to_str().unwrap().to_owned();
            let made_for = res.headers()["x-origin"].to_str().unwrap().to_owned();
            // The body is read to its end: that is what stores a miss.
            let _ = http_body_util::BodyExt::collect(res.into_body()).await;
            let made: Vec<&str> = made_for.split('|').collect();
            let asked: Vec<&str> = mine.split('|').collect();
            prop_assert_eq!(made[0], asked[0], "an answer for another URL: {}", status);
            if !status.starts_with("scb; hit") {
                continue;
            }
            hits += 1;
            let (policy, vary) = table[step.url];
            let (directives, shared, with_credentials) = POLICIES[policy];
            prop_assert!(shared, "a hit on `{}`", directives);
            if made[3] == "true" {
                prop_assert!(
                    with_credentials,
                    "`{}` made for a request with credentials was a hit",
                    directives
                );
            }
            match VARIES[vary] {
                None => {}
                Some("*") => prop_assert!(false, "a hit on `Vary: *`"),
                Some(fields) => {
                    prop_assert_eq!(made[1], asked[1], "Vary: {}", fields);
                    if fields.contains("Encoding") {
                        prop_assert_eq!(made[2], asked[2], "Vary: {}", fields);
                    }
                }
            }
        }
        Ok(hits)
    })
}

#[test]
fn the_property_sees_hits_where_they_are_allowed() {
    // So that the property cannot hold by the cache never answering from its store.
    let plain = Step {
        url: 0,
        head: false,
        language: Some("en"),
        encoding: None,
        authorized: false,
    };
    let steps = [
        plain.clone(),
        plain.clone(),
        Step {
            head: true,
            ..plain.clone()
        },
        Step {
            url: 1,
            ..plain.clone()
        },
        Step { url: 1, ..plain },
    ];
    // URL 0: `max-age=60` varying on the language; URL 1: `private`.
    assert_eq!(run(&[(0, 1), (1, 0)], &steps).unwrap(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_stored_response_is_never_answered_to_a_request_it_must_not_satisfy(
        urls in proptest::collection::vec((0..POLICIES.len(), 0..VARIES.len()), 4),
        steps in proptest::collection::vec(step(4), 1..48),
    ) {
        run(&urls, &steps)?;
    }
}
