//! Listening sockets handed to `scb run` by systemd's socket activation (`LISTEN_FDS`,
//! `LISTEN_PID`, `LISTEN_FDNAMES`): while scb restarts, connections wait in systemd's
//! sockets instead of being refused.

/// The TCP listening sockets passed in the environment, which is cleared of them so that
/// nothing started later takes them again. A passed descriptor that is not a TCP
/// listening socket is logged and closed.
pub(crate) fn take() -> Vec<std::net::TcpListener> {
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    let names: Vec<&str> = names.split(':').collect();
    // `LISTEN_PID` naming another process means the sockets are not ours: listenfd then
    // reports none.
    let mut passed = listenfd::ListenFd::from_env();
    let mut sockets = Vec::with_capacity(passed.len());
    for i in 0..passed.len() {
        let name = names
            .get(i)
            .copied()
            .filter(|n| !n.is_empty())
            .unwrap_or("-");
        match passed.take_tcp_listener(i) {
            Ok(Some(socket)) => {
                match socket.local_addr() {
                    Ok(addr) => tracing::info!("socket from systemd: {addr} ({name})"),
                    Err(e) => tracing::warn!("socket from systemd ({name}): {e}"),
                }
                sockets.push(socket);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "descriptor {} from systemd ({name}) is not a TCP listener: {e}",
                i + 3
            ),
        }
    }
    sockets
}
