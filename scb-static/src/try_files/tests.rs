//! `TryFilesLayer` over a real directory tree, with an inner service that reports the URI
//! it was given.

use std::path::PathBuf;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::original_uri::OriginalUri;
use tower::{ServiceBuilder, ServiceExt as _, service_fn};

use super::*;

struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tree(name: &str) -> Tree {
    let base = std::env::temp_dir().join(format!("scb-try-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("www");
    std::fs::create_dir_all(root.join("blog")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("index.php"), "<?php").unwrap();
    std::fs::write(root.join("blog/index.php"), "<?php").unwrap();
    std::fs::write(root.join("about.html"), "about").unwrap();
    std::fs::write(root.join("a b.txt"), "spaces").unwrap();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    std::fs::write(base.join("outside.txt"), "OUTSIDE").unwrap();
    std::os::unix::fs::symlink("../outside.txt", root.join("escape")).unwrap();
    Tree(base)
}

/// What the inner service saw: its URI and the client's, when they differ.
async fn seen(layer: &TryFilesLayer, uri: &str) -> (StatusCode, String) {
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service(service_fn(|req: Request<Body>| async move {
            let original = req
                .extensions()
                .get::<OriginalUri>()
                .map(|o| format!(" (from {})", o.0))
                .unwrap_or_default();
            Ok::<_, Infallible>(Response::new(Body::from(format!(
                "{}{original}",
                req.uri()
            ))))
        }));
    let res = svc
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn the_first_candidate_that_exists_is_chosen_else_the_fallback_path() {
    let t = tree("php");
    let layer = TryFilesLayer::new(
        t.0.join("www"),
        ["{path}", "{path}/index.php", "/index.php?{query}"],
    )
    .unwrap();
    for (uri, want) in [
        // Exists as it is: untouched, and no original noted.
        ("/about.html?x=1", "/about.html?x=1"),
        ("/a%20b.txt", "/a%20b.txt"),
        // A directory with its index script.
        ("/blog", "/blog/index.php (from /blog)"),
        ("/blog?p=2", "/blog/index.php?p=2 (from /blog?p=2)"),
        // Nothing: the front controller, with the query the template gives it.
        (
            "/users/7?sort=name",
            "/index.php?sort=name (from /users/7?sort=name)",
        ),
        ("/users/7", "/index.php (from /users/7)"),
        // A directory without index.php is not a file: `{path}` does not match it.
        ("/empty", "/index.php (from /empty)"),
        // Dotfiles and what lies outside the root never match.
        ("/.env", "/index.php (from /.env)"),
        ("/escape", "/index.php (from /escape)"),
        (
            "/%2e%2e/outside.txt",
            "/index.php (from /%2e%2e/outside.txt)",
        ),
        (
            "/blog/../../outside.txt",
            "/index.php (from /blog/../../outside.txt)",
        ),
    ] {
        assert_eq!(
            seen(&layer, uri).await,
            (StatusCode::OK, want.to_owned()),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn directories_need_a_trailing_slash_candidate_and_status_fallbacks_answer() {
    let t = tree("dirs");
    let layer = TryFilesLayer::new(t.0.join("www"), ["{path}", "{path}/", "=404"]).unwrap();
    assert_eq!(
        seen(&layer, "/empty").await,
        (StatusCode::OK, "/empty/ (from /empty)".to_owned())
    );
    assert_eq!(
        seen(&layer, "/about.html").await,
        (StatusCode::OK, "/about.html".to_owned())
    );
    let (status, body) = seen(&layer, "/missing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, "Not Found\n");
    // A candidate's own query replaces the request's.
    let layer = TryFilesLayer::new(t.0.join("www"), ["/about.html?from={path}", "=503"]).unwrap();
    assert_eq!(
        seen(&layer, "/x?y=1").await,
        (
            StatusCode::OK,
            "/about.html?from=/x (from /x?y=1)".to_owned()
        )
    );
}

#[tokio::test]
async fn split_path_finds_a_script_with_path_info_and_hidden_files_can_be_shown() {
    let t = tree("split");
    let layer = TryFilesLayer::new(t.0.join("www"), ["{path}", "/index.php?{query}"])
        .unwrap()
        .split_path([".php"]);
    assert_eq!(
        seen(&layer, "/blog/index.php/post/7?a=1").await,
        (StatusCode::OK, "/blog/index.php/post/7?a=1".to_owned())
    );
    assert_eq!(
        seen(&layer, "/blog/INDEX.PHP/x").await.1,
        "/index.php (from /blog/INDEX.PHP/x)"
    );
    // Without the split, `index.php/post/7` names no file.
    let plain = TryFilesLayer::new(t.0.join("www"), ["{path}", "/index.php?{query}"]).unwrap();
    assert_eq!(
        seen(&plain, "/blog/index.php/post/7").await.1,
        "/index.php (from /blog/index.php/post/7)"
    );
    let shown = TryFilesLayer::new(t.0.join("www"), ["{path}", "=404"])
        .unwrap()
        .show_hidden(true);
    assert_eq!(seen(&shown, "/.env").await.1, "/.env");
}

#[test]
fn bad_entries_are_refused_with_their_position() {
    let t = tree("bad");
    let root = t.0.join("www");
    let err = |entries: &[&str]| TryFilesLayer::new(&root, entries).unwrap_err().to_string();
    assert_eq!(
        err(&["{path}"]),
        "try_files needs at least two entries: candidates, then a path or `=404`"
    );
    assert_eq!(
        err(&["{path}", "=200"]),
        "entry 1 (\"=200\"): `=` takes a 4xx or 5xx status, as `=404`"
    );
    assert_eq!(
        err(&["{uri}", "=404"]),
        "entry 0 (\"{uri}\"): placeholders are {path} and {query}"
    );
    assert_eq!(
        err(&["index.html", "=404"]),
        "entry 0 (\"index.html\"): a path: starts with `/` or `{path}`"
    );
    assert_eq!(
        err(&["{path}", "/a b"]),
        "entry 1 (\"/a b\"): bytes a URI cannot hold"
    );
    assert!(matches!(
        TryFilesLayer::new(t.0.join("missing"), ["{path}", "=404"]),
        Err(TryFilesError::Root { .. })
    ));
}

/// A name the kernel has not looked up yet (a front controller's `/users/7`) is a
/// `RESOLVE_CACHED` miss: the cached decision may be `WouldBlock`, never another answer.
#[test]
fn the_blocking_path_decides_as_the_cached_one_wherever_that_can_decide() {
    let t = tree("modes");
    let layer = TryFilesLayer::new(
        t.0.join("www"),
        ["{path}", "{path}/index.php", "/index.php?{query}"],
    )
    .unwrap();
    for uri in ["/about.html", "/blog", "/users/7?q=1", "/.env"] {
        let uri: Uri = uri.parse().unwrap();
        let blocking = format!("{:?}", layer.config.decide(&uri, Mode::Blocking));
        assert_ne!(blocking, "WouldBlock");
        let cached = format!("{:?}", layer.config.decide(&uri, Mode::Cached));
        assert!(
            cached == blocking || cached == "WouldBlock",
            "{uri}: {cached} {blocking}"
        );
    }
}
