//! The response cache through the binary: a `cache` route over a real socket, in front
//! of an origin that counts what reaches it. Sequences, not single events: hits after a
//! store, a HEAD, a range and a conditional answered from it, an unsafe method that
//! invalidates it, a crowd of clients on one expired key, then the origin gone with
//! `stale-if-error` set by the route.

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{Server, request};

/// An origin answering every GET with `max-age=MAX_AGE` and a body naming how many requests
/// it has seen, slowly (so concurrent misses overlap), and POSTs with 204. It stops
/// answering once `alive` is cleared: connections are then closed unanswered.
struct Origin {
    addr: SocketAddr,
    seen: Arc<AtomicUsize>,
    alive: Arc<std::sync::atomic::AtomicBool>,
}

impl Origin {
    fn start(max_age: u32) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (s, a) = (Arc::clone(&seen), Arc::clone(&alive));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (s, a) = (Arc::clone(&s), Arc::clone(&a));
                std::thread::spawn(move || {
                    let _ = answer(stream, &s, &a, max_age);
                });
            }
        });
        Self { addr, seen, alive }
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

fn answer(
    stream: TcpStream,
    seen: &AtomicUsize,
    alive: &std::sync::atomic::AtomicBool,
    max_age: u32,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 || header == "\r\n" {
                break;
            }
        }
        if !alive.load(Ordering::SeqCst) {
            return Ok(());
        }
        let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
        if line.starts_with("POST") {
            stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n")?;
            continue;
        }
        std::thread::sleep(Duration::from_millis(200));
        let body = format!("response {n}\n");
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nCache-Control: max-age={max_age}\r\nETag: \"{n}\"\r\n\
             Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
    }
}

/// The whole exchange as text, read to the end.
fn raw(addr: SocketAddr, request: &str) -> String {
    use std::io::Read as _;
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

fn send(addr: SocketAddr, method: &str, path: &str, extra: &str) -> support::Response {
    request(
        addr,
        &format!("{method} {path} HTTP/1.1\r\nHost: test\r\n{extra}Connection: close\r\n\r\n"),
    )
}

#[test]
fn a_cache_route_stores_answers_invalidates_collapses_and_serves_stale_when_the_origin_fails() {
    let origin = Origin::start(1);
    let server = Server::start(&format!(
        "[server]\nworkers = 2\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"api\"\nprefix = \"/\"\nproxy = {{ upstreams = [\"{}\"], max_tries = 1 }}\n\
         cache = {{ max_bytes = \"1MiB\", stale_if_error = \"1h\" }}\n",
        origin.addr
    ));
    let addr = server.addr();

    let first = send(addr, "GET", "/a", "");
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("cache-status"),
        Some("scb; fwd=uri-miss; stored")
    );
    assert_eq!(first.text(), "response 1\n");
    let hit = send(addr, "GET", "/a", "");
    assert_eq!(hit.header("cache-status"), Some("scb; hit"));
    assert_eq!(hit.text(), "response 1\n");
    assert!(hit.header("age").is_some());
    assert!(hit.header("x-request-id").is_some());
    let head = raw(
        addr,
        "HEAD /a HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.ends_with("\r\n\r\n"),
        "no body after a HEAD's head: {head}"
    );
    assert!(head.contains("content-length: 11\r\n"), "{head}");
    assert!(head.contains("cache-status: scb; hit\r\n"), "{head}");
    let range = send(addr, "GET", "/a", "Range: bytes=0-7\r\n");
    assert_eq!((range.status, range.text()), (206, "response"));
    let conditional = send(addr, "GET", "/a", "If-None-Match: \"1\"\r\n");
    assert_eq!(conditional.status, 304);
    assert_eq!(origin.seen(), 1, "one trip to the origin so far");

    // An unsafe method drops what is stored for its URI.
    assert_eq!(
        send(addr, "POST", "/a", "Content-Length: 0\r\n").status,
        204
    );
    let refetched = send(addr, "GET", "/a", "");
    assert_eq!(refetched.text(), "response 3\n");
    assert_eq!(origin.seen(), 3);

    // A crowd on a key nobody has fetched: one request reaches the origin, on either
    // worker.
    let before = origin.seen();
    let crowd: Vec<_> = (0..20)
        .map(|_| std::thread::spawn(move || send(addr, "GET", "/popular", "")))
        .collect();
    let bodies: Vec<String> = crowd
        .into_iter()
        .map(|c| c.join().unwrap().text().to_owned())
        .collect();
    assert!(bodies.iter().all(|b| *b == bodies[0]), "{bodies:?}");
    assert_eq!(
        origin.seen() - before,
        1,
        "collapsed to one upstream request"
    );

    // The origin dies; once the stored answer is stale, the route's stale_if_error
    // serves it, again and again.
    origin.alive.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(2100));
    for _ in 0..3 {
        let stale = send(addr, "GET", "/popular", "");
        assert_eq!(stale.status, 200);
        assert_eq!(stale.text(), bodies[0]);
        let status = stale.header("cache-status").unwrap();
        assert!(status.contains("stale-if-error"), "{status}");
    }
    // Nothing stored for this one: the client gets the proxy's error.
    assert_eq!(send(addr, "GET", "/never", "").status, 502);

    let scrape = support::get(server.metrics.unwrap(), "/metrics")
        .text()
        .to_owned();
    let count = |result: &str| {
        support::metric(
            &scrape,
            &format!(r#"scb_cache_requests_total{{route="api",result="{result}"}}"#),
        )
        .unwrap_or(0.0)
    };
    // Hits: GET, HEAD, range, conditional, and 19 of the crowd (the 20th filled).
    assert_eq!(count("hit"), 23.0, "{scrape}");
    assert_eq!(count("stale"), 3.0, "{scrape}");
    assert_eq!(count("pass"), 1.0, "the POST: {scrape}");
    assert_eq!(count("miss"), 4.0, "/a twice, /popular, /never: {scrape}");
    assert!(
        support::metric(&scrape, r#"scb_cache_bytes{route="api"}"#).is_some_and(|b| b > 0.0),
        "{scrape}"
    );

    // A purge, on the metrics listener only: /a is gone (and the origin is down).
    assert_eq!(send(addr, "GET", "/a", "").status, 200, "still stored");
    let purge = |query: &str| {
        request(
            server.metrics.unwrap(),
            &format!(
                "POST /cache/purge?{query} HTTP/1.1\r\nHost: m\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            ),
        )
    };
    let purged = purge("path=/a&route=api");
    assert_eq!((purged.status, purged.text()), (200, "{\"purged\": 1}\n"));
    assert_eq!(purge("route=api").status, 400);
    assert_eq!(
        send(addr, "GET", "/a", "").status,
        502,
        "purged: asked of the dead origin"
    );
}

/// `curl --http2 http://...` asks to upgrade; scb answers over HTTP/1.1 through hyper, which
/// stops reading a body once its declared length is written. The answer is stored all the
/// same, and the next request (plain, then upgrading again) is a hit. (`close` as well: the
/// test reads each answer to its end.)
#[test]
fn a_get_that_asks_to_upgrade_to_h2c_is_stored_like_any_other() {
    let origin = Origin::start(60);
    let server = Server::start(&format!(
        "[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{}\"] }}\n\
         cache = {{ max_bytes = \"1MiB\" }}\n",
        origin.addr
    ));
    let addr = server.addr();
    let upgrade = "Connection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\n\
                   HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
    let first = raw(
        addr,
        &format!("GET /u HTTP/1.1\r\nHost: test\r\n{upgrade}\r\n"),
    );
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(
        first.contains("cache-status: scb; fwd=uri-miss; stored\r\n"),
        "{first}"
    );
    assert!(first.ends_with("response 1\n"), "{first}");
    let plain = send(addr, "GET", "/u", "");
    assert_eq!(plain.header("cache-status"), Some("scb; hit"));
    assert_eq!(plain.text(), "response 1\n");
    let again = raw(
        addr,
        &format!("GET /u HTTP/1.1\r\nHost: test\r\n{upgrade}\r\n"),
    );
    assert!(again.contains("cache-status: scb; hit\r\n"), "{again}");
    assert!(again.ends_with("response 1\n"), "{again}");
    assert_eq!(origin.seen(), 1);
}

#[test]
fn a_cache_key_on_a_route_without_a_proxy_is_refused_with_its_place() {
    let out = support::check(
        "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\nprefix = \"/\"\n\
         respond = { body = \"x\" }\ncache = { max_bytes = \"1MiB\" }\n",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("route[0].cache") && err.contains(":6:"),
        "{err}"
    );
}

#[test]
fn a_reload_keeps_what_the_cache_stored_even_during_a_fill_and_a_new_bound_starts_empty() {
    use rustix::process::Signal;
    // Fresh for the whole test, however slow the machine: every second trip is a loss.
    let origin = Origin::start(3600);
    let config = |max_bytes: &str, extra: &str| {
        format!(
            "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\nname = \"api\"\nprefix = \"/\"\n\
             proxy = {{ upstreams = [\"{}\"] }}\ncache = {{ max_bytes = \"{max_bytes}\" }}\n{extra}",
            origin.addr
        )
    };
    let mut server = Server::start(&config("1MiB", ""));
    let addr = server.addr();
    // A fill under way (the origin has the request and takes 200 ms) when the reload
    // comes.
    let filling = std::thread::spawn(move || send(addr, "GET", "/k", ""));
    while origin.seen() == 0 {
        std::thread::yield_now();
    }
    server.rewrite_config(&config(
        "1MiB",
        "[[route]]\npath = \"/other\"\nrespond = { body = \"new\" }\n",
    ));
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    assert_eq!(
        send(addr, "GET", "/other", "").text(),
        "new",
        "the reload took effect"
    );
    let filled = filling.join().unwrap();
    assert_eq!(filled.text(), "response 1\n");
    let after = send(addr, "GET", "/k", "");
    assert_eq!(after.text(), "response 1\n");
    assert_eq!(
        origin.seen(),
        1,
        "the fill begun before the reload serves after it"
    );

    // A different bound is a new store.
    server.rewrite_config(&config("2MiB", ""));
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    let fresh = send(addr, "GET", "/k", "");
    assert_eq!(
        fresh.header("cache-status"),
        Some("scb; fwd=uri-miss; stored")
    );
    assert_eq!(origin.seen(), 2);
}

/// The bytes of the large object the `large` origin serves.
fn large_body() -> Vec<u8> {
    (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

/// An origin answering every GET with [`large_body`], fresh for a minute, counting.
fn large_origin() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                            break;
                        }
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    let body = large_body();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: \"big\"\r\n\
                         Content-Length: {}\r\n\r\n",
                        body.len()
                    );
                    if stream.write_all(head.as_bytes()).is_err()
                        || stream.write_all(&body).is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[test]
fn a_large_stored_body_is_sent_whole_from_its_sealed_file_and_a_key_template_shares_queries() {
    let (origin, seen) = large_origin();
    let server = Server::start(&format!(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/shared/\"\nproxy = {{ upstreams = [\"{origin}\"] }}\n\
         cache = {{ max_bytes = \"16MiB\", key = \"{{host}}{{path}}\" }}\n\
         [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{origin}\"] }}\n\
         cache = {{ max_bytes = \"16MiB\" }}\n"
    ));
    let addr = server.addr();
    let big = large_body();
    let first = send(addr, "GET", "/big", "");
    assert_eq!(
        first.header("cache-status"),
        Some("scb; fwd=uri-miss; stored")
    );
    assert_eq!(first.body, big);
    // Hits, several in a row and on a kept-alive connection too: whole, and the same.
    for _ in 0..3 {
        let hit = send(addr, "GET", "/big", "");
        assert_eq!(hit.header("cache-status"), Some("scb; hit"));
        assert_eq!(hit.header("content-length"), Some("300000"));
        assert_eq!(hit.body, big);
    }
    let two = {
        use std::io::Read as _;
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(
                b"GET /big HTTP/1.1\r\nHost: test\r\n\r\n\
                  GET /big HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
            )
            .unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).unwrap();
        out
    };
    let hits = two
        .windows(b"cache-status: scb; hit".len())
        .filter(|w| *w == b"cache-status: scb; hit")
        .count();
    assert_eq!(hits, 2);
    assert!(two.len() > 2 * big.len(), "two heads and two whole bodies");
    let second_body = &two[two.len() - big.len()..];
    assert_eq!(
        second_body,
        &big[..],
        "the second answer ends with the whole body"
    );
    // A HEAD first: fetched as the GET and stored, the head alone sent, with its length.
    let head = raw(
        addr,
        "HEAD /head-first HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    );
    assert!(
        head.contains("cache-status: scb; fwd=uri-miss; stored\r\n"),
        "{head}"
    );
    assert!(head.contains("content-length: 300000\r\n"), "{head}");
    assert!(
        head.ends_with("\r\n\r\n"),
        "no body after a HEAD's head: {head}"
    );
    let after = send(addr, "GET", "/head-first", "");
    assert_eq!(after.header("cache-status"), Some("scb; hit"));
    assert_eq!(after.body, big);
    let range = send(addr, "GET", "/big", "Range: bytes=150000-150099\r\n");
    assert_eq!(range.status, 206);
    assert_eq!(range.body, &big[150_000..150_100]);
    assert_eq!(seen.load(Ordering::SeqCst), 2);

    // The template without `{query}`: every query of a path is one stored response.
    assert_eq!(
        send(addr, "GET", "/shared/x?utm=1", "").header("cache-status"),
        Some("scb; fwd=uri-miss; stored")
    );
    let shared = send(addr, "GET", "/shared/x?utm=2", "");
    assert_eq!(shared.header("cache-status"), Some("scb; hit"));
    assert_eq!(shared.body, big);
    // The default key keeps queries apart.
    assert_eq!(
        send(addr, "GET", "/big?v=2", "").header("cache-status"),
        Some("scb; fwd=uri-miss; stored")
    );
    assert_eq!(seen.load(Ordering::SeqCst), 4);
}

/// Waits for the cache's disk tier to have scanned its directory (the line may have come
/// before the listeners'); the line.
fn disk_ready(server: &mut Server) -> String {
    let ready = |l: &str| l.contains("cache disk tier ready");
    match server.log.iter().find(|l| ready(l)) {
        Some(line) => line.clone(),
        None => server.wait_for_line(ready),
    }
}

/// The records in a disk tier's directory.
fn records(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .count()
    })
}

#[test]
fn a_disk_tier_survives_a_restart_and_a_reload_and_a_removed_directory_costs_one_log_line() {
    use rustix::process::Signal;
    let (origin, seen) = large_origin();
    let dir = std::env::temp_dir().join(format!("scb-cache-bin-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let config = format!(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"assets\"\nprefix = \"/\"\nproxy = {{ upstreams = [\"{origin}\"] }}\n\
         cache = {{ max_bytes = \"16MiB\", path = \"{}\", disk_max_bytes = \"64MiB\" }}\n",
        dir.display()
    );
    let mut server = Server::start(&config);
    assert!(disk_ready(&mut server).contains("records=0"));
    let big = large_body();
    for path in ["/one", "/two"] {
        let res = send(server.addr(), "GET", path, "");
        assert_eq!(
            res.header("cache-status"),
            Some("scb; fwd=uri-miss; stored")
        );
        assert_eq!(res.body, big);
    }
    // The writer is a thread of its own: the records appear when it has written them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while records(&dir) < 2 {
        assert!(std::time::Instant::now() < deadline, "no records written");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.terminate();
    assert!(server.wait().success());

    // A new process: what was stored is answered from disk, the origin is not asked.
    let mut server = Server::start(&config);
    assert!(
        disk_ready(&mut server).contains("records=2"),
        "{:?}",
        server.log
    );
    let addr = server.addr();
    for path in ["/one", "/two", "/one"] {
        let res = send(addr, "GET", path, "");
        assert_eq!(res.header("cache-status"), Some("scb; hit"), "{path}");
        assert_eq!(res.body, big);
    }
    let head = raw(
        addr,
        "HEAD /two HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
    );
    assert!(head.contains("cache-status: scb; hit\r\n"), "{head}");
    assert!(head.contains("content-length: 300000\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
    let range = send(addr, "GET", "/one", "Range: bytes=299990-\r\n");
    assert_eq!((range.status, &range.body[..]), (206, &big[299_990..]));
    assert_eq!(seen.load(Ordering::SeqCst), 2);

    // A reload keeps the store, disk tier included.
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    assert_eq!(
        send(addr, "GET", "/two", "").header("cache-status"),
        Some("scb; hit")
    );

    // The directory removed under it: new responses are stored in memory and answered,
    // and the log says so once.
    std::fs::remove_dir_all(&dir).unwrap();
    for path in ["/three", "/four", "/five"] {
        let miss = send(addr, "GET", path, "");
        assert_eq!(
            miss.header("cache-status"),
            Some("scb; fwd=uri-miss; stored")
        );
        let hit = send(addr, "GET", path, "");
        assert_eq!(hit.header("cache-status"), Some("scb; hit"), "{path}");
        assert_eq!(hit.body, big);
    }
    server.terminate();
    assert!(server.wait().success());
    let unusable = server
        .log
        .iter()
        .filter(|l| l.contains("cache disk tier unusable"))
        .count();
    assert_eq!(unusable, 1, "{:?}", server.log);
    assert_eq!(seen.load(Ordering::SeqCst), 5);
}
