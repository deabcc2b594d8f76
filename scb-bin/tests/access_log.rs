//! The access log of the real binary: its fields and formats (templates among them, with
//! headers, TLS, the upstream's answer and hostile values), logrotate's reopen, and a log
//! consumer that stops reading, which must not stop the server.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use rustix::process::Signal;
use support::{
    KeepAlive, Server, TIMEOUT, echo_upstream, get, lines, metric, request, request_bytes,
};

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("access-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn json_lines_carry_every_field_and_sigusr1_starts_a_new_file() {
    let dir = temp_dir("json");
    let log = dir.join("access.log");
    let upstream = echo_upstream();
    let config = format!(
        "[server]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [log]\naccess = {{ path = {log:?}, format = \"json\" }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"hello\"\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n\
         [[route]]\nname = \"api\"\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{upstream}\"] }}\n",
        log = log.display().to_string(),
    );
    let mut server = Server::start(&config);
    let addr = server.addr();
    let res = request(
        addr,
        "GET /hello?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Request-Id: rid-1\r\n\
         X-Forwarded-For: 203.0.113.5\r\nUser-Agent: probe/1\r\nReferer: https://r.example/\r\n\
         Connection: close\r\n\r\n",
    );
    assert_eq!(res.status, 200);
    assert_eq!(get(addr, "/api/users").status, 200);
    assert_eq!(get(addr, "/nowhere").status, 404);

    let written = lines(&log, 3);
    let hello = &written[0];
    for field in [
        r#""request_id":"rid-1""#,
        // The peer is a trusted proxy: the client is who it forwarded for.
        r#""client":"203.0.113.5""#,
        r#""host":"example.com""#,
        r#""method":"GET""#,
        r#""path":"/hello?x=1""#,
        r#""protocol":"HTTP/1.1""#,
        r#""status":200"#,
        r#""bytes":2"#,
        r#""user_agent":"probe/1""#,
        r#""referer":"https://r.example/""#,
        r#""route":"hello""#,
        r#""upstream":null"#,
    ] {
        assert!(hello.contains(field), "{field} in {hello}");
    }
    assert!(hello.starts_with(r#"{"timestamp":""#) && hello.contains(r#""duration_us":"#));
    let api = &written[1];
    assert!(api.contains(r#""route":"api""#), "{api}");
    assert!(
        api.contains(&format!(r#""upstream":"{upstream}""#)),
        "{api}"
    );
    assert!(api.contains(r#""client":"127.0.0.1""#), "{api}");
    assert!(
        written[2].contains(r#""route":"unmatched""#) && written[2].contains(r#""status":404"#)
    );

    // logrotate: move the file, SIGUSR1, and the next request lands in a new file.
    let rotated = dir.join("access.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    server.signal(Signal::USR1);
    server.wait_for_line(|l| l.contains("SIGUSR1: reopening the access log"));
    assert_eq!(get(addr, "/hello").status, 200);
    let fresh = lines(&log, 1);
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert!(fresh[0].contains(r#""path":"/hello""#), "{}", fresh[0]);
    assert_eq!(lines(&rotated, 3).len(), 3);

    server.terminate();
    assert!(server.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn access_true_writes_the_combined_format_to_stderr() {
    let mut server = Server::start(
        "[server]\nworkers = 1\n[log]\naccess = true\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\npath = \"/hello\"\nrespond = { body = \"hi\" }\n",
    );
    let addr = server.addr();
    assert_eq!(get(addr, "/hello").status, 200);
    let line = server.wait_for_line(|l| l.contains("\"GET /hello HTTP/1.1\""));
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.ends_with("\" 200 2 \"-\" \"-\""), "{line}");
}

#[test]
fn a_log_reader_that_stops_reading_never_stalls_the_workers() {
    let config = support::config_file(
        "[server]\nworkers = 1\n[log]\naccess = true\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n\
         [[route]]\npath = \"/hello\"\nrespond = { body = \"hi\" }\n",
    );
    let mut child = support::scb()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read until both addresses are known, then never again: the pipe fills (64 KiB) and
    // every write to stderr blocks from then on.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut addr, mut metrics): (Option<SocketAddr>, Option<SocketAddr>) = (None, None);
    while addr.is_none() || metrics.is_none() {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "scb exited");
        if line.contains("listening on ") {
            addr = Some(support::addr_after(&line, "listening on "));
        }
        if line.contains("metrics on ") {
            metrics = Some(support::addr_after(&line, "metrics on "));
        }
    }
    let (addr, metrics) = (addr.unwrap(), metrics.unwrap());

    // 20,000 lines of about 80 bytes: 25 times what the pipe holds, more than the queue
    // holds too. Every request is answered all the same.
    let clients: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conn = KeepAlive::connect(addr).unwrap();
                for _ in 0..5_000 {
                    let res = conn.get("/hello").unwrap();
                    assert_eq!(res.status, 200);
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    let scrape = get(metrics, "/metrics");
    let dropped = metric(scrape.text(), "scb_access_log_dropped_total").unwrap_or(0.0);
    assert!(dropped > 0.0, "nothing dropped:\n{}", scrape.text());

    // A reload during the fault: the process's own log lines (SIGHUP, reloaded) go to
    // the same full pipe, and must not stop the reload either. The access log moves to
    // a file; the old writer, stuck on the pipe, is left behind without a worker waiting
    // for it.
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("access-moved-{}.log", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 1\n[log]\naccess = {{ path = {:?} }}\n\
             [[listen]]\naddr = \"{addr}\"\n\
             [metrics]\nlisten = \"{metrics}\"\n\
             [[route]]\npath = \"/hello\"\nrespond = {{ body = \"moved\" }}\n",
            log.display().to_string()
        ),
    )
    .unwrap();
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, Signal::HUP).unwrap();
    // Reloaded once the new route answers; the file then gets its lines.
    let deadline = Instant::now() + TIMEOUT;
    while get(addr, "/hello").text() != "moved" {
        assert!(Instant::now() < deadline, "the reload did not happen");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(lines(&log, 1)[0].contains("\"GET /hello HTTP/1.1\" 200 5"));
    let _ = std::fs::remove_file(&log);
    let _ = child.kill();
    let _ = child.wait();
    drop(stderr);
    let _ = std::fs::remove_file(config);
}

#[test]
fn server_trusted_proxies_alone_name_the_client_in_the_log_and_to_the_upstream() {
    let dir = temp_dir("one-setting");
    let log = dir.join("access.log");
    let upstream = echo_upstream();
    let config = format!(
        "[server]\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [log]\naccess = {{ path = {log:?}, format = \"json\" }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/api/\"\nallow = [\"203.0.113.0/24\"]\n\
         proxy = {{ upstreams = [\"{upstream}\"] }}\n",
        log = log.display().to_string(),
    );
    let server = Server::start(&config);
    let via = |client: &str| {
        request(
            server.addr(),
            &format!(
                "GET /api/who HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: {client}\r\n\
                 Connection: close\r\n\r\n"
            ),
        )
    };
    let res = via("203.0.113.5");
    assert_eq!(res.status, 200);
    // The upstream gets the chain the trusted peer sent, with the peer appended.
    assert!(
        res.text()
            .contains("x-forwarded-for: 203.0.113.5, 127.0.0.1\n"),
        "{}",
        res.text()
    );
    // allow/deny judge the same client: one outside the network is refused.
    assert_eq!(via("198.51.100.7").status, 403);
    let written = lines(&log, 2);
    assert!(
        written[0].contains(r#""client":"203.0.113.5""#),
        "{}",
        written[0]
    );
    assert!(
        written[1].contains(r#""client":"198.51.100.7""#),
        "{}",
        written[1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_502_names_the_upstream_tried_and_the_warning_names_the_request() {
    let dir = temp_dir("failed-upstream");
    let log = dir.join("access.log");
    // A port nobody listens on: the connect is refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = format!(
        "[server]\nworkers = 1\n\
         [log]\naccess = {{ path = {log:?}, format = \"json\" }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{dead}\"], max_tries = 1 }}\n",
        log = log.display().to_string(),
    );
    let mut server = Server::start(&config);
    // The startup line says which build and how many workers.
    assert!(
        server.log.iter().any(|l| l.contains(&format!(
            "scb {} starting with 1 worker",
            env!("CARGO_PKG_VERSION")
        ))),
        "{:?}",
        server.log
    );
    let res = request(
        server.addr(),
        "GET /api/x HTTP/1.1\r\nHost: t\r\nX-Request-Id: failing-1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.status, 502);
    let warning = server.wait_for_line(|l| l.contains("upstream try failed"));
    assert!(warning.contains("failing-1"), "{warning}");
    let written = lines(&log, 1);
    assert!(
        written[0].contains(&format!(r#""upstream":"{dead}""#))
            && written[0].contains(r#""status":502"#),
        "{}",
        written[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_template_writes_request_and_response_fields_the_upstream_s_answer_and_escapes_what_clients_send()
 {
    let dir = temp_dir("template");
    let log = dir.join("access.log");
    let upstream = echo_upstream();
    let template = r#"{client_ip} "{method} {target}" {status} {route} "{header.x-a}" "{resp_header.x-cache}" {upstream} {upstream_status} {upstream_time_ms} {tls_version} {tls_cipher} {trace_id} "{header.user-agent}""#;
    let config = format!(
        "[server]\nworkers = 1\n\
         [log]\naccess = {{ path = {log:?}, format = '{template}' }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nname = \"hello\"\npath = \"/hello\"\n\
         respond = {{ body = \"hi\", headers = {{ \"x-cache\" = \"HIT\" }} }}\n\
         [[route]]\nname = \"api\"\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{upstream}\"] }}\n",
        log = log.display().to_string(),
    );
    let server = Server::start(&config);
    let addr = server.addr();
    // A field repeated, and a user agent that tries to close its quotes, add a field, and
    // carries a byte past ASCII (obs-text, which HTTP allows) and a tab.
    let res = request_bytes(
        addr,
        b"GET /hello?q=1 HTTP/1.1\r\nHost: t\r\nX-A: one\r\nX-A: two\r\n\
          User-Agent: evil\" 200 \"forged\\\t\xff\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(res.status, 200);
    // Control characters in a field never reach the log: the server refuses the head.
    let refused = request_bytes(
        addr,
        b"GET /hello HTTP/1.1\r\nHost: t\r\nUser-Agent: a\x1b[31m\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(refused.status, 400);
    assert_eq!(get(addr, "/api/users").status, 200);

    let written = lines(&log, 2);
    assert_eq!(
        written[0],
        r#"127.0.0.1 "GET /hello?q=1" 200 hello "one, two" "HIT" - - - - - - "evil\" 200 \"forged\\\x09\xFF""#
    );
    let proxied: Vec<&str> = written[1].split(' ').collect();
    assert_eq!(
        proxied[..8],
        [
            "127.0.0.1",
            "\"GET",
            "/api/users\"",
            "200",
            "api",
            "\"-\"",
            "\"-\"",
            &upstream.to_string()
        ],
        "{}",
        written[1]
    );
    assert_eq!(proxied[8], "200", "{}", written[1]);
    let upstream_ms: f64 = proxied[9].parse().unwrap();
    assert!(upstream_ms < 10_000.0, "{}", written[1]);
    assert_eq!(proxied[10..], ["-", "-", "-", "\"-\""], "{}", written[1]);
    assert_eq!(written.len(), 2, "{written:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_json_template_over_tls_logs_the_session_and_parses_whatever_the_client_sent() {
    use std::io::{Read as _, Write as _};

    let dir = temp_dir("template-tls");
    let log = dir.join("access.log");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let template = r#"{{"tls":"{tls_version}","cipher":{tls_cipher},"protocol":"{protocol}","status":{status},"ua":{header.user-agent},"missing":{header.x-none},"trace":{trace_id}}}"#;
    let config = format!(
        "[server]\nworkers = 1\n\
         [log]\naccess = {{ path = {log:?}, format = '{template}' }}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         tls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[route]]\npath = \"/hello\"\nrespond = {{ body = \"hi\" }}\n",
        log = log.display().to_string(),
        cert = cert_path.display().to_string(),
        key = key_path.display().to_string(),
    );
    let server = Server::start(&config);
    let client = support::tls::client(&[cert.der()]);
    let mut tls = support::tls::connect(server.addr(), &client);
    let agent: &[u8] = b"\"},\"status\":0,\"x\":{\"\\ \xc3\xa9 \xff";
    tls.write_all(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nUser-Agent: ")
        .unwrap();
    tls.write_all(agent).unwrap();
    tls.write_all(b"\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    let version = match tls.conn.protocol_version().unwrap() {
        scb_tls::rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        other => panic!("{other:?}"),
    };
    let cipher = tls
        .conn
        .negotiated_cipher_suite()
        .unwrap()
        .suite()
        .as_str()
        .unwrap();

    let line = &lines(&log, 1)[0];
    let value: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "tls": version,
            "cipher": cipher,
            "protocol": "HTTP/1.1",
            "status": 200,
            "ua": String::from_utf8_lossy(agent),
            "missing": null,
            "trace": null,
        }),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
