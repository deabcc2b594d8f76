//! Free loopback ports, and waiting until a server accepts on one.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::harness::process::ServerProcess;

/// How long a server gets to start accepting. Caddy takes the longest here (about 100 ms
/// to adapt its config and load the certificate); 15 s only matters on a loaded machine.
pub(crate) const START_DEADLINE: Duration = Duration::from_secs(15);

/// How often a connect is retried while a server starts.
const RETRY: Duration = Duration::from_millis(10);

/// `n` distinct ports that were free on 127.0.0.1 a moment ago (the kernel's choice of
/// ephemeral ports, all held until all are chosen). Another process could take one before
/// the server binds it; the server would then fail to start, loudly.
///
/// # Errors
///
/// When the kernel gives no port.
pub(crate) fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let mut held = Vec::with_capacity(N);
    let mut ports = [0; N];
    for port in &mut ports {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
        *port = listener.local_addr().context("local address")?.port();
        held.push(listener);
    }
    Ok(ports)
}

/// The loopback address with `port`.
pub(crate) fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Polls until `addr` accepts a connection, the server exits, or [`START_DEADLINE`].
///
/// # Errors
///
/// When the server exits (with its log) or the deadline passes.
pub(crate) fn wait_until_accepting(
    server: &mut ServerProcess,
    addr: SocketAddr,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        server.ensure_running()?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > START_DEADLINE {
            bail!(
                "nothing accepted on {addr} within {START_DEADLINE:?}; see {}",
                server.log().display()
            );
        }
        thread::sleep(RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let [a, b, c] = free_ports::<3>().unwrap();
        assert!(a != b && b != c && a != c);
        TcpListener::bind(local(a)).unwrap();
    }
}
