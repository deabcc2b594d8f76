//! Faults a production server meets, against the real binary: its descriptors running
//! out, and SIGTERM while requests are in flight.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Server, TIMEOUT, get};

/// A site with one file the test never asks for before the fault.
fn site(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-bin-faults-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fresh.txt"), "fresh").unwrap();
    std::fs::write(dir.join("slow.txt"), "slow").unwrap();
    dir
}

fn config(root: &std::path::Path) -> String {
    format!(
        "[server]\nworkers = 1\ngrace_period = \"10s\"\n\n[[listen]]\naddr = \"127.0.0.1:0\"\n\n\
         [[route]]\npath = \"/respond\"\nrespond = {{ status = 200, body = \"ok\" }}\n\n\
         [[route]]\nprefix = \"/\"\nstatic = {{ root = {:?} }}\n",
        root.display().to_string()
    )
}

/// Sends one keep-alive GET on `s` and reads its response's status and body.
fn keep_alive_get(s: &mut TcpStream, path: &str) -> (u16, String) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).expect("a response");
        assert!(n > 0, "closed before a response");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            if body.len() >= len {
                let status = head[9..12].parse().unwrap();
                return (status, body[..len].to_owned());
            }
        }
    }
}

#[test]
fn out_of_descriptors_the_server_answers_503_keeps_its_connections_and_recovers() {
    let root = site("emfile");
    let mut server = Server::start_under(&config(&root), &["prlimit", "--nofile=48:48"]);
    let addr = server.addr();
    let mut first = TcpStream::connect(addr).unwrap();
    first.set_read_timeout(Some(TIMEOUT)).unwrap();
    assert_eq!(keep_alive_get(&mut first, "/respond"), (200, "ok".into()));
    // More connections than descriptors: the server accepts until it cannot.
    let crowd: Vec<TcpStream> = (0..80).map(|_| TcpStream::connect(addr).unwrap()).collect();
    server.wait_for_line(|l| l.contains("accept failed"));
    // A file not opened before needs a descriptor it cannot have: 503, not 404 or 500.
    let (status, _) = keep_alive_get(&mut first, "/fresh.txt");
    assert_eq!(status, 503);
    // The connection and the worker go on.
    assert_eq!(keep_alive_get(&mut first, "/respond"), (200, "ok".into()));
    drop(crowd);
    drop(first);
    // Once descriptors are free again, everything is served.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let res = get(addr, "/fresh.txt");
        if res.status == 200 {
            assert_eq!(res.text(), "fresh");
            break;
        }
        assert_eq!(res.status, 503, "{}", res.text());
        assert!(std::time::Instant::now() < deadline, "never recovered");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn sigterm_under_load_lets_every_accepted_request_finish() {
    let root = site("sigterm");
    std::fs::write(root.join("big.bin"), vec![b'z'; 4 << 20]).unwrap();
    let mut server = Server::start(&config(&root));
    let addr = server.addr();
    // Clients with requests in flight: each has sent a request for 4 MiB and read only
    // the first bytes of the answer when the signal comes.
    let mut clients: Vec<(TcpStream, Vec<u8>)> = (0..16)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut first = vec![0u8; 64];
            s.read_exact(&mut first).unwrap();
            (s, first)
        })
        .collect();
    server.terminate();
    for (s, got) in &mut clients {
        s.read_to_end(got).unwrap();
        let text = &got[..];
        let head_end = text.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(text.starts_with(b"HTTP/1.1 200"));
        assert_eq!(got.len() - head_end, 4 << 20, "a whole response");
    }
    assert!(server.wait().success());
    let _ = std::fs::remove_dir_all(&root);
}
