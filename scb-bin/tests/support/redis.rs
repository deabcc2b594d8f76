//! Debian's redis-server, started by a test on a port of its own and stopped when
//! dropped; without it the caller skips, with a line saying so, unless SCB_REQUIRE_TOOLS
//! says the tests must run.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::TIMEOUT;

/// A running redis-server.
pub(crate) struct Redis {
    child: Child,
    pub(crate) port: u16,
}

impl Redis {
    /// A redis-server on a free port, without persistence.
    pub(crate) fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::on(port)
    }

    /// A redis-server on `port` (again, after [`stop`](Self::stop)).
    pub(crate) fn on(port: u16) -> Option<Self> {
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                    "redis-server cannot be run ({e}), and SCB_REQUIRE_TOOLS says these tests must run"
                );
                #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
                {
                    eprintln!("skipped: redis-server is not installed (Debian: redis-server)");
                }
                return None;
            }
        };
        let redis = Self { child, port };
        let deadline = Instant::now() + TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Some(redis)
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Stops it now.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
