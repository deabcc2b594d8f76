//! The status page (`[status] enabled = true`) over real sockets: `/status.json`'s figures
//! while requests flow, the page's headers and self-containment, its absence from the
//! public listeners, and the page itself in a real browser (headless Chromium, Debian's
//! `chromium`), which must show the live figures in its DOM. The browser's screenshot is
//! kept beside the test binaries' temp files (`status-page.png` under Cargo's
//! `CARGO_TARGET_TMPDIR`) for a person to look at; nothing is asserted on its pixels.
//!
//! Without `chromium` on PATH the browser test says so and passes, unless
//! `SCB_REQUIRE_TOOLS` is set (as `.ci/run` sets it).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::{Server, TIMEOUT, get};

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("status-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The certificate's `notAfter`, which the page must show.
const NOT_AFTER: (i32, u8, u8) = (2031, 5, 17);

/// A running scb with the status page, a static route (`/files/`), a proxy route to a
/// live upstream (`/echo/`), one to a port nobody listens on (`/dead/`, down after its
/// first failure), a plain listener and a TLS one with a self-signed certificate for
/// `localhost`; and that certificate's DER.
fn start(name: &str) -> (Server, Vec<u8>) {
    let dir = dir(name);
    let root = dir.join("www");
    std::fs::create_dir_all(root.join("files")).unwrap();
    std::fs::write(root.join("files/hello.txt"), "hello\n").unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let (y, m, d) = NOT_AFTER;
    params.not_after = rcgen::date_time_ymd(y, m, d);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
    let echo = support::echo_upstream();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = format!(
        "[server]\nworkers = 2\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n\
         [status]\nenabled = true\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = {c:?}, key = {k:?} }}\n\
         [[route]]\nname = \"files\"\nprefix = \"/files/\"\nstatic = {{ root = {root:?} }}\n\
         [[route]]\nname = \"echo\"\nprefix = \"/echo/\"\nproxy = {{ upstreams = [\"{echo}\"] }}\n\
         [[route]]\nname = \"dead\"\nprefix = \"/dead/\"\n\
         proxy = {{ upstreams = [\"{dead}\"], max_tries = 1, \
         passive = {{ max_fails = 1, fail_timeout = \"10m\" }} }}\n",
        c = dir.join("c.pem").display().to_string(),
        k = dir.join("k.pem").display().to_string(),
        root = root.display().to_string(),
    );
    let server = Server::start(&config);
    (server, cert.der().to_vec())
}

/// One round of traffic: files and the live upstream (2xx), the dead one (5xx).
fn traffic(addr: std::net::SocketAddr) {
    assert_eq!(get(addr, "/files/hello.txt").status, 200);
    assert_eq!(get(addr, "/echo/x").status, 200);
    assert_eq!(get(addr, "/dead/x").status, 502);
}

/// `/status.json`, parsed.
fn status(metrics: std::net::SocketAddr) -> serde_json::Value {
    let res = get(metrics, "/status.json");
    assert_eq!(res.status, 200, "{}", res.text());
    serde_json::from_slice(&res.body).unwrap()
}

/// Polls `/status.json` until `ready` says its figures are in (the sampler reads the
/// recorder once a second), failing the test after [`TIMEOUT`].
fn status_when(
    metrics: std::net::SocketAddr,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let json = status(metrics);
        if ready(&json) {
            return json;
        }
        assert!(Instant::now() < deadline, "figures never came: {json:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_json_shows_the_live_figures_while_requests_flow() {
    let (server, der) = start("json");
    let metrics = server.metrics.unwrap();
    for _ in 0..10 {
        traffic(server.addr());
    }
    // One request over TLS, its connection kept open: a worker holds it.
    let client = support::tls::client(&[&der]);
    let mut tls = support::tls::connect(server.addrs[1], &client);
    assert!(support::tls::request(&mut tls, "/files/hello.txt").starts_with("HTTP/1.1 200"));

    let json = status_when(metrics, |j| {
        j["requests"]["total"].as_f64() >= Some(31.0)
            && j["connections"]["open"].as_f64() >= Some(1.0)
    });
    let rate = |v: &serde_json::Value| v.as_f64().unwrap();
    assert!(rate(&json["requests"]["per_second"]) > 0.0, "{json:#}");
    assert!(rate(&json["status_classes"]["2xx"]) > 0.0, "{json:#}");
    assert!(rate(&json["status_classes"]["5xx"]) > 0.0, "{json:#}");
    assert!(
        rate(&json["requests"]["errors_per_second"]) > 0.0,
        "{json:#}"
    );
    assert!(json["latency_ms"]["p50"].as_f64().is_some(), "{json:#}");
    assert!(json["latency_ms"]["p99"].as_f64() >= json["latency_ms"]["p50"].as_f64());

    let route = |name: &str| {
        json["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no route {name}: {json:#}"))
            .clone()
    };
    assert_eq!(route("files")["total"], 11.0);
    assert_eq!(route("dead")["total"], 10.0);
    assert!(rate(&route("dead")["errors_per_second"]) > 0.0);
    assert_eq!(route("echo")["errors_per_second"], 0.0);

    // The live upstream is up, the dead one down; nothing is in flight now.
    let upstreams = json["upstreams"].as_array().unwrap();
    assert_eq!(upstreams.len(), 2, "{json:#}");
    let upstream = |route: &str| upstreams.iter().find(|u| u["route"] == route).unwrap();
    assert_eq!(upstream("echo")["up"], true, "{json:#}");
    assert_eq!(upstream("dead")["up"], false, "{json:#}");
    assert_eq!(upstream("echo")["in_flight"], 0);
    assert!(
        rate(&upstream("dead")["errors_per_second"]) > 0.0,
        "{json:#}"
    );

    // Two workers, one holding the TLS connection.
    let workers = json["connections"]["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{json:#}");
    assert_eq!(
        workers.iter().map(|w| rate(&w["open"])).sum::<f64>(),
        1.0,
        "{json:#}"
    );

    // The certificate, with its expiry.
    let certificates = json["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 1, "{json:#}");
    assert_eq!(certificates[0]["names"], serde_json::json!(["localhost"]));
    assert_eq!(certificates[0]["not_after"], "2031-05-17T00:00:00Z");
    assert!(rate(&certificates[0]["expires_in_days"]) > 0.0);

    // No route caches, so no cache figures; the chart has points.
    assert!(json["cache"].is_null());
    let chart = json["chart"]["requests_per_second"].as_array().unwrap();
    assert!(chart.iter().any(|p| rate(p) > 0.0), "{json:#}");
    drop(tls);
}

#[test]
fn the_page_loads_nothing_from_elsewhere_and_is_not_on_the_public_listeners() {
    let (server, der) = start("page");
    let metrics = server.metrics.unwrap();
    let page = get(metrics, "/status");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("cache-control"), Some("no-store"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.starts_with("default-src 'none'; "), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    let html = page.text();
    assert!(html.starts_with("<!doctype html>"));
    for outside in ["http://", "https://", "src=", "url("] {
        assert!(!html.contains(outside), "{outside} in the page");
    }
    assert_eq!(
        get(metrics, "/status.json").header("cache-control"),
        Some("no-store")
    );

    // Never on a public listener, plain or TLS.
    for path in ["/status", "/status.json"] {
        assert_eq!(get(server.addr(), path).status, 404, "{path}");
    }
    let client = support::tls::client(&[&der]);
    let mut tls = support::tls::connect(server.addrs[1], &client);
    assert!(support::tls::request(&mut tls, "/status").starts_with("HTTP/1.1 404"));
}

/// Whether `chromium` can be run; false (with a line on stderr) only where tools may be
/// missing.
fn have_chromium() -> bool {
    match Command::new("chromium").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        other => {
            assert!(
                std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                "`chromium` cannot be run ({other:?}), and SCB_REQUIRE_TOOLS says this test \
                 must run"
            );
            #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
            {
                eprintln!("skipped: `chromium` is not on PATH");
            }
            false
        }
    }
}

/// Runs headless Chromium on `url` with `action` (`--dump-dom`, `--screenshot=...`) and
/// a profile of its own under `profile`, with virtual time: the page's timers run for
/// 4 s of it (its polls included; the browser waits for each answer), however long that
/// takes on the clock. Killed after [`TIMEOUT`]. Its stdout.
fn chromium(url: &str, action: &str, profile: &Path) -> String {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,1500",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(action)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running chromium");
    // Read on threads: a full pipe would stall the browser.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let deadline = Instant::now() + TIMEOUT * 3;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {action} did not finish in {:?}", TIMEOUT * 3);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "chromium {action}: {status}\n{err}");
    out
}

/// The text of the element with `id` in `dom`: what is between its start tag's `>` and
/// the next `<`.
fn text_of<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in\n{dom}"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    let end = start + dom[start..].find('<').unwrap();
    &dom[start..end]
}

#[test]
fn a_browser_shows_the_live_figures() {
    if !have_chromium() {
        return;
    }
    let (server, _) = start("browser");
    let metrics = server.metrics.unwrap();
    let addr = server.addr();
    // Requests flow while the browser looks, for at most a minute.
    let stop = Arc::new(AtomicBool::new(false));
    let flowing = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                traffic(addr);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // The sampler has seen them before the browser asks.
    status_when(metrics, |j| {
        j["requests"]["per_second"].as_f64() > Some(0.0)
            && j["status_classes"]["5xx"].as_f64() > Some(0.0)
    });

    let profile = dir("browser-profile");
    let url = format!("http://{metrics}/status");
    let dom = chromium(&url, "--dump-dom", &profile);
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&url, &format!("--screenshot={}", shot.display()), &profile);
    stop.store(true, Ordering::Relaxed);
    flowing.join().unwrap();

    // The script ran (the CSP let it) and filled the figures in.
    assert_eq!(text_of(&dom, "state"), "live", "{dom}");
    let number = |id: &str| -> f64 {
        let text = text_of(&dom, id).replace(',', "");
        text.parse()
            .unwrap_or_else(|_| panic!("#{id} is {text:?}, not a number"))
    };
    assert!(number("rps") > 0.0, "{dom}");
    assert!(number("c2xx") > 0.0, "{dom}");
    assert!(number("c5xx") > 0.0, "{dom}");
    assert!(number("p99") >= 0.0, "{dom}");
    assert_eq!(text_of(&dom, "version"), env!("CARGO_PKG_VERSION"));
    // One row per upstream, the live one up and the dead one down.
    assert!(
        dom.contains(r#"<tr class="upstream" data-up="true"><td>echo</td>"#),
        "{dom}"
    );
    assert!(
        dom.contains(r#"<tr class="upstream" data-up="false"><td>dead</td>"#),
        "{dom}"
    );
    assert!(
        dom.contains(r#"<span class="badge down">down</span>"#),
        "{dom}"
    );
    // The routes, the two workers, the certificate with its expiry date.
    for route in ["files", "echo", "dead"] {
        assert!(
            dom.contains(&format!(r#"<tr class="route"><td>{route}</td>"#)),
            "{dom}"
        );
    }
    assert_eq!(dom.matches(r#"<tr class="worker">"#).count(), 2, "{dom}");
    assert!(
        dom.contains(
            r#"<tr class="certificate"><td>localhost</td><td>2031-05-17 00:00:00 UTC</td>"#
        ),
        "{dom}"
    );
    // The chart was drawn.
    assert!(!dom.contains(r#"id="chart-req" d="""#), "{dom}");

    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}

#[test]
fn a_reload_keeps_the_chart_and_turns_the_page_off_and_on() {
    let config = |status: bool, body: &str| {
        format!(
            "[server]\nworkers = 1\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n\
             [status]\nenabled = {status}\n\
             [[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\nname = \"hi\"\npath = \"/hi\"\nrespond = {{ body = \"{body}\" }}\n"
        )
    };
    let points = |json: &serde_json::Value| {
        json["chart"]["requests_per_second"]
            .as_array()
            .unwrap()
            .len()
    };
    let mut server = Server::start(&config(true, "hi"));
    let metrics = server.metrics.unwrap();
    assert_eq!(get(server.addr(), "/hi").status, 200);
    let before = points(&status_when(metrics, |j| points(j) >= 2));

    let reload = |server: &mut Server, status: bool, body: &str| {
        server.rewrite_config(&config(status, body));
        server.signal(rustix::process::Signal::HUP);
        server.wait_for_line(|l| l.contains("reloaded "));
    };
    // The page stays on: the same sampler, so the chart goes on where it was.
    reload(&mut server, true, "hello");
    assert_eq!(get(server.addr(), "/hi").text(), "hello");
    let json = status_when(metrics, |j| j["routes"][0]["total"] == 2.0);
    assert!(points(&json) > before, "{json:#}");

    reload(&mut server, false, "hello");
    assert_eq!(get(metrics, "/status").status, 404);
    assert_eq!(get(metrics, "/status.json").status, 404);
    assert_eq!(get(metrics, "/metrics").status, 200);

    // On again: a new sampler, whose figures come within a second.
    reload(&mut server, true, "hello");
    let json = status_when(metrics, |j| points(j) >= 1);
    assert_eq!(json["routes"][0]["name"], "hi", "{json:#}");
}
