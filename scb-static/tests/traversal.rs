//! The traversal corpus over real sockets: raw request targets through scb's HTTP/1.1
//! driver into ServeStatic. Nothing from outside the root, and never a 500.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use scb_core::server::Server;
use scb_static::ServeStatic;

#[test]
fn no_request_target_reaches_outside_the_root() {
    let base = std::env::temp_dir().join(format!("scb-traversal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("www/sub")).unwrap();
    std::fs::write(base.join("www/ok.txt"), "inside").unwrap();
    std::fs::write(base.join("www/sub/x.txt"), "inside too").unwrap();
    std::fs::write(base.join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(base.join("secret.txt"), base.join("www/abs-link")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", base.join("www/rel-link")).unwrap();
    std::os::unix::fs::symlink("..", base.join("www/dir-link")).unwrap();

    let files = ServeStatic::new(base.join("www")).unwrap();
    let bound = Server::builder()
        .workers(1)
        .listen("127.0.0.1:0".parse().unwrap())
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(move |_| files.clone());

    let targets = [
        "/../secret.txt",
        "/sub/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/sub%2f..%2f..%2fsecret.txt",
        "/%252e%252e/secret.txt",
        "/..%5csecret.txt",
        "/..\\secret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/ok.txt%00.png",
        "//secret.txt",
        "//../secret.txt",
        "/..;/secret.txt",
        "/C:/secret.txt",
        "/C:%5c..%5csecret.txt",
        "/abs-link",
        "/rel-link",
        "/dir-link/secret.txt",
        "http://t/../secret.txt",
        "http://t/%2e%2e/secret.txt",
    ];
    for target in targets {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = Vec::new();
        s.read_to_end(&mut response).unwrap();
        let text = String::from_utf8_lossy(&response);
        let status: u16 = text.split(' ').nth(1).unwrap().parse().unwrap();
        assert!(!text.contains("TOP-SECRET"), "{target}: leaked the secret");
        assert!(matches!(status, 400 | 404), "{target}: status {status}");
    }
    // The corpus did not break normal service.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /sub/x.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    assert!(response.ends_with("inside too"), "{response}");
    handle.shutdown();
    handle.join();
    let _ = std::fs::remove_dir_all(&base);
}
