//! Sites over real sockets: virtual hosts, redirects, header rules, security headers
//! and allow lists, with hostile Host fields.

mod support;

use support::{Server, request};

const CONFIG: &str = "[server]\nworkers = 1\n\
    [[listen]]\naddr = \"127.0.0.1:0\"\n\
    [[site]]\nhosts = [\"example.com\", \"*.example.com\"]\nsecurity_headers = true\n\
    headers = { request = { set = { \"x-seen-host\" = \"{host}\" } }, response = { set = { \"x-frame-options\" = \"DENY\" }, remove = [\"x-internal\"] } }\n\
    [[site.route]]\npath = \"/old\"\nredirect = { to = \"https://example.com/new{query}\", status = 301 }\n\
    [[site.route]]\nprefix = \"/go/\"\nredirect = { to = \"https://{host}/landing/{rest}\" }\n\
    [[site.route]]\nprefix = \"/admin/\"\nallow = [\"10.0.0.0/8\"]\nrespond = { body = \"admin\" }\n\
    [[site.route]]\nprefix = \"/\"\nrespond = { body = \"example\", headers = { \"x-internal\" = \"1\" } }\n\
    [[site]]\nhosts = [\"example.org\"]\n\
    [[site.route]]\nprefix = \"/\"\nrespond = { body = \"org\" }\n\
    headers = { response = { add = { \"x-request\" = \"{request_id}\" } } }\n";

fn get_host(addr: std::net::SocketAddr, host: &str, path: &str) -> support::Response {
    request(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: rid-9\r\nConnection: close\r\n\r\n"
        ),
    )
}

#[test]
fn hosts_choose_the_site_and_its_rules() {
    let server = Server::start(CONFIG);
    let addr = server.addr();

    let res = get_host(addr, "Example.COM:443", "/");
    assert_eq!((res.status, res.text()), (200, "example"));
    // The site's response rules: set, remove, and the security fields where absent.
    assert_eq!(res.header("x-frame-options"), Some("DENY"));
    assert_eq!(res.header("x-internal"), None);
    assert_eq!(res.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        res.header("referrer-policy"),
        Some("strict-origin-when-cross-origin")
    );
    assert_eq!(get_host(addr, "blog.example.com", "/").text(), "example");

    let org = get_host(addr, "example.org", "/anything");
    assert_eq!(org.text(), "org");
    assert_eq!(org.header("x-request"), Some("rid-9"));
    assert_eq!(org.header("x-content-type-options"), None);

    // No default site: another host, one label too deep, or none at all gets 421.
    for host in ["example.net", "a.b.example.com"] {
        assert_eq!(get_host(addr, host, "/").status, 421, "{host}");
    }
    let res = request(addr, "GET / HTTP/1.0\r\n\r\n");
    assert_eq!(res.status, 421);
    assert!(res.header("x-request-id").is_some());
}

#[test]
fn redirects_fill_their_placeholders_and_refuse_what_would_inject() {
    let server = Server::start(CONFIG);
    let addr = server.addr();
    let res = get_host(addr, "example.com", "/old?a=1&b=2");
    assert_eq!(res.status, 301);
    assert_eq!(
        res.header("location"),
        Some("https://example.com/new?a=1&b=2")
    );
    let res = get_host(addr, "shop.example.com", "/go/x/y");
    assert_eq!(res.status, 308);
    assert_eq!(
        res.header("location"),
        Some("https://shop.example.com/landing/x/y")
    );
    // A Host that would carry a second field or another authority never gets that far:
    // scb's server answers 400 before any site.
    for raw in [
        "GET /go/x HTTP/1.1\r\nHost: example.com\r\n\tx-evil: 1\r\nConnection: close\r\n\r\n",
        "GET /go/x HTTP/1.1\r\nHost: evil.test/x.example.com\r\nConnection: close\r\n\r\n",
        "GET /go/x HTTP/1.1\r\nHost: a@example.com\r\nConnection: close\r\n\r\n",
    ] {
        let res = request(addr, raw);
        assert_eq!(res.status, 400, "{raw:?}");
        assert_eq!(res.header("location"), None);
    }
}

#[test]
fn allow_lists_refuse_other_clients_with_403() {
    let server = Server::start(CONFIG);
    let addr = server.addr();
    // The test connects from 127.0.0.1, outside 10.0.0.0/8.
    let res = get_host(addr, "example.com", "/admin/");
    assert_eq!(res.status, 403);
    assert!(res.header("x-request-id").is_some());
    // A forged X-Forwarded-For from an untrusted peer changes nothing.
    let res = request(
        addr,
        "GET /admin/ HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 10.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.status, 403);
    let allowed = Server::start(&CONFIG.replace("10.0.0.0/8", "127.0.0.1"));
    assert_eq!(
        get_host(allowed.addr(), "example.com", "/admin/").text(),
        "admin"
    );
}

#[test]
fn cors_preflights_are_answered_without_the_handler() {
    // The handler is a proxy to a port nobody listens on: reaching it would be a 502.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let server = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{closed}\"] }}\n\
         cors = {{ origins = [\"https://app.example.com\"], methods = [\"GET\", \"POST\"], \
         headers = [\"content-type\"], credentials = true, max_age = \"1h\" }}\n"
    ));
    let addr = server.addr();
    let preflight = |origin: &str| {
        request(
            addr,
            &format!(
                "OPTIONS /api/items HTTP/1.1\r\nHost: t\r\nOrigin: {origin}\r\n\
                 Access-Control-Request-Method: POST\r\n\
                 Access-Control-Request-Headers: content-type\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    let res = preflight("https://app.example.com");
    assert_eq!(res.status, 200);
    assert_eq!(
        res.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(res.header("access-control-allow-methods"), Some("GET,POST"));
    assert_eq!(
        res.header("access-control-allow-headers"),
        Some("content-type")
    );
    assert_eq!(res.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(res.header("access-control-max-age"), Some("3600"));
    // Another origin gets no grant.
    let res = preflight("https://evil.example");
    assert_eq!(res.header("access-control-allow-origin"), None);
    // A simple request goes to the handler (here a 502) and carries the grant.
    let res = request(
        addr,
        "GET /api/items HTTP/1.1\r\nHost: t\r\nOrigin: https://app.example.com\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.status, 502);
    assert_eq!(
        res.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
}

#[test]
fn rewrites_change_the_path_the_static_handler_looks_up() {
    let root = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sites-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(root.join("posts")).unwrap();
    std::fs::write(root.join("posts/42.html"), "post 42").unwrap();
    std::fs::write(root.join("posts/index.html"), "posts").unwrap();
    let server = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/blog/\"\nrewrite = {{ regex = \"^/blog/(\\\\d+)$\", to = \"/posts/{{1}}.html\" }}\n\
         static = {{ root = {root:?} }}\n\
         [[route]]\nprefix = \"/old/\"\nrewrite = {{ prefix = \"/old/\", to = \"/posts/\" }}\n\
         static = {{ root = {root:?} }}\n",
        root = root.display().to_string()
    ));
    let addr = server.addr();
    assert_eq!(get_host(addr, "t", "/blog/42?x=1").text(), "post 42");
    // A path the expression does not match is looked up as it is.
    assert_eq!(get_host(addr, "t", "/blog/latest").status, 404);
    assert_eq!(get_host(addr, "t", "/old/42.html").text(), "post 42");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn max_concurrent_answers_503_over_the_bound_and_frees_the_slot_after() {
    use std::io::{Read as _, Write as _};
    use std::sync::mpsc;
    // An upstream whose first exchange waits for the test's word; the others answer at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = listener.local_addr().unwrap();
    let (accepted_tx, accepted) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut first = true;
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            if first {
                first = false;
                accepted_tx.send(()).unwrap();
                let _ = go_rx.recv();
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let server = Server::start(&format!(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/api/\"\nmax_concurrent = 1\nproxy = {{ upstreams = [\"{upstream}\"] }}\n"
    ));
    let addr = server.addr();
    let held = std::thread::spawn(move || get_host(addr, "t", "/api/slow"));
    accepted.recv().unwrap();
    // The one slot is taken, whichever worker has it: 503 at once, with Retry-After.
    let res = get_host(addr, "t", "/api/other");
    assert_eq!(res.status, 503);
    assert_eq!(res.header("retry-after"), Some("1"));
    go.send(()).unwrap();
    assert_eq!(held.join().unwrap().status, 200);
    // Freed: the next one goes through.
    assert_eq!(get_host(addr, "t", "/api/again").text(), "ok");
}

#[test]
fn a_sites_error_pages_replace_its_404_and_403_bodies() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sites-pages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("404.html"), "<h1>not here ({request_id})</h1>").unwrap();
    std::fs::write(dir.join("403.html"), "<h1>not for you</h1>").unwrap();
    let config = format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[site]]\nhosts = [\"example.com\"]\n\
         error_pages = {{ 404 = {p404:?}, 403 = {p403:?} }}\n\
         [[site.route]]\npath = \"/ok\"\nrespond = {{ body = \"fine\" }}\n\
         [[site.route]]\nprefix = \"/admin/\"\nallow = [\"10.0.0.0/8\"]\nrespond = {{}}\n",
        p404 = dir.join("404.html").display().to_string(),
        p403 = dir.join("403.html").display().to_string(),
    );
    let server = Server::start(&config);
    let addr = server.addr();
    let res = get_host(addr, "example.com", "/missing");
    assert_eq!(res.status, 404);
    assert_eq!(res.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(res.text(), "<h1>not here (rid-9)</h1>");
    let res = get_host(addr, "example.com", "/admin/");
    assert_eq!((res.status, res.text()), (403, "<h1>not for you</h1>"));
    assert_eq!(get_host(addr, "example.com", "/ok").text(), "fine");
    // A page that cannot be read is a config error naming its key.
    let out = support::check(&config.replace("403.html", "absent.html"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("site[0].error_pages.403: cannot read"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
