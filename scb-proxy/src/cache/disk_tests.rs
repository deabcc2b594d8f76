//! The disk tier through the layer: what survives a restart, what a removal takes off
//! the disk, bounds, records that cannot be read, and a directory that cannot be written.

use std::fs;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, StatusCode};
use tower::{ServiceBuilder, ServiceExt as _};

use super::tests::{Origin, Scripted, get, request, response, send, status_of};
use super::*;

/// An empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-cache-disk-{}-{name}", std::process::id()));
    fs::remove_dir_all(&dir).ok();
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn on_disk(memory: u64, path: &Path, disk: u64, origin: Origin) -> Cache<Origin> {
    ServiceBuilder::new()
        .layer(CacheLayer::new(memory).disk(path, disk))
        .service(origin)
}

/// Waits until the tier's thread has done what was asked of it.
fn sync(svc: &Cache<Origin>) {
    svc.shared.store.disk().expect("a disk tier").sync();
}

/// The records in `dir` (not `tmp/`).
fn records(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
}

fn large(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn cacheable(body: impl Into<Bytes>) -> Response<Body> {
    response(200, &[("cache-control", "max-age=600")], body)
}

/// The file a body's region is read from, as `/proc` names it.
fn file_of(body: &Body) -> Option<PathBuf> {
    let region = body.file_region()?;
    fs::read_link(format!("/proc/self/fd/{}", region.file().as_raw_fd())).ok()
}

#[tokio::test]
async fn a_restart_answers_from_disk_what_was_stored_before_it() {
    let dir = scratch("restart");
    let before = Scripted::new();
    let svc = on_disk(
        4 << 20,
        &dir,
        16 << 20,
        before.origin(|req, _| match req.uri().path() {
            "/big" => cacheable(large(300 << 10)),
            _ => cacheable("small"),
        }),
    );
    send(&svc, get("/small")).await;
    send(&svc, get("/big")).await;
    sync(&svc);
    assert_eq!(records(&dir).len(), 2);
    drop(svc);

    // A new store on the same directory: the process restarted.
    let after = Scripted::new();
    let svc = on_disk(
        4 << 20,
        &dir,
        16 << 20,
        after.origin(|_, _| response(500, &[], "the origin is not asked")),
    );
    sync(&svc);
    let (hit, body) = send(&svc, get("/small")).await;
    assert_eq!((status_of(&hit), &body[..]), ("scb; hit", &b"small"[..]));
    assert!(hit.headers().contains_key(http::header::AGE));
    let res = svc.clone().oneshot(get("/big")).await.unwrap();
    assert_eq!(res.headers()["cache-status"], "scb; hit");
    let file = file_of(res.body()).expect("a large hit is a region of its record");
    assert!(file.starts_with(&dir), "{file:?} is the record, not a copy");
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(body, large(300 << 10));
    let (head, body) = send(&svc, request(Method::HEAD, "/big", &[])).await;
    assert_eq!(status_of(&head), "scb; hit");
    assert!(body.is_empty());
    assert_eq!(after.calls(), 0);
}

#[tokio::test]
async fn a_large_body_is_sent_from_its_record_once_written() {
    let dir = scratch("rebody");
    let origin = Scripted::new();
    let svc = on_disk(
        4 << 20,
        &dir,
        16 << 20,
        origin.origin(|_, _| cacheable(large(200 << 10))),
    );
    send(&svc, get("/big")).await;
    sync(&svc);
    let res = svc.clone().oneshot(get("/big")).await.unwrap();
    let file = file_of(res.body()).expect("a file region");
    assert!(file.starts_with(&dir), "{file:?}");
    // Its pages are the page cache's now: memory counts the head alone.
    assert!(
        svc.shared.store.bytes() < 8 << 10,
        "{}",
        svc.shared.store.bytes()
    );
    assert_eq!(origin.calls(), 1);
}

#[tokio::test]
async fn what_the_store_drops_is_removed_from_disk_and_does_not_come_back() {
    let dir = scratch("removals");
    let origin = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &dir,
        16 << 20,
        origin.origin(|req, _| {
            if req.method() == Method::POST {
                response(204, &[], "")
            } else {
                cacheable(format!("at {}", req.uri().path()))
            }
        }),
    );
    for path in ["/posted", "/purged", "/kept"] {
        send(&svc, get(path)).await;
    }
    sync(&svc);
    assert_eq!(records(&dir).len(), 3);
    let (res, _) = send(&svc, request(Method::POST, "/posted", &[])).await;
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(svc.shared.store.purge(None, "/purged", false), 1);
    sync(&svc);
    assert_eq!(records(&dir).len(), 1);
    drop(svc);

    let after = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &dir,
        16 << 20,
        after.origin(|_, _| cacheable("new")),
    );
    sync(&svc);
    let (kept, _) = send(&svc, get("/kept")).await;
    assert_eq!(status_of(&kept), "scb; hit");
    for path in ["/posted", "/purged"] {
        let (res, body) = send(&svc, get(path)).await;
        assert_eq!(
            (status_of(&res), &body[..]),
            ("scb; fwd=uri-miss; stored", &b"new"[..])
        );
    }
    assert_eq!(after.calls(), 2);
}

#[tokio::test]
async fn a_purge_counts_what_is_on_disk_only() {
    let dir = scratch("purge-disk-only");
    let origin = Scripted::new();
    // Memory holds a few objects; the disk holds them all.
    let svc = on_disk(
        128 << 10,
        &dir,
        16 << 20,
        origin.origin(|_, _| cacheable(vec![b'x'; 8 << 10])),
    );
    for i in 0..32 {
        send(&svc, get(&format!("/p/{i}"))).await;
    }
    sync(&svc);
    assert_eq!(records(&dir).len(), 32);
    assert_eq!(svc.shared.store.purge(None, "/p/", true), 32);
    sync(&svc);
    assert!(records(&dir).is_empty());
}

#[tokio::test]
async fn what_memory_evicts_is_answered_from_disk() {
    let dir = scratch("evicted");
    let origin = Scripted::new();
    let svc = on_disk(
        128 << 10,
        &dir,
        16 << 20,
        origin.origin(|req, _| cacheable(format!("{:8192}", req.uri().path()))),
    );
    for i in 0..40 {
        send(&svc, get(&format!("/o/{i}"))).await;
    }
    sync(&svc);
    assert!(svc.shared.store.bytes() <= 128 << 10);
    for i in 0..40 {
        let (res, body) = send(&svc, get(&format!("/o/{i}"))).await;
        assert_eq!(status_of(&res), "scb; hit", "/o/{i}");
        assert_eq!(body.len(), 8192);
        assert!(body.starts_with(format!("/o/{i} ").as_bytes()));
    }
    assert_eq!(origin.calls(), 40, "each was fetched once");
}

#[tokio::test]
async fn the_disk_tier_stays_within_its_bound() {
    let dir = scratch("bound");
    let origin = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &dir,
        256 << 10,
        origin.origin(|_, _| cacheable(vec![b'y'; 16 << 10])),
    );
    for i in 0..100 {
        send(&svc, get(&format!("/b/{i}"))).await;
    }
    sync(&svc);
    let on_disk: u64 = records(&dir)
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum();
    assert!(on_disk <= 256 << 10, "{on_disk} bytes of records");
    assert!(on_disk > 64 << 10, "it keeps what fits: {on_disk}");
    let indexed = svc.shared.store.disk().unwrap().bytes();
    assert_eq!(indexed, on_disk, "the index counts what the files hold");
}

#[tokio::test]
async fn records_that_cannot_be_read_are_removed_and_the_rest_are_answered() {
    let dir = scratch("torn");
    let origin = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &dir,
        16 << 20,
        origin.origin(|req, _| cacheable(format!("body of {}", req.uri().path()))),
    );
    send(&svc, get("/whole")).await;
    send(&svc, get("/cut")).await;
    sync(&svc);
    drop(svc);
    // A record cut short (a crash before its pages were written), a foreign file with a
    // record's name, and what a crash left in `tmp/` long ago.
    let found = records(&dir);
    let cut = found
        .iter()
        .find(|p| fs::read(p).unwrap().ends_with(b"body of /cut"))
        .unwrap();
    let len = cut.metadata().unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(cut)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    fs::write(dir.join("00000000deadbeef"), b"not a record").unwrap();
    let left = dir.join("tmp").join("0000000000000001");
    fs::write(&left, b"half a rec").unwrap();
    let long_ago = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&left)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();

    let after = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &dir,
        16 << 20,
        after.origin(|_, _| cacheable("fetched again")),
    );
    sync(&svc);
    assert_eq!(records(&dir).len(), 1, "only the whole record is left");
    assert!(!left.exists());
    let (whole, body) = send(&svc, get("/whole")).await;
    assert_eq!(
        (status_of(&whole), &body[..]),
        ("scb; hit", &b"body of /whole"[..])
    );
    let (cut, body) = send(&svc, get("/cut")).await;
    assert_eq!(status_of(&cut), "scb; fwd=uri-miss; stored");
    assert_eq!(body, "fetched again");
}

#[tokio::test]
async fn a_path_that_cannot_be_written_leaves_the_cache_in_memory() {
    let dir = scratch("unwritable");
    // A regular file where the directory should be: no user, root included, can make it.
    let path = dir.join("a-file");
    fs::write(&path, b"").unwrap();
    let origin = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &path,
        16 << 20,
        origin.origin(|_, _| cacheable("kept in memory")),
    );
    for _ in 0..3 {
        let (res, body) = send(&svc, get("/m")).await;
        assert_eq!(body, "kept in memory");
        assert_ne!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    sync(&svc);
    assert_eq!(origin.calls(), 1, "stored in memory, answered from it");

    // A directory removed while the cache runs: writes fail, requests do not.
    let gone = scratch("removed");
    let origin = Scripted::new();
    let svc = on_disk(
        1 << 20,
        &gone,
        16 << 20,
        origin.origin(|req, _| cacheable(format!("at {}", req.uri().path()))),
    );
    send(&svc, get("/before")).await;
    sync(&svc);
    fs::remove_dir_all(&gone).unwrap();
    for path in ["/after-1", "/after-2", "/before"] {
        send(&svc, get(path)).await;
        let (res, _) = send(&svc, get(path)).await;
        assert_eq!(status_of(&res), "scb; hit", "{path}");
    }
    sync(&svc);
    assert_eq!(origin.calls(), 3);
    assert!(
        !gone.exists(),
        "nothing made the directory again within the retry time"
    );
}

#[test]
fn a_reload_keeps_the_store_only_for_the_same_disk_tier() {
    let dir = scratch("reload");
    let before = CacheLayer::new(1 << 20).disk(&dir, 1 << 30);
    let same = CacheLayer::new(1 << 20)
        .disk(&dir, 1 << 30)
        .keep_store_of(&before);
    assert!(Arc::ptr_eq(&before.shared, &same.shared));
    let bigger = CacheLayer::new(1 << 20)
        .disk(&dir, 2 << 30)
        .keep_store_of(&before);
    assert!(!Arc::ptr_eq(&before.shared, &bigger.shared));
    let memory = CacheLayer::new(1 << 20).keep_store_of(&before);
    assert!(!Arc::ptr_eq(&before.shared, &memory.shared));
}
