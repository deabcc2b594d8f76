//! ServeStatic as axum users mount it: `nest_service` and `fallback_service`.

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use scb_static::ServeStatic;
use tower::ServiceExt as _;

fn site() -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("scb-axum-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("index.html"), "<h1>home</h1>").unwrap();
    std::fs::write(root.join("app.js"), "console.log(1)").unwrap();
    std::fs::write(root.join("docs/index.html"), "<h1>docs</h1>").unwrap();
    root
}

async fn get_path(app: &Router, path: &str) -> (StatusCode, http::HeaderMap, String) {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn nest_service_and_fallback_service_serve_files_beside_routes() {
    let root = site();
    let app = Router::new()
        .route("/api/hello", get(|| async { "hello" }))
        .nest_service("/assets", ServeStatic::new(&root).unwrap())
        .fallback_service(ServeStatic::new(&root).unwrap());

    assert_eq!(get_path(&app, "/api/hello").await.2, "hello");
    let (status, headers, body) = get_path(&app, "/assets/app.js").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(body, "console.log(1)");
    // The redirect is relative: from /assets/docs the client goes to /assets/docs/.
    let (status, headers, _) = get_path(&app, "/assets/docs").await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(headers[header::LOCATION], "docs/");
    assert_eq!(get_path(&app, "/assets/docs/").await.2, "<h1>docs</h1>");
    assert_eq!(get_path(&app, "/").await.2, "<h1>home</h1>");
    assert_eq!(get_path(&app, "/missing").await.0, StatusCode::NOT_FOUND);
    let _ = std::fs::remove_dir_all(&root);
}
