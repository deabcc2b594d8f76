//! Ticket keys shared through a real `redis-server`: two instances (two clusters, as two
//! processes have) converge on one set, read each other's tickets, and keep reading a
//! ticket across the fleet's rotation; an instance that never reaches Redis keeps its own.
//!
//! Without `redis-server` the test is skipped with a line saying so, unless
//! SCB_REQUIRE_TOOLS says it must run.

#![cfg(feature = "cluster")]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustls::server::ProducesTickets;
use scb_core::cluster::Cluster;
use scb_tls::TicketKeys;

struct Redis(Child, u16);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis() -> Option<Redis> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = match Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            assert!(
                std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                "redis-server cannot be run ({e}), and SCB_REQUIRE_TOOLS says this test must run"
            );
            #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
            {
                eprintln!("skipped: redis-server is not installed (Debian: redis-server)");
            }
            return None;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(Redis(child, port))
}

/// Waits until `check` holds, for at most ten seconds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn two_instances_read_each_others_tickets_across_a_rotation() {
    let Some(redis) = redis() else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/0", redis.1);
    let period = Duration::from_secs(2);
    let a = TicketKeys::shared(&Cluster::connect(&url, "t:").unwrap(), period).unwrap();
    let b = TicketKeys::shared(&Cluster::connect(&url, "t:").unwrap(), period).unwrap();
    // Both take the set the first of them stored.
    eventually("b reads a's tickets", || {
        a.encrypt(b"x").is_some_and(|t| b.decrypt(&t).is_some())
    })
    .await;
    let from_a = a.encrypt(b"made by a").unwrap();
    let from_b = b.encrypt(b"made by b").unwrap();
    assert_eq!(b.decrypt(&from_a).unwrap(), b"made by a");
    assert_eq!(a.decrypt(&from_b).unwrap(), b"made by b");
    // One period on, one of them has rotated the set for both: new tickets use another
    // key, and the old ones still resume on either.
    let first_key = from_a[..4].to_vec();
    eventually("the fleet rotated", || {
        a.encrypt(b"y").is_some_and(|t| t[..4] != first_key[..])
            && b.encrypt(b"y").is_some_and(|t| t[..4] != first_key[..])
    })
    .await;
    assert_eq!(b.decrypt(&from_a).unwrap(), b"made by a");
    assert_eq!(a.decrypt(&from_b).unwrap(), b"made by b");
    let after = b.encrypt(b"after").unwrap();
    assert_eq!(a.decrypt(&after).unwrap(), b"after");
    // An instance whose Redis is not there serves its own keys.
    let away = Cluster::connect(&format!("redis://127.0.0.1:{}/0", redis.1 + 1), "t:").unwrap();
    let alone = TicketKeys::shared(&away, period).unwrap();
    let own = alone.encrypt(b"own").unwrap();
    assert_eq!(alone.decrypt(&own).unwrap(), b"own");
    assert!(a.decrypt(&own).is_none());
}
