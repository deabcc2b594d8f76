//! `fastcgi` routes through the binary, against Debian's php-fpm running a small PHP
//! front-controller application (`support/php.rs`): routing through `index.php` with
//! `try_files`, a form, a 10 MiB upload, a redirect, a PHP error logged with the request
//! id, path info, the variables php-fpm reads, the `/uploads/evil.jpg/x.php` attack, and
//! faults in a row (a dead pool, a slow script, a reload during the fault).
//!
//! Without php-fpm the tests are skipped with a line saying so, unless SCB_REQUIRE_TOOLS
//! says they must run.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;

use support::php::{PhpFpm, write_app};
use support::{Response, Server, get, request, request_bytes, sha256_hex};

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fastcgi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The PHP site's config: the front controller behind `try_files`, as the issue writes it.
fn config(root: &std::path::Path, socket: &std::path::Path, extra: &str) -> String {
    format!(
        "[server]\nworkers = 2\ntrusted_proxies = [\"127.0.0.2\"]\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/\"\n\
         try_files = [\"{{path}}\", \"{{path}}/index.php\", \"/index.php?{{query}}\"]\n\
         fastcgi = {{ upstreams = [\"unix:{socket}\"], root = {root:?}{extra} }}\n",
        socket = socket.display(),
        root = root.display().to_string(),
    )
}

fn post(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> Response {
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    request_bytes(addr, &raw)
}

fn json(res: &Response) -> serde_json::Value {
    serde_json::from_slice(&res.body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&res.body)))
}

#[test]
fn a_php_front_controller_runs_through_scb_with_the_variables_php_fpm_expects() {
    let dir = dir("app");
    let root = dir.join("public");
    write_app(&root);
    let Some(fpm) = PhpFpm::start(&dir.join("fpm"), 4) else {
        return;
    };
    let mut server = Server::start(&config(&root, &fpm.socket, ""));
    let addr = server.addr();

    // Routing through index.php: paths that name no file.
    let home = get(addr, "/");
    assert_eq!((home.status, home.text()), (200, "home\n"));
    assert!(home.header("x-request-id").is_some());
    assert_eq!(get(addr, "/users/7").text(), "user 7\n");
    assert_eq!(get(addr, "/users/7?tab=posts").text(), "user 7\n");
    let missing = get(addr, "/nowhere");
    assert_eq!(
        (missing.status, missing.text()),
        (404, "no route for /nowhere\n")
    );
    // A directory's own index.php, through `{path}/index.php`.
    assert_eq!(get(addr, "/blog").text(), "blog index\n");
    assert_eq!(get(addr, "/blog/").text(), "blog index\n");

    // A form, and a 10 MiB upload (multipart, streamed to php-fpm).
    let form = post(
        addr,
        "/form",
        "application/x-www-form-urlencoded",
        b"name=Ann+Lee&lang=fr",
    );
    assert_eq!((form.status, form.text()), (200, "hello Ann Lee (fr)\n"));
    let file: Vec<u8> = (0..10 * 1024 * 1024u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let mut multipart = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; \
        filename=\"big.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        .to_vec();
    multipart.extend_from_slice(&file);
    multipart.extend_from_slice(b"\r\n--XyZ--\r\n");
    let upload = post(
        addr,
        "/upload",
        "multipart/form-data; boundary=XyZ",
        &multipart,
    );
    assert_eq!(
        (upload.status, upload.text().to_owned()),
        (
            200,
            format!("upload big.bin {} {}\n", file.len(), sha256_hex(&file))
        )
    );

    // Status and Location from the script.
    let redirect = get(addr, "/redirect");
    assert_eq!(redirect.status, 302);
    assert_eq!(redirect.header("location"), Some("/users/1"));
    let created = get(addr, "/created");
    assert_eq!(
        (created.status, created.header("x-app")),
        (201, Some("yes"))
    );

    // A PHP error: 500, and the interpreter's message in scb's log with the request id.
    let failed = get(addr, "/error");
    assert_eq!(failed.status, 500);
    let id = failed.header("x-request-id").unwrap().to_owned();
    let line = server.wait_for_line(|l| l.contains("fastcgi stderr") && l.contains("boom"));
    assert!(line.contains(&id), "{line}");

    // Path info, split at `.php`.
    assert_eq!(get(addr, "/info.php/a/b").text(), "/info.php|/a/b\n");
    assert_eq!(get(addr, "/info.php").text(), "/info.php|\n");

    // The variables.
    let env = json(&request(
        addr,
        "GET /env?x=1 HTTP/1.1\r\nHost: app.test\r\nProxy: http://evil.test:8080\r\n\
         X-Custom: yes\r\nConnection: close\r\n\r\n",
    ));
    assert_eq!(
        env["SCRIPT_FILENAME"],
        root.join("index.php").display().to_string()
    );
    assert_eq!(env["DOCUMENT_ROOT"], root.display().to_string());
    assert_eq!(env["SCRIPT_NAME"], "/index.php");
    // The client's URI, not the one `try_files` chose.
    assert_eq!(env["REQUEST_URI"], "/env?x=1");
    assert_eq!(env["QUERY_STRING"], "x=1");
    assert_eq!(env["REQUEST_METHOD"], "GET");
    assert_eq!(env["REMOTE_ADDR"], "127.0.0.1");
    assert_eq!(env["HTTP_HOST"], "app.test");
    assert_eq!(env["HTTP_X_CUSTOM"], "yes");
    assert_eq!(env["SERVER_PROTOCOL"], "HTTP/1.1");
    assert_eq!(env["HTTPS"], serde_json::Value::Null);
    // httpoxy: a client's `Proxy:` never becomes HTTP_PROXY.
    assert_eq!(env["HTTP_PROXY"], serde_json::Value::Null);
    // `X-Forwarded-For` counts only from a trusted proxy (127.0.0.2 here, which this
    // client is not).
    let env = json(&request(
        addr,
        "GET /env HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 203.0.113.9\r\n\
         Connection: close\r\n\r\n",
    ));
    assert_eq!(env["REMOTE_ADDR"], "127.0.0.1");

    // Files beside the scripts are served as files; scripts never are.
    let css = get(addr, "/style.css");
    assert_eq!(css.status, 200);
    assert_eq!(css.text(), "body { color: black }\n");
    assert!(css.header("content-type").unwrap().starts_with("text/css"));
    for path in [
        "/index.php",
        "/info.php",
        "/INDEX.PHP",
        "/index%2ephp",
        "/blog/index.php",
    ] {
        let res = get(addr, path);
        assert!(!res.text().contains("<?php"), "{path}: {}", res.text());
    }

    // The classic attack: an upload named as a script's directory never runs. No such
    // script exists, so the front controller answers (its own 404), as nginx's
    // `try_files` with `location ~ \.php$` does.
    for path in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg/.php",
        "/uploads/evil.jpg%2fx.php",
        "/uploads/evil.jpg/x.php/more",
    ] {
        let res = get(addr, path);
        assert!(
            !res.text().contains("PWNED"),
            "{path} ran the upload: {}",
            res.text()
        );
        assert_eq!(res.status, 404, "{path}: {}", res.text());
    }
    // Nothing outside the root, and no dotfile script.
    std::fs::write(dir.join("secret.php"), "<?php echo 'OUTSIDE';").unwrap();
    std::fs::write(root.join(".env.php"), "<?php echo 'DOTFILE';").unwrap();
    for path in [
        "/../secret.php",
        "/%2e%2e/secret.php",
        "/blog/../../secret.php",
        "/.env.php",
    ] {
        let res = get(addr, path);
        assert!(
            !res.text().contains("OUTSIDE") && !res.text().contains("DOTFILE"),
            "{path}: {}",
            res.text()
        );
        assert!(matches!(res.status, 400 | 404), "{path}: {}", res.status);
    }
    server.terminate();
    drop(fpm);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn faults_in_a_row_a_dead_pool_a_slow_script_and_a_reload_during_the_fault() {
    let dir = dir("faults");
    let root = dir.join("public");
    write_app(&root);
    let Some(mut fpm) = PhpFpm::start(&dir.join("fpm"), 2) else {
        return;
    };
    let socket = fpm.socket.clone();
    let mut server = Server::start(&config(&root, &socket, ", response_timeout = \"1s\""));
    let addr = server.addr();
    assert_eq!(get(addr, "/users/1").text(), "user 1\n");

    // A script slower than response_timeout: 504, and the next request is served.
    let slow = get(addr, "/sleep");
    assert_eq!(slow.status, 504, "{}", slow.text());
    assert!(slow.header("x-request-id").is_some());
    assert_eq!(get(addr, "/users/2").text(), "user 2\n");

    // The pool dies: 502 with a request id, request after request.
    fpm.kill();
    for _ in 0..3 {
        let res = get(addr, "/users/3");
        assert_eq!(res.status, 502, "{}", res.text());
        assert!(res.header("x-request-id").is_some());
    }
    // Static files beside the scripts still answer.
    assert_eq!(get(addr, "/style.css").status, 200);

    // A reload during the fault, then the pool comes back on the same socket.
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    assert_eq!(get(addr, "/users/4").status, 502);
    let fpm = PhpFpm::start(&dir.join("fpm"), 2).expect("php-fpm ran a moment ago");
    assert_eq!(fpm.socket, socket);
    // One upstream is always tried, whatever passive health says of it: the first
    // request after the pool is back is served.
    assert_eq!(get(addr, "/users/5").text(), "user 5\n");
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}
