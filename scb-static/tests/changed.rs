//! A file changed while it is being sent: the client gets one whole version or a closed
//! connection, never a mix. Over real sockets, through scb's server and its sendfile path.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use scb_core::server::Server;
use scb_static::ServeStatic;

/// Far more than loopback socket buffers hold, so the transfer is still going when the
/// file changes.
const SIZE: usize = 32 << 20;

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-changed-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("big.bin"), vec![b'a'; SIZE]).unwrap();
    dir
}

/// Requests /big.bin, reads a little, calls `change`, then reads to the end of the
/// connection. Returns the Content-Length and the body bytes received.
fn fetch_while(root: &Path, change: impl FnOnce()) -> (usize, Vec<u8>) {
    let files = ServeStatic::new(root).unwrap();
    let bound = Server::builder()
        .workers(1)
        .listen("127.0.0.1:0".parse().unwrap())
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(move |_| files.clone());
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut received = vec![0u8; 256 * 1024];
    let mut n = 0;
    while n < 64 * 1024 {
        let m = s.read(&mut received[n..]).unwrap();
        assert!(m > 0, "connection closed before the change");
        n += m;
    }
    received.truncate(n);
    change();
    let mut rest = Vec::new();
    // A reset is one way of closing: whatever arrived before it counts.
    let _ = s.read_to_end(&mut rest);
    received.extend_from_slice(&rest);
    handle.shutdown();
    handle.join();
    let head_end = received.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&received[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (len, received[head_end..].to_vec())
}

fn assert_never_mixed(len: usize, body: &[u8]) -> bool {
    let complete = body.len() == len;
    if complete {
        let first = body[0];
        assert!(
            body.iter().all(|&b| b == first),
            "a complete body mixes two versions"
        );
    }
    complete
}

#[test]
fn a_file_rewritten_in_place_is_never_completed_as_a_mix() {
    let root = dir("in-place");
    let path = root.join("big.bin");
    let (len, body) = fetch_while(&root, || {
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all(&vec![b'b'; SIZE]).unwrap();
    });
    assert_eq!(len, SIZE);
    let complete = assert_never_mixed(len, &body);
    assert!(
        !complete,
        "the rewrite landed mid-transfer, so the connection must close short"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_file_replaced_by_rename_is_sent_whole_in_its_old_version() {
    let root = dir("rename");
    let (len, body) = fetch_while(&root, || {
        std::fs::write(root.join("new.bin"), vec![b'b'; SIZE / 2]).unwrap();
        std::fs::rename(root.join("new.bin"), root.join("big.bin")).unwrap();
    });
    assert_eq!(len, SIZE);
    assert!(
        assert_never_mixed(len, &body),
        "the old version must arrive whole"
    );
    assert_eq!(body[0], b'a');
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_file_truncated_mid_transfer_ends_short_and_is_never_padded() {
    let root = dir("truncated");
    let path = root.join("big.bin");
    let (len, body) = fetch_while(&root, || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
    });
    assert_eq!(len, SIZE);
    assert!(
        body.len() < SIZE,
        "the connection must close short of the length"
    );
    // What the file still has arrives as it is. Past the new end, bytes sendfile had
    // already queued may read as zeros: they are the page cache's pages, shared, and the
    // kernel zeroes the tail of a large folio cut by the truncation. Never scb's padding:
    // the response stops short of its Content-Length, so the client knows it is not the
    // file (the guarantee is "whole or closed short", see RELIABILITY.md).
    let kept = body.len().min(1 << 20);
    assert!(
        body[..kept].iter().all(|&b| b == b'a'),
        "the file's own bytes up to its new end"
    );
    assert!(
        body[kept..].iter().all(|&b| b == b'a' || b == 0),
        "past the new end only the file's old bytes or the kernel's zeros"
    );
    let _ = std::fs::remove_dir_all(&root);
}
