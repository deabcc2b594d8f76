//! `RateLimitLayer` driven with `oneshot`, on tokio's paused clock.

use tower::ServiceExt as _;

use super::*;
use crate::connection::ConnectInfo;
use crate::respond::Respond;
use tokio::time::Instant;

fn request(peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::get("/api/");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let mut req = req.body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo {
        remote: format!("{peer}:5000").parse().unwrap(),
        local: "127.0.0.1:80".parse().unwrap(),
        secure: false,
    });
    req
}

async fn status(layer: &RateLimitLayer, req: Request<Body>) -> (StatusCode, Option<String>) {
    let res = layer
        .layer(Respond::new(StatusCode::OK))
        .oneshot(req)
        .await
        .unwrap();
    let retry = res
        .headers()
        .get(RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    (res.status(), retry)
}

fn rate(s: &str) -> Rate {
    s.parse().unwrap()
}

#[test]
fn rates_parse_and_bad_ones_are_refused() {
    assert_eq!(rate("10/s"), Rate::new(10, Duration::from_secs(1)).unwrap());
    assert_eq!(rate("600/m").period(), Duration::from_secs(60));
    assert_eq!(rate(" 5 / h ").requests(), 5);
    for bad in ["", "10", "0/s", "-1/s", "10/d", "1.5/s", "ten/s", "10/"] {
        assert_eq!(bad.parse::<Rate>(), Err(InvalidRate), "{bad}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_passes_then_429_with_retry_after_until_a_token_comes_back() {
    let layer = RateLimitLayer::new(rate("10/s")).burst(3);
    for _ in 0..3 {
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
    }
    let (refused, retry) = status(&layer, request("192.0.2.1", &[])).await;
    assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry.as_deref(), Some("1"));
    // Another client has its own bucket.
    assert_eq!(
        status(&layer, request("192.0.2.2", &[])).await.0,
        StatusCode::OK
    );
    // One interval (100 ms) gives one token back, not more.
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A refused request takes no token: after a full period the burst is whole again.
    tokio::time::advance(Duration::from_secs(1)).await;
    for _ in 0..3 {
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_rounds_the_wait_up_to_whole_seconds() {
    let layer = RateLimitLayer::new(rate("1/m")).burst(1);
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    tokio::time::advance(Duration::from_millis(500)).await;
    let (refused, retry) = status(&layer, request("192.0.2.1", &[])).await;
    assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry.as_deref(), Some("60"));
}

#[tokio::test(start_paused = true)]
async fn keys_are_the_forwarded_client_the_v6_slash_64_or_a_header() {
    let trusted = TrustedProxies::new(["127.0.0.1"]).unwrap();
    let layer = RateLimitLayer::new(rate("1/s"))
        .burst(1)
        .trusted_proxies(trusted);
    let via_proxy = |client: &str| request("127.0.0.1", &[("x-forwarded-for", client)]);
    assert_eq!(
        status(&layer, via_proxy("203.0.113.1")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&layer, via_proxy("203.0.113.2")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&layer, via_proxy("203.0.113.1")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // An untrusted peer's claim is ignored: it is counted as itself.
    let forged = request("198.51.100.1", &[("x-forwarded-for", "203.0.113.9")]);
    assert_eq!(status(&layer, forged).await.0, StatusCode::OK);
    let forged = request("198.51.100.1", &[("x-forwarded-for", "203.0.113.10")]);
    assert_eq!(
        status(&layer, forged).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Two addresses of one /64 share a bucket; another /64 does not.
    assert_eq!(
        status(&layer, request("[2001:db8:1:1::1]", &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&layer, request("[2001:db8:1:1::2]", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&layer, request("[2001:db8:1:2::1]", &[])).await.0,
        StatusCode::OK
    );

    let by_key = RateLimitLayer::new(rate("1/s"))
        .burst(1)
        .key(RateKey::Header(HeaderName::from_static("x-api-key")));
    let keyed = |peer: &str, key: &str| request(peer, &[("x-api-key", key)]);
    assert_eq!(
        status(&by_key, keyed("192.0.2.1", "a")).await.0,
        StatusCode::OK
    );
    // Same key from elsewhere: limited; another key from the same address: not.
    assert_eq!(
        status(&by_key, keyed("192.0.2.2", "a")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&by_key, keyed("192.0.2.1", "b")).await.0,
        StatusCode::OK
    );
    // Without the header, the address is the key.
    assert_eq!(
        status(&by_key, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&by_key, request("192.0.2.1", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_addresses_stays_within_the_bound_and_spares_nobody_new() {
    let layer = RateLimitLayer::new(rate("1/m")).burst(1).max_keys(64);
    // 10,000 distinct clients, each within its first token: the table never holds
    // more than its bound, and every new client is served (the limit fails open for
    // dropped keys rather than shutting newcomers out).
    for i in 0..10_000u32 {
        let peer = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
        assert_eq!(status(&layer, request(&peer, &[])).await.0, StatusCode::OK);
        let held: usize = layer
            .limits
            .local
            .shards
            .iter()
            .map(|s| s.lock().unwrap().full_at.len())
            .sum();
        assert!(held <= 64, "{held} keys held");
    }
    // A client that keeps coming is still limited between floods.
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn clones_of_the_layer_and_services_share_one_table() {
    let layer = RateLimitLayer::new(rate("1/s")).burst(1);
    let other_worker = layer.clone();
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&other_worker, request("192.0.2.1", &[])).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[test]
fn service_is_send_and_sync_and_future_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<RateLimit<Respond>>();
    send::<ResponseFuture<Respond, Body>>();
}

/// A store in memory: one GCRA per key on tokio's clock, counting the calls made to it,
/// and down while `down` is set.
#[derive(Debug, Default)]
struct MemoryStore {
    full_at: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
    calls: std::sync::atomic::AtomicUsize,
    down: std::sync::atomic::AtomicBool,
}

impl SharedBuckets for MemoryStore {
    fn take(&self, key: String, interval: Duration, tolerance: Duration, want: u32) -> TakeFuture {
        use std::sync::atomic::Ordering;
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.down.load(Ordering::Relaxed) {
            return Box::pin(async { Err(SharedUnavailable) });
        }
        let now = Instant::now();
        let mut table = self.full_at.lock().unwrap();
        let mut tat = table.get(&key).copied().unwrap_or(now).max(now);
        let free = ((now + tolerance - tat).as_nanos() / interval.as_nanos()) as u32;
        let taken = if free == 0 {
            Taken {
                granted: 0,
                wait: tat + interval - tolerance - now,
            }
        } else {
            let granted = want.min(free);
            tat += interval * granted;
            table.insert(key, tat);
            Taken {
                granted,
                wait: Duration::ZERO,
            }
        };
        Box::pin(async move { Ok(taken) })
    }
}

#[tokio::test(start_paused = true)]
async fn a_shared_limit_holds_across_instances_with_a_call_per_batch() {
    use std::sync::atomic::Ordering;
    let store = Arc::new(MemoryStore::default());
    // Two instances of one route: one limit of 10/s with a burst of 20 between them.
    let instance = || {
        RateLimitLayer::new(rate("10/s"))
            .burst(20)
            .shared(Arc::clone(&store) as Arc<dyn SharedBuckets>, "api")
    };
    let (a, b) = (instance(), instance());
    let mut admitted = 0;
    for i in 0..60 {
        let layer = if i % 2 == 0 { &a } else { &b };
        if status(layer, request("192.0.2.1", &[])).await.0 == StatusCode::OK {
            admitted += 1;
        }
        // Background refills run between requests, as they do on a server.
        tokio::task::yield_now().await;
    }
    // The burst, across both; each instance's unspent batch is lost, not added.
    assert!((18..=20).contains(&admitted), "{admitted} admitted");
    // The store was asked once per batch of two, and refusals were remembered.
    let calls = store.calls.load(Ordering::Relaxed);
    assert!(calls <= 14, "{calls} calls to the store");
    // A second later ten more tokens are there, for the fleet.
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut admitted = 0;
    for i in 0..40 {
        let layer = if i % 2 == 0 { &a } else { &b };
        if status(layer, request("192.0.2.1", &[])).await.0 == StatusCode::OK {
            admitted += 1;
        }
        // Background refills run between requests, as they do on a server.
        tokio::task::yield_now().await;
    }
    assert!(
        (9..=10).contains(&admitted),
        "{admitted} admitted after a second"
    );
    // Another client has its own bucket.
    assert_eq!(
        status(&a, request("192.0.2.2", &[])).await.0,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn without_the_store_the_limit_is_counted_locally() {
    use std::sync::atomic::Ordering;
    let store = Arc::new(MemoryStore::default());
    store.down.store(true, Ordering::Relaxed);
    let layer = RateLimitLayer::new(rate("10/s"))
        .burst(3)
        .shared(Arc::clone(&store) as Arc<dyn SharedBuckets>, "api");
    for _ in 0..3 {
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
    }
    let (refused, retry) = status(&layer, request("192.0.2.1", &[])).await;
    assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry.as_deref(), Some("1"));
    // The store is back: it decides again.
    store.down.store(false, Ordering::Relaxed);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    assert!(store.calls.load(Ordering::Relaxed) >= 5);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_from_the_store_is_remembered_until_its_wait_is_over() {
    use std::sync::atomic::Ordering;
    let store = Arc::new(MemoryStore::default());
    let layer = RateLimitLayer::new(rate("1/s"))
        .burst(1)
        .shared(Arc::clone(&store) as Arc<dyn SharedBuckets>, "api");
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
    let (refused, retry) = status(&layer, request("192.0.2.1", &[])).await;
    assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry.as_deref(), Some("1"));
    let asked = store.calls.load(Ordering::Relaxed);
    for _ in 0..50 {
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    assert_eq!(
        store.calls.load(Ordering::Relaxed),
        asked,
        "refusals asked the store"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        status(&layer, request("192.0.2.1", &[])).await.0,
        StatusCode::OK
    );
}
