//! The PROXY protocol (HAProxy's, versions 1 and 2) on a listener: a load balancer in
//! front says who the client is in a header before the connection's own bytes.
//!
//! A listener with [`ProxyProtocol`] reads the header from peers in its `trusted`
//! networks, and the client address of every request on the connection
//! ([`ConnectInfo::remote`](super::ConnectInfo)) is the header's source. A trusted peer
//! must send one: without it, or with a malformed one, the connection is closed (the
//! protocol forbids guessing). An untrusted peer is served as itself, but if its first
//! bytes are a PROXY header, the connection is closed: a client must not name itself.
//! `LOCAL` headers (a balancer's own health checks) and `UNKNOWN` or non-TCP families
//! keep the peer's address.
//!
//! The header is read with `MSG_PEEK` until it is whole, then exactly its length is
//! consumed: the bytes after it (an HTTP request, a TLS ClientHello) stay in the socket
//! for the HTTP driver or the handshake, with no buffer handed over. A header split
//! across reads waits for the rest, within the listener's header-read timeout; one that
//! says it is longer than [`MAX_HEADER`] bytes is refused. Refusals are logged at debug
//! level and counted in `scb_proxy_protocol_refused_total`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncReadExt as _, Interest};

use super::lazy_tcp::LazyTcpStream;

use crate::client_ip::Networks;

/// The longest header accepted: a v1 line is at most 107 bytes, a v2 header 16 bytes
/// and its addresses and TLVs (cloud balancers add a few hundred bytes at most).
pub const MAX_HEADER: usize = 16 + 4096;

/// The 12 bytes a version 2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The PROXY protocol on a listener: whose headers are believed.
#[derive(Clone, Debug, Default)]
pub struct ProxyProtocol {
    trusted: Networks,
}

impl ProxyProtocol {
    /// Headers from peers in `trusted` (the balancers' addresses) name the client.
    pub fn new(trusted: Networks) -> Self {
        Self { trusted }
    }

    /// The networks whose headers are believed.
    pub fn trusted(&self) -> &Networks {
        &self.trusted
    }
}

/// The version of a PROXY header to send (see [`header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The text line, `PROXY TCP4 ...\r\n`.
    V1,
    /// The binary form.
    V2,
}

/// The PROXY header announcing a connection from `client` to `server`, as a proxy sends it
/// to an upstream before its first request; with no addresses, one saying the connection
/// is the sender's own (v1 `UNKNOWN`, v2 `LOCAL`), as for a health check. An IPv4 address
/// beside an IPv6 one is sent as IPv4-mapped IPv6, since a header has one family.
pub fn header(version: Version, addrs: Option<(SocketAddr, SocketAddr)>) -> Vec<u8> {
    let addrs = addrs.map(|(client, server)| match (client, server) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => {
            (client, server)
        }
        _ => (mapped(client), mapped(server)),
    });
    match (version, addrs) {
        (Version::V1, None) => b"PROXY UNKNOWN\r\n".to_vec(),
        (Version::V1, Some((client, server))) => {
            let family = if client.is_ipv4() { "TCP4" } else { "TCP6" };
            format!(
                "PROXY {family} {} {} {} {}\r\n",
                client.ip(),
                server.ip(),
                client.port(),
                server.port()
            )
            .into_bytes()
        }
        (Version::V2, addrs) => {
            let mut out = V2_SIGNATURE.to_vec();
            match addrs {
                None => out.extend_from_slice(&[0x20, 0x00, 0, 0]),
                Some((SocketAddr::V4(client), SocketAddr::V4(server))) => {
                    out.extend_from_slice(&[0x21, 0x11, 0, 12]);
                    out.extend_from_slice(&client.ip().octets());
                    out.extend_from_slice(&server.ip().octets());
                    out.extend_from_slice(&client.port().to_be_bytes());
                    out.extend_from_slice(&server.port().to_be_bytes());
                }
                Some((client, server)) => {
                    let v6 = |a: SocketAddr| match a.ip() {
                        IpAddr::V6(ip) => ip.octets(),
                        IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
                    };
                    out.extend_from_slice(&[0x21, 0x21, 0, 36]);
                    out.extend_from_slice(&v6(client));
                    out.extend_from_slice(&v6(server));
                    out.extend_from_slice(&client.port().to_be_bytes());
                    out.extend_from_slice(&server.port().to_be_bytes());
                }
            }
            out
        }
    }
}

fn mapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) => SocketAddr::new(ip.to_ipv6_mapped().into(), addr.port()),
        IpAddr::V6(_) => addr,
    }
}

/// What the first bytes of a connection are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// Not enough bytes yet to tell.
    Incomplete,
    /// Not a PROXY header at all.
    NotProxy,
    /// A PROXY header that does not follow the protocol.
    Invalid(&'static str),
    /// A whole header of `len` bytes, naming `source` (none for `LOCAL`, `UNKNOWN` and
    /// families other than TCP).
    Header {
        len: usize,
        source: Option<SocketAddr>,
    },
}

/// Parses a PROXY header at the start of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Parsed {
    let v1 = b"PROXY ";
    if buf.len() < v1.len() && v1.starts_with(buf) {
        return Parsed::Incomplete;
    }
    if buf.starts_with(v1) {
        return parse_v1(buf);
    }
    if buf.len() < V2_SIGNATURE.len() && V2_SIGNATURE.starts_with(buf) {
        return Parsed::Incomplete;
    }
    if buf.starts_with(V2_SIGNATURE) {
        return parse_v2(buf);
    }
    Parsed::NotProxy
}

/// `PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n`, at most 107 bytes.
fn parse_v1(buf: &[u8]) -> Parsed {
    const MAX_V1: usize = 107;
    let Some(end) = buf.windows(2).take(MAX_V1 - 1).position(|w| w == b"\r\n") else {
        return if buf.len() >= MAX_V1 {
            Parsed::Invalid("v1 line longer than 107 bytes")
        } else {
            Parsed::Incomplete
        };
    };
    let Ok(line) = std::str::from_utf8(&buf[..end]) else {
        return Parsed::Invalid("v1 line is not ASCII");
    };
    let len = end + 2;
    let mut fields = line.split(' ');
    let _proxy = fields.next();
    let source = match fields.next() {
        Some("UNKNOWN") => return Parsed::Header { len, source: None },
        Some("TCP4") => fields
            .next()
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
            .map(IpAddr::V4),
        Some("TCP6") => fields
            .next()
            .and_then(|s| s.parse::<Ipv6Addr>().ok())
            .map(IpAddr::V6),
        _ => return Parsed::Invalid("v1 protocol is not TCP4, TCP6 or UNKNOWN"),
    };
    let destination_ok = match (source, fields.next()) {
        (Some(IpAddr::V4(_)), Some(d)) => d.parse::<Ipv4Addr>().is_ok(),
        (Some(IpAddr::V6(_)), Some(d)) => d.parse::<Ipv6Addr>().is_ok(),
        _ => false,
    };
    let port = |field: Option<&str>| {
        field
            .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
            .filter(|p| p.len() == 1 || !p.starts_with('0'))
            .and_then(|p| p.parse::<u16>().ok())
    };
    let (Some(ip), true, Some(source_port), Some(_), None) = (
        source,
        destination_ok,
        port(fields.next()),
        port(fields.next()),
        fields.next(),
    ) else {
        return Parsed::Invalid("v1 addresses or ports are malformed");
    };
    Parsed::Header {
        len,
        source: Some(SocketAddr::new(ip, source_port)),
    }
}

/// The binary form: the signature, version and command, family, length, addresses.
fn parse_v2(buf: &[u8]) -> Parsed {
    let Some(head) = buf.get(..16) else {
        return Parsed::Incomplete;
    };
    if head[12] >> 4 != 2 {
        return Parsed::Invalid("v2 version is not 2");
    }
    let command = head[12] & 0x0f;
    if command > 1 {
        return Parsed::Invalid("v2 command is neither LOCAL nor PROXY");
    }
    let body_len = usize::from(u16::from_be_bytes([head[14], head[15]]));
    let len = 16 + body_len;
    if len > MAX_HEADER {
        return Parsed::Invalid("v2 header longer than the limit");
    }
    let Some(body) = buf.get(16..len) else {
        return Parsed::Incomplete;
    };
    if command == 0 {
        // LOCAL: the balancer's own connection; the body is to be skipped.
        return Parsed::Header { len, source: None };
    }
    let source = match head[13] {
        // TCP over IPv4: source, destination, source port, destination port.
        0x11 => {
            let Some(a) = body.get(..12) else {
                return Parsed::Invalid("v2 IPv4 addresses are cut short");
            };
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(ip.into(), u16::from_be_bytes([a[8], a[9]])))
        }
        // TCP over IPv6.
        0x21 => {
            let Some(a) = body.get(..36) else {
                return Parsed::Invalid("v2 IPv6 addresses are cut short");
            };
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&a[..16]);
            let ip = Ipv6Addr::from(octets);
            Some(SocketAddr::new(
                ip.into(),
                u16::from_be_bytes([a[32], a[33]]),
            ))
        }
        // UNSPEC, UDP, unix sockets: no TCP client to name; the peer stays.
        0x00 | 0x12 | 0x22 | 0x31 | 0x32 => None,
        _ => return Parsed::Invalid("v2 address family is unknown"),
    };
    Parsed::Header { len, source }
}

/// Why a connection was closed before HTTP.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("a trusted peer sent no PROXY header")]
    Missing,
    #[error("an untrusted peer sent a PROXY header")]
    Untrusted,
    #[error("malformed PROXY header: {0}")]
    Invalid(&'static str),
    #[error("the connection closed before its PROXY header ended")]
    Closed,
    #[error("no whole PROXY header within the header-read timeout")]
    TimedOut,
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl Refused {
    fn label(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Untrusted => "untrusted",
            Self::Invalid(_) => "invalid",
            Self::Closed => "closed",
            Self::TimedOut => "timeout",
            Self::Io(_) => "io",
        }
    }

    /// Logs and counts the refusal.
    pub(crate) fn record(&self, peer: SocketAddr) {
        tracing::debug!(peer = %peer, error = %self, "PROXY protocol: connection closed");
        metrics::counter!("scb_proxy_protocol_refused_total", "reason" => self.label())
            .increment(1);
    }
}

/// Reads the PROXY header, if `peer` must or may send one, and says who the client is;
/// the stream is left at the first byte after the header. The caller bounds the time.
pub(crate) async fn read(
    stream: &mut LazyTcpStream,
    peer: SocketAddr,
    config: &ProxyProtocol,
) -> Result<SocketAddr, Refused> {
    let trusted = config.trusted.contains(peer.ip());
    let mut buf = vec![0u8; MAX_HEADER];
    let parsed = loop {
        // Tried before waiting: the header has usually arrived by the time the connection
        // is accepted, and an unregistered socket then never joins the reactor.
        let peeked = stream.try_io(Interest::READABLE, |socket| {
            let (n, _) = rustix::net::recv(socket, &mut buf[..], rustix::net::RecvFlags::PEEK)?;
            if n == 0 {
                return Ok(None);
            }
            match parse(&buf[..n]) {
                // Nothing new to parse until more bytes come: clear the readiness, so
                // the next wait is for them rather than a spin over the same bytes.
                Parsed::Incomplete => Err(io::ErrorKind::WouldBlock.into()),
                parsed => Ok(Some(parsed)),
            }
        });
        match peeked {
            Ok(Some(parsed)) => break parsed,
            Ok(None) => return Err(Refused::Closed),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await?;
            }
            Err(e) => return Err(e.into()),
        }
    };
    match (parsed, trusted) {
        (Parsed::NotProxy, false) => Ok(peer),
        (Parsed::NotProxy, true) => Err(Refused::Missing),
        (_, false) => Err(Refused::Untrusted),
        (Parsed::Invalid(why), true) => Err(Refused::Invalid(why)),
        (Parsed::Header { len, source }, true) => {
            stream.read_exact(&mut buf[..len]).await?;
            Ok(source.unwrap_or(peer))
        }
        (Parsed::Incomplete, true) => Err(Refused::Invalid("incomplete")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(source: &str) -> Parsed {
        Parsed::Header {
            len: 0,
            source: Some(source.parse().unwrap()),
        }
    }

    /// `parsed` with its length set to that of `bytes` (for whole headers).
    fn whole(bytes: &[u8], parsed: Parsed) -> Parsed {
        match parsed {
            Parsed::Header { source, .. } => Parsed::Header {
                len: bytes.len(),
                source,
            },
            other => other,
        }
    }

    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x20 | command);
        out.push(family);
        out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn v1_lines_name_the_source() {
        for (line, want) in [
            (
                &b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n"[..],
                named("192.0.2.1:56324"),
            ),
            (
                b"PROXY TCP6 2001:db8::1 2001:db8::2 1 80\r\n",
                named("[2001:db8::1]:1"),
            ),
            (
                b"PROXY UNKNOWN\r\n",
                Parsed::Header {
                    len: 0,
                    source: None,
                },
            ),
            (
                b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n",
                Parsed::Header {
                    len: 0,
                    source: None,
                },
            ),
        ] {
            assert_eq!(parse(line), whole(line, want), "{line:?}");
            // With the request behind it in the same read, the length is the line's.
            let mut more = line.to_vec();
            more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            assert_eq!(parse(&more), whole(line, want));
        }
    }

    #[test]
    fn v1_lines_that_lie_are_invalid() {
        for line in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.1 56324\r\n"[..],
            b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443 extra\r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",
            b"PROXY TCP6 192.0.2.1 2001:db8::2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 65536 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 +80 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 080 443\r\n",
            b"PROXY TCP4  192.0.2.1 198.51.100.1 80 443\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.1 80 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.1 80 443\n",
        ] {
            assert!(
                matches!(parse(line), Parsed::Invalid(_) | Parsed::Incomplete),
                "{line:?}"
            );
        }
        // No CRLF within 107 bytes: invalid, not a wait for more.
        let long = format!("PROXY TCP4 {}\r\n", "1".repeat(120));
        assert!(matches!(parse(long.as_bytes()), Parsed::Invalid(_)));
    }

    #[test]
    fn split_headers_are_incomplete_until_whole() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.1 56324 443\r\n";
        for cut in 1..line.len() {
            assert_eq!(parse(&line[..cut]), Parsed::Incomplete, "cut at {cut}");
        }
        let bin = v2(
            1,
            0x11,
            &[192, 0, 2, 1, 198, 51, 100, 1, 0x1f, 0x90, 0x01, 0xbb],
        );
        for cut in 1..bin.len() {
            assert_eq!(parse(&bin[..cut]), Parsed::Incomplete, "cut at {cut}");
        }
        assert_eq!(parse(&bin), whole(&bin, named("192.0.2.1:8080")));
    }

    #[test]
    fn v2_headers_name_the_source_or_keep_the_peer() {
        let mut six = Vec::new();
        six.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        six.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        six.extend_from_slice(&[0x30, 0x39, 0x01, 0xbb]);
        // A TLV after the addresses (AWS's, say) is skipped with them.
        six.extend_from_slice(&[0xea, 0x00, 0x03, 1, 2, 3]);
        let bin = v2(1, 0x21, &six);
        assert_eq!(parse(&bin), whole(&bin, named("[2001:db8::7]:12345")));
        let local = v2(0, 0x11, &[0; 12]);
        assert_eq!(
            parse(&local),
            Parsed::Header {
                len: local.len(),
                source: None
            }
        );
        let unspec = v2(1, 0x00, &[]);
        assert_eq!(
            parse(&unspec),
            Parsed::Header {
                len: 16,
                source: None
            }
        );
    }

    #[test]
    fn v2_headers_that_lie_are_invalid() {
        let short = v2(1, 0x11, &[192, 0, 2, 1]);
        assert!(matches!(parse(&short), Parsed::Invalid(_)));
        let mut version = v2(1, 0x11, &[0; 12]);
        version[12] = 0x11;
        assert!(matches!(parse(&version), Parsed::Invalid(_)));
        let command = v2(2, 0x11, &[0; 12]);
        assert!(matches!(parse(&command), Parsed::Invalid(_)));
        let family = v2(1, 0x45, &[0; 12]);
        assert!(matches!(parse(&family), Parsed::Invalid(_)));
        // A length beyond the limit is refused at once, not waited for.
        let mut huge = V2_SIGNATURE.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert!(matches!(parse(&huge), Parsed::Invalid(_)));
    }

    #[test]
    fn headers_sent_parse_back_to_their_client() {
        let pairs = [
            ("192.0.2.1:40000", "198.51.100.2:443"),
            ("[2001:db8::1]:1", "[2001:db8::2]:8443"),
            ("192.0.2.1:40000", "[2001:db8::2]:8443"),
        ];
        for version in [Version::V1, Version::V2] {
            for (client, server) in pairs {
                let client: SocketAddr = client.parse().unwrap();
                let bytes = header(version, Some((client, server.parse().unwrap())));
                let Parsed::Header { len, source } = parse(&bytes) else {
                    panic!("{version:?} {client}: {:?}", parse(&bytes));
                };
                assert_eq!(len, bytes.len());
                // A v4 client beside a v6 server comes back IPv4-mapped.
                let source = source.unwrap();
                assert_eq!(source.ip().to_canonical(), client.ip(), "{version:?}");
                assert_eq!(source.port(), client.port());
            }
            let own = header(version, None);
            assert_eq!(
                parse(&own),
                Parsed::Header {
                    len: own.len(),
                    source: None
                }
            );
        }
    }

    #[test]
    fn anything_else_is_not_a_header() {
        for start in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROPFIND / HTTP/1.1\r\n",
            b"\x16\x03\x01\x02\x00",
            b"\r\n\r\nx",
        ] {
            assert_eq!(parse(start), Parsed::NotProxy, "{start:?}");
        }
    }
}
