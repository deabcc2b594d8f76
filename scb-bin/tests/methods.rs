//! Every kind of answer, by GET and by HEAD, over HTTP/2 and HTTP/1.1 (TLS and plain),
//! through a real client: curl. HEAD gets the headers GET gets and no body, and ends
//! cleanly: over HTTP/2 its HEADERS frame carries END_STREAM. An upload over the limit
//! gets a 413 the client reads, over HTTP/2 as over HTTP/1.1.
//!
//! Without `curl` on PATH the tests are skipped with a line saying so, unless
//! SCB_REQUIRE_TOOLS says they must run.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::php::PhpFpm;
use support::{Server, auth_service, echo_upstream};

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("methods-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether curl can be run; false (with a line on stderr) only where tools may be missing.
fn have_curl() -> bool {
    match Command::new("curl").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        other => {
            assert!(
                std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                "`curl` cannot be run ({other:?}), and SCB_REQUIRE_TOOLS says these tests must run"
            );
            #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
            {
                eprintln!("skipped: `curl` is not on PATH");
            }
            false
        }
    }
}

/// A certificate and key for `localhost`, as PEM files in `dir`.
fn cert(dir: &Path) -> (PathBuf, PathBuf) {
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.join("site.pem"), dir.join("site.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

/// What curl saw of one exchange.
#[derive(Debug)]
struct Seen {
    /// curl's exit code: 0 for a transfer that ended cleanly.
    code: i32,
    status: u16,
    /// Header lines of the final response, names lower-cased.
    headers: Vec<(String, String)>,
    /// Body bytes received.
    body_len: u64,
    #[allow(dead_code, reason = "read through Debug, in the failure messages")]
    stderr: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Runs curl with `args` and the options that make it report the response head, the
/// body's size and its own verdict.
fn curl(args: &[&str]) -> Seen {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-k",
            "--max-time",
            "20",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-w", "\nsize=%{size_download}\n"])
        .args(args)
        .output()
        .expect("running curl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut status = 0;
    let mut headers = Vec::new();
    let mut body_len = 0;
    for line in stdout.lines() {
        let line = line.trim_end();
        if line.starts_with("HTTP/") {
            // A new response head (after a 100 Continue, say) replaces the one before.
            status = line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            headers.clear();
        } else if let Some(size) = line.strip_prefix("size=") {
            body_len = size.parse().unwrap_or(u64::MAX);
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    Seen {
        code: out.status.code().unwrap_or(-1),
        status,
        headers,
        body_len,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// One way of reaching the server.
struct Protocol {
    name: &'static str,
    scheme: &'static str,
    addr: SocketAddr,
    flag: &'static str,
}

/// A bcrypt line for `admin` / `secret`, as `htpasswd -nbB -C 5 admin secret` writes it.
const HTPASSWD: &str = "admin:$2y$05$lIcw.WE.7TZLC00am52ZDOFf2Cb2wavOezmAsNO0iIzzgIWwtQEKe\n";

#[test]
fn head_answers_like_get_without_a_body_for_every_route_kind_and_protocol() {
    if !have_curl() {
        return;
    }
    let dir = dir("matrix");
    let (cert, key) = cert(&dir);
    let root = dir.join("www");
    std::fs::create_dir_all(root.join("static")).unwrap();
    std::fs::write(root.join("static/a.txt"), "a static file\n").unwrap();
    std::fs::write(dir.join("users"), HTPASSWD).unwrap();
    let upstream = echo_upstream();
    let auth = auth_service();
    // FastCGI with php-fpm where it is installed (or required): scripts, the files beside
    // them, and try_files' fallback to a script.
    let php_root = dir.join("php-root");
    std::fs::create_dir_all(php_root.join("php")).unwrap();
    std::fs::write(
        php_root.join("php/hello.php"),
        "<?php header('Content-Type: text/plain'); echo \"Hello, world!\";\n",
    )
    .unwrap();
    std::fs::write(php_root.join("php/a.txt"), "a file beside the scripts\n").unwrap();
    let fpm = PhpFpm::start(&dir.join("fpm"), 2);
    let php_route = fpm.as_ref().map_or(String::new(), |fpm| {
        format!(
            "[[site.route]]\nprefix = \"/php/\"\n\
             try_files = [\"{{path}}\", \"/php/hello.php\"]\n\
             fastcgi = {{ upstreams = [\"unix:{}\"], root = {:?} }}\n",
            fpm.socket.display(),
            php_root.display().to_string(),
        )
    });
    let config = format!(
        "[server]\nworkers = 1\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nredirect_https = true\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[site]]\nhosts = [\"localhost\"]\n\
         [[site.route]]\npath = \"/health\"\nrespond = {{ body = \"ok\\n\" }}\n\
         [[site.route]]\npath = \"/ready\"\nhealth = true\n\
         [[site.route]]\nprefix = \"/static/\"\nstatic = {{ root = {root:?} }}\n\
         [[site.route]]\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[site.route]]\nprefix = \"/cached/\"\nproxy = {{ upstreams = [\"{upstream}\"] }}\n\
         cache = {{ max_bytes = \"1MiB\" }}\n\
         [[site.route]]\npath = \"/old\"\nredirect = {{ to = \"/new\" }}\n\
         [[site.route]]\nprefix = \"/admin/\"\n\
         basic_auth = {{ users = {users:?} }}\nrespond = {{ body = \"secret\" }}\n\
         [[site.route]]\nprefix = \"/guarded/\"\n\
         forward_auth = {{ upstream = \"{auth}\", uri = \"/verify\" }}\n\
         proxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[site.route]]\nprefix = \"/open/\"\n\
         forward_auth = {{ upstream = \"{auth}\", uri = \"/verify\", copy_headers = [\"Remote-User\"] }}\n\
         respond = {{ body = \"passed\\n\" }}\n\
         [[site.route]]\npath_regex = \"^/u/(?<id>\\\\d+)$\"\nrewrite = {{ to = \"/api/users/{{id}}\" }}\n\
         proxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[site.route]]\nprefix = \"/cond/\"\nmatch = {{ methods = [\"GET\"], query = {{ \"v\" = \"1\" }} }}\n\
         respond = {{ body = \"conditional\\n\" }}\n\
         {php_route}",
        cert = cert.display().to_string(),
        key = key.display().to_string(),
        root = root.display().to_string(),
        users = dir.join("users").display().to_string(),
    );
    let server = Server::start(&config);
    let (redirecting, secure, plain) = (server.addrs[0], server.addrs[1], server.addrs[2]);
    let protocols = [
        Protocol {
            name: "HTTP/2 over TLS",
            scheme: "https",
            addr: secure,
            flag: "--http2",
        },
        Protocol {
            name: "HTTP/1.1 over TLS",
            scheme: "https",
            addr: secure,
            flag: "--http1.1",
        },
        Protocol {
            name: "HTTP/1.1",
            scheme: "http",
            addr: plain,
            flag: "--http1.1",
        },
        Protocol {
            name: "HTTP/2 (h2c)",
            scheme: "http",
            addr: plain,
            flag: "--http2-prior-knowledge",
        },
    ];
    // (path, Host, the status every protocol must give). The echo upstream's body names
    // the method, so its HEAD length is one byte more than its GET's: not compared.
    let mut cases: Vec<(&str, &str, u16)> = vec![
        ("/health", "localhost", 200),
        ("/ready", "localhost", 200),
        ("/static/a.txt", "localhost", 200),
        ("/static/missing.txt", "localhost", 404),
        ("/nowhere", "localhost", 404),
        ("/api/users", "localhost", 200),
        ("/cached/users", "localhost", 200),
        ("/old", "localhost", 308),
        ("/admin/", "localhost", 401),
        ("/health", "elsewhere.test", 421),
        ("/guarded/x", "localhost", 401),
        ("/open/x", "localhost", 200),
        ("/u/42", "localhost", 200),
        ("/cond/x?v=1", "localhost", 200),
        ("/cond/x?v=2", "localhost", 404),
    ];
    if fpm.is_some() {
        cases.extend([
            ("/php/hello.php", "localhost", 200),
            ("/php/a.txt", "localhost", 200),
            ("/php/route/7", "localhost", 200),
            ("/php/", "localhost", 404),
        ]);
    }
    let mut failures = Vec::new();
    for protocol in &protocols {
        for &(path, host, status) in &cases {
            let url = format!(
                "{}://localhost:{}{path}",
                protocol.scheme,
                protocol.addr.port()
            );
            let resolve = format!("localhost:{}:127.0.0.1", protocol.addr.port());
            let host_header = format!("Host: {host}:{}", protocol.addr.port());
            let base = [protocol.flag, "--resolve", &resolve, "-H", &host_header];
            let get = curl(&[&base[..], &[url.as_str()]].concat());
            let head = curl(&[&base[..], &["-I", url.as_str()]].concat());
            let what = format!("{} {host}{path}", protocol.name);
            let mut check = |ok: bool, msg: &str| {
                if !ok {
                    failures.push(format!("{what}: {msg}\n  GET {get:?}\n  HEAD {head:?}"));
                }
            };
            check(get.code == 0 && head.code == 0, "curl failed");
            check(get.status == status, "GET status");
            check(head.status == status, "HEAD status");
            check(head.body_len == 0, "HEAD got a body");
            for name in [
                "content-length",
                "content-type",
                "location",
                "www-authenticate",
            ] {
                // The echo upstream's body names the method.
                if name == "content-length"
                    && ["/api/", "/cached/", "/u/"]
                        .iter()
                        .any(|p| path.starts_with(p))
                {
                    continue;
                }
                // php-fpm sends nothing for a HEAD, so the length is left out (RFC 9110
                // 8.6: a HEAD's length, if sent, is the GET's).
                if name == "content-length" && path.starts_with("/php/") {
                    check(
                        head.header(name)
                            .is_none_or(|h| Some(h) == get.header(name)),
                        "HEAD content-length differs from GET's",
                    );
                    continue;
                }
                check(
                    head.header(name) == get.header(name),
                    &format!("{name} differs"),
                );
            }
            check(
                get.header("x-request-id").is_some() && head.header("x-request-id").is_some(),
                "no request id",
            );
        }
    }
    // A plain listener that redirects: the 308 by HEAD over both HTTP/1.1 and h2c.
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let url = format!("http://localhost:{}/health", redirecting.port());
        let resolve = format!("localhost:{}:127.0.0.1", redirecting.port());
        let head = curl(&[flag, "--resolve", &resolve, "-I", &url]);
        if head.code != 0 || head.status != 308 || head.header("location").is_none() {
            failures.push(format!("redirect_https {flag}: {head:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_upload_over_the_limit_gets_a_413_that_curl_reads_over_http2_and_http1() {
    if !have_curl() {
        return;
    }
    let dir = dir("upload");
    let (cert, key) = cert(&dir);
    let big = dir.join("2MB.bin");
    std::fs::write(&big, vec![b'x'; 2_000_000]).unwrap();
    let upstream = echo_upstream();
    let config = format!(
        "[server]\nworkers = 1\n\
         [limits]\nmax_body_bytes = \"100KiB\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[route]]\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[route]]\nprefix = \"/small/\"\n\
         proxy = {{ upstreams = [\"{upstream}\"], max_body = \"50KiB\" }}\n",
        cert = cert.display().to_string(),
        key = key.display().to_string(),
    );
    let server = Server::start(&config);
    let port = server.addr().port();
    let data = format!("@{}", big.display());
    let resolve = format!("localhost:{port}:127.0.0.1");
    // The server's limit and a route's smaller one, each three times in a row on new
    // connections: the answer must not depend on which frame arrives first.
    for path in ["/api/upload", "/small/upload"] {
        for flag in ["--http2", "--http1.1"] {
            for _ in 0..3 {
                let url = format!("https://localhost:{port}{path}");
                let seen = curl(&[flag, "--resolve", &resolve, "--data-binary", &data, &url]);
                assert_eq!(
                    (seen.code, seen.status),
                    (0, 413),
                    "{flag} {path}: {seen:?}"
                );
                assert!(seen.header("x-request-id").is_some(), "{seen:?}");
                assert!(seen.body_len > 0, "the 413's text: {seen:?}");
            }
        }
    }
}
