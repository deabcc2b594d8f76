//! Basic auth, rate limits and compression of proxied and fixed responses, over real
//! sockets, in sequences: a password guessed until the rate limit answers, the password
//! file changed and reloaded, a 401 and a 429 with the site's error pages.

mod support;

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Server, request};

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("guards-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes an htpasswd file with `htpasswd -B` itself: the format users have. Without
/// `htpasswd` on PATH the test is skipped, unless SCB_REQUIRE_TOOLS says it must run.
fn htpasswd(file: &Path, users: &[(&str, &str)]) -> bool {
    let _ = std::fs::remove_file(file);
    for (i, (user, password)) in users.iter().enumerate() {
        let mut command = Command::new("htpasswd");
        command.arg(if i == 0 { "-cbB" } else { "-bB" });
        match command.arg(file).arg(user).arg(password).output() {
            Ok(out) => assert!(out.status.success(), "{out:?}"),
            Err(e) => {
                assert!(
                    std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                    "`htpasswd` is not on PATH ({e}), and SCB_REQUIRE_TOOLS says these tests must run"
                );
                return false;
            }
        }
    }
    true
}

fn basic(user: &str, password: &str) -> String {
    // Base64 by hand: the test should not share the server's decoder.
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| (n << 8) | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

fn get_as(addr: SocketAddr, path: &str, extra: &str) -> support::Response {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
    )
}

fn authorized(addr: SocketAddr, user: &str, password: &str) -> support::Response {
    get_as(
        addr,
        "/admin/",
        &format!("Authorization: {}\r\n", basic(user, password)),
    )
}

#[test]
fn basic_auth_checks_htpasswd_users_and_a_reload_reads_the_file_again() {
    let dir = dir("auth");
    let users = dir.join("admin.htpasswd");
    if !htpasswd(
        &users,
        &[("alice", "correct horse"), ("bob", "s3cret:with colon")],
    ) {
        return;
    }
    std::fs::write(dir.join("401.html"), "<h1>who are you? ({request_id})</h1>").unwrap();
    let config = |realm: &str| {
        format!(
            "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[site]]\nerror_pages = {{ 401 = \"401.html\" }}\n\
             [[site.route]]\nprefix = \"/admin/\"\nrespond = {{ body = \"admin\" }}\n\
             basic_auth = {{ users = \"admin.htpasswd\", realm = \"{realm}\" }}\n\
             [[site.route]]\nprefix = \"/\"\nrespond = {{ body = \"public\" }}\n"
        )
    };
    let path = dir.join("scb.toml");
    std::fs::write(&path, config("admin")).unwrap();
    let mut server = Server::start_file(&path, 1, |_| {});
    let addr = server.addr();

    assert_eq!(get_as(addr, "/", "").text(), "public");
    let res = get_as(addr, "/admin/", "X-Request-Id: rid-1\r\n");
    assert_eq!(res.status, 401);
    assert_eq!(
        res.header("www-authenticate"),
        Some(r#"Basic realm="admin", charset="UTF-8""#)
    );
    assert_eq!(res.text(), "<h1>who are you? (rid-1)</h1>");
    for _ in 0..3 {
        // Again and again: the first check on the blocking pool, the rest remembered.
        let res = authorized(addr, "alice", "correct horse");
        assert_eq!((res.status, res.text()), (200, "admin"));
    }
    assert_eq!(authorized(addr, "bob", "s3cret:with colon").status, 200);
    for (user, password) in [("alice", "correct horse "), ("alice", ""), ("carol", "x")] {
        let res = authorized(addr, user, password);
        assert_eq!(res.status, 401, "{user}:{password}");
        assert!(res.header("www-authenticate").is_some());
    }

    // Alice's password changes and Bob goes; the reload reads the file again, and what
    // was remembered goes with the old config.
    assert!(htpasswd(&users, &[("alice", "battery staple")]));
    std::fs::write(&path, config("admin area")).unwrap();
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    assert_eq!(authorized(addr, "alice", "correct horse").status, 401);
    assert_eq!(authorized(addr, "bob", "s3cret:with colon").status, 401);
    let res = authorized(addr, "alice", "battery staple");
    assert_eq!((res.status, res.text()), (200, "admin"));
    assert_eq!(
        get_as(addr, "/admin/", "").header("www-authenticate"),
        Some(r#"Basic realm="admin area", charset="UTF-8""#)
    );

    // A file with a weak hash fails the reload and leaves the running users in place.
    std::fs::write(&users, "alice:{SHA}qs67vlse11GdWHE+bbh7CYDxCOs=\n").unwrap();
    server.signal(rustix::process::Signal::HUP);
    let line = server.wait_for_line(|l| l.contains("reload failed"));
    assert!(
        line.contains("basic_auth.users") && line.contains("line 1"),
        "{line}"
    );
    assert_eq!(authorized(addr, "alice", "battery staple").status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn guessing_passwords_meets_the_rate_limit_before_the_hash() {
    let dir = dir("guess");
    let users = dir.join("users");
    if !htpasswd(&users, &[("alice", "right")]) {
        return;
    }
    std::fs::write(dir.join("429.html"), "slow down ({request_id})").unwrap();
    let config = format!(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[site]]\nerror_pages = {{ 429 = {page:?} }}\n\
         [[site.route]]\nprefix = \"/admin/\"\nrespond = {{ body = \"admin\" }}\n\
         rate_limit = {{ rate = \"3/m\", burst = 3 }}\n\
         basic_auth = {{ users = {users:?} }}\n",
        page = dir.join("429.html").display().to_string(),
        users = users.display().to_string(),
    );
    let server = Server::start(&config);
    let addr = server.addr();
    // Three guesses on new connections (spread over both workers: one table for all)...
    for guess in ["a", "b", "c"] {
        assert_eq!(authorized(addr, "alice", guess).status, 401);
    }
    // ...then even the right password waits: the limit comes before the password check.
    let res = get_as(
        addr,
        "/admin/",
        &format!(
            "Authorization: {}\r\nX-Request-Id: rid-2\r\n",
            basic("alice", "right")
        ),
    );
    assert_eq!(res.status, 429);
    let retry: u64 = res.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "{retry}");
    assert_eq!(res.text(), "slow down (rid-2)");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rate_limits_count_per_client_or_per_key_across_workers() {
    let server = Server::start(
        "[server]\nworkers = 2\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/ip/\"\nrespond = { body = \"ok\" }\n\
         rate_limit = { key = \"client_ip\", rate = \"2/m\" }\n\
         [[route]]\nprefix = \"/key/\"\nrespond = { body = \"ok\" }\n\
         rate_limit = { key = \"header:x-api-key\", rate = \"1/h\", burst = 1 }\n",
    );
    let addr = server.addr();
    let from = |client: &str| format!("X-Forwarded-For: {client}\r\n");
    // Through the trusted proxy (127.0.0.1), each forwarded client has its own bucket.
    for _ in 0..2 {
        assert_eq!(get_as(addr, "/ip/", &from("203.0.113.1")).status, 200);
    }
    let res = get_as(addr, "/ip/", &from("203.0.113.1"));
    assert_eq!(res.status, 429);
    assert_eq!(res.text(), "Too Many Requests\n");
    assert_eq!(get_as(addr, "/ip/", &from("203.0.113.2")).status, 200);

    let key = |k: &str| format!("X-Api-Key: {k}\r\n");
    assert_eq!(get_as(addr, "/key/", &key("k1")).status, 200);
    let res = get_as(addr, "/key/", &key("k1"));
    assert_eq!(res.status, 429);
    let retry: u64 = res.header("retry-after").unwrap().parse().unwrap();
    assert!((3000..=3600).contains(&retry), "{retry}");
    assert_eq!(get_as(addr, "/key/", &key("k2")).status, 200);
}

/// A chunked body's data.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size");
        let size_text = std::str::from_utf8(&body[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn page() -> String {
    "<p>the same sentence, over and over</p>\n".repeat(200)
}

/// An upstream answering each request with the response its path names.
fn text_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = stream.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let body = page();
            let extra = if head.starts_with("GET /up/encoded") {
                "Content-Encoding: gzip\r\n"
            } else if head.starts_with("GET /up/range") {
                "Content-Range: bytes 0-9/100\r\n"
            } else if head.starts_with("GET /up/image") {
                "X-Kind: image\r\n"
            } else {
                ""
            };
            let (status, ctype) = if head.starts_with("GET /up/range") {
                ("206 Partial Content", "text/html")
            } else if head.starts_with("GET /up/image") {
                ("200 OK", "image/png")
            } else {
                ("200 OK", "text/html; charset=utf-8")
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

#[test]
fn proxied_and_fixed_responses_are_compressed_once_and_only_where_it_is_right() {
    let upstream = text_upstream();
    let body = page();
    let server = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/up/\"\nproxy = {{ upstreams = [\"{upstream}\"], compress = true }}\n\
         [[route]]\npath = \"/fixed\"\nrespond = {{ body = {body:?}, content_type = \"text/html\" }}\ncompress = true\n\
         [[route]]\npath = \"/plain\"\nrespond = {{ body = {body:?}, content_type = \"text/html\" }}\n"
    ));
    let addr = server.addr();
    let gzip = "Accept-Encoding: gzip\r\n";

    let res = get_as(addr, "/up/page", gzip);
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-encoding"), Some("gzip"));
    assert_eq!(res.header("vary"), Some("accept-encoding"));
    assert_eq!(res.header("content-length"), None);
    assert_eq!(gunzip(&dechunk(&res.body)), body.as_bytes());
    // Without Accept-Encoding: as the upstream sent it, but still varying.
    let res = get_as(addr, "/up/page", "");
    assert_eq!(res.header("content-encoding"), None);
    assert_eq!(res.header("vary"), Some("accept-encoding"));
    assert_eq!(res.text(), body);
    // Encoded upstream: untouched; a range: untouched; an image: untouched.
    let res = get_as(addr, "/up/encoded", gzip);
    assert_eq!(res.header("content-encoding"), Some("gzip"));
    assert_eq!(res.body, body.as_bytes());
    let res = get_as(addr, "/up/range", gzip);
    assert_eq!(res.status, 206);
    assert_eq!(res.header("content-encoding"), None);
    assert_eq!(res.body, body.as_bytes());
    let res = get_as(addr, "/up/image", gzip);
    assert_eq!(res.header("content-encoding"), None);
    assert_eq!(res.header("vary"), None);

    let res = get_as(addr, "/fixed", "Accept-Encoding: br;q=0, gzip\r\n");
    assert_eq!(res.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&dechunk(&res.body)), body.as_bytes());
    // A route without `compress` sends what it has.
    let res = get_as(addr, "/plain", gzip);
    assert_eq!(res.header("content-encoding"), None);
    assert_eq!(res.text(), body);
}

#[test]
fn a_flood_of_keys_is_served_within_the_bound_and_a_steady_client_stays_limited() {
    let server = Server::start(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/api/\"\nrespond = { body = \"ok\" }\n\
         rate_limit = { key = \"header:x-api-key\", rate = \"1/h\", burst = 1, max_keys = 64 }\n",
    );
    let addr = server.addr();
    let key = |k: &str| format!("X-Api-Key: {k}\r\n");
    for round in 0..3 {
        // 300 new keys: more than the table holds, each within its first token, so each is
        // served (a dropped key starts over; no newcomer is refused)...
        for i in 0..300 {
            let res = get_as(addr, "/api/", &key(&format!("flood-{round}-{i}")));
            assert_eq!(res.status, 200, "flood key {i} of round {round}");
        }
        // ...and a key used twice in a row is still limited between floods.
        let steady = format!("steady-{round}");
        assert_eq!(get_as(addr, "/api/", &key(&steady)).status, 200);
        assert_eq!(get_as(addr, "/api/", &key(&steady)).status, 429);
    }
}
