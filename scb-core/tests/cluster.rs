//! `scb_core::cluster` against a real `redis-server` started by each test: leases with
//! fencing (taken, renewed, run out, taken over; a stale holder's write refused), shared
//! rate limits counted across two clusters (two instances' connections), and Redis going
//! away and coming back.
//!
//! Without `redis-server` the tests are skipped with a line saying so, unless
//! SCB_REQUIRE_TOOLS says they must run.

#![cfg(feature = "cluster")]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, StatusCode};
use scb_core::Body;
use scb_core::cluster::{Cluster, ClusterError};
use scb_core::connection::ConnectInfo;
use scb_core::rate_limit::{Rate, RateLimitLayer, SharedBuckets};
use scb_core::respond::Respond;
use tower::{Layer, ServiceExt};

/// A redis-server on a port of its own, stopped when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Option<Self> {
        Self::on(free_port())
    }

    fn on(port: u16) -> Option<Self> {
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                    "redis-server cannot be run ({e}), and SCB_REQUIRE_TOOLS says these tests must run"
                );
                #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
                {
                    eprintln!("skipped: redis-server is not installed (Debian: redis-server)");
                }
                return None;
            }
        };
        let redis = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "current_thread")]
async fn a_lease_is_held_renewed_lost_and_fenced() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let a = Cluster::connect(&redis.url(), "test:").unwrap();
    let b = Cluster::connect(&redis.url(), "test:").unwrap();
    assert_ne!(a.instance(), b.instance());
    let lease = Duration::from_millis(600);
    let held = a
        .acquire("lock:x", lease)
        .await
        .unwrap()
        .expect("a takes it");
    assert!(b.acquire("lock:x", lease).await.unwrap().is_none());
    // Renewed while held: still a's after several leases' time.
    tokio::time::sleep(lease * 3).await;
    assert!(held.is_held());
    assert!(b.acquire("lock:x", lease).await.unwrap().is_none());
    let version = held
        .hset_fenced("cert:x", vec![("chain".into(), b"PEM".to_vec())])
        .await
        .unwrap();
    assert!(version.is_some());
    let first_fence = held.fence();
    // Released: b takes it at once, with a larger fence.
    held.release().await;
    let taken = b
        .acquire("lock:x", lease)
        .await
        .unwrap()
        .expect("b takes it");
    assert!(taken.fence() > first_fence);
    // Dropped without release: renewals stop, and the lock expires.
    drop(taken);
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        if let Some(lease) = a.acquire("lock:x", lease).await.unwrap() {
            break lease;
        }
        assert!(Instant::now() < deadline, "the dropped lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A guard finishes work within the lease, and stops work that outlasts a lost one.
    assert_eq!(again.guard(async { 7 }).await, Ok(7));
    // Taken over behind its back (as after a pause longer than the lease): the renewal
    // notices, the guard ends the work, and Redis refuses the stale holder's write.
    let conn = redis::Client::open(redis.url()).unwrap();
    let mut conn = conn.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("test:lock:x")
        .arg("someone-else/999")
        .query_async(&mut conn)
        .await
        .unwrap();
    let outlasting = again
        .guard(tokio::time::sleep(Duration::from_secs(30)))
        .await;
    assert!(outlasting.is_err());
    assert!(!again.is_held());
    let stale = again
        .hset_fenced("cert:x", vec![("chain".into(), b"STALE".to_vec())])
        .await
        .unwrap();
    assert_eq!(stale, None);
    let chain: Vec<u8> = redis::cmd("HGET")
        .arg("test:cert:x")
        .arg("chain")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(chain, b"PEM");
}

fn from(peer: &str) -> Request<Body> {
    let mut req = Request::get("/api/").body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo {
        remote: format!("{peer}:5000").parse().unwrap(),
        local: "127.0.0.1:80".parse().unwrap(),
        secure: false,
    });
    req
}

/// Sends requests from `peer` alternately through `a` and `b`, as fast as they come for
/// a little over a second: how many were admitted, of how many.
async fn hammer(a: &RateLimitLayer, b: &RateLimitLayer, peer: &str) -> (usize, usize) {
    let started = Instant::now();
    let (mut admitted, mut sent) = (0, 0);
    while started.elapsed() < Duration::from_millis(1100) {
        let layer = if sent % 2 == 0 { a } else { b };
        let svc = layer.layer(Respond::new(StatusCode::OK));
        if svc.oneshot(from(peer)).await.unwrap().status() == StatusCode::OK {
            admitted += 1;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (admitted, sent)
}

/// Waits until `cluster` answers a PING again.
async fn answering(cluster: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pong = cluster
            .run("test", None, |mut c| async move {
                redis::cmd("PING").query_async::<String>(&mut c).await
            })
            .await;
        if pong.is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "no PING answered: {pong:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_shared_limit_is_one_limit_for_two_instances_and_local_without_redis() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let rate: Rate = "10/s".parse().unwrap();
    let (ca, cb) = (
        Cluster::connect(&redis.url(), "test:").unwrap(),
        Cluster::connect(&redis.url(), "test:").unwrap(),
    );
    let instance = |cluster: &Cluster| {
        RateLimitLayer::new(rate)
            .burst(20)
            .shared(Arc::new(cluster.clone()) as Arc<dyn SharedBuckets>, "api")
    };
    let (a, b) = (instance(&ca), instance(&cb));
    // The burst plus about ten more are admitted across both instances, where two local
    // limits would admit twice that.
    let (admitted, sent) = hammer(&a, &b, "192.0.2.1").await;
    assert!(
        (20..=34).contains(&admitted),
        "{admitted} of {sent} admitted (one shared 10/s with a burst of 20)"
    );
    // Redis stops: requests are counted locally at once, neither all refused nor all
    // admitted.
    redis.stop();
    let started = Instant::now();
    let mut ok = 0;
    for _ in 0..30 {
        let svc = a.layer(Respond::new(StatusCode::OK));
        if svc.oneshot(from("192.0.2.9")).await.unwrap().status() == StatusCode::OK {
            ok += 1;
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "requests waited for the missing Redis: {:?}",
        started.elapsed()
    );
    assert!(
        (20..=22).contains(&ok),
        "{ok} of 30 admitted by the local fallback"
    );
    // Redis is back on its port: once both connections answer, the limit is shared again.
    let redis = Redis::on(redis.port).expect("started a moment ago");
    answering(&ca).await;
    answering(&cb).await;
    let (admitted, sent) = hammer(&a, &b, "192.0.2.2").await;
    assert!(
        (20..=34).contains(&admitted),
        "{admitted} of {sent} admitted after Redis came back"
    );
    drop(redis);
}

#[tokio::test(flavor = "current_thread")]
async fn calls_fail_fast_while_redis_is_away() {
    // Nothing listens on this port.
    let cluster = Cluster::connect(&format!("redis://127.0.0.1:{}/0", free_port()), "x:").unwrap();
    let started = Instant::now();
    let first = cluster
        .run("test", None, |mut c| async move {
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await;
    assert!(first.is_err());
    assert!(!cluster.is_available());
    let second = cluster
        .run("test", None, |mut c| async move {
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await;
    assert!(
        matches!(second, Err(ClusterError::Unavailable)),
        "{second:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(
        Cluster::connect("http://nope", "x:"),
        Err(ClusterError::Url(_))
    ));
}
