//! The reverse proxy against real upstreams on loopback: well-behaved hyper servers and
//! misbehaving raw TCP listeners, driven either straight through the tower service or over
//! real sockets through scb's own server (framing, streaming, upgrades).

mod support;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::request_id::RequestIdLayer;
use scb_proxy::{ActiveHealth, Balance, HashKey, PassiveHealth, ReverseProxy, TrustedProxies};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt as _;

use support::{
    Blackhole, HttpUpstream, Named, ProxyServer, RawUpstream, Read, WAIT, closed_port,
    drain_to_eof, fetch, fill, find, get, get_from, head_echo, head_field, head_fields, pattern,
    read_head, read_more, send, upstream, wait_until,
};

/// Slack allowed on top of a configured timeout before a test calls the proxy late: generous
/// for a loaded 2-core box, still far below the defaults a forgotten setting would fall to.
const SLACK: Duration = Duration::from_secs(2);

/// A proxy to one upstream, built with `f` applied to its builder.
fn proxy_to(
    addr: SocketAddr,
    f: impl FnOnce(scb_proxy::ReverseProxyBuilder) -> scb_proxy::ReverseProxyBuilder,
) -> ReverseProxy {
    f(ReverseProxy::builder([upstream(addr)])).build().unwrap()
}

fn is_text_plain(answer: &support::Answer) -> bool {
    answer
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"))
}

// ---------------------------------------------------------------------------------------
// Misbehaving upstreams
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn slow_upstream_head_gets_504_at_the_response_timeout() {
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            // The misbehaviour itself: no answer for far longer than the proxy waits.
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    })
    .await;
    let timeout = Duration::from_millis(300);
    let proxy = proxy_to(up.addr, |b| b.response_timeout(timeout));
    let started = Instant::now();
    let answer = send(&proxy, get("/slow")).await;
    let elapsed = started.elapsed();
    assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(is_text_plain(&answer), "{:?}", answer.headers);
    assert!(!answer.text().is_empty());
    assert!(
        elapsed >= timeout,
        "answered before the timeout: {elapsed:?}"
    );
    assert!(elapsed < timeout + SLACK, "answered late: {elapsed:?}");
    assert_eq!(
        up.accepted(),
        1,
        "a request that timed out waiting is not sent again"
    );
}

#[tokio::test]
async fn try_timeout_bounds_the_wait_when_it_is_shorter_than_the_response_timeout() {
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    })
    .await;
    let budget = Duration::from_millis(300);
    let proxy = proxy_to(up.addr, |b| {
        b.response_timeout(Duration::from_secs(30))
            .try_timeout(budget)
    });
    let started = Instant::now();
    let answer = send(&proxy, get("/slow")).await;
    let elapsed = started.elapsed();
    assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(elapsed >= budget, "{elapsed:?}");
    assert!(elapsed < budget + SLACK, "{elapsed:?}");
}

/// An upstream that sends a head and the first 200 KB of a 1 MB `Content-Length` body
/// (more than scb's server buffers before writing, so the head reaches a client on the
/// wire), waits for `go`, then resets the connection (`SO_LINGER` 0).
async fn resetting_mid_body(go: Arc<Notify>) -> RawUpstream {
    RawUpstream::spawn(move |mut s, _| {
        let go = Arc::clone(&go);
        async move {
            let mut buf = Vec::new();
            if read_head(&mut s, &mut buf).await.is_none() {
                return;
            }
            let mut res = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n".to_vec();
            res.extend_from_slice(&[b'x'; 200_000]);
            s.write_all(&res).await.unwrap();
            let _ = tokio::time::timeout(WAIT, go.notified()).await;
            s.set_zero_linger().unwrap();
            drop(s);
        }
    })
    .await
}

#[tokio::test]
async fn upstream_reset_mid_body_errors_the_client_body() {
    let go = Arc::new(Notify::new());
    let up = resetting_mid_body(Arc::clone(&go)).await;
    let proxy = proxy_to(up.addr, |b| b);
    let res = tokio::time::timeout(WAIT, proxy.clone().oneshot(get("/big")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // The head is here; now the upstream breaks off.
    go.notify_one();
    let body = tokio::time::timeout(WAIT, res.into_body().collect())
        .await
        .expect("the body neither ended nor failed");
    assert!(
        body.is_err(),
        "a body cut short by a reset ended cleanly with {} bytes",
        body.map(|b| b.to_bytes().len()).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_reset_mid_body_truncates_the_response_on_the_wire() {
    let go = Arc::new(Notify::new());
    let up = resetting_mid_body(Arc::clone(&go)).await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    client.send(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let head = client.head().await;
    assert_eq!(head.status, 200);
    go.notify_one();
    // The client must not be able to take what it got for the whole response: the
    // connection closes before the 1000000 promised bytes.
    let complete = client.read_until(b"y").await;
    assert!(!complete, "unexpected bytes after the reset");
    assert!(
        client.buf.len() < 1_000_000,
        "got {} body bytes after an upstream reset",
        client.buf.len()
    );
}

#[tokio::test]
async fn garbage_instead_of_http_gets_502() {
    let up = RawUpstream::replying(b"SSH-2.0-OpenSSH_9.6\r\nthis is not http at all\r\n\r\n").await;
    let answer = send(&proxy_to(up.addr, |b| b), get("/")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(is_text_plain(&answer));
    assert!(
        !answer.text().contains("SSH"),
        "upstream bytes leaked: {}",
        answer.text()
    );
}

#[tokio::test]
async fn upstream_closing_before_a_head_on_a_fresh_connection_gets_502_without_a_retry() {
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        let _ = read_head(&mut s, &mut buf).await;
        // Read the request, then hang up without a word.
    })
    .await;
    let answer = send(&proxy_to(up.addr, |b| b), get("/")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        up.accepted(),
        1,
        "only a reused connection's failure is replayed"
    );
}

#[tokio::test]
async fn upstream_closing_every_connection_at_accept_gets_502_quickly() {
    // Accepts and closes at once, before reading anything: an overloaded or dying upstream.
    let up = RawUpstream::spawn(|s, _| async move { drop(s) }).await;
    let proxy = proxy_to(up.addr, |b| b);
    let started = Instant::now();
    let answer = send(&proxy, get("/")).await;
    let elapsed = started.elapsed();
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(
        elapsed < SLACK,
        "took {elapsed:?} over {} connections: the proxy kept reconnecting",
        up.accepted()
    );
    assert!(
        up.accepted() <= 3,
        "{} connections for one request",
        up.accepted()
    );
}

/// An upstream answering every request with `head_bytes` of header fields (in 10 KiB
/// fields) and the body `ok`.
async fn big_head(head_bytes: usize) -> RawUpstream {
    RawUpstream::spawn(move |mut s, _| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_none() {
            return;
        }
        let mut res = String::from("HTTP/1.1 200 OK\r\n");
        for i in 0..head_bytes / 10_240 {
            res.push_str(&format!("X-Pad-{i}: {}\r\n", "a".repeat(10_240)));
        }
        res.push_str("Content-Length: 2\r\n\r\nok");
        let _ = s.write_all(res.as_bytes()).await;
        drain_to_eof(&mut s, &mut buf).await;
    })
    .await
}

#[tokio::test]
async fn response_head_of_100_kib_gets_502() {
    let up = big_head(100 * 1024).await;
    let answer = send(&proxy_to(up.addr, |b| b), get("/")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);

    // The same upstream with a 20 KiB head is fine: it is the size that is refused.
    let up = big_head(20 * 1024).await;
    let answer = send(&proxy_to(up.addr, |b| b), get("/")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), "ok");
}

#[tokio::test]
async fn response_with_content_length_and_transfer_encoding_gets_502_and_is_not_reused() {
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        while read_head(&mut s, &mut buf).await.is_some() {
            let res = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n\
                       5\r\nhello\r\n0\r\n\r\n";
            if s.write_all(res.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b);
    let answer = send(&proxy, get("/one")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(
        answer.body.as_ref().is_ok_and(|b| !b.starts_with(b"hello")),
        "{answer:?}"
    );
    let answer = send(&proxy, get("/two")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        up.accepted(),
        2,
        "a connection whose framing was ambiguous must not carry another request"
    );
}

/// An upstream whose chunked response breaks after its first chunk.
async fn bad_chunks() -> RawUpstream {
    RawUpstream::replying(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n",
    )
    .await
}

#[tokio::test]
async fn bad_chunk_size_in_a_response_errors_the_body() {
    let up = bad_chunks().await;
    let answer = send(&proxy_to(up.addr, |b| b), get("/")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(
        answer.body.is_err(),
        "a broken chunked body ended cleanly: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chunk_size_in_a_response_closes_the_client_connection() {
    let up = bad_chunks().await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    match client.response().await {
        Read::Complete(resp) => panic!("a broken upstream body came out complete: {resp:?}"),
        Read::Truncated(resp) => {
            if let Some(resp) = resp {
                assert_eq!(resp.status, 200);
                assert!(find(&resp.body, b"more").is_none(), "{resp:?}");
            }
        }
    }
}

#[tokio::test]
async fn stalled_response_body_errors_after_the_idle_timeout() {
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
                .await;
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    })
    .await;
    let idle = Duration::from_millis(300);
    let proxy = proxy_to(up.addr, |b| b.idle_timeout(idle));
    let started = Instant::now();
    let answer = send(&proxy, get("/")).await;
    let elapsed = started.elapsed();
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.body.is_err(), "{answer:?}");
    assert!(elapsed >= idle, "{elapsed:?}");
    assert!(elapsed < idle + SLACK, "{elapsed:?}");
}

#[tokio::test]
async fn connect_refused_gets_502_quickly() {
    let proxy = proxy_to(closed_port(), |b| b);
    let started = Instant::now();
    let answer = send(&proxy, get("/")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(is_text_plain(&answer));
    assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());
}

#[tokio::test]
async fn connect_timeout_gets_504_at_the_connect_timeout() {
    // A listener whose accept queue is full: the kernel drops further SYNs, so a connect
    // hangs (an unroutable address does the same on a real network, but this sandbox
    // answers those itself).
    let hole = Blackhole::new().await;
    let timeout = Duration::from_millis(300);
    let proxy = proxy_to(hole.addr, |b| {
        b.connect_timeout(timeout)
            .response_timeout(Duration::from_secs(5))
    });
    let started = Instant::now();
    let answer = send(&proxy, get("/")).await;
    let elapsed = started.elapsed();
    assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(is_text_plain(&answer));
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(elapsed < timeout + SLACK, "{elapsed:?}");
}

#[tokio::test]
async fn the_only_upstream_is_tried_again_after_it_was_marked_down() {
    // Accepts and reads, never answers: each try times out and counts as a failure.
    let silent = RawUpstream::silent().await;
    let timeout = Duration::from_millis(200);
    let proxy = proxy_to(silent.addr, |b| {
        b.response_timeout(timeout).passive_health(
            PassiveHealth::new()
                .max_fails(1)
                .fail_timeout(Duration::from_secs(30)),
        )
    });
    for attempt in 1..=3 {
        let answer = send(&proxy, get("/")).await;
        assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT, "try {attempt}");
        assert!(is_text_plain(&answer));
        // Marked down after the first, and contacted every time all the same.
        assert_eq!(silent.accepted(), attempt, "try {attempt} was refused");
    }
}

/// An upstream whose first three connections fail in the three ways that used to mark it
/// down (a reset, a malformed head, an oversized head) and whose later ones answer 200.
async fn failing_three_times_then_healthy() -> RawUpstream {
    RawUpstream::spawn(|mut s, n| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_none() {
            return;
        }
        match n {
            0 => {} // closed without a word: a reset before any response
            1 => {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nbroken header line\r\n\r\n")
                    .await;
            }
            2 => {
                let mut huge = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
                huge.resize(200 * 1024, b'a');
                let _ = s.write_all(&huge).await;
            }
            _ => {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await;
            }
        }
    })
    .await
}

#[tokio::test]
async fn the_only_upstream_failing_three_times_in_a_row_serves_the_fourth_request() {
    // By default only the reset counts; counting invalid responses too, the three failures
    // mark the upstream down for 10 s, and it is tried all the same.
    for count_invalid in [false, true] {
        let up = failing_three_times_then_healthy().await;
        let proxy = proxy_to(up.addr, |b| {
            b.passive_health(PassiveHealth::new().count_invalid_responses(count_invalid))
        });
        for _ in 0..3 {
            assert_eq!(send(&proxy, get("/")).await.status, StatusCode::BAD_GATEWAY);
        }
        let answer = send(&proxy, get("/")).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{count_invalid}: {}",
            answer.text()
        );
        assert_eq!(answer.text(), "ok");
        // A request with a body takes the same way.
        let post = Request::post("/upload")
            .header("content-length", "5")
            .body(Body::from("hello"))
            .unwrap();
        assert_eq!(
            send(&proxy, post).await.status,
            StatusCode::OK,
            "{count_invalid}"
        );
    }
}

#[tokio::test]
async fn an_upstream_restarted_on_its_port_takes_requests_with_no_client_error() {
    let first = Named::spawn("first").await;
    let addr = first.addr;
    let proxy = proxy_to(addr, |b| b);
    // Keep-alive connections are pooled.
    for _ in 0..10 {
        assert_eq!(fetch(&proxy, "/").await, (StatusCode::OK, "first".into()));
    }
    // The upstream dies (its connections close) and comes back on the same port.
    drop(first);
    // The abort takes effect when the runtime next runs the task: the port is free soon.
    let deadline = Instant::now() + WAIT;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("the old upstream kept its port: {e}"),
        }
    };
    let second = Named::spawn_on(listener, "second");
    for i in 0..10 {
        assert_eq!(
            fetch(&proxy, "/").await,
            (StatusCode::OK, "second".into()),
            "request {i} after the restart"
        );
    }
    assert_eq!(second.hits(), 10);
}

#[tokio::test]
async fn with_every_upstream_marked_down_a_request_is_still_tried() {
    let (a, b) = (closed_port(), closed_port());
    let proxy = ReverseProxy::builder([upstream(a), upstream(b)])
        .passive_health(
            PassiveHealth::new()
                .max_fails(1)
                .fail_timeout(Duration::from_secs(3600)),
        )
        .build()
        .unwrap();
    // Both refuse: one request tries each, and marks each down for an hour.
    assert_eq!(fetch(&proxy, "/").await.0, StatusCode::BAD_GATEWAY);
    // Both come back within their marks.
    let a = Named::spawn_on(TcpListener::bind(a).await.unwrap(), "a");
    let b = Named::spawn_on(TcpListener::bind(b).await.unwrap(), "b");
    for _ in 0..4 {
        assert_eq!(fetch(&proxy, "/").await.0, StatusCode::OK);
    }
    assert_eq!(a.hits() + b.hits(), 4);
}

#[tokio::test]
async fn a_malformed_response_is_that_requests_502_and_no_mark_unless_configured() {
    let bad = RawUpstream::replying(b"HTTP/1.1 200 OK\r\nbroken header line\r\n\r\n").await;
    let good = Named::spawn("good").await;
    let policy = PassiveHealth::new()
        .max_fails(1)
        .fail_timeout(Duration::from_secs(3600));
    let build = |policy: PassiveHealth| {
        ReverseProxy::builder([upstream(bad.addr), upstream(good.addr)])
            .passive_health(policy)
            .build()
            .unwrap()
    };
    // Not counted: round robin keeps sending `bad` its share.
    let proxy = build(policy);
    let mut bad_answers = 0;
    for _ in 0..10 {
        if fetch(&proxy, "/").await.0 == StatusCode::BAD_GATEWAY {
            bad_answers += 1;
        }
    }
    assert_eq!(
        bad_answers, 5,
        "every other request still goes to the bad upstream"
    );
    // Counted: one malformed response takes it out.
    let proxy = build(policy.count_invalid_responses(true));
    let before = bad.accepted();
    let statuses: Vec<StatusCode> = {
        let mut v = Vec::new();
        for _ in 0..10 {
            v.push(fetch(&proxy, "/").await.0);
        }
        v
    };
    assert_eq!(bad.accepted() - before, 1, "{statuses:?}");
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::BAD_GATEWAY)
            .count(),
        1
    );
}

// ---------------------------------------------------------------------------------------
// Keep-alive, stale connections and retries
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn upstream_closing_each_connection_after_its_response_does_not_fail_gets() {
    // Keep-alive in words (no `Connection: close`), but hangs up right after each response.
    let up = RawUpstream::spawn(|mut s, n| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let body = format!("conn-{n}");
            let res = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(res.as_bytes()).await;
        }
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b);
    for i in 0..20 {
        let (status, body) = fetch(&proxy, &format!("/{i}")).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body}");
        assert!(body.starts_with("conn-"), "{body}");
    }
    assert_eq!(up.accepted(), 20);
}

/// What a stale-connection upstream saw: each request line with its connection.
type Seen = Arc<Mutex<Vec<(usize, String)>>>;

/// An upstream that answers the first request on each connection and treats later ones
/// by `on_reuse`: while it returns true the request is read and the connection closed
/// unanswered (as an upstream closing an idle connection just as a request arrives).
async fn closing_on_reuse(
    seen: Seen,
    on_reuse: Arc<dyn Fn() -> bool + Send + Sync>,
) -> RawUpstream {
    RawUpstream::spawn(move |mut s, conn| {
        let seen = Arc::clone(&seen);
        let on_reuse = Arc::clone(&on_reuse);
        async move {
            let mut buf = Vec::new();
            let mut served = 0;
            while let Some(head) = read_head(&mut s, &mut buf).await {
                let line = head.lines().next().unwrap_or_default().to_owned();
                seen.lock().unwrap().push((conn, line));
                if served > 0 && on_reuse() {
                    return;
                }
                served += 1;
                let body = format!("conn-{conn}");
                let res = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(res.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

fn times_seen(seen: &Seen, path: &str) -> usize {
    let line = format!("GET {path} HTTP/1.1");
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(_, l)| *l == line)
        .count()
}

#[tokio::test]
async fn idempotent_get_is_replayed_once_when_a_reused_connection_was_closed() {
    let seen: Seen = Arc::default();
    // The first reuse of any connection is closed on; everything else is answered.
    let tripped = Arc::new(AtomicBool::new(false));
    let trip = Arc::clone(&tripped);
    let up = closing_on_reuse(
        Arc::clone(&seen),
        Arc::new(move || !trip.swap(true, Ordering::SeqCst)),
    )
    .await;
    // One pooled connection at most, so the replay cannot land on another stale one.
    let proxy = proxy_to(up.addr, |b| b.max_idle_per_upstream(1));
    // Requests until one lands on a reused connection (the pool may not have seen the
    // previous exchange finish in time for the very next request).
    let mut tripped_on = None;
    for i in 0..50 {
        let path = format!("/r{i}");
        let (status, body) = fetch(&proxy, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        if tripped.load(Ordering::SeqCst) {
            tripped_on = Some(path);
            break;
        }
    }
    let path = tripped_on.expect("the proxy never reused a pooled connection");
    assert_eq!(
        times_seen(&seen, &path),
        2,
        "the GET closed on must be sent exactly once more: {:?}",
        seen.lock().unwrap()
    );
}

#[tokio::test]
async fn idempotent_get_is_replayed_at_most_once() {
    let seen: Seen = Arc::default();
    // Phase 0 answers; the first reuse of a connection is closed on and moves to phase 1;
    // in phase 1 the next request anywhere (the replay) is closed on too; from then on
    // everything is answered, so a third send would succeed, and must not happen.
    let phase = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&phase);
    let seen2 = Arc::clone(&seen);
    let up = RawUpstream::spawn(move |mut s, conn| {
        let phase = Arc::clone(&p);
        let seen = Arc::clone(&seen2);
        async move {
            let mut buf = Vec::new();
            let mut served = 0;
            while let Some(head) = read_head(&mut s, &mut buf).await {
                let line = head.lines().next().unwrap_or_default().to_owned();
                seen.lock().unwrap().push((conn, line));
                let close = match phase.load(Ordering::SeqCst) {
                    0 => {
                        served > 0
                            && phase
                                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                                .is_ok()
                    }
                    1 => phase
                        .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok(),
                    _ => false,
                };
                if close {
                    return;
                }
                served += 1;
                let res = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                if s.write_all(res.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b.max_idle_per_upstream(1));
    let mut outcome = None;
    for i in 0..50 {
        let path = format!("/r{i}");
        let (status, _) = fetch(&proxy, &path).await;
        if phase.load(Ordering::SeqCst) > 0 {
            outcome = Some((path, status));
            break;
        }
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    let (path, status) = outcome.expect("the proxy never reused a pooled connection");
    assert_eq!(
        times_seen(&seen, &path),
        2,
        "sent once and replayed once, no more: {:?}",
        seen.lock().unwrap()
    );
    assert_eq!(status, StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn post_is_never_replayed_after_the_upstream_resets() {
    // Two upstreams sharing one count: a POST must not go to the other one either.
    let posts = Arc::new(AtomicUsize::new(0));
    let resetting = |posts: Arc<AtomicUsize>| {
        RawUpstream::spawn(move |mut s, _| {
            let posts = Arc::clone(&posts);
            async move {
                let mut buf = Vec::new();
                while let Some(head) = read_head(&mut s, &mut buf).await {
                    if head.starts_with("POST ") {
                        let len: usize = head_field(&head, "content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        fill(&mut s, &mut buf, len).await;
                        posts.fetch_add(1, Ordering::SeqCst);
                        s.set_zero_linger().unwrap();
                        return;
                    }
                    let res = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if s.write_all(res.as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        })
    };
    let a = resetting(Arc::clone(&posts)).await;
    let b = resetting(Arc::clone(&posts)).await;
    let proxy = ReverseProxy::builder([upstream(a.addr), upstream(b.addr)])
        .build()
        .unwrap();
    // Warm both pools, so the POST may well go out on a reused connection.
    for _ in 0..4 {
        assert_eq!(fetch(&proxy, "/warm").await.0, StatusCode::OK);
    }
    let post = Request::post("/orders")
        .header("host", "example.test")
        .header("content-length", "5")
        .body(Body::from("hello"))
        .unwrap();
    let answer = send(&proxy, post).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert_eq!(
        posts.load(Ordering::SeqCst),
        1,
        "a POST whose body went out was replayed"
    );
}

// ---------------------------------------------------------------------------------------
// Bodies over real sockets
// ---------------------------------------------------------------------------------------

const UP_LEN: usize = 5 * 1024 * 1024;
const DOWN_LEN: usize = 8 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_pass_through_intact_both_ways() {
    let up = HttpUpstream::spawn(|req: Request<hyper::body::Incoming>| async move {
        let chunked = req.headers().contains_key("transfer-encoding");
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        let verdict = match body {
            Ok(b) if b[..] == pattern(1, UP_LEN)[..] => "intact".to_owned(),
            Ok(b) => format!("corrupt-{}", b.len()),
            Err(e) => format!("failed-{e}").replace(['\r', '\n'], " "),
        };
        let data = Bytes::from(pattern(2, DOWN_LEN));
        let body = if chunked {
            // Answer a chunked upload with a streamed (unsized) body.
            let chunks: Vec<Bytes> = (0..data.len())
                .step_by(100_000)
                .map(|i| data.slice(i..(i + 100_000).min(data.len())))
                .collect();
            Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
                chunks
                    .into_iter()
                    .map(|c| Ok::<_, std::convert::Infallible>(http_body::Frame::data(c))),
            )))
        } else {
            Body::from(data)
        };
        Response::builder()
            .header("x-upload", verdict)
            .body(body)
            .unwrap()
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b.max_body(Some(16 * 1024 * 1024)));
    let server = ProxyServer::start(&proxy);
    let mut client = server.connect().await;
    let upload = pattern(1, UP_LEN);
    let expected = pattern(2, DOWN_LEN);

    // Content-Length up, Content-Length down.
    let mut raw = format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {UP_LEN}\r\n\r\n")
        .into_bytes();
    raw.extend_from_slice(&upload);
    let sent = client.send_in_background(raw);
    let resp = client.complete().await;
    sent.await.unwrap().expect("the upload was cut off");
    assert_eq!(resp.status, 200, "{}", resp.head);
    assert_eq!(resp.header("x-upload"), Some("intact"));
    assert_eq!(resp.body.len(), DOWN_LEN);
    assert!(
        resp.body == expected,
        "the 8 MiB download changed in transit"
    );

    // Chunked up (uneven chunks), streamed down. A fresh connection: whether a connection
    // survives a proxied Content-Length body is `keep_alive_survives_a_proxied_post_with_a_content_length`.
    let mut client = server.connect().await;
    let mut raw =
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut at = 0;
    let mut size = 1;
    while at < upload.len() {
        let end = (at + size).min(upload.len());
        raw.extend_from_slice(format!("{:x}\r\n", end - at).as_bytes());
        raw.extend_from_slice(&upload[at..end]);
        raw.extend_from_slice(b"\r\n");
        at = end;
        size = size * 7 % 150_001 + 1;
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let sent = client.send_in_background(raw);
    let resp = client.complete().await;
    sent.await.unwrap().expect("the upload was cut off");
    assert_eq!(resp.status, 200, "{}", resp.head);
    assert_eq!(resp.header("x-upload"), Some("intact"));
    assert!(
        resp.body == expected,
        "the streamed 8 MiB download changed in transit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_survives_a_proxied_post_with_a_content_length() {
    let up = body_counter().await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    client
        .send(b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        .await;
    let resp = client.complete().await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, b"got 5");
    assert_eq!(
        resp.header("connection"),
        None,
        "the client connection is closed after a request body that was read whole"
    );
    client.send(b"GET /b HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let resp = client.complete().await;
    assert_eq!(resp.status, 200);
}

/// An upstream that sends a chunked head and a first chunk `first `, then the rest
/// (`last`) only once `go` is notified.
async fn holding_back(go: Arc<Notify>) -> RawUpstream {
    RawUpstream::spawn(move |mut s, _| {
        let go = Arc::clone(&go);
        async move {
            let mut buf = Vec::new();
            if read_head(&mut s, &mut buf).await.is_none() {
                return;
            }
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst \r\n")
                .await;
            if tokio::time::timeout(WAIT, go.notified()).await.is_ok() {
                let _ = s.write_all(b"4\r\nlast\r\n0\r\n\r\n").await;
            }
            drain_to_eof(&mut s, &mut buf).await;
        }
    })
    .await
}

/// How long a streamed first chunk may take to come through: generous, and short enough
/// that a proxy (or server) holding it back fails the test quickly.
const FIRST_CHUNK: Duration = Duration::from_secs(3);

#[tokio::test]
async fn response_body_frames_are_passed_on_as_they_arrive() {
    let go = Arc::new(Notify::new());
    let up = holding_back(Arc::clone(&go)).await;
    let proxy = proxy_to(up.addr, |b| b);
    let res = tokio::time::timeout(WAIT, proxy.clone().oneshot(get("/stream")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let first = tokio::time::timeout(FIRST_CHUNK, body.frame())
        .await
        .expect("the first chunk was held back until the upstream finished")
        .expect("a frame")
        .expect("a good frame");
    assert_eq!(first.into_data().unwrap(), "first ");
    go.notify_one();
    let rest = tokio::time::timeout(WAIT, body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_body_streams_to_the_wire_before_the_upstream_finishes() {
    let go = Arc::new(Notify::new());
    let up = holding_back(Arc::clone(&go)).await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    client
        .send(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    let first = tokio::time::timeout(FIRST_CHUNK, async {
        let head = client.head().await;
        assert_eq!(head.status, 200);
        client.read_until(b"first ").await
    })
    .await;
    assert!(
        matches!(first, Ok(true)),
        "the head and first chunk did not reach the client while the upstream held the rest"
    );
    assert!(find(&client.buf, b"last").is_none());
    go.notify_one();
    assert!(client.read_until(b"last").await);
    assert!(
        client.read_until(b"0\r\n\r\n").await,
        "the body never ended"
    );
}

// ---------------------------------------------------------------------------------------
// Headers
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn hop_by_hop_fields_are_stripped_both_ways() {
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        while let Some(head) = read_head(&mut s, &mut buf).await {
            let res = format!(
                "HTTP/1.1 200 OK\r\nConnection: x-secret\r\nX-Secret: from-upstream\r\n\
                 Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\n\
                 Trailer: x-checksum\r\nX-Kept: yes\r\nContent-Length: {}\r\n\r\n{head}",
                head.len()
            );
            if s.write_all(res.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await;
    let req = Request::get("/hop")
        .header("host", "example.test")
        .header("connection", "keep-alive, X-Secret-Req")
        .header("x-secret-req", "from-client")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "trailers")
        .header("trailer", "x-checksum")
        .header("upgrade", "h2c")
        .header("expect", "100-continue")
        .header("x-kept-req", "yes")
        .body(Body::empty())
        .unwrap();
    let answer = send(&proxy_to(up.addr, |b| b), req).await;
    assert_eq!(answer.status, StatusCode::OK);
    let upstream_saw = answer.text();
    for name in [
        "x-secret-req",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        // Answered by scb's server; the body goes up without waiting for the upstream.
        "expect",
    ] {
        assert!(
            head_field(&upstream_saw, name).is_none(),
            "{name} reached the upstream:\n{upstream_saw}"
        );
    }
    for value in head_fields(&upstream_saw, "connection") {
        assert!(
            !value.to_ascii_lowercase().contains("secret"),
            "{upstream_saw}"
        );
    }
    assert_eq!(head_field(&upstream_saw, "x-kept-req"), Some("yes"));

    for name in [
        "connection",
        "x-secret",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "trailer",
        "transfer-encoding",
    ] {
        assert!(
            !answer.headers.contains_key(name),
            "{name} reached the client: {:?}",
            answer.headers
        );
    }
    assert_eq!(answer.headers["x-kept"], "yes");
}

#[tokio::test]
async fn absolute_form_targets_go_upstream_in_origin_form() {
    let up = head_echo().await;
    let mut req = get("http://example.test/x/y?q=1");
    *req.uri_mut() = "http://example.test/x/y?q=1".parse().unwrap();
    let seen = send(&proxy_to(up.addr, |b| b), req).await.text();
    assert_eq!(seen.lines().next(), Some("GET /x/y?q=1 HTTP/1.1"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_response_has_no_body_and_the_connection_stays_in_sync() {
    let up = Named::spawn("hello").await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    client.send(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let head = client.head().await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("5"), "{}", head.head);
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let resp = client.complete().await;
    assert_eq!(resp.status, 200, "{}", resp.head);
    assert_eq!(resp.body, b"hello");
    assert_eq!(up.hits(), 2);
}

#[tokio::test]
async fn switching_protocols_to_a_request_without_an_upgrade_gets_502() {
    let up = RawUpstream::replying(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    )
    .await;
    let answer = send(&proxy_to(up.addr, |b| b), get("/")).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
}

/// A request from `client` carrying a client-supplied forwarding chain and `host` as its
/// forwarded host.
fn with_forwarded_fields(client: &str, host: &'static str) -> Request<Body> {
    let mut req = get_from("/", client.parse().unwrap());
    let h = req.headers_mut();
    h.append("x-forwarded-for", "1.2.3.4".parse().unwrap());
    h.append("x-forwarded-for", "5.6.7.8".parse().unwrap());
    h.insert("x-forwarded-proto", "https".parse().unwrap());
    h.insert("x-forwarded-host", host.parse().unwrap());
    req
}

/// Every value of X-Forwarded-For, -Proto and -Host in a head the upstream saw.
fn forwarded(seen: &str) -> [Vec<&str>; 3] {
    ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"]
        .map(|name| head_fields(seen, name).collect())
}

#[tokio::test]
async fn forwarded_fields_from_an_untrusted_client_are_replaced() {
    let up = head_echo().await;
    let proxy = proxy_to(up.addr, |b| {
        b.trusted_proxies(TrustedProxies::new(["10.0.0.0/8"]).unwrap())
    });
    let req = with_forwarded_fields("192.0.2.7:40000", "evil.test");
    let seen = send(&proxy, req).await.text();
    assert_eq!(
        forwarded(&seen),
        [vec!["192.0.2.7"], vec!["http"], vec!["example.test"]],
        "{seen}"
    );
}

#[tokio::test]
async fn forwarded_fields_from_a_trusted_proxy_are_kept_and_appended_to() {
    let up = head_echo().await;
    let proxy = proxy_to(up.addr, |b| {
        b.trusted_proxies(TrustedProxies::new(["10.0.0.0/8", "127.0.0.1"]).unwrap())
    });
    let req = with_forwarded_fields("10.1.2.3:40000", "www.example.test");
    let seen = send(&proxy, req).await.text();
    assert_eq!(
        forwarded(&seen),
        [
            vec!["1.2.3.4, 5.6.7.8, 10.1.2.3"],
            vec!["https"],
            vec!["www.example.test"]
        ],
        "{seen}"
    );

    // A trusted proxy that sent none gets this hop's values.
    let seen = send(&proxy, get_from("/", "127.0.0.1:40000".parse().unwrap()))
        .await
        .text();
    assert_eq!(
        forwarded(&seen),
        [vec!["127.0.0.1"], vec!["http"], vec!["example.test"]],
        "{seen}"
    );
}

#[tokio::test]
async fn host_is_preserved_by_default_and_the_upstreams_without_preserve_host() {
    let up = head_echo().await;
    let seen = send(&proxy_to(up.addr, |b| b), get("/")).await.text();
    assert_eq!(
        head_fields(&seen, "host").collect::<Vec<_>>(),
        ["example.test"],
        "{seen}"
    );

    let seen = send(&proxy_to(up.addr, |b| b.preserve_host(false)), get("/"))
        .await
        .text();
    let authority = up.addr.to_string();
    assert_eq!(
        head_fields(&seen, "host").collect::<Vec<_>>(),
        [authority.as_str()],
        "{seen}"
    );
    assert_eq!(
        head_field(&seen, "x-forwarded-host"),
        Some("example.test"),
        "{seen}"
    );
}

#[tokio::test]
async fn strip_prefix_removes_the_prefix_at_a_segment_boundary_only() {
    let up = head_echo().await;
    let proxy = proxy_to(up.addr, |b| b.strip_prefix("/api"));
    for (sent, expected) in [
        ("/api/users?id=1", "/users?id=1"),
        ("/api", "/"),
        ("/api/", "/"),
        ("/apifoo", "/apifoo"),
        ("/other/api/x", "/other/api/x"),
    ] {
        let seen = send(&proxy, get(sent)).await.text();
        let line = seen.lines().next().unwrap();
        assert_eq!(line, format!("GET {expected} HTTP/1.1"), "for {sent}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_id_goes_upstream_exactly_once_and_matches_the_response() {
    let up = head_echo().await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    for raw in [
        &b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"GET /b HTTP/1.1\r\nHost: t\r\nX-Request-Id: abc-123\r\n\r\n",
        b"GET /c HTTP/1.1\r\nHost: t\r\nX-Request-Id: one\r\nX-Request-Id: two\r\n\r\n",
    ] {
        client.send(raw).await;
        let resp = client.complete().await;
        assert_eq!(resp.status, 200);
        let id = resp
            .header("x-request-id")
            .expect("a request id")
            .to_owned();
        let seen = String::from_utf8(resp.body).unwrap();
        assert_eq!(
            head_fields(&seen, "x-request-id").collect::<Vec<_>>(),
            [id.as_str()],
            "{seen}"
        );
        // Over a real socket the client address comes from scb's server.
        assert_eq!(
            head_fields(&seen, "x-forwarded-for").collect::<Vec<_>>(),
            ["127.0.0.1"]
        );
        assert_eq!(head_field(&seen, "x-forwarded-proto"), Some("http"));
        assert_eq!(head_field(&seen, "x-forwarded-host"), Some("t"));
    }
}

#[tokio::test]
async fn request_id_layer_in_front_of_the_proxy_sends_one_id() {
    let up = head_echo().await;
    let svc = tower::ServiceBuilder::new()
        .layer(RequestIdLayer::new())
        .service(proxy_to(up.addr, |b| b));
    let res = tokio::time::timeout(WAIT, svc.oneshot(get("/")))
        .await
        .unwrap()
        .unwrap();
    let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let seen = String::from_utf8_lossy(&body);
    assert_eq!(
        head_fields(&seen, "x-request-id").collect::<Vec<_>>(),
        [id.as_str()]
    );
}

// ---------------------------------------------------------------------------------------
// Balancing
// ---------------------------------------------------------------------------------------

async fn names(proxy: &ReverseProxy, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (status, body) = fetch(proxy, "/").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        out.push(body);
    }
    out
}

#[tokio::test]
async fn round_robin_alternates_exactly_and_follows_weights() {
    let a = Named::spawn("a").await;
    let b = Named::spawn("b").await;
    let proxy = ReverseProxy::builder([upstream(a.addr), upstream(b.addr)])
        .balance(Balance::RoundRobin)
        .build()
        .unwrap();
    let seq = names(&proxy, 10).await;
    assert!(
        seq.windows(2).all(|w| w[0] != w[1]),
        "not alternating: {seq:?}"
    );
    assert_eq!((a.hits(), b.hits()), (5, 5));

    let a = Named::spawn("a").await;
    let b = Named::spawn("b").await;
    let proxy = ReverseProxy::builder([upstream(a.addr), upstream(b.addr).weight(2)])
        .build()
        .unwrap();
    let seq = names(&proxy, 30).await;
    assert_eq!((a.hits(), b.hits()), (10, 20), "{seq:?}");
    let joined = seq.concat();
    assert!(
        !joined.contains("aa") && !joined.contains("bbb"),
        "runs, not interleaving: {joined}"
    );
}

#[tokio::test]
async fn least_conn_prefers_the_upstream_without_a_slow_request() {
    let gate = Arc::new(Notify::new());
    let slow_seen = Arc::new(Mutex::new(Vec::<&'static str>::new()));
    let spawn = |name: &'static str| {
        let gate = Arc::clone(&gate);
        let slow_seen = Arc::clone(&slow_seen);
        HttpUpstream::spawn(move |req: Request<hyper::body::Incoming>| {
            let gate = Arc::clone(&gate);
            let slow_seen = Arc::clone(&slow_seen);
            async move {
                if req.uri().path() == "/slow" {
                    slow_seen.lock().unwrap().push(name);
                    let _ = tokio::time::timeout(WAIT, gate.notified()).await;
                }
                Response::new(Body::from(name))
            }
        })
    };
    let a = spawn("a").await;
    let b = spawn("b").await;
    let proxy = ReverseProxy::builder([upstream(a.addr), upstream(b.addr)])
        .balance(Balance::LeastConn)
        .build()
        .unwrap();
    let slow = tokio::spawn({
        let proxy = proxy.clone();
        async move { send(&proxy, get("/slow")).await }
    });
    wait_until("the slow request reached an upstream", || {
        !slow_seen.lock().unwrap().is_empty()
    })
    .await;
    let busy = slow_seen.lock().unwrap()[0];
    let idle = if busy == "a" { "b" } else { "a" };
    let seq = names(&proxy, 10).await;
    assert!(
        seq.iter().all(|n| n == idle),
        "{busy} is busy, yet: {seq:?}"
    );
    gate.notify_one();
    let answer = slow.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), busy);
}

#[tokio::test]
async fn random_two_spreads_over_every_upstream() {
    let ups = [
        Named::spawn("a").await,
        Named::spawn("b").await,
        Named::spawn("c").await,
    ];
    let proxy = ReverseProxy::builder(ups.iter().map(|u| upstream(u.addr)))
        .balance(Balance::RandomTwo)
        .build()
        .unwrap();
    names(&proxy, 300).await;
    let hits: Vec<usize> = ups.iter().map(Named::hits).collect();
    // 100 each expected; below 40 of 300 is a one-in-10^10 event for a fair spread.
    assert!(hits.iter().all(|&h| h >= 40), "{hits:?}");
    assert_eq!(hits.iter().sum::<usize>(), 300);
}

#[tokio::test]
async fn hash_on_a_header_is_sticky_per_key() {
    let ups = [
        Named::spawn("a").await,
        Named::spawn("b").await,
        Named::spawn("c").await,
    ];
    let proxy = ReverseProxy::builder(ups.iter().map(|u| upstream(u.addr)))
        .balance(Balance::Hash(HashKey::Header(
            http::HeaderName::from_static("x-user"),
        )))
        .build()
        .unwrap();
    let mut owner: HashMap<String, String> = HashMap::new();
    for round in 0..4 {
        for user in 0..30 {
            let key = format!("user-{user}");
            let mut req = get("/");
            req.headers_mut().insert("x-user", key.parse().unwrap());
            let name = send(&proxy, req).await.text();
            let first = owner.entry(key.clone()).or_insert_with(|| name.clone());
            assert_eq!(*first, name, "{key} moved in round {round}");
        }
    }
    let used: HashSet<&String> = owner.values().collect();
    assert!(used.len() >= 2, "30 keys all on one upstream: {owner:?}");

    // Without the header, requests are spread.
    let seq = names(&proxy, 6).await;
    assert!(seq.iter().collect::<HashSet<_>>().len() >= 2, "{seq:?}");
}

#[tokio::test]
async fn hash_on_the_client_address_is_sticky_per_client() {
    let ups = [
        Named::spawn("a").await,
        Named::spawn("b").await,
        Named::spawn("c").await,
    ];
    let proxy = ReverseProxy::builder(ups.iter().map(|u| upstream(u.addr)))
        .balance(Balance::Hash(HashKey::ClientIp))
        .build()
        .unwrap();
    let mut owner: HashMap<u8, String> = HashMap::new();
    for _ in 0..3 {
        for host in 1..=30u8 {
            // The port changes with every connection of a client; the hash must not.
            let client = SocketAddr::from(([198, 51, 100, host], 1000 + u16::from(host)));
            let name = send(&proxy, get_from("/", client)).await.text();
            assert_eq!(
                *owner.entry(host).or_insert_with(|| name.clone()),
                name,
                "{client}"
            );
        }
    }
    assert!(
        owner.values().collect::<HashSet<_>>().len() >= 2,
        "{owner:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Health
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn passive_health_skips_an_upstream_whose_port_is_closed_then_retries_it() {
    let a = Named::spawn("a").await;
    let b_addr = closed_port();
    let fail_timeout = Duration::from_secs(1);
    let proxy = ReverseProxy::builder([upstream(a.addr), upstream(b_addr)])
        .passive_health(PassiveHealth::new().max_fails(2).fail_timeout(fail_timeout))
        .build()
        .unwrap();
    // Every request succeeds: a refused connect moves on to the other upstream.
    let seq = names(&proxy, 10).await;
    assert!(seq.iter().all(|n| n == "a"), "{seq:?}");
    let marked_down = Instant::now();

    // B comes up on its old port, but it is in its cool-down: nothing goes there.
    let b = Named::spawn_on(TcpListener::bind(b_addr).await.unwrap(), "b");
    let seq = names(&proxy, 10).await;
    if marked_down.elapsed() < fail_timeout {
        assert_eq!(
            b.hits(),
            0,
            "an upstream in its cool-down got requests: {seq:?}"
        );
    }

    // After the cool-down it gets requests again.
    let deadline = Instant::now() + WAIT;
    while b.hits() == 0 {
        assert!(Instant::now() < deadline, "b never came back");
        assert_eq!(fetch(&proxy, "/").await.0, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        marked_down.elapsed() >= fail_timeout / 2,
        "b came back too soon"
    );
}

#[tokio::test]
async fn active_health_takes_an_upstream_down_and_brings_it_back() {
    let a = Named::spawn("a").await;
    let b_health = Arc::new(AtomicU16::new(503));
    let b_checks = Arc::new(AtomicUsize::new(0));
    let b = HttpUpstream::spawn({
        let b_health = Arc::clone(&b_health);
        let b_checks = Arc::clone(&b_checks);
        move |req: Request<hyper::body::Incoming>| {
            let status = b_health.load(Ordering::SeqCst);
            let checks = Arc::clone(&b_checks);
            async move {
                if req.uri().path() == "/healthz" {
                    checks.fetch_add(1, Ordering::SeqCst);
                    return Response::builder()
                        .status(status)
                        .body(Body::empty())
                        .unwrap();
                }
                Response::new(Body::from("b"))
            }
        }
    })
    .await;
    let mut active = ActiveHealth::new("/healthz");
    active.interval = Duration::from_millis(50);
    active.timeout = Duration::from_millis(500);
    active.passes = 1;
    active.fails = 1;
    let proxy = ReverseProxy::builder([upstream(a.addr), upstream(b.addr)])
        .active_health(active)
        .build()
        .unwrap();
    // The first request starts the checks.
    assert_eq!(fetch(&proxy, "/").await.0, StatusCode::OK);
    wait_until("b was checked", || b_checks.load(Ordering::SeqCst) >= 2).await;
    // B answers 503 to its checks: it is down, and every request goes to A.
    let seq = names(&proxy, 20).await;
    assert!(seq.iter().all(|n| n == "a"), "{seq:?}");

    b_health.store(200, Ordering::SeqCst);
    let checks = b_checks.load(Ordering::SeqCst);
    wait_until("b was checked again", || {
        b_checks.load(Ordering::SeqCst) >= checks + 2
    })
    .await;
    let seq = names(&proxy, 10).await;
    assert!(
        seq.iter().any(|n| n == "b"),
        "b passed its checks but got nothing: {seq:?}"
    );
}

// ---------------------------------------------------------------------------------------
// max_body
// ---------------------------------------------------------------------------------------

/// An upstream that reads a `Content-Length` body and answers with its length.
async fn body_counter() -> RawUpstream {
    RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        while let Some(head) = read_head(&mut s, &mut buf).await {
            let len: usize = head_field(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if !fill(&mut s, &mut buf, len).await {
                return;
            }
            buf.drain(..len);
            let body = format!("got {len}");
            let res = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if s.write_all(res.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await
}

fn post(len: usize) -> Request<Body> {
    Request::post("/upload")
        .header("host", "example.test")
        .header("content-length", len.to_string())
        .body(Body::from(vec![b'x'; len]))
        .unwrap()
}

#[tokio::test]
async fn content_length_over_max_body_gets_413_without_contacting_the_upstream() {
    let up = body_counter().await;
    let proxy = proxy_to(up.addr, |b| b.max_body(Some(1000)));
    let answer = send(&proxy, post(1001)).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(is_text_plain(&answer));
    assert_eq!(up.accepted(), 0, "the upstream was contacted");

    let answer = send(&proxy, post(1000)).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), "got 1000");
}

#[tokio::test]
async fn an_upload_refused_before_it_is_read_gets_the_upstreams_answer() {
    // The upstream answers at the head and never reads the body: 8 MiB fill every socket
    // buffer on the way, so a proxy that insists on sending the whole body first hangs.
    let up = RawUpstream::spawn(|mut s, _| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let _ = s
                .write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 6\r\n\r\nlog in")
                .await;
            std::future::pending::<()>().await;
        }
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b);
    let answer = tokio::time::timeout(WAIT, send(&proxy, post(8 << 20)))
        .await
        .expect("the answer came while the body was still going up");
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.text(), "log in");
}

#[tokio::test]
async fn unsized_body_growing_over_max_body_gets_413() {
    let up = HttpUpstream::spawn(|req: Request<hyper::body::Incoming>| async move {
        match req.into_body().collect().await {
            Ok(b) => Response::new(Body::from(format!("got {}", b.to_bytes().len()))),
            Err(_) => Response::builder().status(499).body(Body::empty()).unwrap(),
        }
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b.max_body(Some(1500)));
    let frames = (0..3).map(|_| {
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from(vec![b'x'; 1000])))
    });
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let req = Request::post("/upload")
        .header("host", "example.test")
        .body(body)
        .unwrap();
    let answer = send(&proxy, req).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_over_max_body_gets_413_or_closed_and_never_arrives_whole() {
    let whole = Arc::new(AtomicUsize::new(0));
    let w = Arc::clone(&whole);
    let up = HttpUpstream::spawn(move |req: Request<hyper::body::Incoming>| {
        let whole = Arc::clone(&w);
        async move {
            if req.into_body().collect().await.is_ok() {
                whole.fetch_add(1, Ordering::SeqCst);
            }
            Response::new(Body::from("took it"))
        }
    })
    .await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b.max_body(Some(1500))));
    let mut client = server.connect().await;
    let mut raw =
        b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        raw.extend_from_slice(b"3e8\r\n");
        raw.extend_from_slice(&[b'x'; 1000]);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    // The server may close before taking it all.
    let _ = client.stream.write_all(&raw).await;
    match client.response().await {
        Read::Complete(resp) => assert_eq!(resp.status, 413, "{}", resp.head),
        Read::Truncated(None) => {}
        Read::Truncated(Some(resp)) => panic!("broken response: {resp:?}"),
    }
    assert_eq!(
        whole.load(Ordering::SeqCst),
        0,
        "the upstream got the whole oversized body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_servers_limit_gets_413_not_400() {
    let up = HttpUpstream::spawn(|req: Request<hyper::body::Incoming>| async move {
        let _ = req.into_body().collect().await;
        Response::new(Body::from("took it"))
    })
    .await;
    let mut limits = scb_core::server::Limits::default();
    limits.max_body_bytes = 1500;
    // No `max_body` of the proxy's own: the server's limit is the one that trips.
    let server = ProxyServer::start_with_limits(&proxy_to(up.addr, |b| b), limits);
    for (framing, body) in [
        ("Transfer-Encoding: chunked", {
            let mut raw = Vec::new();
            for _ in 0..3 {
                raw.extend_from_slice(b"3e8\r\n");
                raw.extend_from_slice(&[b'x'; 1000]);
                raw.extend_from_slice(b"\r\n");
            }
            raw.extend_from_slice(b"0\r\n\r\n");
            raw
        }),
        ("Content-Length: 3000", vec![b'x'; 3000]),
    ] {
        let mut client = server.connect().await;
        let mut raw = format!("POST /upload HTTP/1.1\r\nHost: t\r\n{framing}\r\n\r\n").into_bytes();
        raw.extend_from_slice(&body);
        let _ = client.stream.write_all(&raw).await;
        match client.response().await {
            Read::Complete(resp) => assert_eq!(resp.status, 413, "{framing}: {}", resp.head),
            other => panic!("{framing}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_invalid_host_is_400_and_never_forwarded() {
    let up = head_echo().await;
    let proxy = proxy_to(up.addr, |b| b);
    for host in ["a b/c", "user@example.com", "example.com:http"] {
        let req = Request::get("/")
            .header("host", host)
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            send(&proxy, req).await.status,
            StatusCode::BAD_REQUEST,
            "{host}"
        );
    }
    assert_eq!(up.accepted(), 0);
}

// ---------------------------------------------------------------------------------------
// Upgrades
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_joins_client_and_upstream() {
    let upstream_head = Arc::new(Mutex::new(String::new()));
    let h = Arc::clone(&upstream_head);
    let up = RawUpstream::spawn(move |mut s, _| {
        let h = Arc::clone(&h);
        async move {
            let mut buf = Vec::new();
            let Some(head) = read_head(&mut s, &mut buf).await else {
                return;
            };
            *h.lock().unwrap() = head;
            let res = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                       Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
            if s.write_all(res.as_bytes()).await.is_err() {
                return;
            }
            // Echo whatever comes, including anything sent right behind the head.
            if !buf.is_empty() && s.write_all(&buf).await.is_err() {
                return;
            }
            let mut chunk = Vec::new();
            loop {
                chunk.clear();
                if !read_more(&mut s, &mut chunk).await || s.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let mut client = server.connect().await;
    client
        .send(
            b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .await;
    let head = client.head().await;
    assert_eq!(head.status, 101, "{}", head.head);
    assert_eq!(
        head.header("upgrade")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("websocket")
    );

    let seen = upstream_head.lock().unwrap().clone();
    assert_eq!(head_field(&seen, "upgrade"), Some("websocket"), "{seen}");
    assert!(
        head_field(&seen, "connection").is_some_and(|c| c.to_ascii_lowercase().contains("upgrade")),
        "{seen}"
    );
    assert_eq!(
        head_field(&seen, "sec-websocket-key"),
        Some("dGhlIHNhbXBsZSBub25jZQ==")
    );

    client.send(b"ping over the upgrade").await;
    assert!(client.read_until(b"ping over the upgrade").await);
    let binary: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
    client.buf.clear();
    client.send(&binary).await;
    let mut got = std::mem::take(&mut client.buf);
    assert!(
        tokio::time::timeout(WAIT, fill(&mut client.stream, &mut got, binary.len()))
            .await
            .unwrap(),
        "the upgraded connection closed"
    );
    assert!(got == binary, "echoed bytes differ");
}

// ---------------------------------------------------------------------------------------
// Request smuggling toward the upstream
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_framing_gets_400_and_never_reaches_the_upstream() {
    let up = RawUpstream::silent().await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    let cases: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 40\r\n\r\nhello",
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n Content-Length: 5\r\n\r\n0\r\n\r\n",
    ];
    for raw in cases {
        let mut client = server.connect().await;
        client.send(raw).await;
        let resp = client.complete().await;
        assert_eq!(resp.status, 400, "{}", String::from_utf8_lossy(raw));
        assert!(resp.header("x-request-id").is_some());
    }
    assert_eq!(
        up.accepted(),
        0,
        "an ambiguous request reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_chunk_sizes_get_400_and_nothing_whole_reaches_the_upstream() {
    let received = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let r = Arc::clone(&received);
    let up = RawUpstream::spawn(move |mut s, _| {
        let r = Arc::clone(&r);
        async move {
            let mut buf = Vec::new();
            drain_to_eof(&mut s, &mut buf).await;
            r.lock().unwrap().push(buf);
        }
    })
    .await;
    let server = ProxyServer::start(&proxy_to(up.addr, |b| b));
    // (request, whether its first chunk is valid and may be streamed up before the error)
    let cases: &[(&[u8], bool)] = &[
        (
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
            false,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
            false,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
            false,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n5 x\r\nworld\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n",
            true,
        ),
    ];
    for &(raw, valid_start) in cases {
        let what = String::from_utf8_lossy(raw);
        let before = received.lock().unwrap().len();
        let mut client = server.connect().await;
        client.send(raw).await;
        let resp = client.complete().await;
        assert_eq!(resp.status, 400, "{what}");
        assert!(resp.header("x-request-id").is_some());
        assert!(client.closed().await);
        // Whatever upstream connections were made are over before their bytes are read.
        wait_until("the upstream connections ended", || {
            received.lock().unwrap().len() == up.accepted()
        })
        .await;
        let received = received.lock().unwrap();
        for bytes in &received[before..] {
            let got = String::from_utf8_lossy(bytes);
            assert!(
                !got.contains("smuggled"),
                "smuggled request reached the upstream: {got}"
            );
            assert!(
                !got.ends_with("0\r\n\r\n"),
                "a whole message reached the upstream: {got}"
            );
            if !valid_start {
                assert!(bytes.is_empty(), "for {what}\nthe upstream got: {got}");
            }
        }
    }
}

#[tokio::test]
async fn the_upstream_is_noted_for_the_access_log_above_and_nothing_is_added_without_it() {
    let up = HttpUpstream::spawn(|_req: Request<hyper::body::Incoming>| async move {
        Response::new(Body::from("ok"))
    })
    .await;
    let proxy = proxy_to(up.addr, |b| b);
    let res = proxy.clone().oneshot(get("/")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.extensions().is_empty(), "no access log, nothing added");

    let path = std::env::temp_dir().join(format!(
        "scb-proxy-upstream-note-{}-{}.log",
        std::process::id(),
        fastrand::u64(..)
    ));
    let writer = scb_core::access_log::AccessLogWriter::file(
        &path,
        scb_core::access_log::AccessLogFormat::Json,
    )
    .unwrap();
    let logged = tower::ServiceBuilder::new()
        .layer(scb_core::access_log::AccessLogLayer::new().writer(writer.clone()))
        .service(proxy);
    let res = logged.oneshot(get("/")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(writer.close(Duration::from_secs(10)));
    let line = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        line.contains(&format!("\"upstream\":\"{}\"", up.addr)),
        "{line}"
    );
}

/// The access log's `{upstream} {upstream_status} {upstream_time_ms}` after `proxy`
/// answered one request.
async fn upstream_fields(proxy: ReverseProxy) -> String {
    let path = std::env::temp_dir().join(format!(
        "scb-proxy-upstream-status-{}-{}.log",
        std::process::id(),
        fastrand::u64(..)
    ));
    let template = scb_core::access_log::AccessLogTemplate::parse(
        "{status} {upstream} {upstream_status} {upstream_time_ms}",
    )
    .unwrap();
    let writer = scb_core::access_log::AccessLogWriter::file(&path, template.into()).unwrap();
    let logged = tower::ServiceBuilder::new()
        .layer(scb_core::access_log::AccessLogLayer::new().writer(writer.clone()))
        .service(proxy);
    logged.oneshot(get("/")).await.unwrap();
    assert!(writer.close(Duration::from_secs(10)));
    let line = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    line
}

#[tokio::test]
async fn the_upstream_s_status_and_time_are_noted_and_a_dash_when_none_answered() {
    let up = HttpUpstream::spawn(|_req: Request<hyper::body::Incoming>| async move {
        let mut res = Response::new(Body::from("gone"));
        *res.status_mut() = StatusCode::GONE;
        res
    })
    .await;
    let line = upstream_fields(proxy_to(up.addr, |b| b)).await;
    let fields: Vec<&str> = line.trim_end().split(' ').collect();
    assert_eq!(fields[..3], ["410", &up.addr.to_string(), "410"], "{line}");
    let ms: f64 = fields[3].parse().unwrap();
    assert!((0.0..10_000.0).contains(&ms), "{line}");

    // Refused: the upstream tried is named, but nothing answered.
    let dead = closed_port();
    let line = upstream_fields(proxy_to(dead, |b| b)).await;
    assert_eq!(line, format!("502 {dead} - -\n"));
}

// ---------------------------------------------------------------------------------------
// Unix domain socket upstreams
// ---------------------------------------------------------------------------------------

/// An upstream on a Unix socket answering `unix <path>` to every request, keep-alive,
/// counting its connections.
async fn unix_upstream(name: &str) -> (std::path::PathBuf, Arc<AtomicUsize>) {
    use tokio::io::AsyncReadExt as _;
    let path = std::env::temp_dir().join(format!("scb-proxy-{}-{name}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = find(&buf, b"\r\n\r\n") else {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end + 4);
                    let path = head.split(' ').nth(1).unwrap_or("?").to_owned();
                    let host = head_field(&head, "host").unwrap_or("-").to_owned();
                    let body = format!("unix {path} host={host}");
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (path, connections)
}

#[tokio::test]
async fn a_unix_socket_upstream_is_proxied_to_and_its_connections_reused() {
    let (path, connections) = unix_upstream("reuse").await;
    let addr = format!("unix:{}", path.display());
    let upstream = scb_proxy::Upstream::new(&addr).unwrap();
    assert_eq!(upstream.to_string(), addr);
    let proxy = ReverseProxy::builder([upstream])
        .preserve_host(false)
        .active_health(ActiveHealth::new("/healthz"))
        .build()
        .unwrap();
    for n in 0..3 {
        let (status, text) = fetch(&proxy, &format!("/n/{n}")).await;
        assert_eq!(status, StatusCode::OK);
        // Without the client's Host, a Unix upstream is `localhost`.
        assert_eq!(text, format!("unix /n/{n} host=localhost"));
    }
    // One connection for the three requests (health checks open their own, so at most
    // a few more; never one per request).
    assert!(connections.load(Ordering::SeqCst) < 3, "{connections:?}");
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_unix_socket_nobody_listens_on_is_a_502_and_a_bad_path_is_refused() {
    let missing =
        std::env::temp_dir().join(format!("scb-proxy-{}-absent.sock", std::process::id()));
    let proxy =
        ReverseProxy::builder([
            scb_proxy::Upstream::new(&format!("unix:{}", missing.display())).unwrap(),
        ])
        .build()
        .unwrap();
    assert_eq!(fetch(&proxy, "/").await.0, StatusCode::BAD_GATEWAY);
    for bad in ["unix:relative.sock", "unix:"] {
        assert!(scb_proxy::Upstream::new(bad).is_err(), "{bad}");
    }
}
