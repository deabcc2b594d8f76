//! Socket activation: systemd (here its `systemd-socket-activate`) opens the listening
//! socket and starts scb at the first connection, which waits in the socket's queue and
//! is served, not refused.

mod support;

use std::process::Command;

use support::{Server, get};

#[test]
fn a_socket_from_systemd_is_taken_and_its_waiting_connection_served() {
    if Command::new("systemd-socket-activate")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
            "`systemd-socket-activate` is not on PATH, and SCB_REQUIRE_TOOLS says this test must run"
        );
        return;
    }
    // A free port: systemd-socket-activate binds it itself.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = format!(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"{addr}\"\n\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"activated\" }}\n"
    );
    let listen = addr.to_string();
    // scb starts only once a connection comes, so the server is awaited beside it.
    let starting = std::thread::spawn(move || {
        Server::start_under(
            &config,
            &[
                "systemd-socket-activate",
                "--listen",
                &listen,
                "--fdname=web",
                "--setenv=RUST_LOG=info",
            ],
        )
    });
    let deadline = std::time::Instant::now() + support::TIMEOUT;
    // The socket exists once systemd-socket-activate runs; until then, connecting fails.
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on {addr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let res = get(addr, "/");
    assert_eq!(res.status, 200);
    assert_eq!(res.text(), "activated");
    let mut server = starting.join().unwrap();
    assert_eq!(server.addr(), addr);
    assert!(
        server
            .log
            .iter()
            .any(|l| l.contains(&format!("socket from systemd: {addr} (web)"))),
        "{:?}",
        server.log
    );
    // Both workers take connections from the one socket.
    for _ in 0..20 {
        assert_eq!(get(addr, "/").text(), "activated");
    }
    server.terminate();
    assert!(server.wait().success());
}
