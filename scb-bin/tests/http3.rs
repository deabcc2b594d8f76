//! `http3 = true` on a TLS listener: HTTP/3 over QUIC on the same port, driven by
//! aioquic (PyPI, `tests/h3/client.py`) through every route kind (static with ranges and
//! conditionals, the proxy with large bodies both ways and a client certificate, fixed
//! answers, 404s, malformed requests, many streams at once), and by quinn's client for
//! what a Python script cannot see well: the certificate of each handshake across a
//! reload, while a connection opened before it stays open. TCP answers of the listener
//! advertise HTTP/3 with `Alt-Svc`; other listeners do not.
//!
//! Without aioquic importable by `python3` (or `$SCB_PYTHON`) its tests are skipped with
//! a line saying so, unless `SCB_REQUIRE_TOOLS` is set (as `.ci/run` does).

mod support;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};
use support::{Server, check, get, quic, sha256_hex};

/// A CA, and what it signed: a certificate for `names` with its key, as PEM files.
struct Pki {
    ca: PathBuf,
    ca_der: Vec<u8>,
    cert: PathBuf,
    key: PathBuf,
    der: Vec<u8>,
}

fn pki(dir: &Path, name: &str, names: &[&str], cn: &str) -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} CA"));
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    let write = |suffix: &str, pem: String| {
        let path = dir.join(format!("{name}{suffix}"));
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("-ca.pem", ca_cert.pem()),
        ca_der: ca_cert.der().to_vec(),
        cert: write(".pem", cert.pem()),
        key: write(".key", key.serialize_pem()),
        der: cert.der().to_vec(),
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-bin-h3-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An HTTP/1.1 upstream (axum) that reads each request's body whole and sends it back, with
/// the client-certificate subject scb forwarded as `echo-client-subject`. (Whole: scb's
/// HTTP/1.1 upstream client cuts a request at an answer that starts before it was read,
/// see scb-proxy's `client` module.)
fn echo_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
                use http_body_util::BodyExt as _;
                let subject = req.headers().get("x-client-cert-subject").cloned();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let mut res = axum::response::Response::new(axum::body::Body::from(body));
                if let Some(subject) = subject {
                    res.headers_mut().insert("echo-client-subject", subject);
                }
                res
            });
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

/// The Python that can import aioquic, or `None` (the test is skipped, with a line on
/// stderr) unless `SCB_REQUIRE_TOOLS` is set.
fn aioquic_python() -> Option<String> {
    let python = std::env::var("SCB_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let importable = Command::new(&python)
        .args(["-c", "import aioquic"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if importable {
        return Some(python);
    }
    assert!(
        std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
        "`{python}` cannot import aioquic, and SCB_REQUIRE_TOOLS says these tests must run"
    );
    #[allow(
        clippy::print_stderr,
        reason = "the only way to say why a test did nothing"
    )]
    {
        eprintln!(
            "SKIPPED: `{python}` cannot import aioquic (pip install aioquic, or set SCB_PYTHON)"
        );
    }
    None
}

/// Runs `tests/h3/client.py` on `job`: one report per request.
fn aioquic(python: &str, job: &Value) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3/client.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(job.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        reports.iter().all(|r| r.get("error").is_none()),
        "{reports:?}"
    );
    reports
}

#[test]
fn aioquic_gets_every_route_kind_over_http3_as_over_tcp() {
    let Some(python) = aioquic_python() else {
        return;
    };
    let dir = temp_dir("routes");
    let server_pki = pki(&dir, "server", &["localhost"], "localhost");
    let client_pki = pki(&dir, "alice", &["alice.clients.test"], "alice");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "hello, quic\n").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(dir.join("secret.txt"), "outside the root").unwrap();
    let upstream = echo_upstream();
    let config = format!(
        "[server]\nworkers = 1\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nhttp3 = true\n\
         tls = {{ cert = {cert:?}, key = {key:?}, client_ca = {ca:?}, client_auth = \"optional\" }}\n\
         [[route]]\npath = \"/respond\"\nrespond = {{ body = \"fixed\" }}\n\
         [[route]]\nprefix = \"/echo/\"\n\
         proxy = {{ upstreams = [\"{upstream}\"], forward_client_cert = true }}\n\
         [[route]]\nprefix = \"/\"\nstatic = {{ root = {root:?} }}\n",
        cert = server_pki.cert.display().to_string(),
        key = server_pki.key.display().to_string(),
        ca = client_pki.ca.display().to_string(),
        root = root.display().to_string(),
    );
    let server = Server::start(&config);
    let addr = server.addr();
    let job = |requests: Value| {
        json!({
            "host": "127.0.0.1", "port": addr.port(), "server_name": "localhost",
            "ca": server_pki.ca, "requests": requests,
        })
    };

    let reports = aioquic(
        &python,
        &job(json!([
            {"path": "/hello.txt"},
            {"path": "/hello.txt", "headers": [["range", "bytes=0-4"]]},
            {"method": "HEAD", "path": "/big.bin"},
            {"path": "/big.bin"},
            {"method": "POST", "path": "/echo/up", "body_size": 2_500_000,
             "headers": [["content-type", "application/octet-stream"]]},
            {"path": "/respond"},
            {"method": "HEAD", "path": "/respond"},
            {"path": "/missing"},
            {"path": "/../secret.txt"},
            {"path": "/%2e%2e/secret.txt"},
        ])),
    );
    let field = |r: &Value, name: &str| r["headers"][name].as_str().map(str::to_owned);
    let hello = &reports[0];
    assert_eq!(hello["status"], 200, "{hello}");
    assert_eq!(hello["body"], "hello, quic\n");
    assert_eq!(field(hello, "content-length").as_deref(), Some("12"));
    assert!(field(hello, "x-request-id").is_some(), "{hello}");
    // An answer over HTTP/3 needs no advertisement of it.
    assert_eq!(field(hello, "alt-svc"), None);
    let etag = field(hello, "etag").expect("an ETag");
    let range = &reports[1];
    assert_eq!(range["status"], 206, "{range}");
    assert_eq!(range["body"], "hello");
    assert_eq!(
        field(range, "content-range").as_deref(),
        Some("bytes 0-4/12")
    );
    let head = &reports[2];
    assert_eq!(head["status"], 200, "{head}");
    assert_eq!(field(head, "content-length").as_deref(), Some("3000000"));
    assert_eq!(head["body_len"], 0);
    let whole = &reports[3];
    assert_eq!(whole["status"], 200);
    assert_eq!(whole["body_len"], 3_000_000);
    assert_eq!(whole["body_sha256"], sha256_hex(&big));
    let echoed = &reports[4];
    assert_eq!(echoed["status"], 200, "{echoed}");
    assert_eq!(echoed["body_len"], 2_500_000, "{echoed}");
    assert_eq!(echoed["body_sha256"], sha256_hex(&vec![b'x'; 2_500_000]));
    // No certificate presented: none forwarded.
    assert_eq!(field(echoed, "echo-client-subject"), None);
    assert_eq!(reports[5]["status"], 200);
    assert_eq!(reports[5]["body"], "fixed");
    assert_eq!(reports[6]["status"], 200);
    assert_eq!(reports[6]["body_len"], 0);
    assert_eq!(
        field(&reports[6], "content-length"),
        field(&reports[5], "content-length")
    );
    assert_eq!(reports[7]["status"], 404);
    assert!(field(&reports[7], "x-request-id").is_some());
    for outside in &reports[8..10] {
        let status = outside["status"].as_u64().unwrap();
        assert!(status == 400 || status == 404, "{outside}");
        assert_ne!(outside["body"], "outside the root");
    }

    // Conditionals, and fifty streams at once on one connection.
    let mut requests = vec![json!({"path": "/hello.txt", "headers": [["if-none-match", etag]]})];
    requests.extend(
        (0..50).map(|i| json!({"path": if i % 2 == 0 { "/hello.txt" } else { "/respond" }})),
    );
    let mut concurrent = job(Value::Array(requests));
    concurrent["concurrent"] = json!(true);
    let reports = aioquic(&python, &concurrent);
    assert_eq!(reports[0]["status"], 304, "{}", reports[0]);
    assert_eq!(reports[0]["body_len"], 0);
    assert_eq!(reports.len(), 51);
    for (i, r) in reports[1..].iter().enumerate() {
        assert_eq!(r["status"], 200, "{r}");
        let body = if i % 2 == 0 { "hello, quic\n" } else { "fixed" };
        assert_eq!(r["body"], body);
    }

    // A client certificate reaches the upstream as the TCP listener forwards it.
    let mut with_cert = job(json!([{"method": "POST", "path": "/echo/who", "body_size": 10}]));
    with_cert["cert"] = json!(client_pki.cert);
    with_cert["key"] = json!(client_pki.key);
    let reports = aioquic(&python, &with_cert);
    assert_eq!(reports[0]["status"], 200, "{}", reports[0]);
    assert_eq!(
        field(&reports[0], "echo-client-subject").as_deref(),
        Some("CN=alice")
    );

    // Malformed requests (RFC 9114 §4.1.2): no :path, an uppercase field name, a
    // connection-specific field. Each is refused on its stream alone (a reset with
    // H3_MESSAGE_ERROR, or a 400); the connection goes on serving the next request.
    let malformed = |raw: Value| json!({"raw": raw, "path": "-"});
    let base = |extra: &[(&str, &str)]| {
        let mut v = vec![
            json!([":method", "GET"]),
            json!([":scheme", "https"]),
            json!([":authority", "localhost"]),
            json!([":path", "/hello.txt"]),
        ];
        v.extend(extra.iter().map(|(k, val)| json!([k, val])));
        Value::Array(v)
    };
    let reports = aioquic(
        &python,
        &job(json!([
            malformed(json!([[":method", "GET"], [":scheme", "https"], [":authority", "localhost"]])),
            {"path": "/hello.txt"},
            malformed(base(&[("X-Upper", "1")])),
            {"path": "/hello.txt"},
            malformed(base(&[("connection", "keep-alive")])),
            {"path": "/hello.txt"},
        ])),
    );
    const H3_MESSAGE_ERROR: u64 = 0x10e;
    for (i, r) in reports.iter().enumerate() {
        if i % 2 == 0 {
            let refused = r["reset"] == H3_MESSAGE_ERROR || r["status"] == 400;
            assert!(refused, "malformed request {i}: {r}");
        } else {
            assert_eq!(r["status"], 200, "the request after a malformed one: {r}");
            assert!(r["connection_closed"].is_null(), "{r}");
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_svc_names_the_quic_port_and_a_reload_gives_new_handshakes_the_new_certificate() {
    let dir = temp_dir("reload");
    let first = pki(&dir, "first", &["localhost"], "localhost");
    let live_cert = dir.join("live.pem");
    let live_key = dir.join("live.key");
    std::fs::copy(&first.cert, &live_cert).unwrap();
    std::fs::copy(&first.key, &live_key).unwrap();
    let config = format!(
        "[server]\nworkers = 2\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nhttp3 = true\n\
         tls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nhttp3 = true\nalt_svc_max_age = \"1h\"\n\
         tls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         tls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\npath = \"/hello\"\nrespond = {{ body = \"hello\" }}\n",
        cert = live_cert.display().to_string(),
        key = live_key.display().to_string(),
    );
    let mut server = Server::start(&config);
    let [h3_default, h3_hour, tls_only, plain] = server.addrs[..] else {
        panic!("four listeners: {:?}", server.addrs);
    };

    // TCP answers advertise the QUIC port of their own listener, and only where it is.
    let trusts_first = support::tls::client(&[&first.ca_der]);
    for (addr, expected) in [
        (
            h3_default,
            Some(format!("h3=\":{}\"; ma=86400", h3_default.port())),
        ),
        (
            h3_hour,
            Some(format!("h3=\":{}\"; ma=3600", h3_hour.port())),
        ),
        (tls_only, None),
    ] {
        let mut tls = support::tls::connect(addr, &trusts_first);
        let text = support::tls::request(&mut tls, "/hello");
        assert!(text.ends_with("hello"), "{text}");
        let alt_svc = text
            .lines()
            .find_map(|l| l.strip_prefix("alt-svc: "))
            .map(str::to_owned);
        assert_eq!(alt_svc, expected, "{addr}: {text}");
    }
    assert_eq!(get(plain, "/hello").header("alt-svc"), None);

    // HTTP/3 on the same port, with the first certificate; several clients (each its
    // own source port, so the kernel spreads them across both workers' sockets).
    let mut old = Vec::new();
    for _ in 0..4 {
        let (endpoint, mut send, presented) = quic::connect(h3_default, &[&first.ca_der]).await;
        assert_eq!(presented, first.der);
        assert_eq!(
            quic::get(&mut send, "/hello").await,
            (200, "hello".to_owned())
        );
        old.push((endpoint, send));
    }

    // New files and `scb reload`: new handshakes get the new certificate, connections
    // opened before stay open on theirs.
    let second = pki(&dir, "second", &["localhost"], "localhost");
    std::fs::copy(&second.cert, &live_cert).unwrap();
    std::fs::copy(&second.key, &live_key).unwrap();
    // Requests keep flowing on an open connection through the reload.
    let (_busy_endpoint, mut busy, _) = quic::connect(h3_default, &[&first.ca_der]).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let mut answered = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                assert_eq!(
                    quic::get(&mut busy, "/hello").await,
                    (200, "hello".to_owned())
                );
                answered += 1;
            }
            answered
        }
    });
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    for _ in 0..4 {
        let (_endpoint, mut send, presented) =
            quic::connect(h3_default, &[&first.ca_der, &second.ca_der]).await;
        assert_eq!(presented, second.der);
        assert_eq!(
            quic::get(&mut send, "/hello").await,
            (200, "hello".to_owned())
        );
    }
    for (_endpoint, send) in &mut old {
        assert_eq!(quic::get(send, "/hello").await, (200, "hello".to_owned()));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answered = traffic
        .await
        .expect("every request during the reload answered");
    assert!(answered > 0);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_requests_are_logged_as_tls13_without_a_cipher() {
    let dir = temp_dir("access-log");
    let certs = pki(&dir, "site", &["localhost"], "localhost");
    let log = dir.join("access.log");
    let config = format!(
        "[server]\nworkers = 1\n\
         [log]\naccess = {{ path = {log:?}, format = '{{protocol}} {{tls_version}} {{tls_cipher}}' }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nhttp3 = true\n\
         tls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[route]]\npath = \"/hello\"\nrespond = {{ body = \"hello\" }}\n",
        log = log.display().to_string(),
        cert = certs.cert.display().to_string(),
        key = certs.key.display().to_string(),
    );
    let server = Server::start(&config);
    let (_endpoint, mut send, _) = quic::connect(server.addr(), &[&certs.ca_der]).await;
    assert_eq!(
        quic::get(&mut send, "/hello").await,
        (200, "hello".to_owned())
    );
    // quinn keeps the suite to itself: the version is all a QUIC session tells.
    let deadline = std::time::Instant::now() + support::TIMEOUT;
    loop {
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        if !written.is_empty() {
            assert_eq!(written, "HTTP/3.0 TLSv1.3 -\n");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "nothing logged");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http3_needs_tls_and_alt_svc_needs_http3() {
    let out = check(
        "[[listen]]\naddr = \"127.0.0.1:0\"\nhttp3 = true\n\
         [[route]]\nprefix = \"/\"\nrespond = { body = \"x\" }\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(".toml:3:")
            && stderr.contains("listen[0].http3")
            && stderr.contains("add `tls`"),
        "{stderr}"
    );
    let out = check(
        "[[listen]]\naddr = \"127.0.0.1:0\"\nalt_svc_max_age = \"1h\"\n\
         [[route]]\nprefix = \"/\"\nrespond = { body = \"x\" }\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listen[0].alt_svc_max_age") && stderr.contains("http3 = true"),
        "{stderr}"
    );
    let out = check(
        "[[listen]]\naddr = \"unix:/tmp/scb-h3-test.sock\"\nhttp3 = true\n\
         [[route]]\nprefix = \"/\"\nrespond = { body = \"x\" }\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("listen[0].http3"), "{stderr}");
}
