//! `[tracing]` in the real binary, against an OTLP receiver that decodes what it gets
//! with the protocol's own types: a client's trace continued through the proxy (the
//! upstream told of the exchange's span, which is a child of the server's), parent-based
//! sampling, `{trace_id}` in the access log and in an error page, a failed upstream's
//! span, and a collector that is down at first (requests unharmed, spans counted as
//! dropped) until a reload points at one that is up and raises the ratio.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use support::otlp::{Collector, Received};
use support::{Server, TIMEOUT, echo_upstream, get, lines, metric, request};

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tracing-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A port nothing listens on.
fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

fn config(otlp: &str, ratio: f64, dir: &Path, echo: std::net::SocketAddr) -> String {
    let dead = closed_port();
    let log = dir.join("access.log");
    let page = dir.join("502.html");
    format!(
        "[server]\nworkers = 2\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n\
         [tracing]\notlp = \"{otlp}\"\nservice_name = \"edge-test\"\nsample_ratio = {ratio:?}\n\
         [log]\naccess = {{ path = {log:?}, format = '{{status}} {{trace_id}} {{path}}' }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[site]]\nerror_pages = {{ 502 = {page:?} }}\n\
         [[site.route]]\nname = \"api\"\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{echo}\"] }}\n\
         [[site.route]]\nname = \"down\"\nprefix = \"/down/\"\nproxy = {{ upstreams = [\"{dead}\"] }}\n\
         [[site.route]]\nname = \"hello\"\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n",
        log = log.display().to_string(),
        page = page.display().to_string(),
    )
}

fn scrape(server: &Server) -> String {
    get(server.metrics.unwrap(), "/metrics").text().to_owned()
}

/// A metric once it reaches `at_least` (the exporter counts when a batch is done).
fn wait_metric(server: &Server, series: &str, at_least: f64) -> f64 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let value = metric(&scrape(server), series).unwrap_or(0.0);
        if value >= at_least {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {value}, not {at_least}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn traces_continue_through_the_proxy_and_reach_the_collector_whatever_it_does() {
    let dir = temp_dir("sequence");
    std::fs::write(
        dir.join("502.html"),
        "<p>upstream down; trace {trace_id}, request {request_id}</p>",
    )
    .unwrap();
    let log = dir.join("access.log");
    let echo = echo_upstream();
    let collector = Collector::start();
    // First the collector is down: nothing a client sees may change.
    let down = format!("http://{}", closed_port());
    let mut server = Server::start(&config(&down, 0.0, &dir, echo));
    let addr = server.addr();
    let traced = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: app.test\r\n\
             traceparent: 00-{CLIENT_TRACE}-{CLIENT_SPAN}-01\r\ntracestate: vendor=abc\r\n\
             Connection: close\r\n\r\n"
        )
    };
    for _ in 0..5 {
        let res = request(addr, &traced("/api/x"));
        assert_eq!(res.status, 200, "{}", res.text());
    }
    // Sampled by the client, so exported, and every batch failed: counted, not waited for.
    wait_metric(
        &server,
        "scb_trace_spans_dropped_total{reason=\"export_failed\"}",
        10.0,
    );
    assert_eq!(collector.posts(), 0);

    // A reload points at a collector that is up.
    server.rewrite_config(&config(&collector.url(), 0.0, &dir, echo));
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));

    let res = request(addr, &traced("/api/x?y=1"));
    assert_eq!(res.status, 200);
    // The upstream was told the trace, not the client's span: this server's exchange.
    let body = res.text().to_owned();
    let told = body
        .lines()
        .find_map(|l| l.strip_prefix("traceparent: "))
        .unwrap_or_else(|| panic!("no traceparent upstream: {body}"))
        .to_owned();
    let parts: Vec<&str> = told.split('-').collect();
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], CLIENT_TRACE);
    assert_ne!(parts[2], CLIENT_SPAN);
    assert_eq!(parts[3], "01");
    assert!(body.contains("tracestate: vendor=abc"), "{body}");

    // A server span and the exchange's client span.
    let spans = collector.wait_for(2);
    assert!(
        spans
            .iter()
            .all(|s| s.service.as_deref() == Some("edge-test"))
    );
    let by_kind: HashMap<i32, &Received> = spans.iter().map(|s| (s.span.kind, s)).collect();
    let server_span = by_kind[&2]; // SPAN_KIND_SERVER
    let client_span = by_kind[&3]; // SPAN_KIND_CLIENT
    assert_eq!(hex(&server_span.span.trace_id), CLIENT_TRACE);
    assert_eq!(hex(&server_span.span.parent_span_id), CLIENT_SPAN);
    assert_eq!(server_span.span.name, "GET api");
    assert_eq!(
        server_span.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(server_span.attr("scb.route").as_deref(), Some("api"));
    assert_eq!(server_span.attr("url.path").as_deref(), Some("/api/x"));
    assert_eq!(server_span.attr("url.query").as_deref(), Some("y=1"));
    assert_eq!(
        server_span.attr("server.address").as_deref(),
        Some("app.test")
    );
    assert_eq!(hex(&client_span.span.trace_id), CLIENT_TRACE);
    assert_eq!(client_span.span.parent_span_id, server_span.span.span_id);
    assert_eq!(hex(&client_span.span.span_id), parts[2]);
    assert_eq!(
        client_span.attr("server.port"),
        Some(echo.port().to_string())
    );
    let events: Vec<&str> = client_span
        .span
        .events
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(events, ["connected", "first_byte"]);
    assert!(server_span.span.start_time_unix_nano <= client_span.span.start_time_unix_nano);
    assert!(client_span.span.end_time_unix_nano <= server_span.span.end_time_unix_nano);

    // The access log has the trace id of each request: the client's.
    let written = lines(&log, 6);
    assert_eq!(written[5], format!("200 {CLIENT_TRACE} /api/x"));

    // Not sampled (a ratio of 0, no parent): a trace id for the logs, no span.
    let res = request(
        addr,
        "GET /hello HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.text(), "hi");
    let written = lines(&log, 7);
    let own = written[6].split(' ').nth(1).unwrap().to_owned();
    assert_eq!(own.len(), 32);
    assert_ne!(own, CLIENT_TRACE);

    // A reload raises the ratio to 1: every trace is sampled, a failed upstream's too,
    // and its error page names the trace.
    server.rewrite_config(&config(&collector.url(), 1.0, &dir, echo));
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    let res = request(
        addr,
        "GET /down/z HTTP/1.1\r\nHost: app.test\r\nX-Request-Id: rid-9\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.status, 502);
    let page = res.text().to_owned();
    let written = lines(&log, 8);
    let trace = written[7].split(' ').nth(1).unwrap().to_owned();
    assert_eq!(
        page,
        format!("<p>upstream down; trace {trace}, request rid-9</p>")
    );
    let spans = collector.wait_for(4);
    let failed: Vec<&Received> = spans
        .iter()
        .filter(|s| hex(&s.span.trace_id) == trace)
        .collect();
    assert_eq!(failed.len(), 2, "{failed:#?}");
    let server_span = failed.iter().find(|s| s.span.kind == 2).unwrap();
    let client_span = failed.iter().find(|s| s.span.kind == 3).unwrap();
    assert!(server_span.span.parent_span_id.is_empty());
    assert_eq!(
        server_span.attr("http.response.status_code").as_deref(),
        Some("502")
    );
    // STATUS_CODE_ERROR on both.
    assert_eq!(server_span.span.status.as_ref().unwrap().code, 2);
    assert_eq!(client_span.span.status.as_ref().unwrap().code, 2);
    let retry = &client_span.span.events[0];
    assert_eq!(retry.name, "retry");
    assert!(
        support::otlp::attr(&retry.attributes, "error.message").is_some(),
        "{retry:?}"
    );
    // Counted once the collector has answered.
    wait_metric(&server, "scb_trace_spans_exported_total", 4.0);
    server.terminate();
    assert!(server.wait().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tracing_settings_are_checked_with_their_keys() {
    for (tracing, key, why) in [
        (
            "otlp = \"https://c:4318\"\nca_root = \"/nonexistent/ca.pem\"",
            "tracing.ca_root",
            "/nonexistent/ca.pem",
        ),
        ("ca_root = \"ca.pem\"", "tracing.ca_root", "needs `otlp`"),
        (
            "otlp = \"http://c:4318\"\nheaders = { \"bad name\" = \"v\" }",
            "tracing.headers.bad name",
            "not a header name",
        ),
        (
            "otlp = \"http://c:4318\"\nheaders = { key = \"a\\nb\" }",
            "tracing.headers.key",
            "not a header value",
        ),
        ("otlp = \"c:4318\"", "tracing.otlp", "http:// or https://"),
        (
            "sample_ratio = 1.5",
            "tracing.sample_ratio",
            "between 0 and 1",
        ),
        ("service_name = \" \"", "tracing.service_name", "empty"),
        ("sample = 1", "tracing", "unknown field"),
    ] {
        let out = support::check(&format!(
            "[tracing]\n{tracing}\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\n"
        ));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{tracing}");
        assert!(stderr.contains(key), "{key}: {stderr}");
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
}

/// php-fpm is told the exchange's span in `HTTP_TRACEPARENT`, and the exchange is a
/// client span of the request's, with its connection and first byte.
#[test]
fn a_fastcgi_application_continues_the_trace() {
    let dir = temp_dir("fastcgi");
    let root = dir.join("public");
    support::php::write_app(&root);
    let Some(fpm) = support::php::PhpFpm::start(&dir.join("fpm"), 2) else {
        return;
    };
    let collector = Collector::start();
    let server = Server::start(&format!(
        "[server]\nworkers = 1\n\
         [tracing]\notlp = \"{}\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"php\"\nprefix = \"/\"\n\
         try_files = [\"{{path}}\", \"/index.php?{{query}}\"]\n\
         fastcgi = {{ upstreams = [\"unix:{}\"], root = {:?} }}\n",
        collector.url(),
        fpm.socket.display(),
        root.display().to_string(),
    ));
    let res = request(
        server.addr(),
        &format!(
            "GET /env HTTP/1.1\r\nHost: app.test\r\n\
             traceparent: 00-{CLIENT_TRACE}-{CLIENT_SPAN}-01\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(res.status, 200, "{}", res.text());
    let env: serde_json::Value = serde_json::from_str(res.text()).unwrap();
    let told = env["HTTP_TRACEPARENT"].as_str().unwrap().to_owned();
    let spans = collector.wait_for(2);
    let client = spans.iter().find(|s| s.span.kind == 3).unwrap();
    let server_span = spans.iter().find(|s| s.span.kind == 2).unwrap();
    assert_eq!(
        told,
        format!("00-{CLIENT_TRACE}-{}-01", hex(&client.span.span_id))
    );
    assert_eq!(client.span.parent_span_id, server_span.span.span_id);
    assert_eq!(hex(&server_span.span.parent_span_id), CLIENT_SPAN);
    assert_eq!(server_span.attr("scb.route").as_deref(), Some("php"));
    let events: Vec<&str> = client.span.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(events, ["connected", "first_byte"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// A hosted collector: `https://` with a private CA (`ca_root`) and an API key in
/// `headers`. First the roots are another CA's, so every export fails the handshake
/// (counted, requests unharmed); a reload to the right roots delivers the spans, with
/// the key, which no log line ever shows (debug level included).
#[test]
fn an_https_collector_gets_spans_with_its_key_once_its_ca_is_trusted() {
    const KEY: &str = "k-7f3a9c-never-logged";
    let dir = temp_dir("https");
    let issued = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let collector = Collector::start_tls(&issued.cert.pem(), &issued.signing_key.serialize_pem());
    let right = dir.join("collector-ca.pem");
    std::fs::write(&right, issued.cert.pem()).unwrap();
    let other = dir.join("other-ca.pem");
    let stranger = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(&other, stranger.cert.pem()).unwrap();
    let config = |root: &Path| {
        format!(
            "[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [tracing]\notlp = \"https://localhost:{port}\"\nca_root = {root:?}\n\
             headers = {{ \"x-api-key\" = \"{KEY}\" }}\n\
             [[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n",
            port = collector.addr().port(),
            root = root.display().to_string(),
        )
    };
    let mut server = support::Server::start_adjusted(&config(&other), |command| {
        command.env("RUST_LOG", "debug");
    });
    let addr = server.addr();
    for _ in 0..5 {
        assert_eq!(get(addr, "/hello").status, 200);
    }
    wait_metric(
        &server,
        "scb_trace_spans_dropped_total{reason=\"export_failed\"}",
        5.0,
    );
    assert_eq!(collector.posts(), 0);

    server.rewrite_config(&config(&right));
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    for _ in 0..3 {
        assert_eq!(get(addr, "/hello").status, 200);
    }
    let spans = collector.wait_for(3);
    assert!(
        spans
            .iter()
            .all(|s| s.attr("url.path").as_deref() == Some("/hello"))
    );
    assert!(
        collector
            .fields()
            .contains(&("x-api-key".to_owned(), KEY.to_owned())),
        "{:?}",
        collector.fields()
    );
    wait_metric(&server, "scb_trace_spans_exported_total", 3.0);
    server.terminate();
    server.wait();
    assert!(
        server.log.iter().any(|l| l.contains("OTLP export failed")),
        "the failed handshakes were logged at debug level: {:#?}",
        server.log
    );
    assert!(
        !server.log.iter().any(|l| l.contains(KEY)),
        "{:#?}",
        server.log
    );
}
