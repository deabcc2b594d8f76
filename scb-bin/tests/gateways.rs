//! Forward authentication and route matchers through the binary: an auth service
//! (`support::auth_service`) in front of a proxied app, and routes chosen by method,
//! header, query, client network and path expression, each with the answers a client
//! reads off the wire.

mod support;

use std::net::SocketAddr;

use support::{Response, Server, auth_service, echo_upstream, request};

fn send(addr: SocketAddr, method: &str, path: &str, fields: &[&str]) -> Response {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n");
    for field in fields {
        head.push_str(field);
        head.push_str("\r\n");
    }
    if method == "POST" || method == "PUT" {
        head.push_str("Content-Length: 4\r\n\r\nbody");
    } else {
        head.push_str("\r\n");
    }
    request(addr, &head)
}

#[test]
fn forward_auth_passes_refuses_and_redirects_as_the_auth_service_says() {
    let auth = auth_service();
    let upstream = echo_upstream();
    let config = format!(
        "[server]\nworkers = 2\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/app/\"\n\
         forward_auth = {{ upstream = \"{auth}\", uri = \"/api/verify\", \
         copy_headers = [\"Remote-User\", \"Remote-Groups\"] }}\n\
         proxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[route]]\nprefix = \"/dead/\"\n\
         forward_auth = {{ upstream = \"127.0.0.1:9\", uri = \"/verify\", timeout = \"2s\" }}\n\
         proxy = {{ upstreams = [\"{upstream}\"] }}\n"
    );
    let server = Server::start(&config);
    let addr = server.addr();

    // A pass: the app gets the auth service's user, not the client's claim.
    let passed = send(
        addr,
        "GET",
        "/app/items?x=1",
        &[
            "X-Test-Auth: ok",
            "Remote-User: mallory",
            "Remote-Admin: yes",
        ],
    );
    assert_eq!(passed.status, 200, "{}", passed.text());
    let body = passed.text();
    assert!(body.starts_with("GET /app/items?x=1 HTTP/1.1\n"), "{body}");
    assert!(body.contains("remote-user: alice\n"), "{body}");
    assert!(body.contains("remote-groups: admins\n"), "{body}");
    assert!(!body.contains("mallory"), "{body}");
    // Only the fields named are copied; what the client sent of other names passes.
    assert!(body.contains("remote-admin: yes\n"), "{body}");
    assert!(passed.header("x-not-copied").is_none());

    // A refusal goes back as it came: status, challenge, body. What the check carried is
    // in the fields the auth service echoes here.
    let refused = send(
        addr,
        "POST",
        "/app/items?page=2",
        &["Authorization: Basic Zm9v"],
    );
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.header("www-authenticate"),
        Some("Basic realm=\"test\"")
    );
    assert_eq!(refused.text(), "denied\n");
    assert!(refused.header("x-request-id").is_some());
    assert_eq!(refused.header("x-seen-method"), Some("GET POST"));
    assert_eq!(refused.header("x-seen-uri"), Some("/app/items?page=2"));
    assert_eq!(refused.header("x-seen-host"), Some("app.test"));
    assert_eq!(refused.header("x-seen-proto"), Some("http"));
    assert_eq!(refused.header("x-seen-for"), Some("127.0.0.1"));
    // No body went to the auth service: the check is a GET without one.
    assert_eq!(refused.header("x-seen-body"), Some("-"));

    // A login redirect.
    let login = send(addr, "GET", "/app/settings", &["X-Test-Auth: login"]);
    assert_eq!(login.status, 302);
    assert_eq!(
        login.header("location"),
        Some("https://login.example/?rd=/app/settings")
    );

    // An auth service nobody answers for: 502, never a pass, request after request.
    for _ in 0..3 {
        let res = send(addr, "GET", "/dead/x", &["X-Test-Auth: ok"]);
        assert_eq!(res.status, 502, "{}", res.text());
        assert!(!res.text().contains("GET /dead/x"), "{}", res.text());
    }
    // ... and passes go on meanwhile on the other route.
    let again = send(addr, "GET", "/app/y", &["X-Test-Auth: ok"]);
    assert_eq!(again.status, 200);
}

#[test]
fn routes_are_chosen_by_method_header_query_client_and_expression() {
    let upstream = echo_upstream();
    let config = format!(
        "[server]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/api/\"\nrespond = {{ body = \"api\\n\" }}\n\
         [[route]]\nname = \"api-json-writes\"\nprefix = \"/api/\"\n\
         match = {{ methods = [\"POST\", \"PUT\"], headers = {{ \"content-type\" = \"application/json*\" }} }}\n\
         respond = {{ body = \"json write\\n\" }}\n\
         [[route]]\nname = \"api-v2\"\nprefix = \"/api/\"\nmatch = {{ query = {{ \"v\" = \"2\" }} }}\n\
         respond = {{ body = \"v2\\n\" }}\n\
         [[route]]\nname = \"internal\"\nprefix = \"/api/\"\n\
         match = {{ remote = [\"10.0.0.0/8\"] }}\nrespond = {{ body = \"internal\\n\" }}\n\
         [[route]]\npath_regex = \"^/users/(?<id>\\\\d+)$\"\nrewrite = {{ to = \"/u/{{id}}\" }}\n\
         proxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[route]]\nname = \"get-only\"\npath = \"/form\"\nmatch = {{ methods = [\"GET\"] }}\n\
         respond = {{ body = \"form\\n\" }}\n"
    );
    let server = Server::start(&config);
    let addr = server.addr();
    let json = "Content-Type: application/json; charset=utf-8";
    let cases: [(&str, &str, &[&str], u16, &str); 12] = [
        ("GET", "/api/x", &[], 200, "api\n"),
        ("POST", "/api/x", &[json], 200, "json write\n"),
        ("PUT", "/api/x?v=2", &[json], 200, "json write\n"),
        (
            "POST",
            "/api/x",
            &["Content-Type: text/plain"],
            200,
            "api\n",
        ),
        ("GET", "/api/x?v=2", &[], 200, "v2\n"),
        ("GET", "/api/x?v=20", &[], 200, "api\n"),
        // The client as a trusted proxy names it.
        (
            "GET",
            "/api/x",
            &["X-Forwarded-For: 10.1.2.3"],
            200,
            "internal\n",
        ),
        (
            "GET",
            "/api/x",
            &["X-Forwarded-For: 192.0.2.1"],
            200,
            "api\n",
        ),
        // Captures reach the rewrite, and the proxy sends the new path.
        (
            "GET",
            "/users/42?full=1",
            &[],
            200,
            "GET /u/42?full=1 HTTP/1.1\n",
        ),
        ("GET", "/users/x", &[], 404, "Not Found\n"),
        ("GET", "/form", &[], 200, "form\n"),
        ("POST", "/form", &[], 404, "Not Found\n"),
    ];
    for (method, path, fields, status, start) in cases {
        let res = send(addr, method, path, fields);
        assert_eq!(
            res.status,
            status,
            "{method} {path} {fields:?}: {}",
            res.text()
        );
        assert!(
            res.text().starts_with(start),
            "{method} {path} {fields:?}: {}",
            res.text()
        );
        assert!(res.header("x-request-id").is_some());
    }
    // HEAD takes a GET route, with GET's length and no body.
    let head = send(addr, "HEAD", "/form", &[]);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("5"));
    assert!(head.body.is_empty());
}
