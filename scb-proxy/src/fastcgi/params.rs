//! The CGI/1.1 variables (RFC 3875) a request becomes, named as php-fpm and nginx's
//! `fastcgi_params` name them.

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use http::{HeaderMap, Version, header};

use scb_core::original_uri::OriginalUri;

use super::record::Params;
use super::script::Script;

/// What the request's connection says about it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    /// The client: the connection's peer, or the client a trusted proxy forwarded for
    /// (then without a port).
    pub(crate) client: Option<SocketAddr>,
    /// The address the connection reached.
    pub(crate) local: Option<SocketAddr>,
    pub(crate) secure: bool,
}

/// The variables for `parts`, whose path named `script` beneath `root`; `length` is the
/// body's, which `CONTENT_LENGTH` says.
pub(crate) fn cgi(parts: &Parts, script: &Script, root: &str, peer: Peer, length: u64) -> Params {
    let mut p = Params::with_capacity(size_hint(parts, script, root));
    let add = |p: &mut Params, name: &str, value: &str| p.add(name.as_bytes(), value.as_bytes());
    add(&mut p, "GATEWAY_INTERFACE", "CGI/1.1");
    add(&mut p, "SERVER_SOFTWARE", "scb");
    add(&mut p, "SERVER_PROTOCOL", protocol(parts.version));
    add(&mut p, "REQUEST_METHOD", parts.method.as_str());
    add(
        &mut p,
        "REQUEST_SCHEME",
        if peer.secure { "https" } else { "http" },
    );
    if peer.secure {
        add(&mut p, "HTTPS", "on");
    }
    let original = parts.extensions.get::<OriginalUri>().map(|o| &o.0);
    let uri = original.unwrap_or(&parts.uri);
    add(
        &mut p,
        "REQUEST_URI",
        uri.path_and_query().map_or("/", |pq| pq.as_str()),
    );
    add(&mut p, "DOCUMENT_URI", parts.uri.path());
    add(&mut p, "DOCUMENT_ROOT", root);
    add(&mut p, "SCRIPT_NAME", &script.name);
    p.add(
        b"SCRIPT_FILENAME",
        script.filename.as_os_str().as_encoded_bytes(),
    );
    add(&mut p, "PATH_INFO", &script.path_info);
    if !script.path_info.is_empty() {
        add(
            &mut p,
            "PATH_TRANSLATED",
            &format!("{root}{}", script.path_info),
        );
    }
    add(&mut p, "QUERY_STRING", parts.uri.query().unwrap_or(""));
    if let Some(kind) = parts.headers.get(header::CONTENT_TYPE) {
        p.add(b"CONTENT_TYPE", kind.as_bytes());
    }
    let mut number = itoa::Buffer::new();
    add(&mut p, "CONTENT_LENGTH", number.format(length));
    let mut ip = IpText::default();
    if let Some(client) = peer.client {
        p.add(b"REMOTE_ADDR", ip.format(client.ip()));
        add(&mut p, "REMOTE_PORT", number.format(client.port()));
    }
    if let Some(local) = peer.local {
        p.add(b"SERVER_ADDR", ip.format(local.ip()));
        add(&mut p, "SERVER_PORT", number.format(local.port()));
    }
    let host = host(parts);
    if let Some(host) = host {
        add(&mut p, "SERVER_NAME", strip_port(host));
        // An HTTP/2 or HTTP/3 request names its host in `:authority` only.
        if !parts.headers.contains_key(header::HOST) {
            add(&mut p, "HTTP_HOST", host);
        }
    }
    headers(&mut p, &parts.headers);
    p
}

/// Bytes enough for the variables of most requests, so that they are written into one
/// allocation: the fixed names and short values, the paths, and each header with its
/// `HTTP_` name and length bytes.
fn size_hint(parts: &Parts, script: &Script, root: &str) -> usize {
    let headers: usize = parts
        .headers
        .iter()
        .map(|(name, value)| 16 + name.as_str().len() + value.len())
        .sum();
    512 + 2 * parts.uri.path().len()
        + parts.uri.query().map_or(0, str::len)
        + 2 * root.len()
        + script.name.len()
        + 2 * script.path_info.len()
        + headers
}

/// An address as CGI text (an IPv4-mapped IPv6 address as IPv4), written without the
/// formatting machinery for IPv4, which is most of them: `Ipv4Addr`'s `Display` was a
/// tenth of the instructions scb spent on a FastCGI request.
struct IpText {
    buf: [u8; 45],
}

impl Default for IpText {
    fn default() -> Self {
        Self { buf: [0; 45] }
    }
}

impl IpText {
    fn format(&mut self, ip: IpAddr) -> &[u8] {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let mut len = 0;
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        self.buf[len] = b'.';
                        len += 1;
                    }
                    if octet >= 100 {
                        self.buf[len] = b'0' + octet / 100;
                        len += 1;
                    }
                    if octet >= 10 {
                        self.buf[len] = b'0' + octet / 10 % 10;
                        len += 1;
                    }
                    self.buf[len] = b'0' + octet % 10;
                    len += 1;
                }
                &self.buf[..len]
            }
            IpAddr::V6(v6) => {
                use std::io::Write as _;
                let mut cursor = std::io::Cursor::new(&mut self.buf[..]);
                // 45 bytes hold the longest form (`ffff:...:255.255.255.255`).
                let _ = write!(cursor, "{v6}");
                let len = usize::try_from(cursor.position()).unwrap_or(0);
                &self.buf[..len]
            }
        }
    }
}

/// Every header as `HTTP_NAME`, but for those CGI carries otherwise or must not carry.
///
/// `Proxy` never becomes `HTTP_PROXY` (httpoxy: CGI programs read it as their own
/// outgoing proxy). A name with `_` is dropped, as nginx drops it: `X_Forwarded_For` and
/// `X-Forwarded-For` would both be `HTTP_X_FORWARDED_FOR`, and a client could forge the
/// one a trusted proxy set. Repeated fields are joined, cookies with `; `.
fn headers(p: &mut Params, headers: &HeaderMap) {
    let mut name = Vec::with_capacity(64);
    let mut value = Vec::with_capacity(256);
    for key in headers.keys() {
        if key == header::CONTENT_TYPE
            || key == header::CONTENT_LENGTH
            || key.as_str() == "proxy"
            || key.as_str().contains('_')
        {
            continue;
        }
        name.clear();
        name.extend_from_slice(b"HTTP_");
        name.extend(key.as_str().bytes().map(|b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        let separator: &[u8] = if key == header::COOKIE { b"; " } else { b", " };
        value.clear();
        for (i, v) in headers.get_all(key).iter().enumerate() {
            if i > 0 {
                value.extend_from_slice(separator);
            }
            value.extend_from_slice(v.as_bytes());
        }
        p.add(&name, &value);
    }
}

fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

fn host(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))
}

fn strip_port(host: &str) -> &str {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairs of an encoded set, in order.
    fn decode(content: &[u8]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut at = 0;
        let len = |at: &mut usize| {
            if content[*at] < 128 {
                *at += 1;
                usize::from(content[*at - 1])
            } else {
                let b = &content[*at..*at + 4];
                *at += 4;
                (u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff) as usize
            }
        };
        while at < content.len() {
            let n = len(&mut at);
            let v = len(&mut at);
            let name = String::from_utf8(content[at..at + n].to_vec()).unwrap();
            let value = String::from_utf8(content[at + n..at + n + v].to_vec()).unwrap();
            at += n + v;
            out.push((name, value));
        }
        out
    }

    fn get<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
        pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_request_becomes_the_variables_php_fpm_reads() {
        let req = http::Request::post("/index.php/users/7?sort=name")
            .header("host", "shop.example:8443")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("content-length", "11")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("accept", "text/html")
            .header("accept", "*/*")
            .header("proxy", "http://evil.example")
            .header("x_forwarded_for", "6.6.6.6")
            .header("x-custom-thing", "yes")
            .body(())
            .unwrap();
        let (mut parts, ()) = req.into_parts();
        parts
            .extensions
            .insert(OriginalUri("/users/7?sort=name".parse().unwrap()));
        let script = Script {
            name: "/index.php".into(),
            path_info: "/users/7".into(),
            filename: "/srv/app/index.php".into(),
        };
        let peer = Peer {
            client: Some("[::ffff:10.1.2.3]:5555".parse().unwrap()),
            local: Some("10.0.0.1:8443".parse().unwrap()),
            secure: true,
        };
        let pairs = decode(cgi(&parts, &script, "/srv/app", peer, 11).content());
        for (name, value) in [
            ("GATEWAY_INTERFACE", "CGI/1.1"),
            ("REQUEST_METHOD", "POST"),
            ("SERVER_PROTOCOL", "HTTP/1.1"),
            ("REQUEST_URI", "/users/7?sort=name"),
            ("DOCUMENT_URI", "/index.php/users/7"),
            ("SCRIPT_NAME", "/index.php"),
            ("SCRIPT_FILENAME", "/srv/app/index.php"),
            ("PATH_INFO", "/users/7"),
            ("PATH_TRANSLATED", "/srv/app/users/7"),
            ("DOCUMENT_ROOT", "/srv/app"),
            ("QUERY_STRING", "sort=name"),
            ("CONTENT_TYPE", "application/x-www-form-urlencoded"),
            ("CONTENT_LENGTH", "11"),
            ("REMOTE_ADDR", "10.1.2.3"),
            ("REMOTE_PORT", "5555"),
            ("SERVER_ADDR", "10.0.0.1"),
            ("SERVER_PORT", "8443"),
            ("SERVER_NAME", "shop.example"),
            ("HTTPS", "on"),
            ("REQUEST_SCHEME", "https"),
            ("HTTP_HOST", "shop.example:8443"),
            ("HTTP_COOKIE", "a=1; b=2"),
            ("HTTP_ACCEPT", "text/html, */*"),
            ("HTTP_X_CUSTOM_THING", "yes"),
        ] {
            assert_eq!(get(&pairs, name), Some(value), "{name}");
        }
        for absent in [
            "HTTP_PROXY",
            "HTTP_X_FORWARDED_FOR",
            "HTTP_CONTENT_TYPE",
            "HTTP_CONTENT_LENGTH",
        ] {
            assert_eq!(get(&pairs, absent), None, "{absent}");
        }
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut text = IpText::default();
        for ip in [
            "0.0.0.0",
            "255.255.255.255",
            "100.10.9.199",
            "1.20.255.0",
            "::1",
            "2001:db8::8a2e:370:7334",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:192.0.2.128",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let want = ip.to_canonical().to_string();
            assert_eq!(text.format(ip), want.as_bytes(), "{ip}");
        }
        for octets in [[0, 9, 10, 99], [100, 199, 200, 255]] {
            let ip = IpAddr::from(octets);
            assert_eq!(text.format(ip), ip.to_string().as_bytes());
        }
    }

    #[test]
    fn an_http2_request_gets_its_host_from_the_authority() {
        let req = http::Request::get("https://[::1]:8443/")
            .version(Version::HTTP_2)
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let script = Script {
            name: "/index.php".into(),
            path_info: String::new(),
            filename: "/srv/index.php".into(),
        };
        let peer = Peer {
            client: None,
            local: None,
            secure: false,
        };
        let pairs = decode(cgi(&parts, &script, "/srv", peer, 0).content());
        assert_eq!(get(&pairs, "HTTP_HOST"), Some("[::1]:8443"));
        assert_eq!(get(&pairs, "SERVER_NAME"), Some("::1"));
        assert_eq!(get(&pairs, "SERVER_PROTOCOL"), Some("HTTP/2.0"));
        assert_eq!(get(&pairs, "PATH_INFO"), Some(""));
        assert_eq!(get(&pairs, "PATH_TRANSLATED"), None);
        assert_eq!(get(&pairs, "HTTPS"), None);
        assert_eq!(get(&pairs, "CONTENT_LENGTH"), Some("0"));
    }
}
