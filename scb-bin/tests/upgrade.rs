//! Binary upgrade under load: `scb run --upgrade` takes the listeners over from the
//! running process, which drains and exits; twice in a row, with zero failed requests.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use support::{KeepAlive, Server, get};

/// Clients on keep-alive connections renewed every few requests. A request that fails
/// on a connection already used before, with nothing of its response read, is sent
/// again on a new connection, as HTTP clients do for idempotent requests (RFC 9112,
/// 9.3.1): a server may close an idle connection just as a request is sent on it.
/// Anything else is a failure.
struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    threads: Vec<thread::JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let threads = (0..clients)
            .map(|_| {
                let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
                thread::spawn(move || {
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
                            match conn.get("/who") {
                                Ok(res) if res.status == 200 => {
                                    done.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(res) => failures.push(format!("status {}", res.status)),
                                // Closed under a reused connection before any byte of
                                // the response: sent again on a new connection.
                                Err(e)
                                    if i > 0 && e.kind() == std::io::ErrorKind::ConnectionReset =>
                                {
                                    break;
                                }
                                Err(e) => {
                                    failures.push(format!("request {i}: {e}"));
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

    fn wait_for(&self, more: usize) {
        let target = self.done.load(Ordering::Relaxed) + more;
        let deadline = std::time::Instant::now() + support::TIMEOUT;
        while self.done.load(Ordering::Relaxed) < target {
            assert!(std::time::Instant::now() < deadline, "the load stalled");
            thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        (self.done.load(Ordering::Relaxed), failures)
    }
}

#[test]
fn two_upgrades_in_a_row_under_load_fail_no_request() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("scb.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\nupgrade_socket = \"upgrade.sock\"\npid_file = \"scb.pid\"\n\
             [[listen]]\naddr = \"127.0.0.1:{port}\"\n\
             [[route]]\npath = \"/who\"\nrespond = {{ body = \"scb\" }}\n"
        ),
    )
    .unwrap();
    let mut old = Server::start_file(&config, 1, |_| {});
    let addr = old.addr();
    let load = Load::start(addr, 3);
    load.wait_for(200);

    for round in 0..2 {
        let mut new = Server::upgrade(&config, 1);
        assert_eq!(new.addr(), addr, "round {round}");
        new.wait_for_line(|l| l.contains("upgrade: serving"));
        old.wait_for_line(|l| l.contains("upgrade: the new process serves; draining"));
        assert!(old.wait().success(), "round {round}: {:?}", old.log);
        // The pid file names the process that serves.
        let pid: u32 = std::fs::read_to_string(dir.join("scb.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(pid, new.pid());
        assert_eq!(get(addr, "/who").text(), "scb");
        load.wait_for(200);
        old = new;
    }

    let (done, failures) = load.stop();
    assert!(
        failures.is_empty(),
        "{} failed of {done}: {failures:?}",
        failures.len()
    );
    old.terminate();
    assert!(old.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_upgrade_that_cannot_start_leaves_the_old_process_serving() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("upgrade-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("scb.toml");
    let good = "[server]\nworkers = 1\nupgrade_socket = \"upgrade.sock\"\n\
                [[listen]]\naddr = \"127.0.0.1:0\"\n\
                [[route]]\npath = \"/who\"\nrespond = { body = \"old\" }\n";
    std::fs::write(&config, good).unwrap();
    let mut old = Server::start_file(&config, 1, |_| {});
    let addr = old.addr();
    // A new config holding an address another process has: the new process takes the
    // listeners, fails to bind, and exits; the old one hears nothing more and serves on.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(
        &config,
        format!(
            "{good}[[listen]]\naddr = \"{}\"\n",
            taken.local_addr().unwrap()
        ),
    )
    .unwrap();
    let out = support::scb()
        .args(["run", "--upgrade", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    old.wait_for_line(|l| l.contains("the new process went away; serving on"));
    assert_eq!(get(addr, "/who").text(), "old");
    // And a later upgrade still works.
    std::fs::write(
        &config,
        good.replace("\"old\"", "\"new\"")
            .replace("127.0.0.1:0", &addr.to_string()),
    )
    .unwrap();
    let mut new = Server::upgrade(&config, 1);
    old.wait_for_line(|l| l.contains("draining"));
    assert!(old.wait().success());
    assert_eq!(get(addr, "/who").text(), "new");
    new.terminate();
    assert!(new.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}
