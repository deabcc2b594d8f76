//! Config reload on SIGHUP under constant load: routes, layers and listeners change with
//! zero failed requests, and configs that cannot be served change nothing.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};

use rustix::process::Signal;
use support::{KeepAlive, Load, Server, echo_upstream, get};

/// Generation `n` of the config: `/gen` answers `n`, a route of its own exists only in
/// this generation, and odd generations name the request-id header differently (a layer
/// that changes). `extra` adds listeners.
fn config(n: usize, root: &std::path::Path, upstream: SocketAddr, extra: &str) -> String {
    let header = if n % 2 == 1 {
        "x-trace-id"
    } else {
        "x-request-id"
    };
    format!(
        "[server]\nworkers = 2\n\
         [request_id]\nheader = \"{header}\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n{extra}\
         [[route]]\npath = \"/gen\"\nrespond = {{ body = \"{n}\" }}\n\
         [[route]]\npath = \"/only-{n}\"\nrespond = {{ body = \"only\" }}\n\
         [[route]]\nprefix = \"/api/\"\nproxy = {{ upstreams = [\"{upstream}\"] }}\n\
         [[route]]\nprefix = \"/\"\nstatic = {{ root = {root:?} }}\n",
        root = root.display().to_string(),
    )
}

/// The addresses a "reloaded" log line lists.
fn listed(line: &str) -> Vec<SocketAddr> {
    let list = &line[line.find("listening on ").expect("addresses") + "listening on ".len()..];
    list.split(", ")
        .map(|a| {
            let a = a.trim_end_matches(|c: char| !c.is_ascii_digit());
            a.parse()
                .unwrap_or_else(|e| panic!("{a:?} in {line:?}: {e}"))
        })
        .collect()
}

#[test]
fn reloads_under_load_change_routes_layers_and_listeners_without_a_failed_request() {
    let root = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("reload-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "<p>hello</p>").unwrap();
    let upstream = echo_upstream();
    let mut server = Server::start(&config(0, &root, upstream, ""));
    let addr = server.addr();
    let load = Load::start(addr, 3, &["/gen", "/index.html", "/api/x"], false);
    load.wait_for(100);
    // A connection opened before the reloads, to see that it moves with them.
    let mut old = KeepAlive::connect(addr).unwrap();
    assert_eq!(old.get("/gen").unwrap().text(), "0");

    // Twelve reloads, with load running through each.
    const LAST: usize = 12;
    for n in 1..=LAST {
        server.rewrite_config(&config(n, &root, upstream, ""));
        server.signal(Signal::HUP);
        let line = server.wait_for_line(|l| l.contains("reloaded "));
        assert_eq!(listed(&line), [addr], "the listener stays");
        // New and open connections alike get the new routes and layers at once.
        let res = get(addr, "/gen");
        assert_eq!(res.text(), n.to_string());
        let (named, other) = if n % 2 == 1 {
            ("x-trace-id", "x-request-id")
        } else {
            ("x-request-id", "x-trace-id")
        };
        assert!(res.header(named).is_some() && res.header(other).is_none());
        assert_eq!(old.get("/gen").unwrap().text(), n.to_string());
        assert_eq!(old.get(&format!("/only-{n}")).unwrap().status, 200);
        assert_eq!(old.get(&format!("/only-{}", n - 1)).unwrap().status, 404);
        load.wait_for(200);
    }

    // Configs that cannot be served: each is logged and changes nothing.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let missing = root.join("missing");
    let broken = [
        ("a syntax error", "[[route]\n".to_owned()),
        (
            "an unknown key",
            format!("{}colour = \"red\"\n", config(99, &root, upstream, "")),
        ),
        (
            "an address another process holds",
            config(
                9,
                &root,
                upstream,
                &format!("[[listen]]\naddr = \"{}\"\n", taken.local_addr().unwrap()),
            ),
        ),
        (
            "a root that does not exist",
            config(99, &root, upstream, "").replace(
                &format!("{:?}", root.display().to_string()),
                &format!("{:?}", missing.display().to_string()),
            ),
        ),
    ];
    for (what, text) in &broken {
        server.rewrite_config(text);
        server.signal(Signal::HUP);
        let line = server.wait_for_line(|l| l.contains("reload failed"));
        assert!(line.contains("the running config stays"), "{what}: {line}");
        assert_eq!(get(addr, "/gen").text(), LAST.to_string(), "{what}");
        assert_eq!(old.get("/gen").unwrap().text(), LAST.to_string(), "{what}");
        load.wait_for(50);
    }

    // A second listener comes, serves, and goes: its open connection drains while new
    // ones are refused.
    server.rewrite_config(&config(
        LAST + 1,
        &root,
        upstream,
        "[[listen]]\naddr = \"127.0.0.1:0\"\n",
    ));
    server.signal(Signal::HUP);
    let line = server.wait_for_line(|l| l.contains("reloaded "));
    let addrs = listed(&line);
    assert_eq!(addrs.len(), 2, "{line}");
    assert_eq!(addrs[0], addr);
    let second = addrs[1];
    let mut on_second = KeepAlive::connect(second).unwrap();
    assert_eq!(
        on_second.get("/gen").unwrap().text(),
        (LAST + 1).to_string()
    );
    server.rewrite_config(&config(LAST + 2, &root, upstream, ""));
    server.signal(Signal::HUP);
    let line = server.wait_for_line(|l| l.contains("reloaded "));
    assert_eq!(listed(&line), [addr]);
    assert!(
        TcpStream::connect(second).is_err(),
        "the removed listener accepts"
    );
    assert_eq!(
        on_second.get("/gen").unwrap().text(),
        (LAST + 2).to_string()
    );
    load.wait_for(100);

    // Two SIGHUPs in a row, the file changing in between: the second is not lost, so the
    // server ends up on the last file, whether the two reloads ran apart or as one.
    server.rewrite_config(&config(LAST + 3, &root, upstream, ""));
    server.signal(Signal::HUP);
    server.rewrite_config(&config(LAST + 4, &root, upstream, ""));
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    let last = (LAST + 4).to_string();
    if get(addr, "/gen").text() != last {
        server.wait_for_line(|l| l.contains("reloaded "));
    }
    assert_eq!(get(addr, "/gen").text(), last);
    load.wait_for(100);

    let (done, failures) = load.stop();
    assert!(
        failures.is_empty(),
        "{} failed of {done}: {failures:?}",
        failures.len()
    );
    server.terminate();
    assert!(server.wait().success());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_metrics_listener_moves_and_comes_and_goes_with_the_config() {
    let base = "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
                [[route]]\npath = \"/\"\nrespond = {}\n";
    let mut server = Server::start(base);
    assert!(server.metrics.is_none());

    // Added by a reload: the recorder is installed then, and the probes answer.
    server.rewrite_config(&format!(
        "{base}[metrics]\nlisten = \"127.0.0.1:0\"\n[health]\n"
    ));
    server.signal(Signal::HUP);
    let line = server.wait_for_line(|l| l.contains("metrics on "));
    let metrics = support::addr_after(&line, "metrics on ");
    server.wait_for_line(|l| l.contains("reloaded "));
    assert_eq!(get(server.addr(), "/").status, 200);
    let scrape = get(metrics, "/metrics");
    assert_eq!(scrape.status, 200);
    assert_eq!(get(metrics, "/readyz").status, 200);

    // A new path on the same listener.
    server.rewrite_config(&format!(
        "{base}[metrics]\nlisten = \"{metrics}\"\npath = \"/stats\"\n"
    ));
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    assert_eq!(get(metrics, "/stats").status, 200);
    assert_eq!(get(metrics, "/metrics").status, 404);

    // Gone: the listener closes.
    server.rewrite_config(base);
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    assert!(
        TcpStream::connect(metrics).is_err(),
        "the metrics listener stays open"
    );
    server.terminate();
    assert!(server.wait().success());
}

/// A crowded worker parks its idle keep-alive connections without a task (past 256 open,
/// after a second idle): a reload while they are parked reaches them at their next
/// request, they are parked again after it, and shutdown closes them at once (not at the
/// end of the grace period) with the process exiting cleanly.
#[test]
fn parked_connections_follow_a_reload_and_close_at_shutdown() {
    let conf = |n: usize| {
        format!(
            "[server]\nworkers = 1\ngrace_period = \"30s\"\n\
             [[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\npath = \"/gen\"\nrespond = {{ body = \"{n}\" }}\n"
        )
    };
    let mut server = Server::start(&conf(0));
    let addr = server.addr();
    let mut conns: Vec<KeepAlive> = (0..300)
        .map(|_| {
            let mut c = KeepAlive::connect(addr).unwrap();
            assert_eq!(c.get("/gen").unwrap().text(), "0");
            c
        })
        .collect();
    for n in 1..=2 {
        // Idle long enough to be parked (the state the reload finds them in; parking
        // itself is proven in scb-core's tests on a paused clock).
        std::thread::sleep(std::time::Duration::from_millis(2500));
        server.rewrite_config(&conf(n));
        server.signal(Signal::HUP);
        server.wait_for_line(|l| l.contains("reloaded "));
        for (i, c) in conns.iter_mut().enumerate() {
            let res = c
                .get("/gen")
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            assert_eq!(res.text(), n.to_string(), "connection {i}");
            assert!(!c.closing(), "connection {i}");
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(2500));
    server.terminate();
    assert!(server.wait().success(), "{}", server.log.join("\n"));
    assert!(
        !server.log.iter().any(|l| l.contains("grace period over")),
        "shutdown waited out the grace period for parked connections:\n{}",
        server.log.join("\n")
    );
    for (i, c) in conns.iter_mut().enumerate() {
        let e = c
            .get("/gen")
            .map(|r| r.status)
            .expect_err("still answering");
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset,
            "connection {i}: {e}"
        );
    }
}
