//! The cache's bound is in bytes of memory, not in bytes of bodies: what it counts for a
//! stored response (`scb_cache_bytes`) must be what holding it costs the process, or a
//! cache of many small objects would grow far past `max_bytes` (an earlier count of 1.1
//! KB for what held 3.5 KB let 256 MiB grow to 1.8 GiB). In a process of its own, so
//! that its resident memory is this test's alone.

use std::convert::Infallible;

use http::{HeaderValue, Request, Response, header};
use http_body_util::BodyExt as _;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use scb_core::Body;
use scb_proxy::cache::{CACHE_BYTES, CacheLayer};
use tower::{ServiceBuilder, ServiceExt as _};

fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn counted(snapshotter: &Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| match value {
            DebugValue::Gauge(bytes) if key.key().name() == CACHE_BYTES => Some(bytes.0 as u64),
            _ => None,
        })
        .unwrap_or(0)
}

#[test]
fn the_bytes_counted_are_the_bytes_held() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The fields nginx sends with a small answer, one of them a slice of an 8 KiB
        // buffer, as values parsed from a connection's read buffer are.
        let origin = tower::service_fn(|_req: Request<Body>| async {
            let mut read = bytes::BytesMut::with_capacity(8 << 10);
            read.extend_from_slice(b"nginx/1.22.1");
            read.resize(8 << 10, b' ');
            let read = read.freeze();
            let mut res = Response::new(Body::full("Hello, world!"));
            let h = res.headers_mut();
            h.insert(
                header::SERVER,
                HeaderValue::from_maybe_shared(read.slice(..12)).unwrap(),
            );
            h.insert(
                header::DATE,
                HeaderValue::from_static("Fri, 04 Dec 2026 02:45:00 GMT"),
            );
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(13));
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=86400"),
            );
            Ok::<_, Infallible>(res)
        });
        let svc = ServiceBuilder::new()
            .layer(CacheLayer::new(1 << 30))
            .service(origin);
        let store = |i: usize| {
            let req = Request::get(format!("/cache/miss/0-{i}"))
                .header("host", "example.com")
                .body(Body::empty())
                .unwrap();
            let svc = svc.clone();
            async move {
                let res = svc.oneshot(req).await.unwrap();
                res.into_body().collect().await.unwrap();
            }
        };
        // Warm the allocator and the map's first growth.
        for i in 0..2_000 {
            store(i).await;
        }
        let (held_before, counted_before) = (resident(), counted(&snapshotter));
        for i in 2_000..62_000 {
            store(i).await;
        }
        let held = resident() - held_before;
        let count = counted(&snapshotter) - counted_before;
        assert!(count > 0, "the store counted nothing");
        let ratio = held as f64 / count as f64;
        // The map's doublings make the real cost jump around the count: within a third.
        assert!(
            (0.5..=1.33).contains(&ratio),
            "60,000 small responses hold {held} bytes and count for {count} ({ratio:.2})"
        );
    });
}
