//! scb's layers as a library user composes them, compiled and driven with `oneshot`: in an
//! axum app, beside tower-http's layers, and routes of different kinds in one `Router`.
//! Each of these once failed to compile far from its cause (E0271, E0308, a missing
//! `From<&str>`); the answers scb makes itself are checked to be of one style.

use std::convert::Infallible;

use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::catch_panic::CatchPanicLayer;
use scb_core::request_id::RequestIdLayer;
use scb_core::router::{BoxRoute, PathMatch, Router};
use scb_proxy::{ReverseProxy, ReverseProxyLayer, Upstream};
use scb_static::ServeStatic;
use tower::{ServiceBuilder, ServiceExt as _, service_fn};

/// A proxy to a port nothing listens on: its answer is a quick 502.
fn dead_proxy() -> ReverseProxy {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    ReverseProxy::builder([Upstream::new(&addr).unwrap()])
        .build()
        .unwrap()
}

fn site() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-compose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("index.html"), "<p>hi</p>").unwrap();
    dir
}

async fn text(res: Response<Body>) -> String {
    let body = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn reverse_proxy_layer_goes_on_an_axum_router() {
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "from axum" }))
        .layer(ReverseProxyLayer::new(dead_proxy(), "/api"));
    let res = app
        .clone()
        .oneshot(Request::get("/").body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let res = app
        .oneshot(
            Request::get("/api/x")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn catch_panic_goes_outside_tower_http_compression() {
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(tower_http::compression::CompressionLayer::new())
        .service(service_fn(|req: Request<Body>| async move {
            if req.uri().path() == "/boom" {
                panic!("handler bug");
            }
            Ok::<_, Infallible>(Response::new(Body::from("x".repeat(4096))))
        }));
    let req = Request::get("/")
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(Body::empty())
        .unwrap();
    let res = svc.clone().oneshot(req).await.unwrap();
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
    let res = svc
        .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn one_router_mixes_a_closure_static_files_and_a_proxy_with_one_style_of_answer() {
    let root = site();
    let hello = service_fn(|req: Request<Body>| async move {
        if req.uri().path() == "/hello/boom" {
            panic!("handler bug");
        }
        Ok::<_, Infallible>(Response::new(Body::from("hello")))
    });
    let router: Router<BoxRoute> = Router::new()
        .boxed_route("hello", PathMatch::Prefix("/hello".into()), hello)
        .unwrap()
        .boxed_route("api", PathMatch::Prefix("/api".into()), dead_proxy())
        .unwrap()
        .boxed_route(
            "files",
            PathMatch::Prefix("/files".into()),
            ServeStatic::new(&root).unwrap(),
        )
        .unwrap();
    let app = ServiceBuilder::new()
        .layer(RequestIdLayer::new())
        .layer(CatchPanicLayer::new())
        .service(router);
    let get = |path: &str| {
        app.clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
    };
    let res = get("/hello").await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(text(res).await, "hello");
    // The answers scb makes itself: the reason phrase as text, with the request id.
    for (path, status, body) in [
        ("/nowhere", StatusCode::NOT_FOUND, "Not Found\n"),
        ("/files/missing.html", StatusCode::NOT_FOUND, "Not Found\n"),
        ("/api/users", StatusCode::BAD_GATEWAY, "Bad Gateway\n"),
        (
            "/hello/boom",
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Server Error\n",
        ),
    ] {
        let res = get(path).await.unwrap();
        assert_eq!(res.status(), status, "{path}");
        assert!(res.headers().contains_key("x-request-id"), "{path}");
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8",
            "{path}"
        );
        assert_eq!(text(res).await, body, "{path}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
