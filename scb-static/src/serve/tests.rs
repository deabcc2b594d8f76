//! `ServeStatic` driven with `oneshot` over a real directory tree.

use std::path::PathBuf;

use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use scb_core::Body;
use tower::ServiceExt as _;

use super::*;

struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BIG: usize = 300_000;

fn big_bytes() -> Vec<u8> {
    (0..BIG).map(|i| (i % 251) as u8).collect()
}

fn tree(name: &str) -> Tree {
    let base = std::env::temp_dir().join(format!("scb-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::create_dir_all(root.join("bare")).unwrap();
    std::fs::write(root.join("hello.txt"), "Hello, world!").unwrap();
    std::fs::write(root.join("hello.txt.gz"), "GZIPPED-BYTES").unwrap();
    std::fs::write(root.join("dir/index.html"), "<h1>index</h1>").unwrap();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    std::fs::write(root.join("big.bin"), big_bytes()).unwrap();
    std::fs::write(base.join("outside.txt"), "OUTSIDE").unwrap();
    std::os::unix::fs::symlink("../outside.txt", root.join("escape")).unwrap();
    Tree(base)
}

fn service(t: &Tree) -> ServeStatic {
    ServeStatic::builder(t.0.join("www"))
        .precompressed(["gzip"])
        .cache_control("*.html", "no-cache")
        .build()
        .unwrap()
}

async fn send(
    svc: &ServeStatic,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Body> {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    svc.clone().oneshot(req.body(()).unwrap()).await.unwrap()
}

async fn body(res: Response<Body>) -> Vec<u8> {
    res.into_body().collect().await.unwrap().to_bytes().to_vec()
}

#[tokio::test]
async fn a_file_is_served_with_its_validators_and_type() {
    let t = tree("file");
    let res = send(&service(&t), Method::GET, "/hello.txt", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let h = res.headers();
    assert_eq!(h[header::CONTENT_TYPE], "text/plain; charset=utf-8");
    assert_eq!(h[header::CONTENT_LENGTH], "13");
    assert_eq!(h[header::ACCEPT_RANGES], "bytes");
    assert_eq!(h[header::VARY], "accept-encoding");
    assert!(h[header::ETAG].to_str().unwrap().starts_with('"'));
    assert!(h.contains_key(header::LAST_MODIFIED));
    assert!(!h.contains_key(header::CONTENT_ENCODING));
    assert_eq!(body(res).await, b"Hello, world!");
}

#[tokio::test]
async fn head_has_the_same_headers_and_no_body() {
    let t = tree("head");
    let svc = service(&t);
    let get = send(&svc, Method::GET, "/hello.txt", &[]).await;
    let head = send(&svc, Method::HEAD, "/hello.txt", &[]).await;
    assert_eq!(head.status(), StatusCode::OK);
    let strip = |h: &HeaderMap| {
        let mut h = h.clone();
        h.remove(header::DATE);
        h
    };
    assert_eq!(strip(get.headers()), strip(head.headers()));
    assert!(body(head).await.is_empty());
}

#[tokio::test]
async fn other_methods_get_405_with_allow() {
    let t = tree("method");
    let res = send(&service(&t), Method::POST, "/hello.txt", &[]).await;
    assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(res.headers()[header::ALLOW], "GET, HEAD");
}

#[tokio::test]
async fn missing_hidden_escaping_and_malformed_paths_are_refused() {
    let t = tree("refused");
    let svc = service(&t);
    for (path, code) in [
        ("/missing.txt", 404),
        ("/.env", 404),
        ("/escape", 404),
        ("/../outside.txt", 404),
        ("/%2e%2e/outside.txt", 404),
        ("/hello.txt%00", 400),
        ("/a%zz", 400),
        ("/..%5c..%5coutside.txt", 400),
    ] {
        let res = send(&svc, Method::GET, path, &[]).await;
        assert_eq!(res.status().as_u16(), code, "{path}");
        assert!(!body(res).await.starts_with(b"OUTSIDE"), "{path}");
    }
    let shown = ServeStatic::builder(t.0.join("www"))
        .show_hidden(true)
        .build()
        .unwrap();
    assert_eq!(
        send(&shown, Method::GET, "/.env", &[]).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn directories_redirect_to_their_slash_form_and_serve_the_index() {
    let t = tree("dir");
    let svc = service(&t);
    let res = send(&svc, Method::GET, "/dir?x=1", &[]).await;
    assert_eq!(res.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(res.headers()[header::LOCATION], "dir/?x=1");
    let res = send(&svc, Method::GET, "/dir/", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    assert_eq!(res.headers()[header::CACHE_CONTROL], "no-cache");
    assert_eq!(body(res).await, b"<h1>index</h1>");
    // The root is a directory asked for with its slash: its index, not a redirect.
    let root = ServeStatic::builder(t.0.join("www").join("dir"))
        .build()
        .unwrap();
    let res = send(&root, Method::GET, "/", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(body(res).await, b"<h1>index</h1>");
    // A directory without an index is not listed.
    assert_eq!(
        send(&svc, Method::GET, "/bare/", &[]).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn conditional_requests_get_304_and_412() {
    let t = tree("cond");
    let svc = service(&t);
    let res = send(&svc, Method::GET, "/hello.txt", &[]).await;
    let etag = res.headers()[header::ETAG].to_str().unwrap().to_owned();
    let modified = res.headers()[header::LAST_MODIFIED]
        .to_str()
        .unwrap()
        .to_owned();
    let res = send(&svc, Method::GET, "/hello.txt", &[("if-none-match", &etag)]).await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(res.headers()[header::ETAG], etag.as_str());
    assert_eq!(res.headers()[header::VARY], "accept-encoding");
    assert!(body(res).await.is_empty());
    let res = send(
        &svc,
        Method::GET,
        "/hello.txt",
        &[("if-modified-since", &modified)],
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    let res = send(&svc, Method::GET, "/hello.txt", &[("if-match", "\"nope\"")]).await;
    assert_eq!(res.status(), StatusCode::PRECONDITION_FAILED);
}

#[tokio::test]
async fn ranges_single_multiple_and_unsatisfiable() {
    let t = tree("range");
    let svc = service(&t);
    let res = send(&svc, Method::GET, "/hello.txt", &[("range", "bytes=0-4")]).await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(res.headers()[header::CONTENT_RANGE], "bytes 0-4/13");
    assert_eq!(body(res).await, b"Hello");
    let res = send(&svc, Method::GET, "/hello.txt", &[("range", "bytes=-6")]).await;
    assert_eq!(body(res).await, b"world!");
    let res = send(&svc, Method::GET, "/hello.txt", &[("range", "bytes=20-")]).await;
    assert_eq!(res.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(res.headers()[header::CONTENT_RANGE], "bytes */13");
    let res = send(
        &svc,
        Method::GET,
        "/big.bin",
        &[("range", "bytes=0-1,200000-200009")],
    )
    .await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    let ct = res.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let len: usize = res.headers()[header::CONTENT_LENGTH]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let bytes = body(res).await;
    assert_eq!(bytes.len(), len);
    let big = big_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("Content-Range: bytes 0-1/300000"));
    assert!(text.contains("Content-Range: bytes 200000-200009/300000"));
    assert!(bytes.windows(10).any(|w| w == &big[200_000..200_010]));
}

#[tokio::test]
async fn sidecars_follow_accept_encoding_with_their_own_validators() {
    let t = tree("sidecar");
    let svc = service(&t);
    let plain = send(&svc, Method::GET, "/hello.txt", &[]).await;
    let plain_etag = plain.headers()[header::ETAG].clone();
    let res = send(
        &svc,
        Method::GET,
        "/hello.txt",
        &[("accept-encoding", "br, gzip")],
    )
    .await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(
        res.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    assert_eq!(res.headers()[header::CONTENT_LENGTH], "13");
    assert_ne!(res.headers()[header::ETAG], plain_etag);
    // The bytes come from the handle that was opened: the sidecar's.
    assert_eq!(body(res).await, b"GZIPPED-BYTES");
    let res = send(
        &svc,
        Method::GET,
        "/hello.txt",
        &[("accept-encoding", "gzip;q=0, br")],
    )
    .await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(body(res).await, b"Hello, world!");
    let res = send(
        &svc,
        Method::GET,
        "/big.bin",
        &[("accept-encoding", "br, identity;q=0")],
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_ACCEPTABLE);
}

#[tokio::test]
async fn large_files_are_file_regions_and_small_ones_bytes() {
    let t = tree("large");
    let svc = service(&t);
    let res = send(&svc, Method::GET, "/big.bin", &[]).await;
    assert_eq!(
        res.headers()[header::CONTENT_LENGTH],
        BIG.to_string().as_str()
    );
    assert!(
        res.body().file_region().is_some(),
        "a large file must stay a file region"
    );
    assert_eq!(body(res).await, big_bytes());
    let res = send(&svc, Method::GET, "/hello.txt", &[]).await;
    assert!(res.body().file_region().is_none());
}

#[test]
fn a_missing_root_is_a_build_error() {
    let err = ServeStatic::new("/definitely/not/here").unwrap_err();
    assert!(matches!(err, BuildError::Root { .. }), "{err}");
}
