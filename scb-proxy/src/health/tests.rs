use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::state::{AT_BASE, BASE, nanos};
use super::*;
use crate::metrics::UPSTREAM_HEALTHY;
use crate::probe::run_active;
use crate::settings::UpstreamProtocol;
use crate::upstream::{Upstream, UpstreamState};

fn state(addr: &str) -> UpstreamState {
    UpstreamState::new(Upstream::new(addr).unwrap())
}

const POLICY: PassiveHealth = PassiveHealth::new();

/// The health gauge's value set since the last snapshot, or 0 when none was set: the
/// debugging recorder resets values when read.
fn healthy_gauge(snapshotter: &Snapshotter, upstream: &str) -> f64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let key = key.key();
            let ours = key.name() == UPSTREAM_HEALTHY
                && key
                    .labels()
                    .any(|l| l.key() == "upstream" && l.value() == upstream);
            match value {
                DebugValue::Gauge(v) if ours => Some(v.0),
                _ => None,
            }
        })
        .expect("the gauge is registered")
}

#[test]
fn defaults_are_as_documented() {
    assert_eq!(PassiveHealth::default(), POLICY);
    let active = ActiveHealth::new("/healthz");
    assert_eq!(active.path, "/healthz");
    assert_eq!(active.interval, Duration::from_secs(5));
    assert_eq!(active.timeout, Duration::from_secs(2));
    assert_eq!((active.passes, active.fails), (2, 2));
    let health = Health::new();
    assert!(health.is_available(Instant::now()));
}

#[test]
fn passive_failures_below_max_fails_keep_the_upstream_available() {
    let s = state("10.0.0.1:80");
    let now = Instant::now();
    assert!(!s.health.record_failure(now, &POLICY, &s.metrics));
    assert!(!s.health.record_failure(now, &POLICY, &s.metrics));
    assert!(s.health.is_available(now));
}

#[test]
fn passive_max_fails_in_a_row_skip_the_upstream_for_fail_timeout() {
    let s = state("10.0.0.1:80");
    let now = Instant::now();
    for _ in 0..2 {
        s.health.record_failure(now, &POLICY, &s.metrics);
    }
    assert!(s.health.record_failure(now, &POLICY, &s.metrics));
    assert!(!s.health.is_available(now));
    let almost = now + POLICY.fail_timeout - Duration::from_nanos(1);
    assert!(!s.health.is_available(almost));
    assert!(s.health.is_available(now + POLICY.fail_timeout));
}

#[test]
fn instants_convert_exactly_on_both_sides_of_the_base() {
    let base = *BASE;
    let hour = Duration::from_secs(3600);
    assert_eq!(nanos(base), AT_BASE);
    assert_eq!(nanos(base + hour) - nanos(base), 3_600_000_000_000);
    if let Some(before) = base.checked_sub(hour) {
        assert_eq!(nanos(base) - nanos(before), 3_600_000_000_000);
    }
}

#[test]
fn passive_cool_down_is_exact_for_instants_taken_before_any_health_existed() {
    let now = Instant::now();
    let s = state("10.0.0.1:80");
    let policy = PassiveHealth {
        max_fails: 1,
        ..POLICY
    };
    s.health.record_failure(now, &policy, &s.metrics);
    assert!(
        !s.health
            .is_available(now + policy.fail_timeout - Duration::from_nanos(1))
    );
    assert!(s.health.is_available(now + policy.fail_timeout));
}

#[test]
fn passive_one_failure_after_a_cool_down_starts_the_next() {
    let s = state("10.0.0.1:80");
    let now = Instant::now();
    for _ in 0..3 {
        s.health.record_failure(now, &POLICY, &s.metrics);
    }
    let after = now + POLICY.fail_timeout;
    assert!(s.health.is_available(after));
    s.health.record_failure(after, &POLICY, &s.metrics);
    assert!(!s.health.is_available(after));
    assert!(!s.health.is_available(after + POLICY.fail_timeout / 2));
    assert!(s.health.is_available(after + POLICY.fail_timeout));
}

#[test]
fn passive_failures_during_a_cool_down_extend_it_but_never_shorten_it() {
    let s = state("10.0.0.1:80");
    let now = Instant::now();
    for _ in 0..3 {
        s.health.record_failure(now, &POLICY, &s.metrics);
    }
    let later = now + Duration::from_secs(4);
    assert!(!s.health.record_failure(later, &POLICY, &s.metrics));
    assert!(
        !s.health
            .is_available(later + POLICY.fail_timeout - Duration::from_secs(1))
    );
    // A failure timestamped before the latest one (a slow worker) changes nothing.
    s.health.record_failure(now, &POLICY, &s.metrics);
    assert!(
        !s.health
            .is_available(later + POLICY.fail_timeout - Duration::from_secs(1))
    );
    assert!(s.health.is_available(later + POLICY.fail_timeout));
}

#[test]
fn passive_success_resets_the_failure_count() {
    let s = state("10.0.0.1:80");
    let now = Instant::now();
    for _ in 0..5 {
        s.health.record_failure(now, &POLICY, &s.metrics);
        s.health.record_failure(now, &POLICY, &s.metrics);
        assert!(!s.health.record_success(&s.metrics));
    }
    assert!(s.health.is_available(now));

    // After a cool-down and a success, one failure is not enough again.
    for _ in 0..3 {
        s.health.record_failure(now, &POLICY, &s.metrics);
    }
    let after = now + POLICY.fail_timeout;
    s.health.record_success(&s.metrics);
    s.health.record_failure(after, &POLICY, &s.metrics);
    assert!(s.health.is_available(after));
}

#[test]
fn passive_max_fails_zero_never_marks_down() {
    let s = state("10.0.0.1:80");
    let off = PassiveHealth {
        max_fails: 0,
        ..POLICY
    };
    let now = Instant::now();
    for _ in 0..100 {
        assert!(!s.health.record_failure(now, &off, &s.metrics));
    }
    assert!(s.health.is_available(now));
}

#[test]
fn passive_gauge_drops_for_the_cool_down_and_returns_once_it_is_over() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let s = ::metrics::with_local_recorder(&recorder, || state("10.0.0.1:80"));
    let policy = PassiveHealth {
        max_fails: 1,
        ..POLICY
    };
    let now = Instant::now();
    // Not read since `UpstreamState::new` set 1, so a 0 here was set by the failure.
    assert!(s.health.record_failure(now, &policy, &s.metrics));
    assert_eq!(healthy_gauge(&snapshotter, "10.0.0.1:80"), 0.0);
    // A success from a request sent before the cool-down does not end it.
    assert!(!s.health.record_success(&s.metrics));
    assert!(!s.health.settle(now + Duration::from_secs(9), &s.metrics));
    assert!(s.health.settle(now + policy.fail_timeout, &s.metrics));
    assert_eq!(healthy_gauge(&snapshotter, "10.0.0.1:80"), 1.0);
    // Only once.
    assert!(!s.health.settle(now + policy.fail_timeout, &s.metrics));
}

#[test]
fn active_state_changes_after_fails_or_passes_checks_in_a_row() {
    let s = state("10.0.0.1:80");
    let config = ActiveHealth {
        passes: 3,
        fails: 2,
        ..ActiveHealth::new("/")
    };
    let check = |passed| {
        s.health
            .record_check(passed, Instant::now(), &config, &s.metrics)
    };
    assert_eq!(check(false), None);
    assert_eq!(check(true), None, "the streak is broken");
    assert_eq!(check(false), None);
    assert!(s.health.is_available(Instant::now()));
    assert_eq!(check(false), Some(false));
    assert!(!s.health.is_available(Instant::now()));
    assert_eq!(check(true), None);
    assert_eq!(check(true), None);
    assert_eq!(check(false), None, "the streak is broken");
    assert_eq!(check(true), None);
    assert_eq!(check(true), None);
    assert!(!s.health.is_available(Instant::now()));
    assert_eq!(check(true), Some(true));
    assert!(s.health.is_available(Instant::now()));
}

#[test]
fn active_and_passive_must_both_allow_the_upstream() {
    let s = state("10.0.0.1:80");
    let config = ActiveHealth {
        fails: 1,
        passes: 1,
        ..ActiveHealth::new("/")
    };
    let now = Instant::now();
    s.health.record_check(false, now, &config, &s.metrics);
    assert!(!s.health.is_available(now + POLICY.fail_timeout));
    s.health.record_check(true, now, &config, &s.metrics);
    for _ in 0..3 {
        s.health.record_failure(now, &POLICY, &s.metrics);
    }
    assert!(!s.health.is_available(now));
    assert!(s.health.is_available(now + POLICY.fail_timeout));
}

/// A tiny upstream: reads a request head, answers 200 (or 503 while `failing` is set)
/// and closes. Counts the answers of each kind and keeps the last head.
struct TestUpstream {
    addr: SocketAddr,
    failing: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    last_head: Arc<Mutex<String>>,
}

async fn test_upstream() -> TestUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = TestUpstream {
        addr: listener.local_addr().unwrap(),
        failing: Arc::default(),
        ok: Arc::default(),
        failed: Arc::default(),
        last_head: Arc::default(),
    };
    let (failing, ok, failed, last_head) = (
        Arc::clone(&upstream.failing),
        Arc::clone(&upstream.ok),
        Arc::clone(&upstream.failed),
        Arc::clone(&upstream.last_head),
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (failing, ok, failed, last_head) = (
                Arc::clone(&failing),
                Arc::clone(&ok),
                Arc::clone(&failed),
                Arc::clone(&last_head),
            );
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                *last_head.lock().unwrap() = String::from_utf8_lossy(&head).into_owned();
                let status = if failing.load(Ordering::SeqCst) {
                    failed.fetch_add(1, Ordering::SeqCst);
                    "503 Service Unavailable"
                } else {
                    ok.fetch_add(1, Ordering::SeqCst);
                    "200 OK"
                };
                let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                stream.write_all(response.as_bytes()).await.ok();
            });
        }
    });
    upstream
}

fn fast_checks() -> ActiveHealth {
    ActiveHealth {
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(1),
        passes: 2,
        fails: 2,
        ..ActiveHealth::new("/healthz")
    }
}

/// Waits for `condition`, failing the test after 10 seconds.
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn available(upstreams: &[UpstreamState]) -> bool {
    upstreams[0].health.is_available(Instant::now())
}

/// The fast HTTP/1.1 checks of `upstreams`, running until the handle is aborted.
fn spawn_checks(upstreams: &Arc<[UpstreamState]>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_active(
        Arc::clone(upstreams),
        fast_checks(),
        None,
        None,
        UpstreamProtocol::Http1,
    ))
}

#[tokio::test]
async fn active_checks_keep_a_healthy_upstream_up() {
    let upstream = test_upstream().await;
    let addr = upstream.addr.to_string();
    let upstreams: Arc<[UpstreamState]> = Arc::new([state(&addr)]);
    let checker = spawn_checks(&upstreams);
    wait_until("5 checks passed", || {
        assert!(available(&upstreams));
        upstream.ok.load(Ordering::SeqCst) >= 5
    })
    .await;
    assert!(available(&upstreams));
    let head = upstream.last_head.lock().unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /healthz http/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("\r\nhost: {addr}\r\n")), "{head}");
    assert!(
        head.contains("\r\nuser-agent: scb-health-check\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    checker.abort();
}

#[tokio::test]
async fn active_checks_take_a_failing_upstream_down_and_bring_it_back() {
    let upstream = test_upstream().await;
    let addr = upstream.addr.to_string();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let upstreams: Arc<[UpstreamState]> =
        ::metrics::with_local_recorder(&recorder, || Arc::new([state(&addr)]));
    let checker = spawn_checks(&upstreams);
    wait_until("a check passed", || upstream.ok.load(Ordering::SeqCst) >= 1).await;

    upstream.failing.store(true, Ordering::SeqCst);
    wait_until("the upstream is down", || !available(&upstreams)).await;
    assert!(upstream.failed.load(Ordering::SeqCst) >= 2);
    // Not read since `UpstreamState::new` set 1, so a 0 here was set by the transition.
    assert_eq!(healthy_gauge(&snapshotter, &addr), 0.0);

    let ok_before = upstream.ok.load(Ordering::SeqCst);
    upstream.failing.store(false, Ordering::SeqCst);
    wait_until("the upstream is back", || available(&upstreams)).await;
    assert!(upstream.ok.load(Ordering::SeqCst) >= ok_before + 2);
    assert_eq!(healthy_gauge(&snapshotter, &addr), 1.0);
    checker.abort();
}

#[tokio::test]
async fn active_checks_take_a_closed_port_down() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let upstreams: Arc<[UpstreamState]> = Arc::new([state(&addr)]);
    let checker = spawn_checks(&upstreams);
    wait_until("the upstream is down", || !available(&upstreams)).await;
    checker.abort();
}

#[tokio::test]
async fn active_checks_time_out_a_silent_upstream_without_delaying_the_others() {
    // Accepts and reads, never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = silent.accept().await {
            tokio::spawn(async move {
                let mut sink = Vec::new();
                stream.read_to_end(&mut sink).await.ok();
            });
        }
    });
    let healthy = test_upstream().await;
    let upstreams: Arc<[UpstreamState]> =
        Arc::new([state(&silent_addr), state(&healthy.addr.to_string())]);
    let checker = spawn_checks(&upstreams);
    wait_until("the silent upstream is down", || !available(&upstreams)).await;
    // Two 1 s timeouts took it down; meanwhile the healthy upstream was checked every
    // 50 ms. Checks in one loop would have checked it only about twice.
    let healthy_checks = healthy.ok.load(Ordering::SeqCst);
    assert!(healthy_checks >= 8, "{healthy_checks} checks");
    assert!(upstreams[1].health.is_available(Instant::now()));
    checker.abort();
}

#[tokio::test]
async fn active_checks_with_a_relative_path_are_off() {
    let upstreams: Arc<[UpstreamState]> = Arc::new([state("127.0.0.1:9")]);
    let config = ActiveHealth {
        path: "healthz".to_owned(),
        ..fast_checks()
    };
    let ran = tokio::time::timeout(
        Duration::from_secs(5),
        run_active(upstreams, config, None, None, UpstreamProtocol::Http1),
    );
    assert!(ran.await.is_ok(), "run_active returns at once");
}
