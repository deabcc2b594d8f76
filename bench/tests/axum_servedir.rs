//! The `axum-servedir` peer and the committed server templates agree on the benchmark's
//! layout: `/respond`, `/proxy/...` to a keep-alive upstream, and static files for the rest.
//!
//! `axum-servedir` is run as a real process over plain HTTP/1.1 (the harness verifies TLS
//! itself, before every TLS scenario). Every wait is bounded: sockets have read and write
//! timeouts, start-up is a connect retried until a deadline, and exit is awaited with one.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long anything here may take: generous for a loaded CI machine, short enough that a
/// hang fails the test instead of the job.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Between two refused connects while a listener comes up: short next to start-up, long
/// enough not to spin a core the server needs on a 2-core machine.
const RETRY: Duration = Duration::from_millis(5);

const HELLO: &[u8] = b"Hello, world!";

/// The placeholders the harness replaces in every template.
const PLACEHOLDERS: [&str; 19] = [
    "HTTP_PORT",
    "TLS_PORT",
    "UPSTREAM",
    "UPSTREAM_PORT",
    "UPSTREAM_TLS",
    "UPSTREAM_H2C",
    "UPSTREAM_LISTEN",
    "DOCROOT",
    "CERT",
    "KEY",
    "WORKERS",
    "MAX_CONNECTIONS",
    "WORKDIR",
    "OPEN_FILE_CACHE",
    "METRICS",
    "HTTP3",
    "CADDY_PROTOCOLS",
    "PHP_FPM_SOCKET",
    "PHP_ROOT",
];

const TEMPLATES: [&str; 5] = [
    "nginx.conf",
    "nginx-upstream.conf",
    "Caddyfile",
    "scb.toml",
    "haproxy.cfg",
];

#[test]
fn serves_respond_files_and_proxy_over_plain_http() {
    let upstream = Upstream::start();
    let server = AxumServeDir::start(&upstream);
    let mut conn = Conn::open(server.http);

    let respond = conn.request("GET", "/respond");
    assert_eq!(respond.status, 200);
    assert_eq!(respond.header("content-type"), Some("text/plain"));
    assert_eq!(respond.body, HELLO);

    let head = conn.request("HEAD", "/respond");
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("13"));
    assert!(head.body.is_empty());

    let small = conn.request("GET", "/small.txt");
    assert_eq!(small.status, 200);
    assert_eq!(small.body, HELLO);

    let head = conn.request("HEAD", "/small.txt");
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("13"));

    let big = conn.request("GET", "/1m.bin");
    assert_eq!(big.status, 200);
    assert!(big.body == one_mebibyte(), "1m.bin differs");

    let many = conn.request("GET", "/many/00042.txt");
    assert_eq!(many.status, 200);
    assert_eq!(many.body, one_kibibyte(42));

    let proxied = conn.request("GET", "/proxy/x?y=1");
    assert_eq!(proxied.status, 200);
    assert_eq!(proxied.body, HELLO);
    assert_eq!(upstream.next_request_line(), "GET /proxy/x?y=1 HTTP/1.1");
}

#[test]
fn directories_are_not_listed() {
    let upstream = Upstream::start();
    let server = AxumServeDir::start(&upstream);
    let mut conn = Conn::open(server.http);
    for path in ["/", "/many/"] {
        let response = conn.request("GET", path);
        assert_eq!(response.status, 404, "GET {path}");
        assert!(
            !String::from_utf8_lossy(&response.body).contains("00042.txt"),
            "GET {path} lists the directory"
        );
    }
}

#[test]
fn proxy_keeps_upstream_connections_alive() {
    let upstream = Upstream::start();
    let server = AxumServeDir::start(&upstream);
    let mut conn = Conn::open(server.http);
    let requests = 10;
    for i in 0..requests {
        let response = conn.request("GET", &format!("/proxy/{i}"));
        assert_eq!(response.status, 200);
        assert_eq!(response.body, HELLO);
    }
    // One connection in the ideal case; a pooled connection that goes back to the pool a
    // moment after its response was forwarded may make the next request open a second.
    let connections = upstream.connections.load(Ordering::SeqCst);
    assert!(
        connections < requests / 2,
        "{connections} upstream connections for {requests} requests"
    );
}

#[test]
fn sigterm_stops_both_listeners() {
    let upstream = Upstream::start();
    let mut server = AxumServeDir::start(&upstream);
    let pid = i32::try_from(server.child.id()).expect("pid fits in i32");
    let pid = rustix::process::Pid::from_raw(pid).expect("pid is positive");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill -TERM");
    let status = server.wait();
    assert!(status.success(), "{status}");
    for addr in [server.http, server.tls] {
        assert!(TcpStream::connect(addr).is_err(), "{addr} still accepts");
    }
}

#[test]
fn templates_use_only_the_harness_placeholders_and_document_them() {
    for name in TEMPLATES {
        let text = template(name);
        let used = placeholders(&text);
        assert!(!used.is_empty(), "{name} has no placeholders");
        for placeholder in &used {
            assert!(
                PLACEHOLDERS.contains(&placeholder.as_str()),
                "{name}: unknown placeholder {{{{{placeholder}}}}}"
            );
            // Documented: named in a comment line before the first non-comment line.
            let documented = text
                .lines()
                .take_while(|l| l.trim().is_empty() || l.starts_with('#'))
                .any(|l| l.contains(&format!("{{{{{placeholder}}}}}")));
            assert!(
                documented,
                "{name}: {{{{{placeholder}}}}} is not documented at the top"
            );
        }
    }
}

#[test]
fn templates_serve_the_same_respond_body() {
    for name in ["nginx.conf", "Caddyfile", "scb.toml"] {
        let text = template(name);
        assert!(text.contains("/respond"), "{name} has no /respond");
        assert!(
            text.contains("\"Hello, world!\""),
            "{name} answers something else"
        );
        assert!(text.contains("text/plain"), "{name} sets no text/plain");
    }
}

#[test]
fn nginx_templates_pass_nginx_t() {
    let Some(nginx) = installed("nginx", &["/usr/sbin/nginx"]) else {
        return;
    };
    let scratch = ScratchDir::new("nginx-t");
    let dir = &scratch.0;
    let docroot = dir.join("docroot");
    std::fs::create_dir_all(&docroot).unwrap();
    let (cert, key) = write_cert(dir);
    // nginx.conf twice: as `nginx` (the cache line commented out) and as `nginx-tuned`.
    for (name, open_file_cache) in [
        ("nginx.conf", "# "),
        ("nginx.conf", ""),
        ("nginx-upstream.conf", ""),
    ] {
        let rendered = dir.join(name);
        let text = render(name, dir, &docroot, &cert, &key)
            .replace("{{OPEN_FILE_CACHE}}", open_file_cache);
        assert!(!text.contains("{{"), "{name}: a placeholder is left");
        std::fs::write(&rendered, text).unwrap();
        let output = Command::new(&nginx)
            .arg("-t")
            .args(["-e", "stderr"])
            .arg("-c")
            .arg(&rendered)
            .output()
            .expect("running nginx -t");
        assert!(
            output.status.success(),
            "nginx -t {name}:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn caddyfile_passes_caddy_validate() {
    let Some(caddy) = installed("caddy", &["/usr/bin/caddy"]) else {
        return;
    };
    let scratch = ScratchDir::new("caddy-validate");
    let dir = &scratch.0;
    let docroot = dir.join("docroot");
    std::fs::create_dir_all(&docroot).unwrap();
    let (cert, key) = write_cert(dir);
    let rendered = dir.join("Caddyfile");
    std::fs::write(&rendered, render("Caddyfile", dir, &docroot, &cert, &key)).unwrap();
    let output = Command::new(&caddy)
        .args(["validate", "--adapter", "caddyfile", "--config"])
        .arg(&rendered)
        // Caddy's storage and autosave go here, not into the caller's home.
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .output()
        .expect("running caddy validate");
    assert!(
        output.status.success(),
        "caddy validate:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn haproxy_cfg_passes_haproxy_check() {
    let Some(haproxy) = installed("haproxy", &["/usr/sbin/haproxy"]) else {
        return;
    };
    let scratch = ScratchDir::new("haproxy-check");
    let dir = &scratch.0;
    let (cert, key) = write_cert(dir);
    let rendered = dir.join("haproxy.cfg");
    std::fs::write(&rendered, render("haproxy.cfg", dir, dir, &cert, &key)).unwrap();
    let output = Command::new(&haproxy)
        .arg("-c")
        .arg("-f")
        .arg(&rendered)
        .output()
        .expect("running haproxy -c");
    assert!(
        output.status.success(),
        "haproxy -c:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A running `axum-servedir` on a fresh docroot, killed on drop if the test did not stop it.
struct AxumServeDir {
    child: Child,
    http: SocketAddr,
    tls: SocketAddr,
    _dir: ScratchDir,
}

impl AxumServeDir {
    /// Starts the binary and waits until both listeners accept connections.
    ///
    /// The binary takes fixed addresses, as the harness gives every server, so the ports
    /// are found free by binding port 0 and then released; another process can take one in
    /// between. A start that fails with "address in use" is therefore retried on new ports.
    fn start(upstream: &Upstream) -> Self {
        let dir = ScratchDir::new("axum-servedir");
        let docroot = dir.0.join("docroot");
        write_docroot(&docroot);
        let (cert, key) = write_cert(&dir.0);
        for _ in 0..5 {
            let (http, tls) = (free_addr(), free_addr());
            let mut child = Command::new(env!("CARGO_BIN_EXE_axum-servedir"))
                .arg("--http")
                .arg(http.to_string())
                .arg("--tls")
                .arg(tls.to_string())
                .arg("--root")
                .arg(&docroot)
                .arg("--upstream")
                .arg(upstream.addr.to_string())
                .arg("--cert")
                .arg(&cert)
                .arg("--key")
                .arg(&key)
                .args(["--workers", "1"])
                .stdin(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning axum-servedir");
            let mut pipe = child.stderr.take().expect("piped stderr");
            // Reads until the process exits, so that the pipe never fills.
            let stderr = std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            });
            let started = wait_until_accepting(&mut child, http)
                .and_then(|()| wait_until_accepting(&mut child, tls));
            match started {
                Ok(()) => {
                    return Self {
                        child,
                        http,
                        tls,
                        _dir: dir,
                    };
                }
                Err(status) => {
                    // The process has exited, so its stderr is at EOF.
                    let stderr = stderr.join().unwrap();
                    assert!(
                        stderr.contains("Address already in use"),
                        "axum-servedir exited before listening: {status}\n{stderr}"
                    );
                }
            }
        }
        panic!("axum-servedir found its ports taken five times over");
    }

    /// Waits for the process to exit, failing the test after [`TIMEOUT`].
    fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "axum-servedir did not exit within {TIMEOUT:?}"
            );
            std::thread::sleep(RETRY);
        }
    }
}

impl Drop for AxumServeDir {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `addr` accepts a connection; `Err` with the exit status if `child` exited
/// first.
fn wait_until_accepting(child: &mut Child, addr: SocketAddr) -> Result<(), ExitStatus> {
    let deadline = Instant::now() + TIMEOUT;
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(status);
        }
        assert!(
            Instant::now() < deadline,
            "nothing listens on {addr} within {TIMEOUT:?}"
        );
        std::thread::sleep(RETRY);
    }
    Ok(())
}

/// A stand-in for the upstream nginx: every request on a keep-alive connection gets
/// `200 Hello, world!`. Its threads end with the test process.
struct Upstream {
    addr: SocketAddr,
    /// Connections accepted so far.
    connections: Arc<AtomicUsize>,
    /// The request line of every request, in arrival order.
    request_lines: Mutex<Receiver<String>>,
}

impl Upstream {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel();
        let accepted = Arc::clone(&connections);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                accepted.fetch_add(1, Ordering::SeqCst);
                let tx = tx.clone();
                std::thread::spawn(move || serve_upstream_connection(stream, &tx));
            }
        });
        Self {
            addr,
            connections,
            request_lines: Mutex::new(rx),
        }
    }

    fn next_request_line(&self) -> String {
        self.request_lines
            .lock()
            .unwrap()
            .recv_timeout(TIMEOUT)
            .expect("the upstream saw no request")
    }
}

/// Answers every request head on `stream` until the peer closes it. GET/HEAD only, as
/// the proxied requests here have no body.
fn serve_upstream_connection(stream: TcpStream, request_lines: &Sender<String>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let Some(head) = read_head(&mut reader) else {
            return;
        };
        let request_line = head.first().cloned().unwrap_or_default();
        let body: &[u8] = if request_line.starts_with("HEAD ") {
            b""
        } else {
            HELLO
        };
        let _ = request_lines.send(request_line);
        let mut response =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n".to_vec();
        response.extend_from_slice(body);
        if writer.write_all(&response).is_err() {
            return;
        }
    }
}

/// One keep-alive HTTP/1.1 client connection.
struct Conn {
    reader: BufReader<TcpStream>,
}

struct Response {
    status: u16,
    /// Lower-case names.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Conn {
    fn open(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    /// Sends one bodiless request and reads its response (framed by Content-Length).
    fn request(&mut self, method: &str, path: &str) -> Response {
        let request = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let head = read_head(&mut self.reader).expect("a response head");
        let status = head[0]
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {:?}", head[0]));
        let headers: Vec<(String, String)> = head[1..]
            .iter()
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let response = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if method == "HEAD" {
            return response;
        }
        let length: usize = response
            .header("content-length")
            .unwrap_or_else(|| panic!("{method} {path}: no content-length"))
            .parse()
            .unwrap();
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        Response { body, ..response }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.reader.get_ref().shutdown(Shutdown::Both);
    }
}

/// Reads a message head's lines (without CRLF); `None` at EOF or on an error.
fn read_head(reader: &mut impl BufRead) -> Option<Vec<String>> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return Some(lines);
        }
        lines.push(line.to_owned());
    }
}

/// A loopback address nothing listens on right now.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A fresh directory under Cargo's per-target temp dir, unique to this process and call,
/// removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(what: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The layout's files, in miniature: `many/` holds a few of the harness's 10,000.
fn write_docroot(docroot: &Path) {
    std::fs::create_dir_all(docroot.join("many")).unwrap();
    std::fs::write(docroot.join("small.txt"), HELLO).unwrap();
    std::fs::write(docroot.join("1m.bin"), one_mebibyte()).unwrap();
    for i in 40..45 {
        std::fs::write(docroot.join(format!("many/{i:05}.txt")), one_kibibyte(i)).unwrap();
    }
}

fn one_mebibyte() -> Vec<u8> {
    (0..1 << 20).map(|i: u32| (i % 251) as u8).collect()
}

/// 1 KiB that differs from file to file, so a wrong file cannot pass.
fn one_kibibyte(i: usize) -> Vec<u8> {
    format!("{i:05}\n").bytes().cycle().take(1024).collect()
}

/// A self-signed certificate for 127.0.0.1, as the harness makes one.
fn write_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

fn template(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `{{NAME}}` placeholders in `text`.
fn placeholders(text: &str) -> BTreeSet<String> {
    text.split("{{")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}"))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// `name` rendered the way the harness renders it, with ports nothing needs to bind.
fn render(name: &str, workdir: &Path, docroot: &Path, cert: &Path, key: &Path) -> String {
    let values = [
        ("HTTP_PORT", "18080".to_owned()),
        ("TLS_PORT", "18443".to_owned()),
        ("UPSTREAM", "127.0.0.1:18090".to_owned()),
        ("UPSTREAM_PORT", "18090".to_owned()),
        ("UPSTREAM_TLS", "127.0.0.1:18091".to_owned()),
        ("UPSTREAM_H2C", "127.0.0.1:18092".to_owned()),
        ("UPSTREAM_LISTEN", " ssl".to_owned()),
        ("DOCROOT", docroot.display().to_string()),
        ("CERT", cert.display().to_string()),
        ("KEY", key.display().to_string()),
        ("WORKERS", "1".to_owned()),
        ("MAX_CONNECTIONS", "4096".to_owned()),
        ("WORKDIR", workdir.display().to_string()),
        // The HTTP/3 rows' form: the one with more to check.
        ("HTTP3", "true".to_owned()),
        ("CADDY_PROTOCOLS", "h1 h2 h3".to_owned()),
        // Nothing listens there: nginx and Caddy check a config without connecting.
        (
            "PHP_FPM_SOCKET",
            workdir.join("php-fpm.sock").display().to_string(),
        ),
        ("PHP_ROOT", docroot.display().to_string()),
    ];
    let mut text = template(name);
    for (placeholder, value) in values {
        text = text.replace(&format!("{{{{{placeholder}}}}}"), &value);
    }
    // Left for the caller, which renders nginx.conf both ways.
    assert!(
        !text.replace("{{OPEN_FILE_CACHE}}", "").contains("{{"),
        "{name}: a placeholder is left after rendering"
    );
    text
}

/// `program` from PATH or one of `fallbacks`, or `None` (the test is skipped, with a
/// note) when it is not installed: the harness installs nginx and Caddy, `cargo test` may
/// not. With `SCB_REQUIRE_TOOLS` set (`cargo xtask ci` sets it) a missing program fails
/// the test instead.
fn installed(program: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    });
    let found = on_path.or_else(|| {
        fallbacks
            .iter()
            .map(PathBuf::from)
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
            "{program} is not installed, and SCB_REQUIRE_TOOLS says this check must run"
        );
        #[allow(
            clippy::print_stderr,
            reason = "the only way a skipped test can say so"
        )]
        {
            eprintln!("{program} is not installed: skipping its template check");
        }
    }
    found
}
