//! `ServeStatic` driven with `oneshot` over a real directory tree.

use std::path::PathBuf;

use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use scb_core::Body;
use tower::ServiceExt as _;

use super::*;
use crate::sys::Mode;

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

fn is_no_file(res: &Response<Body>) -> bool {
    res.extensions().get::<super::decide::NoFile>().is_some()
}

#[tokio::test]
async fn spa_fallback_answers_unknown_paths_with_200_and_leaves_the_rest_alone() {
    let t = tree("fallback");
    let www = t.0.join("www");
    std::fs::write(www.join("app.html"), "<div id=app></div>").unwrap();
    std::fs::write(www.join("only.js.gz"), "GZ").unwrap();
    let svc = ServeStatic::builder(&www)
        .precompressed(["gzip"])
        .fallback("app.html")
        .build()
        .unwrap();
    let direct = send(&svc, Method::GET, "/app.html", &[]).await;
    let etag = direct.headers()[header::ETAG].clone();

    let res = send(&svc, Method::GET, "/users/42/settings", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(!is_no_file(&res), "the app owns the path: no fall-through");
    assert_eq!(
        res.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    assert_eq!(res.headers()[header::ETAG], etag);
    assert_eq!(body(res).await, b"<div id=app></div>");
    // Served as any file: conditionals and ranges apply.
    let res = send(
        &svc,
        Method::GET,
        "/users/42",
        &[("if-none-match", etag.to_str().unwrap())],
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    let res = send(&svc, Method::GET, "/users/42", &[("range", "bytes=0-4")]).await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(body(res).await, b"<div ");

    // Real files, directories and refusals are unaffected.
    let res = send(&svc, Method::GET, "/hello.txt", &[]).await;
    assert_eq!(body(res).await, b"Hello, world!");
    assert_eq!(
        send(&svc, Method::GET, "/dir", &[]).await.status(),
        StatusCode::PERMANENT_REDIRECT
    );
    for (path, code) in [
        ("/a%zz", 400),
        ("/hello.txt%00", 400),
        ("/../outside.txt", 404),
        ("/.env", 404),
        ("/escape", 404),
        // A sidecar-only file names something: not the app's HTML as `only.js`.
        ("/only.js", 404),
        // A directory without an index is not a missing path.
        ("/bare/", 404),
    ] {
        let res = send(&svc, Method::GET, path, &[]).await;
        assert_eq!(res.status().as_u16(), code, "{path}");
        assert_ne!(body(res).await, b"<div id=app></div>", "{path}");
    }

    let missing = ServeStatic::builder(&www)
        .fallback("nope.html")
        .build()
        .unwrap();
    let res = send(&missing, Method::GET, "/users/42", &[]).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(is_no_file(&res));
}

#[tokio::test]
async fn not_found_page_is_sent_with_404_and_its_own_bytes() {
    let t = tree("notfound");
    let www = t.0.join("www");
    std::fs::write(www.join("404.html"), "<h1>gone</h1>").unwrap();
    let svc = ServeStatic::builder(&www)
        .not_found("404.html")
        .cache_control("*.html", "public, max-age=31536000, immutable")
        .build()
        .unwrap();
    for path in [
        "/missing.txt",
        "/.env",
        "/escape",
        "/../outside.txt",
        "/bare/",
    ] {
        let res = send(&svc, Method::GET, path, &[("range", "bytes=0-1")]).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(is_no_file(&res), "{path}");
        let h = res.headers();
        assert_eq!(
            h[header::CONTENT_TYPE],
            "text/html; charset=utf-8",
            "{path}"
        );
        assert_eq!(h[header::CONTENT_LENGTH], "13", "{path}");
        assert!(!h.contains_key(header::ETAG), "{path}");
        assert!(!h.contains_key(header::CONTENT_RANGE), "{path}");
        assert!(!h.contains_key(header::CACHE_CONTROL), "{path}");
        assert_eq!(body(res).await, b"<h1>gone</h1>", "{path}");
    }
    let res = send(&svc, Method::GET, "/missing", &[("if-none-match", "*")]).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = send(&svc, Method::HEAD, "/missing", &[]).await;
    assert_eq!(res.headers()[header::CONTENT_LENGTH], "13");
    assert!(body(res).await.is_empty());
    // Not a 404: the plain answers.
    let res = send(&svc, Method::GET, "/a%zz", &[]).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert_ne!(body(res).await, b"<h1>gone</h1>");

    // A fallback that is missing ends in the page too; a page that is missing, in the
    // plain 404.
    let both = ServeStatic::builder(&www)
        .fallback("nope.html")
        .not_found("404.html")
        .build()
        .unwrap();
    let res = send(&both, Method::GET, "/users/42", &[]).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(body(res).await, b"<h1>gone</h1>");
    let no_page = ServeStatic::builder(&www)
        .not_found("nope.html")
        .build()
        .unwrap();
    let res = send(&no_page, Method::GET, "/missing", &[]).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        res.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
}

#[tokio::test]
async fn directory_listing_escapes_names_encodes_links_and_hides_dotfiles() {
    let t = tree("listing");
    let www = t.0.join("www");
    let list = www.join("list");
    std::fs::create_dir_all(list.join("sub dir")).unwrap();
    std::fs::write(list.join("<script>&\"'.txt"), "x").unwrap();
    std::fs::write(list.join("a b.txt"), "x").unwrap();
    std::fs::write(list.join(".secret"), "x").unwrap();
    std::os::unix::fs::symlink("../../outside.txt", list.join("link_out")).unwrap();
    std::os::unix::fs::symlink("../dir", list.join("link_dir")).unwrap();
    let svc = ServeStatic::builder(&www)
        .precompressed(["gzip"])
        .list_directories(true)
        .build()
        .unwrap();

    let res = send(&svc, Method::GET, "/list/", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(!is_no_file(&res));
    let h = res.headers().clone();
    assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(h[header::CACHE_CONTROL], "no-cache");
    let page = String::from_utf8(body(res).await).unwrap();
    assert_eq!(h[header::CONTENT_LENGTH], page.len().to_string().as_str());
    assert!(
        page.contains(
            "<a href=\"%3Cscript%3E%26%22%27.txt\">&lt;script&gt;&amp;&quot;&#39;.txt</a>"
        ),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    assert!(page.contains("<a href=\"a%20b.txt\">a b.txt</a>"), "{page}");
    assert!(
        page.contains("<a href=\"sub%20dir/\">sub dir/</a>"),
        "{page}"
    );
    assert!(page.contains("<a href=\"../\">../</a>"), "{page}");
    // An in-tree link to a directory is shown as one; an escaping link not at all.
    assert!(
        page.contains("<a href=\"link_dir/\">link_dir/</a>"),
        "{page}"
    );
    assert!(!page.contains("link_out"), "{page}");
    assert!(!page.contains(".secret"), "{page}");
    let at = |s: &str| page.find(s).unwrap();
    assert!(at("&lt;script") < at(">a b.txt<") && at(">a b.txt<") < at(">sub dir/<"));

    // The link it gives works.
    let res = send(&svc, Method::GET, "/list/a%20b.txt", &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let head = send(&svc, Method::HEAD, "/list/", &[]).await;
    assert_eq!(
        head.headers()[header::CONTENT_LENGTH],
        h[header::CONTENT_LENGTH]
    );
    assert!(body(head).await.is_empty());
    // The root has no link up; a directory with an index still gets its index.
    let root = String::from_utf8(body(send(&svc, Method::GET, "/", &[]).await).await).unwrap();
    assert!(root.contains("<a href=\"list/\">list/</a>"), "{root}");
    assert!(!root.contains("href=\"../\""), "{root}");
    let res = send(&svc, Method::GET, "/dir/", &[]).await;
    assert_eq!(body(res).await, b"<h1>index</h1>");

    let shown = ServeStatic::builder(&www)
        .list_directories(true)
        .show_hidden(true)
        .build()
        .unwrap();
    let page = body(send(&shown, Method::GET, "/list/", &[]).await).await;
    assert!(String::from_utf8(page).unwrap().contains(">.secret<"));

    let off = ServeStatic::new(&www).unwrap();
    let res = send(&off, Method::GET, "/list/", &[]).await;
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(is_no_file(&res));
}

#[tokio::test]
async fn the_layer_falls_through_on_404_with_a_page_but_not_when_the_fallback_answers() {
    use std::convert::Infallible;

    let t = tree("layer-site");
    let www = t.0.join("www");
    std::fs::write(www.join("404.html"), "<h1>gone</h1>").unwrap();
    std::fs::write(www.join("app.html"), "<div id=app></div>").unwrap();
    let inner = tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Body::from("inner")))
    });
    let call = |layer: ServeStaticLayer, method: Method, path: &str| {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap();
        tower::ServiceBuilder::new()
            .layer(layer)
            .service(inner)
            .oneshot(req)
    };

    let with_page = ServeStatic::builder(&www)
        .not_found("404.html")
        .build()
        .unwrap()
        .into_layer();
    let res = call(with_page.clone(), Method::GET, "/api/users")
        .await
        .unwrap();
    assert_eq!(body(res).await, b"inner");
    let res = call(with_page, Method::GET, "/hello.txt").await.unwrap();
    assert_eq!(body(res).await, b"Hello, world!");

    let spa = ServeStatic::builder(&www)
        .fallback("app.html")
        .build()
        .unwrap()
        .into_layer();
    let res = call(spa.clone(), Method::GET, "/users/42").await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(body(res).await, b"<div id=app></div>");
    // Methods files do not answer still go to the inner service.
    let res = call(spa, Method::POST, "/users/42").await.unwrap();
    assert_eq!(body(res).await, b"inner");
}

#[test]
fn site_files_must_stay_beneath_the_root() {
    let t = tree("sitefile");
    for bad in ["../outside.txt", "a/../../b", "", "/"] {
        let err = ServeStatic::builder(t.0.join("www"))
            .fallback(bad)
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                BuildError::SiteFile {
                    setting: "fallback",
                    ..
                }
            ),
            "{bad}: {err}"
        );
    }
    let err = ServeStatic::builder(t.0.join("www"))
        .not_found("x/../y")
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        BuildError::SiteFile {
            setting: "not_found",
            ..
        }
    ));
    // A leading `/` means the root, and nothing is percent-decoded.
    ServeStatic::builder(t.0.join("www"))
        .fallback("/dir/index.html")
        .not_found("100%.html")
        .build()
        .unwrap();
}

#[tokio::test]
async fn the_blocking_path_answers_like_the_inline_one() {
    let t = tree("blocking");
    let svc = service(&t);
    for path in [
        "/hello.txt",
        "/big.bin",
        "/dir/",
        "/dir",
        "/missing",
        "/.env",
    ] {
        let (parts, ()) = Request::get(path).body(()).unwrap().into_parts();
        let blocking = decide::decide(
            &svc.config,
            &parts,
            true,
            &mut Resolver::direct(Mode::Blocking, false),
        )
        .unwrap_or_else(|_| panic!("{path}: a blocking lookup never asks to block"));
        let inline = send(&svc, Method::GET, path, &[]).await;
        assert_eq!(blocking.status(), inline.status(), "{path}");
        assert_eq!(
            blocking.headers().get(header::ETAG),
            inline.headers().get(header::ETAG),
            "{path}"
        );
        assert_eq!(body(blocking).await, body(inline).await, "{path}");
    }
}

#[tokio::test]
async fn with_the_portable_walk_forced_files_serve_and_no_link_is_followed() {
    let t = tree("walk");
    std::os::unix::fs::symlink("hello.txt", t.0.join("www/link_in")).unwrap();
    let svc = service(&t);
    svc.config.root.force_walk();
    assert_eq!(
        body(send(&svc, Method::GET, "/hello.txt", &[]).await).await,
        b"Hello, world!"
    );
    assert_eq!(
        body(send(&svc, Method::GET, "/dir/", &[]).await).await,
        b"<h1>index</h1>"
    );
    for path in ["/link_in", "/escape", "/../outside.txt"] {
        let res = send(&svc, Method::GET, path, &[]).await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
    }
}
