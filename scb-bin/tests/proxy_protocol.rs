//! The PROXY protocol on a listener, over real sockets: v1 and v2 headers naming the
//! client, headers split across writes, a LOCAL health check, and what closes the
//! connection: no header from a balancer, a malformed or lying one, one from a peer that
//! is not trusted, one that never ends.

mod support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::Server;

/// A listener that trusts `trusted` and a route that shows the client address it sees.
fn config(trusted: &str) -> String {
    format!(
        "[server]\nworkers = 2\n[limits]\nheader_read_timeout = \"1s\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nproxy_protocol = {{ trusted = [\"{trusted}\"] }}\n\
         [[route]]\nprefix = \"/\"\nrespond = {{ body = \"ok\" }}\n\
         headers = {{ response = {{ set = {{ \"x-client\" = \"{{client_ip}}\" }} }} }}\n"
    )
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

/// Sends `parts` in separate writes, then reads to the end: the response, or nothing
/// when the server closed the connection.
fn exchange(addr: SocketAddr, parts: &[&[u8]]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for part in parts {
        // A peer that closes early may make a later write fail: what was read decides.
        if stream.write_all(part).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    out
}

fn client_of(response: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix("x-client: "))
        .map(str::to_owned)
}

fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut out = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    out.push(0x20 | command);
    out.push(family);
    out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn trusted_balancers_name_the_client_in_either_version() {
    let server = Server::start(&config("127.0.0.1"));
    let addr = server.addr();
    let v1 = b"PROXY TCP4 203.0.113.7 127.0.0.1 51000 443\r\n";
    let res = exchange(addr, &[v1, REQUEST]);
    assert_eq!(client_of(&res).as_deref(), Some("203.0.113.7"));
    // The header and the request in one write, and the header cut into pieces.
    let joined = [&v1[..], REQUEST].concat();
    assert_eq!(
        client_of(&exchange(addr, &[&joined])).as_deref(),
        Some("203.0.113.7")
    );
    let pieces: Vec<&[u8]> = v1.chunks(7).chain([REQUEST]).collect();
    assert_eq!(
        client_of(&exchange(addr, &pieces)).as_deref(),
        Some("203.0.113.7")
    );

    let mut body = "2001:db8::9"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets()
        .to_vec();
    body.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    body.extend_from_slice(&[0xc3, 0x50, 0x01, 0xbb, 0xea, 0x00, 0x01, 0x07]);
    let bin = v2(1, 0x21, &body);
    let (first, rest) = bin.split_at(5);
    let res = exchange(addr, &[first, rest, REQUEST]);
    assert_eq!(client_of(&res).as_deref(), Some("2001:db8::9"));
    // LOCAL (the balancer's own health check): the peer itself.
    let local = v2(0, 0x00, &[]);
    assert_eq!(
        client_of(&exchange(addr, &[&local, REQUEST])).as_deref(),
        Some("127.0.0.1")
    );
    // Several requests on one connection all carry the header's client.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"PROXY TCP4 198.51.100.3 127.0.0.1 1 2\r\n")
        .unwrap();
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    for _ in 0..3 {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut head = String::new();
        loop {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut body = [0u8; 2];
        reader.read_exact(&mut body).unwrap();
        assert!(head.contains("x-client: 198.51.100.3"), "{head}");
    }
}

#[test]
fn missing_malformed_lying_and_endless_headers_close_the_connection() {
    let server = Server::start(&config("127.0.0.0/8"));
    let addr = server.addr();
    // No header from a trusted balancer: closed, no answer.
    assert_eq!(exchange(addr, &[REQUEST]), b"");
    for bad in [
        &b"PROXY TCP4 203.0.113.7 127.0.0.1 51000\r\n"[..],
        b"PROXY TCP4 203.0.113.7 127.0.0.1 99999 443\r\n",
        b"PROXY TCP9 a b 1 2\r\n",
        &v2(1, 0x11, &[203, 0, 113, 7])[..],
        &v2(7, 0x11, &[0; 12])[..],
    ] {
        assert_eq!(exchange(addr, &[bad, REQUEST]), b"", "{bad:?}");
    }
    // A v2 header saying it is longer than it is, then silence: closed at the
    // header-read timeout (1 s here), not held open.
    let mut liar = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x40".to_vec();
    liar.extend_from_slice(&[1; 12]);
    let started = std::time::Instant::now();
    assert_eq!(exchange(addr, &[&liar]), b"");
    // And a v1 line that never ends.
    assert_eq!(exchange(addr, &[b"PROXY TCP4 203.0.113.7"]), b"");
    assert!(started.elapsed() < Duration::from_secs(8));
    // The server is unharmed.
    let res = exchange(addr, &[b"PROXY UNKNOWN\r\n", REQUEST]);
    assert_eq!(client_of(&res).as_deref(), Some("127.0.0.1"));
}

#[test]
fn an_untrusted_peer_is_served_as_itself_and_may_not_send_a_header() {
    let server = Server::start(&config("10.0.0.0/8"));
    let addr = server.addr();
    assert_eq!(
        client_of(&exchange(addr, &[REQUEST])).as_deref(),
        Some("127.0.0.1")
    );
    let claim = b"PROXY TCP4 10.1.1.1 127.0.0.1 1 2\r\n";
    assert_eq!(exchange(addr, &[claim, REQUEST]), b"");
    assert_eq!(exchange(addr, &[&v2(1, 0x00, &[]), REQUEST]), b"");
    // WebDAV's PROPFIND starts like "PROXY" and is not one.
    let propfind = exchange(
        addr,
        &[b"PROPFIND / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
    );
    assert!(!propfind.is_empty());
}

#[test]
fn proxy_protocol_settings_are_checked_with_their_key() {
    let out = support::check(
        "[[listen]]\naddr = \"127.0.0.1:0\"\nproxy_protocol = { trusted = [\"10.0.0.0/8\", \"lb\"] }\n",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listen[0].proxy_protocol.trusted[1]"),
        "{stderr}"
    );
    let out =
        support::check("[[listen]]\naddr = \"127.0.0.1:0\"\nproxy_protocol = { trusted = [] }\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listen[0].proxy_protocol.trusted: name the balancers"),
        "{stderr}"
    );
}

#[test]
fn the_proxy_passes_the_client_on_in_a_header_of_its_own() {
    // The back server believes PROXY headers from 127.0.0.1 and shows whom it sees.
    let back = Server::start(&config("127.0.0.1"));
    let back_addr = back.addr();
    for version in ["v1", "v2"] {
        // The front one reads a header from its balancer (the test) and sends its own.
        let front = Server::start(&format!(
            "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             proxy_protocol = {{ trusted = [\"127.0.0.1\"] }}\n\
             [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{back_addr}\"], proxy_protocol = \"{version}\" }}\n"
        ));
        let addr = front.addr();
        for client in ["203.0.113.5", "198.51.100.77"] {
            let header = format!("PROXY TCP4 {client} 127.0.0.1 40000 80\r\n");
            let res = exchange(addr, &[header.as_bytes(), REQUEST]);
            assert_eq!(client_of(&res).as_deref(), Some(client), "{version}");
        }
        // Without a PROXY listener in front, the client is the peer itself.
        let plain = Server::start(&format!(
            "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{back_addr}\"], proxy_protocol = \"{version}\" }}\n"
        ));
        let res = exchange(plain.addr(), &[REQUEST]);
        assert_eq!(client_of(&res).as_deref(), Some("127.0.0.1"));
    }
    let out = support::check(&format!(
        "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{back_addr}\"], proxy_protocol = \"v3\" }}\n"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("route[0].proxy.proxy_protocol: expected \"v1\" or \"v2\""),
        "{stderr}"
    );
}
