//! A blocking TLS client over `std::net::TcpStream` (rustls, aws-lc-rs), for the tests of
//! TLS listeners: trust exactly the given roots, one keep-alive request at a time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use scb_tls::rustls;

use super::TIMEOUT;

/// A TLS client that trusts exactly `ders`.
pub(crate) fn client(ders: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for der in ders {
        roots
            .add(rustls::pki_types::CertificateDer::from(der.to_vec()))
            .unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

pub(crate) type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A connection to `addr` for `localhost`; the handshake happens with the first write.
pub(crate) fn connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Tls {
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// A connection to `addr` for `name`, the handshake done (or its error).
pub(crate) fn handshake(
    addr: SocketAddr,
    name: &str,
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    tcp.set_read_timeout(Some(TIMEOUT))?;
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// Sends a keep-alive GET and reads one response with a Content-Length body: the head and
/// the body.
pub(crate) fn request(tls: &mut Tls, path: &str) -> String {
    write!(tls, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    tls.flush().unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0; len];
    tls.read_exact(&mut body).unwrap();
    head + &String::from_utf8(body).unwrap()
}

/// The leaf certificate the server presented.
pub(crate) fn peer_der(tls: &Tls) -> Vec<u8> {
    tls.conn.peer_certificates().unwrap()[0].to_vec()
}
