#![allow(
    dead_code,
    reason = "each test binary (binary.rs, tls.rs) uses its own part of the support module"
)]

//! Running the real `scb` binary: temp config files, the process and its log, and a tiny
//! HTTP/1.1 client over `std::net::TcpStream`.
//!
//! Every wait is bounded: log lines arrive on a channel read with a deadline, sockets have
//! read and write timeouts, and exits are awaited with a deadline.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

pub(crate) mod bind;
pub(crate) mod otlp;
pub(crate) mod php;
pub(crate) mod quic;
pub(crate) mod redis;
pub(crate) mod tls;

/// How long anything in these tests may take: generous for a loaded CI machine, short
/// enough that a hang fails the test instead of the job.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// The binary under test.
pub(crate) fn scb() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scb"));
    // The tests read `info` lines; a RUST_LOG in the caller's environment must not hide them.
    cmd.env("RUST_LOG", "info");
    cmd
}

/// Writes `contents` to a fresh file under Cargo's per-target temp dir.
pub(crate) fn config_file(contents: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("scb-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, contents).expect("writing a temp config");
    path
}

/// Runs `scb check` on `contents`.
pub(crate) fn check(contents: &str) -> Output {
    run_to_end("check", contents)
}

/// Runs `scb <command>` on `contents` to its end: for commands that exit by themselves
/// (`check`, or `run` with a config it refuses).
pub(crate) fn run_to_end(command: &str, contents: &str) -> Output {
    let path = config_file(contents);
    let output = scb()
        .arg(command)
        .arg("--config")
        .arg(&path)
        .output()
        .expect("running scb");
    let _ = std::fs::remove_file(path);
    output
}

/// A running `scb run`, killed on drop if the test did not stop it.
pub(crate) struct Server {
    child: Child,
    lines: Receiver<String>,
    /// Every log line read so far, for assertions and failure messages.
    pub(crate) log: Vec<String>,
    /// The TCP `[[listen]]` addresses, in config order, as logged.
    pub(crate) addrs: Vec<SocketAddr>,
    /// The `unix:` listeners' paths, in config order, as logged.
    pub(crate) unix: Vec<PathBuf>,
    /// The metrics address, if `[metrics]` is configured.
    pub(crate) metrics: Option<SocketAddr>,
    config: PathBuf,
}

impl Server {
    /// Starts `scb run` on `config` (use port 0 everywhere) and waits until it has logged
    /// every address it listens on.
    pub(crate) fn start(config: &str) -> Self {
        Self::start_with(config, &[])
    }

    /// [`start`](Self::start) with extra arguments before `run`.
    pub(crate) fn start_with(config: &str, args: &[&str]) -> Self {
        Self::start_adjusted(config, |command| {
            command.args(args);
        })
    }

    /// [`start`](Self::start), with `adjust` changing the command first (its user, say)
    /// and adding arguments before `run`.
    pub(crate) fn start_adjusted(config: &str, adjust: impl FnOnce(&mut Command)) -> Self {
        let listeners = config.matches("[[listen]]").count();
        let metrics = config.contains("[metrics]");
        let path = config_file(config);
        let mut command = scb();
        adjust(&mut command);
        command.arg("run").arg("--config").arg(&path);
        Self::spawn(command, listeners, metrics, path)
    }

    /// `scb run` on the config file at `path` (left in place), expecting `listeners`
    /// listen lines, with `adjust` changing the command first (its environment, say).
    pub(crate) fn start_file(
        path: &std::path::Path,
        listeners: usize,
        adjust: impl FnOnce(&mut Command),
    ) -> Self {
        let mut command = scb();
        adjust(&mut command);
        command.arg("run").arg("--config").arg(path);
        Self::spawn(command, listeners, false, PathBuf::new())
    }

    /// `scb run --upgrade` on the config file at `path` (left in place): a new process
    /// taking the listeners over from the one running with it.
    pub(crate) fn upgrade(path: &std::path::Path, listeners: usize) -> Self {
        let mut command = scb();
        command
            .arg("run")
            .arg("--upgrade")
            .arg("--config")
            .arg(path);
        Self::spawn(command, listeners, false, PathBuf::new())
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// [`start`](Self::start) under `wrapper` (a program and its arguments, such as
    /// `prlimit --nofile=48`), which runs the scb binary with `run --config FILE`.
    pub(crate) fn start_under(config: &str, wrapper: &[&str]) -> Self {
        let listeners = config.matches("[[listen]]").count();
        let metrics = config.contains("[metrics]");
        let path = config_file(config);
        let mut command = Command::new(wrapper[0]);
        command
            .args(&wrapper[1..])
            .arg(env!("CARGO_BIN_EXE_scb"))
            .env("RUST_LOG", "info")
            .arg("run")
            .arg("--config")
            .arg(&path);
        Self::spawn(command, listeners, metrics, path)
    }

    /// Starts `scb serve DIR` on a free port.
    #[allow(
        dead_code,
        reason = "each test binary uses its own part of the support module"
    )]
    pub(crate) fn serve(dir: &std::path::Path) -> Self {
        Self::serve_with(dir, |_| {})
    }

    /// [`serve`](Self::serve), with `adjust` changing the command first (its user, say).
    pub(crate) fn serve_with(dir: &std::path::Path, adjust: impl FnOnce(&mut Command)) -> Self {
        let mut command = scb();
        command
            .arg("serve")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--workers", "1"]);
        adjust(&mut command);
        Self::spawn(command, 1, false, PathBuf::new())
    }

    fn spawn(mut command: Command, listeners: usize, metrics: bool, path: PathBuf) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning scb run");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = channel();
        // Reads until the process exits: a full pipe would block the server's logging.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Self {
            child,
            lines,
            log: Vec::new(),
            addrs: Vec::new(),
            unix: Vec::new(),
            metrics: None,
            config: path,
        };
        while server.addrs.len() + server.unix.len() < listeners {
            let line = server.wait_for_line(|l| l.contains("listening on "));
            match line.split_once("listening on unix:") {
                Some((_, path)) => server.unix.push(PathBuf::from(path.trim())),
                None => server.addrs.push(addr_after(&line, "listening on ")),
            }
        }
        if metrics {
            let line = server.wait_for_line(|l| l.contains("metrics on "));
            server.metrics = Some(addr_after(&line, "metrics on "));
        }
        server
    }

    /// The first listen address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Waits for the next log line matching `pred`, failing the test after [`TIMEOUT`].
    pub(crate) fn wait_for_line(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no matching log line within {TIMEOUT:?}; log:\n{}",
                        self.log.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("scb exited; log:\n{}", self.log.join("\n"))
                }
            }
        }
    }

    /// Sends SIGTERM.
    pub(crate) fn terminate(&self) {
        self.signal(rustix::process::Signal::TERM);
    }

    /// Sends `signal`.
    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        let pid = i32::try_from(self.child.id()).expect("pid fits in i32");
        let pid = rustix::process::Pid::from_raw(pid).expect("pid is positive");
        rustix::process::kill_process(pid, signal).expect("kill");
    }

    /// The config file the server runs with.
    pub(crate) fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    /// Replaces the config file the server runs with, atomically (a new file renamed over
    /// it, as editors and config managers do), so that a reload never reads half of it.
    pub(crate) fn rewrite_config(&self, contents: &str) {
        let next = self.config.with_extension("next");
        std::fs::write(&next, contents).expect("writing the new config");
        std::fs::rename(&next, &self.config).expect("renaming the new config over the old");
    }

    /// Waits for the process to exit, failing the test after [`TIMEOUT`], then collects
    /// the rest of its log.
    pub(crate) fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for scb") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "scb did not exit within {TIMEOUT:?}; log:\n{}",
                self.log.join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // The process is gone, so the reader thread ends at EOF and this ends too.
        while let Ok(line) = self.lines.recv_timeout(TIMEOUT) {
            self.log.push(line);
        }
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.config);
    }
}

/// The socket address right after `marker` in a log line (text or JSON).
pub(crate) fn addr_after(line: &str, marker: &str) -> SocketAddr {
    let rest = &line[line.find(marker).expect("marker in line") + marker.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']')))
        .unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|e| panic!("no address in {line:?}: {e}"))
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// Lower-case names, in order.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (lower-case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8.
    pub(crate) fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("UTF-8 body")
    }
}

/// Sends one request with `Connection: close` and reads the whole response.
pub(crate) fn get(addr: SocketAddr, path: &str) -> Response {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"),
    )
}

/// A keep-alive HTTP/1.1 connection for responses with a Content-Length.
pub(crate) struct KeepAlive {
    reader: BufReader<TcpStream>,
    closing: bool,
}

impl KeepAlive {
    pub(crate) fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.set_write_timeout(Some(TIMEOUT))?;
        Ok(Self {
            reader: BufReader::new(stream),
            closing: false,
        })
    }

    /// Whether the last response said `Connection: close`.
    pub(crate) fn closing(&self) -> bool {
        self.closing
    }

    /// `GET path`, and its whole response. An error of kind `ConnectionReset` means
    /// that not one byte of the response came (the request may be sent again); any
    /// other, that the response broke off.
    pub(crate) fn get(&mut self, path: &str) -> std::io::Result<Response> {
        let nothing = |e: std::io::Error| {
            std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                format!("no response: {e}"),
            )
        };
        // One write: `write!` would send the pieces apart, and Nagle would hold the
        // second until the first is acknowledged.
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .map_err(nothing)?;
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            match self.reader.read_until(b'\n', &mut head) {
                Ok(0) if head.is_empty() => {
                    return Err(nothing(std::io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if head.is_empty() => return Err(nothing(e)),
                Err(e) => return Err(e),
            }
        }
        let (mut response, _) = parse_head(&head);
        let length = response
            .header("content-length")
            .map_or(0, |v| v.parse().expect("numeric content-length"));
        response.body = vec![0; length];
        self.reader.read_exact(&mut response.body)?;
        self.closing = response
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        Ok(response)
    }
}

/// Sends `raw` (which must ask the server to close) and reads the response to EOF.
pub(crate) fn request(addr: SocketAddr, raw: &str) -> Response {
    request_bytes(addr, raw.as_bytes())
}

/// [`request`] for a request that is not text (a binary upload, say).
pub(crate) fn request_bytes(addr: SocketAddr, raw: &[u8]) -> Response {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connecting");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    stream.write_all(raw).expect("writing the request");
    let mut bytes = Vec::new();
    stream
        .read_to_end(&mut bytes)
        .expect("reading the response");
    parse(&bytes, raw.starts_with(b"HEAD "))
}

/// The response in `bytes`; its body must be as long as its `Content-Length` says,
/// unless it answers a HEAD (`head`).
fn parse(bytes: &[u8], head: bool) -> Response {
    let (mut response, end) = parse_head(bytes);
    response.body = bytes[end + 4..].to_vec();
    if let Some(len) = response.header("content-length").filter(|_| !head) {
        assert_eq!(
            len.parse::<usize>().unwrap(),
            response.body.len(),
            "content-length"
        );
    }
    response
}

/// The status and fields of a response, and where its head ends (the final CRLF CRLF).
fn parse_head(bytes: &[u8]) -> (Response, usize) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(bytes)));
    let head = std::str::from_utf8(&bytes[..end]).expect("ASCII head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next();
    assert!(
        matches!(version, Some("HTTP/1.1" | "HTTP/1.0")),
        "{status_line}"
    );
    let status = parts.next().unwrap().parse().expect("numeric status");
    let headers: Vec<_> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    let response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    (response, end)
}

/// The lines of `path` once it has `count` of them (the writer thread writes a batch
/// whenever its queue runs empty, so they come soon after the responses).
pub(crate) fn lines(path: &std::path::Path, count: usize) -> Vec<String> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} has {} lines, not {count}",
            path.display(),
            lines.len()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The value of the series written exactly as `series` (name and labels) in a Prometheus
/// text scrape, or `None` if it is absent.
pub(crate) fn metric(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        Some(value.trim().parse().expect("numeric sample"))
    })
}

/// A tiny upstream for proxy tests: a thread answering every request, one per
/// connection, with `200 OK` and a body echoing what it received:
///
/// ```text
/// GET /users HTTP/1.1
/// host: test
/// x-forwarded-for: 127.0.0.1
/// x-request-id: 5c1f...
/// ```
///
/// (a header line for each of those three, `-` when absent). The thread lives as long as
/// the test process.
pub(crate) fn echo_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the upstream");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            // A broken connection fails the test through the proxy's answer, not here.
            let _ = echo_one(stream);
        }
    });
    addr
}

fn echo_one(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let mut body = format!("{}\n", request_line.trim_end());
    for name in ["host", "x-forwarded-for", "x-request-id"] {
        let value = headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("-", |(_, v)| v.as_str());
        body.push_str(&format!("{name}: {value}\n"));
    }
    // What a forward-auth check added and a trace's context, only when there are some
    // (other tests compare the three lines above exactly).
    for (name, value) in headers
        .iter()
        .filter(|(n, _)| n.starts_with("remote-") || n == "traceparent" || n == "tracestate")
    {
        body.push_str(&format!("{name}: {value}\n"));
    }
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// A tiny forward-auth service (Authelia's part in tests): a thread answering each
/// check by the request's fields.
///
/// - `X-Test-Auth: ok`, or an `X-Forwarded-Uri` starting with `/open`: 200 with
///   `Remote-User: alice`, `Remote-Groups: admins` and a field the check must not copy
///   (`X-Not-Copied`).
/// - `X-Test-Auth: login`: 302 to `https://login.example/?rd=` and the forwarded URI.
/// - anything else: 401 with `WWW-Authenticate: Basic realm="test"`, and, as fields,
///   what the check said of the request (`X-Seen-Method`, `-Uri`, `-Host`, `-Proto`,
///   `-For`, `-Auth` (its `X-Test-Auth`), `-Body` (its `Content-Length`)), so a test sees
///   the subrequest through the answer the client gets.
pub(crate) fn auth_service() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the auth service");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = auth_connection(stream);
            });
        }
    });
    addr
}

fn auth_connection(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let field = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-", |(_, v)| v.as_str())
                .to_owned()
        };
        let uri = field("x-forwarded-uri");
        let answer = match field("x-test-auth").as_str() {
            "ok" => ok_answer(),
            _ if uri.starts_with("/open") => ok_answer(),
            "login" => format!(
                "HTTP/1.1 302 Found\r\nLocation: https://login.example/?rd={uri}\r\n\
                 Content-Length: 0\r\n\r\n"
            ),
            _ => {
                let body = "denied\n";
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"test\"\r\n\
                     X-Seen-Method: {} {}\r\nX-Seen-Uri: {uri}\r\nX-Seen-Host: {}\r\n\
                     X-Seen-Proto: {}\r\nX-Seen-For: {}\r\nX-Seen-Auth: {}\r\n\
                     X-Seen-Body: {}\r\nContent-Type: text/plain\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    request_line.split(' ').next().unwrap_or("-"),
                    field("x-forwarded-method"),
                    field("x-forwarded-host"),
                    field("x-forwarded-proto"),
                    field("x-forwarded-for"),
                    field("x-test-auth"),
                    field("content-length"),
                    body.len(),
                )
            }
        };
        stream.write_all(answer.as_bytes())?;
    }
}

fn ok_answer() -> String {
    "HTTP/1.1 200 OK\r\nRemote-User: alice\r\nRemote-Groups: admins\r\n\
     X-Not-Copied: 1\r\nContent-Length: 2\r\n\r\nok"
        .to_owned()
}

/// Clients that keep requesting `paths` in turn on keep-alive connections renewed every
/// 20 requests, counting successes and keeping whatever is not one.
///
/// With `resend_unanswered`, a request that fails on a connection already used, before
/// one byte of its response came, is sent again on a new connection, as HTTP clients do
/// for idempotent requests (RFC 9112, 9.3.1): a server that closes an idle connection
/// may do so just as a request is sent on it. Anything else is a failure.
pub(crate) struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: std::sync::Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<Vec<String>>>,
}

impl Load {
    pub(crate) fn start(
        addr: SocketAddr,
        clients: usize,
        paths: &'static [&'static str],
        resend_unanswered: bool,
    ) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let threads = (0..clients)
            .map(|_| {
                let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut failures = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let mut conn = match KeepAlive::connect(addr) {
                            Ok(conn) => conn,
                            Err(e) => {
                                failures.push(format!("connect: {e}"));
                                continue;
                            }
                        };
                        for i in 0..20 {
                            let path = paths[i % paths.len()];
                            match conn.get(path) {
                                Ok(res) if res.status == 200 => {
                                    done.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(res) => failures.push(format!("{path}: {}", res.status)),
                                Err(e)
                                    if resend_unanswered
                                        && i > 0
                                        && e.kind() == std::io::ErrorKind::ConnectionReset =>
                                {
                                    break;
                                }
                                Err(e) => {
                                    failures.push(format!("{path} (request {i}): {e}"));
                                    break;
                                }
                            }
                            if conn.closing() {
                                break;
                            }
                        }
                    }
                    failures
                })
            })
            .collect();
        Self {
            stop,
            done,
            threads,
        }
    }

    /// Waits until `more` requests have succeeded since the call.
    pub(crate) fn wait_for(&self, more: usize) {
        let target = self.done.load(Ordering::Relaxed) + more;
        let deadline = Instant::now() + TIMEOUT;
        while self.done.load(Ordering::Relaxed) < target {
            assert!(Instant::now() < deadline, "the load stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stops the clients: the successes, and every failure.
    pub(crate) fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        (self.done.load(Ordering::Relaxed), failures)
    }
}

/// SHA-256 of `data`, in lower-case hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = aws_lc_sha256(data);
    digest.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// SHA-256 with the provider rustls already brings (no hashing crate just for tests).
fn aws_lc_sha256(data: &[u8]) -> Vec<u8> {
    let provider = scb_tls::rustls::crypto::aws_lc_rs::default_provider();
    let suite = provider
        .cipher_suites
        .iter()
        .find_map(|s| match s {
            scb_tls::rustls::SupportedCipherSuite::Tls13(t)
                if t.common.suite == scb_tls::rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 =>
            {
                Some(*t)
            }
            _ => None,
        })
        .unwrap();
    suite.common.hash_provider.hash(data).as_ref().to_vec()
}
