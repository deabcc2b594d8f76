//! What changes in a request on its way up and in a response on its way down.
//!
//! - Hop-by-hop fields (RFC 9110 §7.6.1) are removed in both directions: `Connection`,
//!   every field `Connection` names, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
//!   `Transfer-Encoding` and `Upgrade`. The framing of each hop is its own: the upstream
//!   connection and scb's server each write theirs. A WebSocket upgrade keeps `Upgrade`
//!   and gets `Connection: upgrade`, since the upgrade is what is being forwarded.
//!   `Expect` goes with them: the server that received it answers it (scb's sends the
//!   client 100 Continue when the body is read), and the body goes up without waiting.
//! - `X-Forwarded-For` gets the client's address appended. What came before is kept only
//!   when the client itself is a trusted proxy (`trusted_proxies`); otherwise a client
//!   could claim any address, so the field is replaced. `X-Forwarded-Proto` and
//!   `X-Forwarded-Host` follow the same rule: kept from a trusted proxy, else set from this
//!   hop.
//! - `Host` is kept as the client sent it (the upstream sees the site's name), or set to
//!   the upstream's `host:port` when `preserve_host` is off.
//! - The target is sent in origin form, path and query unchanged unless `strip_prefix`.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery};
pub use scb_core::client_ip::{InvalidNetwork, TrustedProxies};
use scb_core::http1::has_any;

/// The hop-by-hop fields removed in both directions, besides those `Connection` names,
/// and `Expect` (see the module docs; no response carries it). `Connection` first:
/// [`strip_hop_by_hop`] reads bit 0 as "has `Connection`".
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::EXPECT,
];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Whether `name` is one of the hop-by-hop fields always removed (not counting those a
/// `Connection` field names).
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// Removes the hop-by-hop fields, and those `Connection` names, from `headers`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names, with no hashing, finds which are there (most messages
    // carry none, or only `Connection`); only those are removed. Seven `contains_key`
    // probes per message were 2k instructions of a proxied request.
    let mut found = 0u8;
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|hop| hop == name) {
            found |= 1 << i;
        }
    }
    if found == 0 {
        return;
    }
    if found & 1 != 0
        && let Some(named) = connection_tokens(headers)
    {
        for name in named {
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if found & (1 << i) != 0 {
            headers.remove(name);
        }
    }
}

/// Which fields of `headers` are hop-by-hop (the fixed list, and what its `Connection`
/// names), for a copy that leaves them out in the same pass rather than removing them
/// after (each removal hashes).
pub(crate) fn hop_by_hop(headers: &HeaderMap) -> impl Fn(&HeaderName) -> bool + use<> {
    // Usually absent (a proxied response has had it stripped): looked for by a pass
    // over the names before its lines are read.
    let named = if has_any(headers, &[header::CONNECTION]) {
        connection_tokens(headers).unwrap_or_default()
    } else {
        Vec::new()
    };
    move |name| HOP_BY_HOP.contains(name) || named.contains(name)
}

/// The field names listed in `Connection`, when there are any besides `close` and
/// `keep-alive` (which name no field a client would send).
fn connection_tokens(headers: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for value in headers.get_all(header::CONNECTION) {
        for token in scb_core::http1::connection_tokens(value.as_bytes()) {
            if token.eq_ignore_ascii_case(b"close") || token.eq_ignore_ascii_case(b"keep-alive") {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(token) {
                names.push(name);
            }
        }
    }
    (!names.is_empty()).then_some(names)
}

/// Whether `headers` ask to upgrade the connection (`Connection: upgrade` and `Upgrade`).
pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && scb_core::http1::ConnectionOptions::of(
            headers
                .get_all(header::CONNECTION)
                .iter()
                .map(|v| v.as_bytes()),
        )
        .upgrade
}

/// What the request's own hop looked like.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hop<'a> {
    /// The client's address, when the server told us (scb's `ConnectInfo`).
    pub(crate) client: Option<IpAddr>,
    /// `http` or `https`.
    pub(crate) proto: &'static str,
    pub(crate) trusted: &'a TrustedProxies,
}

/// Sets `X-Forwarded-For`, `-Proto` and `-Host` on a request's `headers`.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, hop: Hop<'_>) {
    let trusted = hop.client.is_some_and(|ip| hop.trusted.trusts(ip));
    match hop.client {
        Some(ip) => {
            let ip = ip.to_canonical();
            let prior = trusted
                .then(|| joined(headers.get_all(&X_FORWARDED_FOR)))
                .flatten();
            let mut value = prior.map(|prior| prior + ", ").unwrap_or_default();
            push_ip(&mut value, ip);
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(X_FORWARDED_FOR, value);
            }
        }
        None if !trusted => {
            headers.remove(&X_FORWARDED_FOR);
        }
        None => {}
    }
    let host = headers.get(header::HOST).cloned();
    if trusted {
        headers
            .entry(X_FORWARDED_PROTO)
            .or_insert(HeaderValue::from_static(hop.proto));
        if let Some(host) = host {
            headers.entry(X_FORWARDED_HOST).or_insert(host);
        }
    } else {
        // `insert` replaces whatever the client claimed.
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(hop.proto));
        match host {
            Some(host) => headers.insert(X_FORWARDED_HOST, host),
            None => headers.remove(&X_FORWARDED_HOST),
        };
    }
}

/// Appends `ip` in its usual text form. IPv4 by hand: `Display` goes through the
/// formatting machinery, over a thousand instructions per request for four numbers.
fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                if octet >= 100 {
                    out.push(char::from(b'0' + octet / 100));
                }
                if octet >= 10 {
                    out.push(char::from(b'0' + octet / 10 % 10));
                }
                out.push(char::from(b'0' + octet % 10));
            }
        }
        IpAddr::V6(v6) => {
            use std::fmt::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

/// The values of a repeated field joined with `, ` (one field may be sent as several
/// lines), `None` when absent or not text.
fn joined(values: header::GetAll<'_, HeaderValue>) -> Option<String> {
    let mut out: Option<String> = None;
    for value in values {
        let value = value.to_str().ok()?.trim();
        if value.is_empty() {
            continue;
        }
        match &mut out {
            Some(out) => {
                out.push_str(", ");
                out.push_str(value);
            }
            None => out = Some(value.to_owned()),
        }
    }
    out
}

/// Sets `Host` to the upstream's `host:port` unless the client's is kept: HTTP/1.1
/// requires one. `keep_clients` is decided once per request (`preserve_host` and the
/// client sent one; HTTP/1.0 may not), so a retry to another upstream does not keep the
/// name set for the first.
pub(crate) fn set_host(headers: &mut HeaderMap, upstream: &Authority, keep_clients: bool) {
    if keep_clients && headers.contains_key(header::HOST) {
        return;
    }
    if let Ok(value) = HeaderValue::from_str(upstream.as_str()) {
        headers.insert(header::HOST, value);
    }
}

/// The origin-form target sent upstream: `path?query`, with `strip` removed from the
/// front of the path when it matches as a path prefix
/// ([`prefix_matches`](scb_core::router::prefix_matches)); what is left starts with `/`.
pub(crate) fn target(path_and_query: Option<&PathAndQuery>, strip: Option<&str>) -> PathAndQuery {
    let Some(pq) = path_and_query else {
        return PathAndQuery::from_static("/");
    };
    let path = pq.path();
    let Some(strip) = strip.filter(|s| scb_core::router::prefix_matches(s, path)) else {
        return pq.clone();
    };
    // `/api/` strips as `/api` does: the slash after it stays, as the target's first byte.
    let rest = &path[strip.trim_end_matches('/').len()..];
    let mut out = String::with_capacity(pq.as_str().len());
    if !rest.starts_with('/') {
        out.push('/');
    }
    out.push_str(rest);
    if let Some(query) = pq.query() {
        out.push('?');
        out.push_str(query);
    }
    out.parse().unwrap_or_else(|_| pq.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_removed() {
        let mut h = headers(&[
            ("connection", "keep-alive, X-Secret, close"),
            ("connection", "x-other"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("x-secret", "1"),
            ("x-other", "2"),
            ("x-kept", "3"),
            ("cookie", "a=b"),
        ]);
        strip_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept", "cookie"]);
    }

    #[test]
    fn upgrade_requests_are_recognised() {
        assert!(wants_upgrade(&headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket")
        ])));
        assert!(!wants_upgrade(&headers(&[("upgrade", "websocket")])));
        assert!(!wants_upgrade(&headers(&[("connection", "upgrade")])));
    }

    fn trusted() -> TrustedProxies {
        TrustedProxies::new(["10.0.0.0/8", "::1"]).unwrap()
    }

    #[test]
    fn an_untrusted_clients_forwarded_fields_are_replaced() {
        let mut h = headers(&[
            ("host", "example.com"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.example"),
        ]);
        let trusted = trusted();
        let hop = Hop {
            client: Some("192.0.2.7".parse().unwrap()),
            proto: "http",
            trusted: &trusted,
        };
        add_forwarded(&mut h, hop);
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "example.com");
    }

    #[test]
    fn a_trusted_proxys_forwarded_fields_are_kept_and_appended_to() {
        let mut h = headers(&[
            ("host", "internal:8080"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "5.6.7.8"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "example.com"),
        ]);
        let trusted = trusted();
        let hop = Hop {
            client: Some("10.1.2.3".parse().unwrap()),
            proto: "http",
            trusted: &trusted,
        };
        add_forwarded(&mut h, hop);
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 5.6.7.8, 10.1.2.3");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "example.com");

        // An IPv4-mapped IPv6 peer is its IPv4 address.
        let mut h = headers(&[("x-forwarded-for", "1.2.3.4")]);
        let hop = Hop {
            client: Some("::ffff:10.0.0.1".parse().unwrap()),
            proto: "http",
            trusted: &trusted,
        };
        add_forwarded(&mut h, hop);
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 10.0.0.1");
    }

    #[test]
    fn addresses_are_written_in_their_usual_form() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.200.9.255",
            "192.168.100.10",
            "::1",
            "2001:db8::7",
        ] {
            let mut out = String::new();
            push_ip(&mut out, ip.parse().unwrap());
            assert_eq!(out, ip);
        }
    }

    #[test]
    fn host_is_kept_or_set_to_the_upstream() {
        let upstream: Authority = "10.0.0.2:8081".parse().unwrap();
        let mut h = headers(&[("host", "example.com")]);
        set_host(&mut h, &upstream, true);
        assert_eq!(h["host"], "example.com");
        set_host(&mut h, &upstream, false);
        assert_eq!(h["host"], "10.0.0.2:8081");
        let mut h = HeaderMap::new();
        set_host(&mut h, &upstream, true);
        assert_eq!(h["host"], "10.0.0.2:8081");
    }

    #[test]
    fn targets_keep_path_and_query_unless_a_prefix_is_stripped() {
        let pq = |s: &str| s.parse::<PathAndQuery>().unwrap();
        assert_eq!(
            target(Some(&pq("/api/users?id=1")), None),
            "/api/users?id=1"
        );
        assert_eq!(
            target(Some(&pq("/api/users?id=1")), Some("/api/")),
            "/users?id=1"
        );
        assert_eq!(target(Some(&pq("/api")), Some("/api")), "/");
        assert_eq!(target(Some(&pq("/api/?x")), Some("/api/")), "/?x");
        // `/api` is not under the prefix `/api/` (scb_core::router::prefix_matches).
        assert_eq!(target(Some(&pq("/api?x")), Some("/api/")), "/api?x");
        assert_eq!(target(Some(&pq("/apifoo")), Some("/api")), "/apifoo");
        assert_eq!(target(Some(&pq("/other")), Some("/api")), "/other");
        assert_eq!(target(Some(&pq("/a/%2e%2e/b")), None), "/a/%2e%2e/b");
        assert_eq!(target(None, None), "/");
    }
}
