//! `CompressLayer` over a real `ServeStatic`, driven with `oneshot`.

use std::io::Read as _;
use std::path::PathBuf;

use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use scb_core::Body;
use tower::{ServiceBuilder, ServiceExt as _};

use super::*;
use crate::ServeStatic;

struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 300 KB of repetitive HTML: above the inline-read size, so it is a file-region body.
fn page() -> Vec<u8> {
    "<p>compress me, I repeat myself</p>\n"
        .repeat(8_000)
        .into_bytes()
}

fn tree(name: &str) -> Tree {
    let root = std::env::temp_dir().join(format!("scb-compress-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("page.html"), page()).unwrap();
    std::fs::write(root.join("small.css"), "a{}").unwrap();
    std::fs::write(root.join("app.js"), "let x = 1;\n".repeat(500)).unwrap();
    std::fs::write(root.join("app.js.br"), "BROTLI-SIDECAR").unwrap();
    std::fs::write(root.join("photo.png"), vec![7u8; 200_000]).unwrap();
    Tree(root)
}

fn files(t: &Tree) -> Compress<ServeStatic> {
    ServiceBuilder::new().layer(CompressLayer::new()).service(
        ServeStatic::builder(&t.0)
            .precompressed(["br"])
            .build()
            .unwrap(),
    )
}

async fn get(svc: &Compress<ServeStatic>, path: &str, headers: &[(&str, &str)]) -> Response<Body> {
    let mut req = Request::get(path);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    svc.clone().oneshot(req.body(()).unwrap()).await.unwrap()
}

async fn bytes(res: Response<Body>) -> Vec<u8> {
    res.into_body().collect().await.unwrap().to_bytes().to_vec()
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[tokio::test]
async fn text_without_a_sidecar_is_gzipped_with_a_weak_etag() {
    let t = tree("gzip");
    let svc = files(&t);
    let plain = get(&svc, "/page.html", &[]).await;
    let strong = plain.headers()[header::ETAG].to_str().unwrap().to_owned();
    assert!(strong.starts_with('"'), "{strong}");

    let res = get(&svc, "/page.html", &[("accept-encoding", "gzip")]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let h = res.headers();
    assert_eq!(h[header::CONTENT_ENCODING], "gzip");
    assert_eq!(h[header::VARY], "accept-encoding");
    assert_eq!(h[header::ETAG].to_str().unwrap(), format!("W/{strong}"));
    assert!(!h.contains_key(header::CONTENT_LENGTH));
    assert!(!h.contains_key(header::ACCEPT_RANGES));
    let zipped = bytes(res).await;
    assert!(zipped.len() < page().len() / 10, "{} bytes", zipped.len());
    assert_eq!(gunzip(&zipped), page());
}

#[tokio::test]
async fn the_clients_preferred_encoding_is_used() {
    let t = tree("prefer");
    let svc = files(&t);
    let res = get(
        &svc,
        "/page.html",
        &[("accept-encoding", "gzip;q=0.5, zstd")],
    )
    .await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "zstd");
    let res = get(
        &svc,
        "/page.html",
        &[("accept-encoding", "br;q=1, gzip;q=0.2")],
    )
    .await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "br");
}

#[tokio::test]
async fn a_response_left_alone_keeps_its_file_region() {
    let t = tree("untouched");
    let svc = files(&t);
    // No Accept-Encoding: nothing to negotiate, but caches must still know it varies.
    let res = get(&svc, "/page.html", &[]).await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(res.headers()[header::VARY], "accept-encoding");
    assert!(res.body().file_region().is_some(), "zero-copy lost");

    // An image is not compressible: no wrapping (and only the route's own Vary).
    let res = get(&svc, "/photo.png", &[("accept-encoding", "gzip")]).await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(res.headers().get_all(header::VARY).iter().count(), 1);
    assert!(res.body().file_region().is_some(), "zero-copy lost");
}

#[tokio::test]
async fn a_range_is_never_compressed() {
    let t = tree("range");
    let svc = files(&t);
    let res = get(
        &svc,
        "/page.html",
        &[("accept-encoding", "gzip"), ("range", "bytes=0-99")],
    )
    .await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(res.headers()[header::CONTENT_LENGTH], "100");
    assert_eq!(bytes(res).await, page()[..100]);
}

#[tokio::test]
async fn a_sidecar_is_not_compressed_again() {
    let t = tree("sidecar");
    let svc = files(&t);
    let res = get(&svc, "/app.js", &[("accept-encoding", "br, gzip")]).await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "br");
    assert_eq!(bytes(res).await, b"BROTLI-SIDECAR");
    // A client without br gets gzip made on the fly from the original.
    let res = get(&svc, "/app.js", &[("accept-encoding", "gzip")]).await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(
        gunzip(&bytes(res).await),
        "let x = 1;\n".repeat(500).as_bytes()
    );
}

#[tokio::test]
async fn small_responses_and_refused_codings_are_sent_as_they_are() {
    let t = tree("small");
    let svc = files(&t);
    let res = get(&svc, "/small.css", &[("accept-encoding", "gzip")]).await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(res.headers()[header::VARY], "accept-encoding");
    assert_eq!(bytes(res).await, b"a{}");

    for refused in ["gzip;q=0, br;q=0.000", "identity", "compress, deflate;q=0"] {
        let res = get(&svc, "/page.html", &[("accept-encoding", refused)]).await;
        assert_eq!(res.status(), StatusCode::OK, "{refused}");
        assert!(
            !res.headers().contains_key(header::CONTENT_ENCODING),
            "{refused}"
        );
        assert_eq!(bytes(res).await.len(), page().len(), "{refused}");
    }
}

#[tokio::test]
async fn revalidating_a_compressed_response_gives_304_with_the_weak_tag() {
    let t = tree("revalidate");
    let svc = files(&t);
    let res = get(&svc, "/page.html", &[("accept-encoding", "gzip")]).await;
    let weak = res.headers()[header::ETAG].to_str().unwrap().to_owned();
    let res = get(
        &svc,
        "/page.html",
        &[("accept-encoding", "gzip"), ("if-none-match", &weak)],
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(res.headers()[header::ETAG].to_str().unwrap(), weak);
    assert_eq!(res.headers()[header::VARY], "accept-encoding");

    // A client holding the plain variant revalidates with the strong tag.
    let strong = weak.trim_start_matches("W/");
    let res = get(&svc, "/page.html", &[("if-none-match", strong)]).await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(res.headers()[header::ETAG], strong);
}

#[test]
fn compressible_types() {
    for yes in [
        "text/html; charset=utf-8",
        "TEXT/CSS",
        "text/javascript",
        "application/json",
        "application/manifest+json",
        "image/svg+xml; charset=utf-8",
        "application/wasm",
        "font/ttf",
    ] {
        assert!(compressible(yes.as_bytes()), "{yes}");
    }
    for no in [
        "image/png",
        "video/mp4",
        "application/zip",
        "application/octet-stream",
        "font/woff2",
        "text/event-stream",
        "garbage",
    ] {
        assert!(!compressible(no.as_bytes()), "{no}");
    }
}

#[test]
fn accept_encoding_names_a_coding_we_make() {
    let accepts = |value: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_ENCODING, value.parse().unwrap());
        accepts_compression(&headers)
    };
    assert!(accepts("gzip"));
    assert!(accepts("deflate, BR;q=0.5"));
    assert!(accepts("*"));
    assert!(accepts("gzip;q=0.001"));
    assert!(!accepts("gzip;q=0"));
    assert!(!accepts("identity"));
    assert!(!accepts(""));
    assert!(!accepts_compression(&HeaderMap::new()));
}

/// A service answering as an upstream behind a proxy might: a streamed body of unknown
/// length, with the headers given.
fn upstream(
    headers: &'static [(&'static str, &'static str)],
) -> Compress<
    impl tower::Service<
        Request<()>,
        Response = Response<Body>,
        Error = std::convert::Infallible,
        Future = impl Send,
    > + Clone,
> {
    let svc = tower::service_fn(move |_req: Request<()>| async move {
        let chunks = page()
            .chunks(4096)
            .map(|c| {
                Ok::<_, std::io::Error>(http_body::Frame::data(bytes::Bytes::copy_from_slice(c)))
            })
            .collect::<Vec<_>>();
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
        let mut res = Response::new(Body::new(body));
        for (name, value) in headers {
            res.headers_mut().append(*name, value.parse().unwrap());
        }
        Ok::<_, std::convert::Infallible>(res)
    });
    CompressLayer::new().layer(svc)
}

async fn ask<S>(svc: S) -> Response<Body>
where
    S: tower::Service<Request<()>, Response = Response<Body>, Error = std::convert::Infallible>,
{
    let req = Request::get("/api/page")
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(())
        .unwrap();
    svc.oneshot(req).await.unwrap()
}

#[tokio::test]
async fn any_services_streamed_text_is_compressed_and_vary_joins_the_upstreams() {
    let res = ask(upstream(&[
        ("content-type", "text/html"),
        ("vary", "Origin"),
        ("etag", "\"v1\""),
    ]))
    .await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(res.headers()[header::ETAG], "W/\"v1\"");
    let vary: Vec<_> = res.headers().get_all(header::VARY).iter().collect();
    assert_eq!(vary, ["Origin", "accept-encoding"]);
    assert_eq!(gunzip(&bytes(res).await), page());
}

#[tokio::test]
async fn an_upstreams_own_encoding_and_no_transform_are_respected() {
    // Already encoded upstream: passed as it is, never compressed twice.
    let res = ask(upstream(&[
        ("content-type", "text/html"),
        ("content-encoding", "br"),
    ]))
    .await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "br");
    assert_eq!(bytes(res).await, page());
    // `no-transform` anywhere in Cache-Control: not compressed, but still varies.
    let res = ask(upstream(&[
        ("content-type", "text/html"),
        ("cache-control", "public, No-Transform"),
    ]))
    .await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert_eq!(res.headers()[header::VARY], "accept-encoding");
    assert_eq!(bytes(res).await, page());
    // An image type is left alone and gets no Vary.
    let res = ask(upstream(&[("content-type", "image/png")])).await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    assert!(!res.headers().contains_key(header::VARY));
}

#[tokio::test]
async fn a_small_html_page_is_compressed_by_default_and_min_size_and_types_change_that() {
    let t = tree("settings");
    // An SPA's index.html: 386 bytes, above the 256-byte default.
    let index = "<!doctype html><html><head><meta charset=utf-8><title>app</title>\
                 <link rel=stylesheet href=/assets/app.css></head><body><div id=app></div>\
                 <script type=module src=/assets/app.js></script></body></html>\n"
        .repeat(2);
    std::fs::write(t.0.join("index.html"), &index[..386]).unwrap();
    let gz = [("accept-encoding", "gzip")];
    let svc = files(&t);
    let res = get(&svc, "/index.html", &gz).await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(gunzip(&bytes(res).await), &index.as_bytes()[..386]);

    let with = |layer: CompressLayer| {
        ServiceBuilder::new()
            .layer(layer)
            .service(ServeStatic::builder(&t.0).build().unwrap())
    };
    // A larger threshold leaves it as it is.
    let svc = with(CompressLayer::new().min_size(1000));
    let res = svc
        .oneshot(
            Request::get("/index.html")
                .header("accept-encoding", "gzip")
                .body(())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    // Only the types listed: JavaScript yes, HTML no (and no Vary for a type not listed).
    let types = CompressTypes::new(["application/javascript", "text/javascript"]).unwrap();
    let svc = with(CompressLayer::new().types(types));
    let call = |path: &'static str| {
        svc.clone().oneshot(
            Request::get(path)
                .header("accept-encoding", "gzip")
                .body(())
                .unwrap(),
        )
    };
    let page = call("/page.html").await.unwrap();
    assert!(!page.headers().contains_key(header::CONTENT_ENCODING));
    assert!(!page.headers().contains_key(header::VARY));
    let script = call("/app.js").await.unwrap();
    assert_eq!(script.headers()[header::CONTENT_ENCODING], "gzip");
}

#[test]
fn compress_types_take_types_and_wildcards_and_name_the_first_bad_entry() {
    let types = CompressTypes::new(["text/*", "Application/JSON"]).unwrap();
    assert!(types.contains(b"text/html; charset=utf-8"));
    assert!(types.contains(b"application/json"));
    assert!(!types.contains(b"application/xml"));
    assert!(!types.contains(b"image/png"));
    for (bad, index) in [
        (&["text/*", "json"][..], 1),
        (&["*/*"][..], 0),
        (&["text/"][..], 0),
    ] {
        assert_eq!(CompressTypes::new(bad).unwrap_err().index, index, "{bad:?}");
    }
}
