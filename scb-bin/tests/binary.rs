//! The `scb` binary end to end: the CLI, config errors, serving, metrics, workers and
//! shutdown, against the real process on ephemeral loopback ports.

mod support;

use std::collections::HashSet;
use std::path::PathBuf;

use support::{Server, check, get, metric, request, scb};

const HELLO: &str = r#"
[server]
workers = 1
grace_period = "5s"

[[listen]]
addr = "127.0.0.1:0"

[[route]]
name = "hello"
path = "/respond"
respond = { status = 200, body = "Hello, world!", content_type = "text/plain" }
"#;

const METRICS: &str = r#"
[metrics]
listen = "127.0.0.1:0"
path = "/metrics"
"#;

fn stdout(output: &std::process::Output) -> &str {
    std::str::from_utf8(&output.stdout).unwrap()
}

fn stderr(output: &std::process::Output) -> &str {
    std::str::from_utf8(&output.stderr).unwrap()
}

#[test]
fn version_prints_the_package_version() {
    let output = scb().arg("--version").output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        stdout(&output),
        format!("scb {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn check_accepts_the_example_config() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/example.toml");
    let output = scb().args(["check", "--config", path]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output), format!("{path}: ok\n"));
}

#[test]
fn check_names_file_line_column_and_key_of_config_errors() {
    let cases = [
        (
            "unknown key",
            "[server]\nworkers = 1\nthreads = 4\n[[listen]]\naddr = \"127.0.0.1:0\"\n",
            "3:1: server.threads: unknown field `threads`",
        ),
        (
            "bad duration",
            "[[listen]]\naddr = \"127.0.0.1:0\"\n\n[limits]\nsend_timeout = \"30 parsecs\"\n",
            "5:16: limits.send_timeout: invalid duration \"30 parsecs\"",
        ),
        (
            "bad type",
            "[[listen]]\naddr = \"127.0.0.1:0\"\n[limits]\nmax_headers = \"many\"\n",
            "4:15: limits.max_headers: invalid type: string \"many\", expected usize",
        ),
        (
            "missing listen",
            "[server]\nworkers = 1\n",
            "1:1: listen: at least one [[listen]] with an `addr` is required",
        ),
        (
            "path and prefix",
            "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\npath = \"/a\"\nprefix = \"/a/\"\n\
             respond = { status = 200 }\n",
            "5:10: route[0].prefix: a route has one of `path`, `prefix` and `path_regex`: `path` is set",
        ),
    ];
    for (what, config, want) in cases {
        let output = check(config);
        assert!(!output.status.success(), "{what}: accepted");
        assert_eq!(stdout(&output), "", "{what}");
        let err = stderr(&output);
        // `<file>:<line>:<column>: <key>: <message>`, the file as given on the command line.
        let (file, rest) = err
            .split_once(".toml:")
            .unwrap_or_else(|| panic!("{what}: {err}"));
        assert!(
            file.starts_with(env!("CARGO_TARGET_TMPDIR")),
            "{what}: {err}"
        );
        assert!(
            rest.starts_with(want),
            "{what}:\n got: {err}\nwant: …{want}"
        );
    }
}

#[test]
fn relative_paths_are_the_config_files_own_from_any_working_directory() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("relative-paths-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("public")).unwrap();
    std::fs::write(dir.join("public/index.html"), "hi").unwrap();
    let config = |root: &str| {
        format!(
            "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\nprefix = \"/\"\n\
             static = {{ root = \"{root}\", not_found = \"index.html\" }}\n"
        )
    };
    let file = dir.join("scb.toml");
    // Run from elsewhere: the root is found beside the config, not in the cwd.
    let check_from_root = |root: &str| {
        std::fs::write(&file, config(root)).unwrap();
        scb()
            .current_dir("/")
            .args(["check", "--config"])
            .arg(&file)
            .output()
            .unwrap()
    };
    for root in ["public", "./public"] {
        let output = check_from_root(root);
        assert!(output.status.success(), "{root}: {}", stderr(&output));
    }
    let output = check_from_root("missing");
    assert!(!output.status.success());
    // The error names the directory as resolved: absolute, beside the config.
    let want = format!(
        "cannot open the root directory {}",
        dir.join("missing").display()
    );
    assert!(stderr(&output).contains(&want), "{}", stderr(&output));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_refuses_an_invalid_config_like_check() {
    let output = support::run_to_end(
        "run",
        "[server]\nworkers = 0\n[[listen]]\naddr = \"127.0.0.1:0\"\n",
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains(".toml:2:11: server.workers: must be at least 1"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn run_fails_when_the_port_is_taken() {
    // A plain listener, without SO_REUSEPORT: scb's bind must fail, not share the port.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let output = support::run_to_end("run", &format!("[[listen]]\naddr = \"{addr}\"\n"));
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains(&format!("binding {addr}: address already in use")),
        "{}",
        stderr(&output)
    );
}

#[test]
fn run_serves_the_respond_route_with_a_request_id() {
    let server = Server::start(HELLO);
    let res = get(server.addr(), "/respond");
    assert_eq!(res.status, 200);
    assert_eq!(res.text(), "Hello, world!");
    assert_eq!(res.header("content-type"), Some("text/plain"));
    let id = res.header("x-request-id").expect("x-request-id");
    assert!(!id.is_empty());

    // A valid incoming id is kept.
    let res = request(
        server.addr(),
        "GET /respond HTTP/1.1\r\nHost: t\r\nx-request-id: abc-123\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.status, 200);
    assert_eq!(res.header("x-request-id"), Some("abc-123"));
}

#[test]
fn unknown_paths_get_404_with_a_request_id() {
    let server = Server::start(HELLO);
    for path in ["/", "/nope", "/respond/more", "/respondx"] {
        let res = get(server.addr(), path);
        assert_eq!(res.status, 404, "{path}");
        assert!(
            res.header("x-request-id").is_some_and(|id| !id.is_empty()),
            "{path}"
        );
    }
}

#[test]
fn sigterm_turns_readiness_to_503_while_the_listeners_still_serve() {
    let config = format!(
        "{HELLO}{METRICS}\n[health]\ndrain_delay = \"3s\"\n\n\
         [[route]]\npath = \"/ready\"\nhealth = true\n"
    );
    let mut server = Server::start(&config);
    let metrics = server.metrics.expect("metrics address");
    assert_eq!(get(metrics, "/healthz").status, 200);
    assert_eq!(get(metrics, "/readyz").status, 200);
    assert_eq!(get(server.addr(), "/ready").status, 200);

    server.terminate();
    // Logged right after readiness turned: from here until the delay ends, the probes
    // say 503 and the routes are still served.
    server.wait_for_line(|line| line.contains("draining"));
    assert_eq!(get(metrics, "/readyz").status, 503);
    assert_eq!(get(server.addr(), "/ready").status, 503);
    assert_eq!(get(metrics, "/healthz").status, 200);
    assert_eq!(get(server.addr(), "/respond").status, 200);
    assert!(server.wait().success());
}

#[test]
fn a_second_sigterm_ends_the_drain_delay() {
    // A delay far longer than the test's wait: only the second signal can end it in time.
    let config = format!("{HELLO}{METRICS}\n[health]\ndrain_delay = \"1h\"\n");
    let mut server = Server::start(&config);
    server.terminate();
    server.wait_for_line(|line| line.contains("draining"));
    assert_eq!(get(server.addr(), "/respond").status, 200);
    server.terminate();
    server.wait_for_line(|line| line.contains("second signal"));
    assert!(server.wait().success());
}

#[test]
fn metrics_count_requests_by_route_method_and_status() {
    let server = Server::start(&format!("{HELLO}{METRICS}"));
    let metrics = server.metrics.expect("metrics address");
    let hello = r#"scb_http_requests_total{route="hello",method="GET",status="200"}"#;
    let unmatched = r#"scb_http_requests_total{route="unmatched",method="GET",status="404"}"#;

    let scrape = get(metrics, "/metrics");
    assert_eq!(scrape.status, 200);
    assert_eq!(
        scrape.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(scrape.header("x-request-id").is_some());
    let before = metric(scrape.text(), hello).unwrap_or(0.0);

    let k = 7;
    for _ in 0..k {
        assert_eq!(get(server.addr(), "/respond").status, 200);
    }
    assert_eq!(get(server.addr(), "/missing").status, 404);

    let scrape = get(metrics, "/metrics");
    let text = scrape.text();
    assert_eq!(metric(text, hello), Some(before + f64::from(k)), "{text}");
    assert_eq!(metric(text, unmatched), Some(1.0), "{text}");
    // A real histogram (buckets), not a summary, labelled by route.
    let inf = r#"scb_http_request_duration_seconds_bucket{route="hello",le="+Inf"}"#;
    assert_eq!(metric(text, inf), Some(before + f64::from(k)), "{text}");
    assert!(
        text.contains("# TYPE scb_http_request_duration_seconds histogram"),
        "{text}"
    );
    let bytes = r#"scb_http_response_bytes_total{route="hello"}"#;
    assert_eq!(
        metric(text, bytes),
        Some(13.0 * (before + f64::from(k))),
        "{text}"
    );

    // Only the configured path answers on the metrics address.
    assert_eq!(get(metrics, "/").status, 404);
}

#[test]
fn two_workers_answer_many_connections() {
    // The access log's `tracing` events (RUST_LOG naming their target) carry the name of
    // the thread that served each request.
    let config = HELLO.replace("workers = 1", "workers = 2");
    let mut server = Server::start_adjusted(&config, |command| {
        command.env("RUST_LOG", "info,scb::access=info");
    });
    let addr = server.addr();
    let connections = 64;
    let threads: Vec<_> = (0..connections)
        .map(|_| std::thread::spawn(move || get(addr, "/respond")))
        .collect();
    for thread in threads {
        let res = thread.join().expect("client thread");
        assert_eq!(res.status, 200);
        assert_eq!(res.text(), "Hello, world!");
    }
    // Every request is in the access log, with the thread that served it; with 64
    // connections spread by SO_REUSEPORT, both workers must have served some.
    let mut workers = HashSet::new();
    for _ in 0..connections {
        let line = server.wait_for_line(|l| l.contains("scb::access"));
        assert!(
            line.contains(r#"path="/respond""#) && line.contains("status=200"),
            "{line}"
        );
        let worker = line
            .split_whitespace()
            .find(|w| w.starts_with("scb-worker-"))
            .unwrap_or_else(|| panic!("no worker thread name in {line:?}"));
        workers.insert(worker.to_owned());
    }
    assert_eq!(workers.len(), 2, "{workers:?}");
}

#[test]
fn sigterm_shuts_down_gracefully_and_exits_zero() {
    let mut server = Server::start(&format!("{HELLO}{METRICS}"));
    assert_eq!(get(server.addr(), "/respond").status, 200);
    server.terminate();
    let status = server.wait();
    assert!(
        status.success(),
        "{status:?}; log:\n{}",
        server.log.join("\n")
    );
    assert!(
        server.log.iter().any(|l| l.contains("stopped")),
        "{}",
        server.log.join("\n")
    );
}

#[test]
fn json_log_format_writes_one_object_per_line() {
    let server = Server::start_with(HELLO, &["--log-format", "json"]);
    assert_eq!(get(server.addr(), "/respond").status, 200);
    for line in &server.log {
        assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
        assert!(line.contains(r#""message":"#), "{line}");
    }
}

/// A directory with a page, a nested file and a secret beside it.
fn site(name: &str) -> PathBuf {
    let base = std::env::temp_dir().join(format!("scb-bin-site-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("www/docs")).unwrap();
    std::fs::write(base.join("www/index.html"), "<h1>home</h1>").unwrap();
    std::fs::write(base.join("www/docs/guide.txt"), "read me").unwrap();
    std::fs::write(base.join("secret.txt"), "SECRET").unwrap();
    base
}

#[test]
fn serve_serves_a_directory_without_a_config() {
    let base = site("serve");
    let server = Server::serve(&base.join("www"));
    let res = get(server.addr(), "/");
    assert_eq!(res.status, 200);
    assert_eq!(res.text(), "<h1>home</h1>");
    assert_eq!(res.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(res.header("x-request-id").is_some());
    let res = get(server.addr(), "/docs");
    assert_eq!(res.status, 308);
    assert_eq!(res.header("location"), Some("docs/"));
    assert_eq!(get(server.addr(), "/docs/guide.txt").text(), "read me");
    let res = get(server.addr(), "/../secret.txt");
    assert_eq!(res.status, 404);
    assert!(!res.text().contains("SECRET"));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_static_route_serves_files_next_to_a_respond_route() {
    let base = site("route");
    let config = format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\npath = \"/health\"\nrespond = {{ body = \"ok\" }}\n\
         [[route]]\nprefix = \"/\"\nstatic = {{ root = {:?} }}\n",
        base.join("www").display().to_string()
    );
    let server = Server::start(&config);
    assert_eq!(get(server.addr(), "/health").text(), "ok");
    assert_eq!(get(server.addr(), "/docs/guide.txt").text(), "read me");
    assert_eq!(get(server.addr(), "/missing").status, 404);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_static_route_with_compress_gzips_text_on_the_fly() {
    use std::io::Read as _;
    let base = site("compress");
    let page = "<p>the same paragraph again</p>\n".repeat(200);
    std::fs::write(base.join("www/page.html"), &page).unwrap();
    let config = format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/\"\nstatic = {{ root = {:?}, compress = true }}\n",
        base.join("www").display().to_string()
    );
    let server = Server::start(&config);
    // HTTP/1.0: the compressed body has no length, so it is delimited by the close.
    let res = request(
        server.addr(),
        "GET /page.html HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n",
    );
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-encoding"), Some("gzip"));
    assert_eq!(res.header("vary"), Some("accept-encoding"));
    assert!(res.body.len() < page.len() / 4, "{} bytes", res.body.len());
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(&res.body[..])
        .read_to_string(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, page);
    // Without Accept-Encoding the same route sends the file as it is.
    let res = get(server.addr(), "/page.html");
    assert_eq!(res.header("content-encoding"), None);
    assert_eq!(res.text(), page);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn compress_settings_choose_the_threshold_and_the_types() {
    let base = site("compress-settings");
    // A small HTML page (an SPA's index.html) and a small JSON file.
    let small = "<!doctype html><title>app</title><div id=app></div>\n".repeat(8);
    std::fs::write(base.join("www/index.html"), &small).unwrap();
    std::fs::write(
        base.join("www/data.json"),
        "[1, 2, 3, 4, 5, 6, 7]\n".repeat(20),
    )
    .unwrap();
    std::fs::write(
        base.join("www/big.json"),
        "[1, 2, 3, 4, 5, 6, 7]\n".repeat(100),
    )
    .unwrap();
    std::fs::write(base.join("www/big.html"), small.repeat(10)).unwrap();
    let root = base.join("www").display().to_string();
    let config = format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/default/\"\nrewrite = {{ prefix = \"/default/\", to = \"/\" }}\n\
         static = {{ root = {root:?}, compress = true }}\n\
         [[route]]\nprefix = \"/\"\n\
         static = {{ root = {root:?}, compress = {{ min_length = \"1KiB\", level = \"fastest\", types = [\"application/json\"] }} }}\n",
    );
    let server = Server::start(&config);
    let gz = |path: &str| {
        request(
            server.addr(),
            &format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"),
        )
        .header("content-encoding")
        .map(str::to_owned)
    };
    // The defaults: a 424-byte page is compressed (the threshold is 256 bytes).
    assert_eq!(gz("/default/index.html").as_deref(), Some("gzip"));
    // Only JSON, and only from 1 KiB: neither the page nor the 440-byte JSON file.
    assert_eq!(gz("/index.html"), None);
    assert_eq!(gz("/data.json"), None);
    assert_eq!(gz("/big.html"), None);
    assert_eq!(gz("/big.json").as_deref(), Some("gzip"));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn an_unreadable_file_is_403_and_a_missing_one_404() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let base = site("forbidden");
    let private = base.join("www/private.txt");
    std::fs::write(&private, "PRIVATE").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads any file, so as root the server runs as `nobody` for the kernel to say
    // EACCES; the tree is world-readable apart from the private file.
    let server = Server::serve_with(&base.join("www"), |command| {
        if rustix::process::geteuid().is_root() {
            command.uid(65534).gid(65534);
        }
    });
    let res = get(server.addr(), "/private.txt");
    assert_eq!(res.status, 403);
    assert!(res.header("x-request-id").is_some());
    assert!(!res.text().contains("PRIVATE"));
    assert_eq!(get(server.addr(), "/index.html").status, 200);
    assert_eq!(get(server.addr(), "/absent.txt").status, 404);
    let _ = std::fs::remove_dir_all(&base);
}

/// A `prefix = "/api/"` route proxying to `upstream` with `strip_prefix = true`.
fn proxy_config(upstream: std::net::SocketAddr) -> String {
    format!(
        "{HELLO}\n[[route]]\nprefix = \"/api/\"\n\
         proxy = {{ upstreams = [\"{upstream}\"], strip_prefix = true }}\n"
    )
}

#[test]
fn a_proxy_route_forwards_with_the_prefix_stripped_and_the_request_id() {
    let upstream = support::echo_upstream();
    let server = Server::start(&proxy_config(upstream));

    let res = get(server.addr(), "/api/users");
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.header("x-request-id").expect("x-request-id");
    let want = format!(
        "GET /users HTTP/1.1\nhost: test\nx-forwarded-for: 127.0.0.1\nx-request-id: {id}\n"
    );
    assert_eq!(res.text(), want);

    // A client's own valid id goes up as it came.
    let res = request(
        server.addr(),
        "GET /api/users?page=2 HTTP/1.1\r\nHost: example.test\r\nx-request-id: abc-123\r\n\
         Connection: close\r\n\r\n",
    );
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.header("x-request-id"), Some("abc-123"));
    assert_eq!(
        res.text(),
        "GET /users?page=2 HTTP/1.1\nhost: example.test\nx-forwarded-for: 127.0.0.1\n\
         x-request-id: abc-123\n"
    );

    // The other routes are untouched.
    assert_eq!(get(server.addr(), "/respond").text(), "Hello, world!");
}

#[test]
fn a_proxy_route_whose_upstream_is_down_answers_502_and_counts_it() {
    // A port nobody listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let server = Server::start(&format!("{}{METRICS}", proxy_config(closed)));

    let res = get(server.addr(), "/api/users");
    assert_eq!(res.status, 502, "{}", res.text());
    assert!(
        res.header("x-request-id").is_some_and(|id| !id.is_empty()),
        "{:?}",
        res.headers
    );

    // The per-upstream metrics reach the endpoint: the proxy registered them with the
    // recorder `scb run` installed, not with none.
    let scrape = get(server.metrics.expect("metrics address"), "/metrics");
    let text = scrape.text();
    let errors = format!(r#"scb_upstream_errors_total{{upstream="{closed}",kind="connect"}}"#);
    assert!(
        metric(text, &errors).is_some_and(|n| n >= 1.0),
        "{errors} in\n{text}"
    );
    let api = r#"scb_http_requests_total{route="api",method="GET",status="502"}"#;
    assert_eq!(metric(text, api), Some(1.0), "{text}");
}

/// A config on a fixed port (free a moment ago) with a pid file.
fn fixed_port_config(port: u16, pid_file: &std::path::Path) -> String {
    format!(
        "[server]\nworkers = 2\npid_file = {:?}\n\n[[listen]]\naddr = \"127.0.0.1:{port}\"\n\n\
         [[route]]\npath = \"/respond\"\nrespond = {{ status = 200, body = \"first\" }}\n",
        pid_file.display().to_string()
    )
}

#[test]
fn a_second_run_on_a_taken_port_is_refused_and_the_first_keeps_its_traffic_and_pid_file() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("scb-bin-taken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("scb.pid");
    let config = fixed_port_config(port, &pid_file);
    let first = Server::start(&config);
    let deadline = std::time::Instant::now() + support::TIMEOUT;
    let first_pid = loop {
        match std::fs::read_to_string(&pid_file) {
            Ok(text) if !text.trim().is_empty() => break text,
            _ => assert!(std::time::Instant::now() < deadline, "no pid file"),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };

    let second = support::run_to_end("run", &config);
    assert!(!second.status.success());
    let err = stderr(&second);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains("in use"),
        "{err}"
    );
    // The first still serves every connection, and its pid file is still its own.
    for _ in 0..20 {
        assert_eq!(get(first.addr(), "/respond").text(), "first");
    }
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap(), first_pid);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pid_file_another_process_wrote_is_left_alone_at_exit() {
    let dir = std::env::temp_dir().join(format!("scb-bin-pidfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("scb.pid");
    let mut server = Server::start(&fixed_port_config(0, &pid_file));
    // The pid file is written after the addresses are logged: wait for it.
    let deadline = std::time::Instant::now() + support::TIMEOUT;
    while std::fs::read_to_string(&pid_file).map_or(true, |t| t.trim().is_empty()) {
        assert!(std::time::Instant::now() < deadline, "no pid file");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::write(&pid_file, "12345\n").unwrap();
    server.terminate();
    assert!(server.wait().success());
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap(), "12345\n");
    // Its own is removed.
    let mut server = Server::start(&fixed_port_config(0, &pid_file));
    server.terminate();
    assert!(server.wait().success());
    assert!(!pid_file.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
