//! `[metrics]` over real sockets: every response counted once, whoever answered it (a
//! route, the https redirect, a 421 for an unknown host, the server's own refusal of a
//! broken head), and what operators look at first: process figures, the build, open
//! connections per listener, TLS handshakes and why they failed.

mod support;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;

use support::{Server, get, metric, request};

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("metrics-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sum of every `scb_http_requests_total` series in `scrape`.
fn requests_total(scrape: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with("scb_http_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends `raw` on a new connection and reads until the server closes it.
fn raw_exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(support::TIMEOUT)).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn every_response_is_counted_once_whoever_answered_it() {
    let dir = dir("once");
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
    let config = format!(
        "[server]\nworkers = 1\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nredirect_https = true\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = {c:?}, key = {k:?} }}\n\
         [[site]]\nhosts = [\"test\"]\n\
         [[site.route]]\nname = \"hello\"\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n",
        c = dir.join("c.pem").display().to_string(),
        k = dir.join("k.pem").display().to_string(),
    );
    let server = Server::start(&config);
    let (plain, redirecting, secure) = (server.addrs[0], server.addrs[1], server.addrs[2]);
    let scrape = || get(server.metrics.unwrap(), "/metrics").text().to_owned();
    let before = scrape();
    assert_eq!(requests_total(&before), 0.0, "{before}");

    // A route's 200 and a site's 404, a 421 for a host no site has, the https redirect.
    assert_eq!(get(plain, "/hello").status, 200);
    assert_eq!(get(plain, "/nowhere").status, 404);
    let other = request(
        plain,
        "GET /hello HTTP/1.1\r\nHost: elsewhere\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(other.status, 421);
    assert_eq!(get(redirecting, "/hello").status, 308);
    // The server's own refusals: a malformed head (400) and one too large (431).
    assert!(raw_exchange(plain, b"GET / HTTP/1.1\r\nHost t\r\n\r\n").starts_with("HTTP/1.1 400"));
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    assert!(raw_exchange(plain, huge.as_bytes()).starts_with("HTTP/1.1 431"));
    // A TLS handshake that fails (plain HTTP to the TLS port) and one that succeeds.
    let _ = raw_exchange(secure, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let client = support::tls::client(&[cert.der()]);
    let mut tls = support::tls::connect(secure, &client);
    assert!(support::tls::request(&mut tls, "/nowhere").starts_with("HTTP/1.1 421"));

    let text = scrape();
    for (series, want) in [
        (
            r#"scb_http_requests_total{route="hello",method="GET",status="200"}"#,
            1.0,
        ),
        (
            r#"scb_http_requests_total{route="unmatched",method="GET",status="404"}"#,
            1.0,
        ),
        (
            r#"scb_http_requests_total{route="unmatched",method="GET",status="421"}"#,
            2.0,
        ),
        (
            r#"scb_http_requests_total{route="https_redirect",method="GET",status="308"}"#,
            1.0,
        ),
        (
            r#"scb_http_requests_total{route="server",method="other",status="400"}"#,
            1.0,
        ),
        (
            r#"scb_http_requests_total{route="server",method="other",status="431"}"#,
            1.0,
        ),
    ] {
        assert_eq!(metric(&text, series), Some(want), "{series} in\n{text}");
    }
    // Seven responses, seven counts: none twice, none missing.
    assert_eq!(requests_total(&text), 7.0, "{text}");

    let listener =
        |name: &str, addr: std::net::SocketAddr| format!("{name}{{listener=\"{addr}\"}}");
    let tls_result = |result: &str| {
        format!("scb_tls_handshakes_total{{listener=\"{secure}\",result=\"{result}\"}}")
    };
    assert_eq!(metric(&text, &tls_result("ok")), Some(1.0), "{text}");
    assert_eq!(metric(&text, &tls_result("protocol")), Some(1.0), "{text}");
    // The TLS connection is still open; every plain one has closed.
    assert_eq!(
        metric(&text, &listener("scb_connections_open", secure)),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, &listener("scb_connections_open", plain)),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, &listener("scb_connections_total", plain)),
        Some(5.0),
        "{text}"
    );
    // The one worker holds the one open connection, whichever listener took it.
    assert_eq!(
        metric(&text, r#"scb_worker_connections_open{worker="0"}"#),
        Some(1.0),
        "{text}"
    );
    drop(tls);

    // The process and the build.
    // (CPU seconds count in 10 ms ticks: a quiet test process may have none yet.)
    assert!(
        metric(&text, "process_cpu_seconds_total").is_some(),
        "{text}"
    );
    for name in ["process_resident_memory_bytes", "process_open_fds"] {
        assert!(
            metric(&text, name).is_some_and(|v| v > 0.0),
            "{name} in\n{text}"
        );
    }
    let version = format!(
        "scb_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(metric(&text, &version), Some(1.0), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Counts stay exact with more workers than the recorder has shards of their own (the
/// machine's parallelism plus four): those past them add into a shared shard atomically,
/// the others into their own without atomic additions. Requests from many threads on new
/// connections, spread by the kernel over the workers' listeners.
#[test]
fn counts_are_exact_with_more_workers_than_owned_shards() {
    const THREADS: usize = 16;
    const EACH: usize = 60;
    let parallelism = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let workers = parallelism + 8;
    let config = format!(
        "[server]\nworkers = {workers}\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"hello\"\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n"
    );
    let server = Server::start(&config);
    let addr = server.addrs[0];
    let clients: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..EACH {
                    let answer = raw_exchange(
                        addr,
                        b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                    );
                    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    let text = get(server.metrics.unwrap(), "/metrics").text().to_owned();
    let sent = (THREADS * EACH) as f64;
    for (series, want) in [
        (
            r#"scb_http_requests_total{route="hello",method="GET",status="200"}"#,
            sent,
        ),
        (
            r#"scb_http_request_duration_seconds_count{route="hello"}"#,
            sent,
        ),
        (
            r#"scb_http_response_bytes_total{route="hello"}"#,
            2.0 * sent,
        ),
        ("scb_http_requests_in_flight", 0.0),
    ] {
        assert_eq!(metric(&text, series), Some(want), "{series} in\n{text}");
    }
}
