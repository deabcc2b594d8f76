//! The open-file cache through `ServeStatic`, driven with `oneshot` on one thread (so every
//! request meets the same thread cache), over a real directory tree changed between
//! requests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use scb_core::Body;
use tower::ServiceExt as _;

use super::*;
use crate::ServeStatic;

/// Long enough that no entry can expire during a test: what a test sees with it is the
/// cache, never a revalidation.
const FOREVER: Duration = Duration::from_secs(3600);

struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Self {
        let base = std::env::temp_dir().join(format!("scb-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("www/dir")).unwrap();
        std::fs::write(base.join("www/a.txt"), "version 1").unwrap();
        std::fs::write(base.join("www/dir/index.html"), "<p>index</p>").unwrap();
        std::fs::write(base.join("outside.txt"), "OUTSIDE").unwrap();
        Tree(base)
    }

    fn www(&self) -> PathBuf {
        self.0.join("www")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.www().join(rel)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cached(root: &Path, settings: OpenFileCache) -> ServeStatic {
    ServeStatic::builder(root)
        .precompressed(["gzip"])
        .cache(settings)
        .build()
        .unwrap()
}

async fn get(svc: &ServeStatic, path: &str, headers: &[(&str, &str)]) -> Response<Body> {
    let mut req = Request::builder().method(Method::GET).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    svc.clone().oneshot(req.body(()).unwrap()).await.unwrap()
}

async fn text(svc: &ServeStatic, path: &str) -> (StatusCode, String) {
    let res = get(svc, path, &[]).await;
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// How many names this thread's cache of `svc` holds: (found something, found nothing).
fn lens(svc: &ServeStatic) -> (usize, usize) {
    let config = &svc.config;
    let settings = config.cache.as_ref().unwrap();
    crate::cache::with_thread_cache(&config.owner, || FileCache::new(settings), |c| c.lens())
        .unwrap()
}

/// The one data frame of a small file's body.
async fn data(res: Response<Body>) -> Bytes {
    let mut body = res.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert!(body.is_end_stream());
    frame.into_data().unwrap()
}

/// Rewrites `path` in place (same inode), with a modification time that surely differs.
fn rewrite_in_place(path: &Path, contents: &str) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all(contents.as_bytes()).unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
}

#[tokio::test]
async fn every_response_of_a_cached_small_file_shares_its_bytes() {
    let t = Tree::new("shared");
    let svc = cached(&t.www(), OpenFileCache::new().revalidate(FOREVER));
    let first = data(get(&svc, "/a.txt", &[]).await).await;
    let second = data(get(&svc, "/a.txt", &[]).await).await;
    assert_eq!(&first[..], b"version 1");
    assert_eq!(
        first.as_ptr(),
        second.as_ptr(),
        "one copy, not one per response"
    );
    // A range is a slice of the same bytes.
    let part = data(get(&svc, "/a.txt", &[("range", "bytes=8-")]).await).await;
    assert_eq!(&part[..], b"1");
    assert_eq!(part.as_ptr(), first[8..].as_ptr());
}

#[tokio::test]
async fn within_the_window_a_file_edited_in_place_is_served_whole_in_its_old_version() {
    let t = Tree::new("window");
    let svc = cached(&t.www(), OpenFileCache::new().revalidate(FOREVER));
    assert_eq!(text(&svc, "/a.txt").await.1, "version 1");
    rewrite_in_place(&t.path("a.txt"), "VERSION TWO!");
    // No look at the file system per request: the old version, whole, with its own length.
    let res = get(&svc, "/a.txt", &[]).await;
    assert_eq!(res.headers()[header::CONTENT_LENGTH], "9");
    assert_eq!(data(res).await, "version 1");
    // Without a cache the next request sees the change.
    let uncached = ServeStatic::builder(t.www()).no_cache().build().unwrap();
    assert_eq!(text(&uncached, "/a.txt").await.1, "VERSION TWO!");
}

#[tokio::test]
async fn after_the_window_every_kind_of_change_is_seen() {
    let t = Tree::new("changes");
    std::os::unix::fs::symlink("a.txt", t.path("current")).unwrap();
    std::fs::write(t.path("b.txt"), "bee").unwrap();
    std::fs::create_dir(t.path("thing")).unwrap();
    // Zero: a stat of every probed name on every request.
    let svc = cached(&t.www(), OpenFileCache::new().revalidate(Duration::ZERO));
    assert_eq!(text(&svc, "/a.txt").await.1, "version 1");
    assert_eq!(text(&svc, "/current").await.1, "version 1");
    assert_eq!(text(&svc, "/new.txt").await.0, StatusCode::NOT_FOUND);
    assert_eq!(text(&svc, "/thing").await.0, StatusCode::PERMANENT_REDIRECT);

    // Edited in place.
    rewrite_in_place(&t.path("a.txt"), "version 2");
    assert_eq!(text(&svc, "/a.txt").await.1, "version 2");
    // Replaced by rename.
    std::fs::write(t.path("a.tmp"), "version 3, renamed over").unwrap();
    std::fs::rename(t.path("a.tmp"), t.path("a.txt")).unwrap();
    assert_eq!(text(&svc, "/a.txt").await.1, "version 3, renamed over");
    // A link pointed elsewhere (replaced by rename, as `ln -sfn` does).
    std::os::unix::fs::symlink("b.txt", t.path("current.tmp")).unwrap();
    std::fs::rename(t.path("current.tmp"), t.path("current")).unwrap();
    assert_eq!(text(&svc, "/current").await.1, "bee");
    // A link pointed outside the root: the kernel refuses it at the new lookup.
    std::os::unix::fs::symlink("../outside.txt", t.path("current.tmp")).unwrap();
    std::fs::rename(t.path("current.tmp"), t.path("current")).unwrap();
    let (status, body) = text(&svc, "/current").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!body.contains("OUTSIDE"));
    // A name that was missing appears.
    std::fs::write(t.path("new.txt"), "new").unwrap();
    assert_eq!(text(&svc, "/new.txt").await, (StatusCode::OK, "new".into()));
    // A directory turned into a file.
    std::fs::remove_dir(t.path("thing")).unwrap();
    std::fs::write(t.path("thing"), "a file now").unwrap();
    assert_eq!(text(&svc, "/thing").await.1, "a file now");
    // Deleted.
    std::fs::remove_file(t.path("a.txt")).unwrap();
    assert_eq!(text(&svc, "/a.txt").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_sidecar_is_resolved_with_its_file_and_its_absence_remembered() {
    let t = Tree::new("sidecar");
    let gzip = [("accept-encoding", "gzip")];
    let svc = cached(&t.www(), OpenFileCache::new().revalidate(FOREVER));
    // The first request, from a client that takes no gzip, probes the sidecar too.
    assert_eq!(text(&svc, "/a.txt").await.1, "version 1");
    std::fs::write(t.path("a.txt.gz"), "GZ").unwrap();
    // "No sidecar" was remembered within the window.
    let res = get(&svc, "/a.txt", &gzip).await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    // After it, the new sidecar is seen.
    let fresh = cached(&t.www(), OpenFileCache::new().revalidate(Duration::ZERO));
    let res = get(&fresh, "/a.txt", &gzip).await;
    assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(data(res).await, "GZ");
    std::fs::remove_file(t.path("a.txt.gz")).unwrap();
    let res = get(&fresh, "/a.txt", &gzip).await;
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
}

#[tokio::test]
async fn missing_names_have_their_own_bound_and_cannot_evict_files() {
    let t = Tree::new("negative");
    let svc = cached(
        &t.www(),
        OpenFileCache::new()
            .entries(4)
            .negative_entries(8)
            .revalidate(FOREVER),
    );
    assert_eq!(text(&svc, "/a.txt").await.1, "version 1");
    assert_eq!(text(&svc, "/dir/").await.1, "<p>index</p>");
    assert_eq!(lens(&svc), (3, 0), "a.txt, dir, dir/index.html");
    for i in 0..1000 {
        assert_eq!(
            text(&svc, &format!("/scan/{i}.php")).await.0,
            StatusCode::NOT_FOUND
        );
    }
    assert_eq!(lens(&svc), (3, 8));
    // Still the cached entry: an edit within the window is not seen.
    rewrite_in_place(&t.path("a.txt"), "version 2");
    assert_eq!(text(&svc, "/a.txt").await.1, "version 1");
}

#[tokio::test]
async fn the_byte_bound_keeps_the_cache_within_max_bytes() {
    let t = Tree::new("bytes");
    for i in 0..50 {
        std::fs::write(t.path(&format!("f{i}.bin")), vec![b'x'; 10_000]).unwrap();
    }
    let svc = cached(
        &t.www(),
        OpenFileCache::new().max_bytes(100_000).revalidate(FOREVER),
    );
    for i in 0..50 {
        let (status, body) = text(&svc, &format!("/f{i}.bin")).await;
        assert_eq!((status, body.len()), (StatusCode::OK, 10_000));
    }
    let (files, _) = lens(&svc);
    assert!(
        (1..10).contains(&files),
        "{files} entries of ~10.5 KB in 100 KB"
    );
}

#[tokio::test]
async fn a_large_file_is_a_shared_descriptor_not_bytes() {
    let t = Tree::new("large");
    let big = vec![7u8; (crate::serve::entry::INLINE_READ_MAX + 1) as usize];
    std::fs::write(t.path("big.bin"), &big).unwrap();
    let svc = cached(&t.www(), OpenFileCache::new().revalidate(FOREVER));
    let one = get(&svc, "/big.bin", &[]).await;
    let two = get(&svc, "/big.bin", &[]).await;
    let (Some(a), Some(b)) = (one.body().file_region(), two.body().file_region()) else {
        panic!("a large file goes out as a file region");
    };
    assert!(std::sync::Arc::ptr_eq(a.file(), b.file()), "one descriptor");
    let bytes = two.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(bytes.len(), big.len());
}

#[tokio::test]
async fn the_blocking_path_records_entries_with_every_sidecar_for_the_worker() {
    let t = Tree::new("recorded");
    std::fs::write(t.path("a.txt.gz"), "GZ").unwrap();
    let svc = cached(&t.www(), OpenFileCache::new());
    let (parts, ()) = Request::get("/dir/").body(()).unwrap().into_parts();
    let mut resolver = Resolver::direct(Mode::Blocking, true);
    let res = super::super::decide::decide(&svc.config, &parts, true, &mut resolver).unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let recorded = resolver.into_recorded();
    let names: Vec<&str> = recorded.iter().map(|(rel, _)| rel.as_str()).collect();
    assert_eq!(names, ["dir", "dir/index.html"]);
    let (parts, ()) = Request::get("/a.txt").body(()).unwrap().into_parts();
    let mut resolver = Resolver::direct(Mode::Blocking, true);
    super::super::decide::decide(&svc.config, &parts, true, &mut resolver).unwrap();
    let recorded = resolver.into_recorded();
    // The client took no gzip, but the entry is for every client.
    assert!(matches!(
        recorded[0].1.sidecar(crate::encoding::Coding::Gzip),
        Some(super::super::entry::Probe::File(_))
    ));
}

#[tokio::test]
async fn without_a_cache_nothing_is_kept() {
    let t = Tree::new("off");
    let svc = ServeStatic::builder(t.www()).no_cache().build().unwrap();
    assert_eq!(text(&svc, "/a.txt").await.1, "version 1");
    rewrite_in_place(&t.path("a.txt"), "version 2");
    assert_eq!(text(&svc, "/a.txt").await.1, "version 2");
    assert!(svc.config.cache.is_none());
}
