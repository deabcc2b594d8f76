//! `scb run` with `unix:` listeners: served beside TCP, the socket file's mode and group
//! applied, a stale file replaced, a live one refused, a reload restyling and dropping the
//! socket, the file gone at exit, and one scb proxying to another over a Unix socket.

mod support;

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use support::{Server, check, get, scb};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-bin-unix-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One GET over the socket at `path` (connection closed after): status and body.
fn get_unix(path: &Path, target: &str) -> (u16, String) {
    let mut stream = UnixStream::connect(path).unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

fn config(sock: &Path, keys: &str) -> String {
    format!(
        "[server]\nworkers = 2\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"unix:{}\"{keys}\n\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"hello\" }}\n",
        sock.display()
    )
}

#[test]
fn unix_listeners_serve_take_their_mode_replace_stale_files_and_clean_up() {
    let dir = temp_dir("serve");
    let sock = dir.join("scb.sock");
    // A stale socket file, as a crashed run leaves it.
    drop(UnixListener::bind(&sock).unwrap());
    let gid = rustix::process::getgid().as_raw();
    let mut server = Server::start(&config(
        &sock,
        &format!("\nmode = \"0660\"\ngroup = \"{gid}\""),
    ));
    assert_eq!(server.unix, vec![sock.clone()]);
    assert_eq!(get_unix(&sock, "/"), (200, "hello".to_owned()));
    assert_eq!(get(server.addrs[0], "/").body, b"hello");
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), gid);

    // A second scb on the same path is refused, naming it; the first keeps serving.
    let out = scb()
        .arg("run")
        .arg("--config")
        .arg(support::config_file(&config(&sock, "")))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("address already in use") && stderr.contains("scb.sock"),
        "{stderr}"
    );
    assert_eq!(get_unix(&sock, "/"), (200, "hello".to_owned()));

    // A reload restyles the kept socket; another drops it, and its file goes.
    server.rewrite_config(&config(&sock, "\nmode = \"0600\""));
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(get_unix(&sock, "/"), (200, "hello".to_owned()));
    server.rewrite_config(
        "[server]\nworkers = 2\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\npath = \"/\"\nrespond = { body = \"hello\" }\n",
    );
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    assert!(!sock.exists());

    // Back again, then the process ends: the file goes with it.
    server.rewrite_config(&config(&sock, ""));
    server.signal(rustix::process::Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded"));
    assert_eq!(get_unix(&sock, "/"), (200, "hello".to_owned()));
    server.terminate();
    assert!(server.wait().success());
    assert!(!sock.exists(), "the socket file is removed at exit");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn static_files_go_out_whole_over_a_unix_socket() {
    let dir = temp_dir("static");
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    // Large enough for several sendfile calls, and an odd length; and a small cached one.
    let big: Vec<u8> = (0..(3 << 20) + 7).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("small.txt"), "small file\n").unwrap();
    let sock = dir.join("static.sock");
    let _server = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"unix:{}\"\n\
         [[route]]\nprefix = \"/\"\nstatic = {{ root = {root:?} }}\n",
        sock.display()
    ));
    for _ in 0..2 {
        let mut stream = UnixStream::connect(&sock).unwrap();
        write!(
            stream,
            "GET /big.bin HTTP/1.1\r\nHost: local\r\n\r\n\
             GET /small.txt HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&answer[..head_end]).to_string();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", big.len())),
            "{head}"
        );
        let body = &answer[head_end..head_end + big.len()];
        assert!(
            body == big.as_slice(),
            "the large file arrived whole and in order"
        );
        let rest = String::from_utf8_lossy(&answer[head_end + big.len()..]).to_string();
        assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
        assert!(rest.ends_with("\r\n\r\nsmall file\n"), "{rest}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn one_scb_proxies_to_another_over_a_unix_socket() {
    let dir = temp_dir("proxy");
    let sock = dir.join("back.sock");
    let back = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"unix:{}\"\n\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"from the back\" }}\n",
        sock.display()
    ));
    let front = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\npath = \"/\"\nproxy = {{ upstreams = [\"unix:{}\"] }}\n",
        sock.display()
    ));
    for _ in 0..3 {
        let res = get(front.addrs[0], "/");
        assert_eq!(res.status, 200);
        assert_eq!(res.body, b"from the back");
    }
    drop(back);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unix_listener_settings_are_checked_with_their_keys() {
    let unix = |keys: &str| {
        format!(
            "[[listen]]\naddr = \"unix:/tmp/scb-check.sock\"\n{keys}\n\
             [[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\n"
        )
    };
    for (config, key, why) in [
        (
            unix("tls = { cert = \"a.pem\", key = \"a.key\" }"),
            "listen[0].tls",
            "not for unix",
        ),
        (
            unix("redirect_https = true"),
            "listen[0].redirect_https",
            "not for unix",
        ),
        (unix("mode = \"999\""), "listen[0].mode", "octal"),
        (
            unix("owner = \"no-such-user-here\""),
            "listen[0].owner",
            "no user",
        ),
        (
            "[[listen]]\naddr = \"127.0.0.1:0\"\nmode = \"0660\"\n\
             [[route]]\npath = \"/\"\nrespond = { body = \"x\" }\n"
                .to_owned(),
            "listen[0].mode",
            "for unix: listeners",
        ),
        (
            "[[listen]]\naddr = \"unix:/tmp/a.sock\"\n[[listen]]\naddr = \"unix:/tmp/a.sock\"\n\
             [[route]]\npath = \"/\"\nrespond = { body = \"x\" }\n"
                .to_owned(),
            "listen[1].addr",
            "clashes with unix:/tmp/a.sock",
        ),
        (
            unix("").replace("unix:/tmp/scb-check.sock", "unix:"),
            "addr",
            "socket path",
        ),
    ] {
        let out = check(&config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{config}");
        assert!(stderr.contains(key), "{key}: {stderr}");
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
    let out = check(&unix("mode = \"0660\"\nowner = \"root\"\ngroup = \"0\""));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
