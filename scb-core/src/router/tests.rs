use bytes::Bytes;
use http::header;
use http_body_util::BodyExt as _;
use tower::{ServiceBuilder, service_fn};

use super::*;
use crate::request_id::RequestIdLayer;
use crate::respond::Respond;

/// A service that answers with its tag and the path it was given.
fn tagged(
    tag: &'static str,
) -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>>,
> + Clone {
    service_fn(move |req: Request<Body>| async move {
        let path = req.uri().path().to_owned();
        Ok::<_, Infallible>(Response::new(Body::from(format!("{tag} {path}"))))
    })
}

fn exact(p: &str) -> PathMatch {
    PathMatch::Exact(p.to_owned())
}

fn prefix(p: &str) -> PathMatch {
    PathMatch::Prefix(p.to_owned())
}

async fn body(res: Response<Body>) -> Bytes {
    res.into_body().collect().await.unwrap().to_bytes()
}

async fn get<S>(svc: &S, uri: &str) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    let req = Request::get(uri).body(Body::empty()).unwrap();
    svc.clone().oneshot(req).await.unwrap()
}

#[tokio::test]
async fn exact_beats_prefix_and_longest_prefix_wins() {
    let router = Router::new()
        .route("root", prefix("/"), tagged("root"))
        .unwrap()
        .route("api", prefix("/api"), tagged("api"))
        .unwrap()
        .route("api-v2", prefix("/api/v2/"), tagged("api-v2"))
        .unwrap()
        .route("api-exact", exact("/api/v2/special"), tagged("special"))
        .unwrap();
    for (uri, want) in [
        ("/api/v2/special", "special"),
        ("/api/v2/special/more", "api-v2"),
        ("/api/v2/users?x=1", "api-v2"),
        ("/api/v1/users", "api"),
        ("/api", "api"),
        ("/api/v2", "api"),
        ("/apiary", "root"),
        ("/", "root"),
        ("/anything/else", "root"),
    ] {
        let path = uri.split('?').next().unwrap();
        let got = body(get(&router, uri).await).await;
        assert_eq!(got, format!("{want} {path}"), "{uri}");
    }
}

#[test]
fn prefix_matches_on_segment_boundaries_only() {
    assert!(prefix_matches("/api", "/api"));
    assert!(prefix_matches("/api", "/api/"));
    assert!(prefix_matches("/api", "/api/x"));
    assert!(!prefix_matches("/api", "/apiary"));
    assert!(!prefix_matches("/api", "/ap"));
    assert!(prefix_matches("/static/", "/static/app.js"));
    assert!(!prefix_matches("/static/", "/static"));
    assert!(prefix_matches("/", "/anything"));
    assert!(!prefix_matches("/", ""));
}

#[tokio::test]
async fn unmatched_path_gets_the_not_found_fallback() {
    let router = Router::new()
        .route("api", prefix("/api"), tagged("api"))
        .unwrap();
    let res = get(&router, "/elsewhere").await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        res.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert_eq!(body(res).await, "Not Found\n");
}

#[tokio::test]
async fn path_is_matched_as_received_without_decoding() {
    let router = Router::new()
        .route("api", prefix("/api"), tagged("api"))
        .unwrap();
    let res = get(&router, "/%61pi/users").await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn custom_fallback_answers_unmatched_requests() {
    let router = Router::new()
        .route("api", prefix("/api"), tagged("api"))
        .unwrap()
        .fallback(tagged("fallback"));
    assert_eq!(body(get(&router, "/other").await).await, "fallback /other");
}

#[tokio::test]
async fn router_adds_no_extensions_to_request_or_response() {
    // Each `Extensions` insert allocates a map and a box; the router must not pay that
    // per request.
    let svc = service_fn(|req: Request<Body>| async move {
        assert!(req.extensions().is_empty());
        Ok::<_, Infallible>(Response::new(Body::empty()))
    });
    let router = Router::new()
        .route("health", exact("/healthz"), svc)
        .unwrap()
        .route("api", prefix("/api"), svc)
        .unwrap();
    for uri in ["/healthz", "/api/x"] {
        let res = get(&router, uri).await;
        assert!(res.extensions().is_empty(), "{uri}");
    }
}

#[tokio::test]
async fn many_exact_routes_added_in_any_order_are_all_found() {
    // Not in sorted order, with paths that share prefixes and differ in length, so the
    // binary search sees both sides of every comparison.
    let paths = [
        "/m", "/b", "/zz", "/a", "/a/b", "/ab", "/", "/a/", "/y", "/c/d/e", "/aa", "/c",
    ];
    let mut router = Router::new();
    for (i, &path) in paths.iter().enumerate() {
        router = router
            .route(format!("r{i}"), exact(path), tagged(path))
            .unwrap();
    }
    for path in paths {
        assert_eq!(
            body(get(&router, path).await).await,
            format!("{path} {path}"),
            "{path}"
        );
    }
    for miss in ["/0", "/a/b/", "/ba", "/zzz", "/c/d", "/A"] {
        assert_eq!(
            get(&router, miss).await.status(),
            StatusCode::NOT_FOUND,
            "{miss}"
        );
    }
}

#[tokio::test]
async fn works_inside_a_service_builder_stack() {
    let router = Router::new()
        .route(
            "ok",
            exact("/ok"),
            Respond::new(StatusCode::OK).body("fine"),
        )
        .unwrap();
    let svc = ServiceBuilder::new()
        .layer(RequestIdLayer::new())
        .service(router);
    let res = get(&svc, "/ok").await;
    assert!(res.headers().contains_key("x-request-id"));
    assert_eq!(body(res).await, "fine");
    let res = get(&svc, "/missing").await;
    assert!(res.headers().contains_key("x-request-id"));
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

#[test]
fn invalid_routes_are_refused_with_a_reason() {
    let ok = || Respond::new(StatusCode::OK);
    let base = || {
        Router::new()
            .route("a", exact("/a"), ok())
            .unwrap()
            .route("p", prefix("/p"), ok())
            .unwrap()
    };
    let cases = [
        ("", exact("/x"), RouterError::EmptyName),
        (
            "a",
            exact("/x"),
            RouterError::DuplicateName { name: "a".into() },
        ),
        (
            "p",
            prefix("/y"),
            RouterError::DuplicateName { name: "p".into() },
        ),
        (
            "b",
            exact("/a"),
            RouterError::DuplicateExact { path: "/a".into() },
        ),
        (
            "b",
            prefix("/p"),
            RouterError::DuplicatePrefix {
                prefix: "/p".into(),
            },
        ),
        (
            "b",
            exact("a"),
            RouterError::NotAbsolute { path: "a".into() },
        ),
        (
            "b",
            prefix(""),
            RouterError::NotAbsolute { path: "".into() },
        ),
    ];
    for (name, path, want) in cases {
        let err = base().route(name, path, ok()).unwrap_err();
        assert_eq!(err, want);
    }
    // The same string may be both an exact path and a prefix.
    assert!(base().route("b", prefix("/a"), ok()).is_ok());
    assert_eq!(
        RouterError::DuplicatePrefix {
            prefix: "/p".into()
        }
        .to_string(),
        "path prefix `/p` is routed twice"
    );
}

#[tokio::test]
async fn adding_routes_to_a_clone_leaves_the_original_alone() {
    let original = Router::new().route("a", exact("/a"), tagged("a")).unwrap();
    let extended = original
        .clone()
        .route("b", exact("/b"), tagged("b"))
        .unwrap();
    assert_eq!(get(&original, "/b").await.status(), StatusCode::NOT_FOUND);
    assert_eq!(body(get(&extended, "/b").await).await, "b /b");
}

#[tokio::test]
async fn a_route_not_ready_yet_waits_for_readiness_then_answers() {
    use tower::limit::ConcurrencyLimitLayer;

    // One request at a time across clones: the first holds the permit until `release`.
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let held = Arc::new(std::sync::Mutex::new(Some(held)));
    let slow = service_fn(move |_req: Request<Body>| {
        let held = held.lock().unwrap().take();
        async move {
            if let Some(held) = held {
                held.await.unwrap();
            }
            Ok::<_, Infallible>(Response::new(Body::from("done")))
        }
    });
    let limited = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(1))
        .service(slow);
    let router = Router::new()
        .route("slow", exact("/slow"), limited)
        .unwrap();

    let first = tokio::spawn(
        router
            .clone()
            .oneshot(Request::get("/slow").body(Body::empty()).unwrap()),
    );
    tokio::task::yield_now().await;
    let mut second = std::pin::pin!(get(&router, "/slow"));
    // The second request's clone has no permit: it waits, it is not refused.
    assert!(futures_poll_once(second.as_mut()).await.is_pending());
    release.send(()).unwrap();
    assert_eq!(body(first.await.unwrap().unwrap()).await, "done");
    assert_eq!(body(second.await).await, "done");
}

#[tokio::test]
async fn a_route_failing_readiness_fails_its_request_with_that_error() {
    #[derive(Clone)]
    struct Broken;
    impl Service<Request<Body>> for Broken {
        type Response = Response<Body>;
        type Error = &'static str;
        type Future = Ready<Result<Response<Body>, &'static str>>;
        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Err("backend gone"))
        }
        fn call(&mut self, _req: Request<Body>) -> Self::Future {
            unreachable!("never ready")
        }
    }
    let router = Router::new()
        .route("broken", exact("/broken"), Broken)
        .unwrap()
        .fallback(service_fn(|_req: Request<Body>| {
            ready(Ok::<_, &'static str>(Response::new(Body::empty())))
        }));
    let req = Request::get("/broken").body(Body::empty()).unwrap();
    assert_eq!(router.oneshot(req).await.unwrap_err(), "backend gone");
}

/// Polls `future` once with the test's waker.
async fn futures_poll_once<T>(future: Pin<&mut impl Future<Output = T>>) -> Poll<T> {
    let mut future = Some(future);
    std::future::poll_fn(|cx| Poll::Ready(future.take().unwrap().poll(cx))).await
}

#[test]
fn router_is_send_and_sync_and_future_send_when_services_are() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Router<Respond>>();
    send::<ResponseFuture<Respond, NotFound, Request<Body>>>();
}

fn regex(p: &str) -> PathMatch {
    PathMatch::Regex(p.to_owned())
}

/// A service that answers with its tag and what the route's expression captured.
fn captured(
    tag: &'static str,
) -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>>,
> + Clone {
    service_fn(move |req: Request<Body>| async move {
        let id = req
            .extensions()
            .get::<PathCaptures>()
            .map(|c| {
                format!(
                    "{}|{}",
                    c.name("id").unwrap_or("-"),
                    c.get(0).unwrap_or("-")
                )
            })
            .unwrap_or_else(|| "none".to_owned());
        Ok::<_, Infallible>(Response::new(Body::from(format!("{tag} {id}"))))
    })
}

#[tokio::test]
async fn exact_then_regex_in_order_then_prefix_and_captures_reach_the_route() {
    let router = Router::new()
        .route("root", prefix("/"), captured("root"))
        .unwrap()
        .route("users", regex(r"^/users/(?<id>\d+)$"), captured("users"))
        .unwrap()
        .route("any-user", regex(r"^/users/(?<id>[^/]+)"), captured("any"))
        .unwrap()
        .route("me", exact("/users/me"), captured("me"))
        .unwrap()
        .route("users-prefix", prefix("/users"), captured("prefix"))
        .unwrap();
    for (uri, want) in [
        ("/users/42", "users 42|/users/42"),
        ("/users/42?x=1", "users 42|/users/42"),
        // The first expression added wins where two match.
        ("/users/ann/posts", "any ann|/users/ann"),
        ("/users/me", "me none"),
        // An expression beats a longer prefix.
        ("/users", "prefix none"),
        ("/other", "root none"),
    ] {
        assert_eq!(body(get(&router, uri).await).await, want, "{uri}");
    }
}

#[tokio::test]
async fn a_route_whose_conditions_fail_leaves_the_request_to_the_next() {
    let json_post = RouteMatch::new(prefix("/api/"))
        .methods([http::Method::POST])
        .header(header::CONTENT_TYPE, Glob::new("application/json*"));
    let v2 = RouteMatch::new(prefix("/api/")).query("v", Glob::new("2"));
    let router = Router::new()
        // Added before the conditional ones: still tried after them.
        .route("api", prefix("/api/"), tagged("api"))
        .unwrap()
        .route("json", json_post, tagged("json"))
        .unwrap()
        .route("v2", v2, tagged("v2"))
        .unwrap()
        .route(
            "exact-get",
            RouteMatch::new(exact("/api/x")).methods([http::Method::GET]),
            tagged("exact-get"),
        )
        .unwrap()
        .route("root", prefix("/"), tagged("root"))
        .unwrap();
    let send = |method: &str, uri: &str, json: bool| {
        let mut b = Request::builder().method(method).uri(uri);
        if json {
            b = b.header("content-type", "application/json");
        }
        let req = b.body(Body::empty()).unwrap();
        let router = router.clone();
        async move {
            let res = router.oneshot(req).await.unwrap();
            String::from_utf8(body(res).await.to_vec()).unwrap()
        }
    };
    assert_eq!(send("POST", "/api/a", true).await, "json /api/a");
    assert_eq!(send("POST", "/api/a?v=2", true).await, "json /api/a");
    assert_eq!(send("POST", "/api/a?v=2", false).await, "v2 /api/a");
    assert_eq!(send("PUT", "/api/a", true).await, "api /api/a");
    assert_eq!(send("GET", "/api/x", false).await, "exact-get /api/x");
    assert_eq!(send("HEAD", "/api/x", false).await, "exact-get /api/x");
    // The exact route's condition fails: the prefixes take it.
    assert_eq!(send("POST", "/api/x", false).await, "api /api/x");
    assert_eq!(send("DELETE", "/else", false).await, "root /else");
    let req = Request::post("/api/a").body(Body::empty()).unwrap();
    assert_eq!(router.route_name(&req).map(|n| &**n), Some("api"));
}

#[tokio::test]
async fn only_conditional_routes_fall_through_to_the_fallback() {
    let router = Router::new()
        .route(
            "post-only",
            RouteMatch::new(exact("/form")).methods([http::Method::POST]),
            tagged("post"),
        )
        .unwrap();
    assert_eq!(get(&router, "/form").await.status(), StatusCode::NOT_FOUND);
    let req = Request::post("/form").body(Body::empty()).unwrap();
    assert_eq!(router.oneshot(req).await.unwrap().status(), StatusCode::OK);
}

#[test]
fn conditional_routes_may_share_a_path_and_bad_expressions_are_refused() {
    let ok = || Respond::new(StatusCode::OK);
    let get_only = |p: PathMatch| RouteMatch::new(p).methods([http::Method::GET]);
    let router = Router::new()
        .route("a", exact("/a"), ok())
        .unwrap()
        .route("a-get", get_only(exact("/a")), ok())
        .unwrap()
        .route("a-get-again", get_only(exact("/a")), ok())
        .unwrap()
        .route("r", regex("^/r$"), ok())
        .unwrap()
        .route("r-get", get_only(regex("^/r$")), ok())
        .unwrap();
    assert_eq!(
        router.clone().route("r2", regex("^/r$"), ok()).unwrap_err(),
        RouterError::DuplicatePattern {
            pattern: "^/r$".into()
        }
    );
    assert_eq!(
        router.clone().route("a2", exact("/a"), ok()).unwrap_err(),
        RouterError::DuplicateExact { path: "/a".into() }
    );
    assert_eq!(
        router
            .clone()
            .route("r-get", regex("^/x$"), ok())
            .unwrap_err(),
        RouterError::DuplicateName {
            name: "r-get".into()
        }
    );
    let err = router.route("bad", regex("(unclosed"), ok()).unwrap_err();
    assert!(
        matches!(&err, RouterError::Regex { pattern, .. } if pattern == "(unclosed"),
        "{err:?}"
    );
}

#[tokio::test]
async fn many_regex_routes_are_searched_in_one_pass_and_still_in_order() {
    let mut router = Router::new();
    for i in 0..100 {
        router = router
            .route(
                format!("r{i}"),
                regex(&format!(r"^/r{i}/(?<id>\d+)$")),
                captured("r"),
            )
            .unwrap();
    }
    let router = router
        .route("catch", regex(r"^/r\d+/(?<id>.*)$"), captured("catch"))
        .unwrap()
        .route("root", prefix("/"), captured("root"))
        .unwrap();
    assert_eq!(body(get(&router, "/r57/9").await).await, "r 9|/r57/9");
    let req = Request::get("/r57/9").body(Body::empty()).unwrap();
    assert_eq!(router.route_name(&req).map(|n| &**n), Some("r57"));
    assert_eq!(body(get(&router, "/r57/x").await).await, "catch x|/r57/x");
    assert_eq!(body(get(&router, "/nothing").await).await, "root none");
}

#[test]
fn a_paths_own_prefixes_are_exactly_those_a_prefix_route_can_match() {
    let paths = [
        "/",
        "/a",
        "/a/",
        "/a/b",
        "/a/b/",
        "/api/v2/users",
        "//x",
        "/a//b",
        "/static/app.js",
    ];
    let prefixes = [
        "/", "/a", "/a/", "/a/b", "/a/b/", "/api", "/api/", "/api/v2", "/api/v2/", "/static/",
        "/static", "/s", "//", "/a//", "/ap",
    ];
    for path in paths {
        let own: Vec<&str> = table::path_prefixes(path).collect();
        let mut want: Vec<&str> = prefixes
            .iter()
            .copied()
            .filter(|p| prefix_matches(p, path))
            .collect();
        want.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let found: Vec<&str> = own
            .iter()
            .copied()
            .filter(|p| prefixes.contains(p))
            .collect();
        assert_eq!(found, want, "{path}: own prefixes {own:?}");
        assert!(own.windows(2).all(|w| w[0].len() > w[1].len()), "{own:?}");
    }
}

#[tokio::test]
async fn many_prefixes_are_found_through_the_index_as_through_the_scan() {
    let mut router = Router::new();
    for i in 0..40 {
        router = router
            .route(
                format!("s{i}"),
                prefix(&format!("/section{i}/")),
                tagged("s"),
            )
            .unwrap()
            .route(
                format!("t{i}"),
                prefix(&format!("/section{i}/deep")),
                tagged("t"),
            )
            .unwrap();
    }
    let router = router
        .route("root", prefix("/"), tagged("root"))
        .unwrap()
        .route(
            "post-only",
            RouteMatch::new(prefix("/section7/deep")).methods([http::Method::POST]),
            tagged("post"),
        )
        .unwrap();
    for (uri, want) in [
        ("/section7/x", "s /section7/x"),
        ("/section7/deep", "t /section7/deep"),
        ("/section7/deep/er", "t /section7/deep/er"),
        ("/section7/deeper", "s /section7/deeper"),
        ("/section7", "root /section7"),
        ("/section70/x", "root /section70/x"),
        ("/", "root /"),
    ] {
        assert_eq!(body(get(&router, uri).await).await, want, "{uri}");
    }
    let req = Request::post("/section7/deep").body(Body::empty()).unwrap();
    assert_eq!(router.route_name(&req).map(|n| &**n), Some("post-only"));
}
