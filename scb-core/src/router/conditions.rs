//! What a route asks of a request beyond its path: [`RouteMatch`] and [`Glob`].

use std::borrow::Cow;
use std::fmt;

use http::{HeaderName, Method, Request};

use super::PathMatch;
use crate::client_ip::{Networks, TrustedProxies, client_ip};
use crate::connection::ConnectInfo;

/// How a route matches: its path ([`PathMatch`]) and, optionally, conditions on the
/// method, headers, query and client address. Every condition given must hold.
///
/// A plain [`PathMatch`] converts into a `RouteMatch` without conditions, so
/// [`Router::route`](super::Router::route) takes either.
///
/// ```
/// use http::{Method, Request};
/// use scb_core::router::{Glob, PathMatch, RouteMatch};
///
/// let json_writes = RouteMatch::new(PathMatch::Prefix("/api/".into()))
///     .methods([Method::POST, Method::PUT])
///     .header(http::header::CONTENT_TYPE, Glob::new("application/json*"))
///     .query("v", Glob::new("2"));
/// let req = Request::post("/api/users?v=2")
///     .header("content-type", "application/json; charset=utf-8")
///     .body(())
///     .unwrap();
/// assert!(json_writes.matches(&req));
/// let req = Request::post("/api/users?v=1").body(()).unwrap();
/// assert!(!json_writes.matches(&req));
/// ```
#[derive(Clone, Debug)]
pub struct RouteMatch {
    pub(super) path: PathMatch,
    /// `None`: the path alone decides, and matching costs nothing more.
    pub(super) conditions: Option<Box<Conditions>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Conditions {
    /// Empty: any method.
    methods: Vec<Method>,
    headers: Vec<(HeaderName, Glob)>,
    query: Vec<(Box<str>, Glob)>,
    remote: Option<Networks>,
    trusted: TrustedProxies,
}

impl From<PathMatch> for RouteMatch {
    fn from(path: PathMatch) -> Self {
        Self::new(path)
    }
}

impl RouteMatch {
    /// Requests whose path matches `path`, with no other condition.
    pub fn new(path: PathMatch) -> Self {
        Self {
            path,
            conditions: None,
        }
    }

    fn conditions(&mut self) -> &mut Conditions {
        self.conditions.get_or_insert_with(Box::default)
    }

    /// Only requests with one of these methods; `GET` takes `HEAD` too (a HEAD is a GET
    /// without its body, RFC 9110 9.3.2). Defaults to any method.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.conditions().methods.extend(methods);
        self
    }

    /// Only requests with a `name` field whose value matches `value` (any of the field's
    /// lines; values compared byte for byte, so case matters, `*` matching any run of
    /// bytes). Defaults to no header condition; each call adds one.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: Glob) -> Self {
        self.conditions().headers.push((name, value));
        self
    }

    /// Only requests whose query has a parameter `key` with a value matching `value`
    /// (any of its occurrences). Keys and values are compared after percent-decoding and
    /// `+` read as a space, as forms encode them; a parameter without `=` has the empty
    /// value. Defaults to no query condition; each call adds one.
    #[must_use]
    pub fn query(mut self, key: impl Into<Box<str>>, value: Glob) -> Self {
        self.conditions().query.push((key.into(), value));
        self
    }

    /// Only requests from a client in `networks`: the connection's peer, or the client
    /// a trusted proxy names (see [`trusted_proxies`](Self::trusted_proxies)). A request
    /// without [`ConnectInfo`] (outside scb's server) does not match. Defaults to any
    /// client.
    #[must_use]
    pub fn remote(mut self, networks: Networks) -> Self {
        self.conditions().remote = Some(networks);
        self
    }

    /// The proxies whose `X-Forwarded-For` names the client for
    /// [`remote`](Self::remote). Defaults to none.
    #[must_use]
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.conditions().trusted = trusted;
        self
    }

    /// The path part.
    pub fn path(&self) -> &PathMatch {
        &self.path
    }

    /// Whether anything besides the path is asked.
    pub fn is_conditional(&self) -> bool {
        self.conditions.is_some()
    }

    /// Whether `req` meets the conditions (the path is not looked at: the router has
    /// found it already).
    pub fn matches<B>(&self, req: &Request<B>) -> bool {
        self.conditions.as_ref().is_none_or(|c| c.matches(req))
    }
}

/// The conditions as `check --print` shows them: `methods GET, POST; header
/// content-type = "application/json*"; query v = "2"; remote 10.0.0.0/8`.
impl fmt::Display for RouteMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(c) = &self.conditions else {
            return Ok(());
        };
        let mut parts: Vec<String> = Vec::new();
        if !c.methods.is_empty() {
            let methods: Vec<&str> = c.methods.iter().map(Method::as_str).collect();
            parts.push(format!("methods {}", methods.join(", ")));
        }
        for (name, value) in &c.headers {
            parts.push(format!("header {name} = {value}"));
        }
        for (key, value) in &c.query {
            parts.push(format!("query {key} = {value}"));
        }
        if let Some(remote) = &c.remote {
            parts.push(format!("remote {remote}"));
        }
        f.write_str(&parts.join("; "))
    }
}

impl Conditions {
    pub(super) fn matches<B>(&self, req: &Request<B>) -> bool {
        self.method_matches(req.method())
            && self.headers.iter().all(|(name, value)| {
                req.headers()
                    .get_all(name)
                    .iter()
                    .any(|v| value.matches(v.as_bytes()))
            })
            && (self.query.is_empty() || self.query_matches(req.uri().query().unwrap_or("")))
            && self.remote.as_ref().is_none_or(|networks| {
                req.extensions().get::<ConnectInfo>().is_some_and(|c| {
                    networks.contains(client_ip(c.remote.ip(), req.headers(), &self.trusted))
                })
            })
    }

    fn method_matches(&self, method: &Method) -> bool {
        self.methods.is_empty()
            || self
                .methods
                .iter()
                .any(|m| m == method || (*method == Method::HEAD && *m == Method::GET))
    }

    fn query_matches(&self, query: &str) -> bool {
        self.query.iter().all(|(key, value)| {
            query.split('&').any(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                *form_decode(k) == *key.as_bytes() && value.matches(&form_decode(v))
            })
        })
    }
}

/// A query key or value as a form means it: `+` is a space, `%XX` a byte. Borrowed
/// unless there is something to decode; a `%` without two hex digits stays as it is.
fn form_decode(text: &str) -> Cow<'_, [u8]> {
    let bytes = text.as_bytes();
    if !bytes.iter().any(|b| matches!(b, b'%' | b'+')) {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(out)
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// A value pattern: text where `*` matches any run of bytes (none included); without a
/// `*` it is an exact comparison. Nothing else is special.
///
/// ```
/// use scb_core::router::Glob;
///
/// assert!(Glob::new("application/json*").matches(b"application/json; charset=utf-8"));
/// assert!(Glob::new("*.example.com").matches(b"api.example.com"));
/// assert!(Glob::new("2").matches(b"2"));
/// assert!(!Glob::new("2").matches(b"20"));
/// assert!(Glob::new("*").matches(b""));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Glob(Box<str>);

impl Glob {
    /// The pattern `pattern`.
    pub fn new(pattern: impl Into<Box<str>>) -> Self {
        Self(pattern.into())
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `value` matches. Linear in practice: after a `*` the rest is retried one
    /// byte later at most once per byte of `value` (the classic greedy match with one
    /// backtrack point), so no value makes it slow.
    pub fn matches(&self, value: &[u8]) -> bool {
        let pattern = self.0.as_bytes();
        let (mut p, mut v) = (0, 0);
        // Where the last `*` was, and the value position it is retried from.
        let mut star: Option<(usize, usize)> = None;
        while v < value.len() {
            if p < pattern.len() && pattern[p] == b'*' {
                star = Some((p, v));
                p += 1;
            } else if p < pattern.len() && pattern[p] == value[v] {
                p += 1;
                v += 1;
            } else if let Some((sp, sv)) = star {
                p = sp + 1;
                v = sv + 1;
                star = Some((sp, sv + 1));
            } else {
                return false;
            }
        }
        pattern[p..].iter().all(|&b| b == b'*')
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Quoted, as in the config: `"application/json*"`.
impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn globs_match_exactly_or_across_stars() {
        let cases: [(&str, &str, bool); 14] = [
            ("abc", "abc", true),
            ("abc", "abcd", false),
            ("abc", "ab", false),
            ("a*", "a", true),
            ("a*", "abc", true),
            ("*c", "abc", true),
            ("*c", "abd", false),
            ("a*c", "abbbc", true),
            ("a*c", "abbbd", false),
            ("a*b*c", "a-b-b-c", true),
            ("a*b*c", "a-c-b", false),
            ("**", "", true),
            ("", "", true),
            ("", "x", false),
        ];
        for (pattern, value, want) in cases {
            assert_eq!(
                Glob::new(pattern).matches(value.as_bytes()),
                want,
                "{pattern} ~ {value}"
            );
        }
    }

    /// The same language as a regular expression: `*` is `.*`, the rest literal.
    fn model(pattern: &str, value: &str) -> bool {
        fn go(p: &[u8], v: &[u8]) -> bool {
            match p.split_first() {
                None => v.is_empty(),
                Some((b'*', rest)) => (0..=v.len()).any(|i| go(rest, &v[i..])),
                Some((c, rest)) => v.first() == Some(c) && go(rest, &v[1..]),
            }
        }
        go(pattern.as_bytes(), value.as_bytes())
    }

    proptest! {
        #[test]
        fn globs_agree_with_a_backtracking_model(
            pattern in "[ab*]{0,8}",
            value in "[ab]{0,10}",
        ) {
            prop_assert_eq!(Glob::new(pattern.as_str()).matches(value.as_bytes()), model(&pattern, &value));
        }
    }

    fn req(method: Method, uri: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri(uri);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn methods_match_and_get_takes_head() {
        let m = RouteMatch::new(PathMatch::Prefix("/".into())).methods([Method::GET]);
        assert!(m.matches(&req(Method::GET, "/", &[])));
        assert!(m.matches(&req(Method::HEAD, "/", &[])));
        assert!(!m.matches(&req(Method::POST, "/", &[])));
        let post = RouteMatch::new(PathMatch::Prefix("/".into())).methods([Method::POST]);
        assert!(!post.matches(&req(Method::HEAD, "/", &[])));
    }

    #[test]
    fn headers_match_any_line_and_all_conditions_must_hold() {
        let m = RouteMatch::new(PathMatch::Prefix("/".into()))
            .header(http::header::CONTENT_TYPE, Glob::new("application/json*"))
            .header(HeaderName::from_static("x-tenant"), Glob::new("*"));
        let json = ("content-type", "application/json");
        assert!(!m.matches(&req(Method::GET, "/", &[json])));
        assert!(m.matches(&req(Method::GET, "/", &[json, ("x-tenant", "a")])));
        assert!(m.matches(&req(
            Method::GET,
            "/",
            &[("x-tenant", "a"), ("content-type", "text/plain"), json]
        )));
        assert!(!m.matches(&req(
            Method::GET,
            "/",
            &[("x-tenant", "a"), ("content-type", "Application/JSON")]
        )));
    }

    #[test]
    fn query_parameters_are_compared_decoded() {
        let m = RouteMatch::new(PathMatch::Prefix("/".into()))
            .query("v", Glob::new("2"))
            .query("q", Glob::new("a b*"));
        for (uri, want) in [
            ("/?v=2&q=a+b", true),
            ("/?q=a%20bc&v=2", true),
            ("/?v=1&v=2&q=a+b", true),
            ("/?%76=2&q=a+b", true),
            ("/?v=20&q=a+b", false),
            ("/?v=2", false),
            ("/?q=a+b", false),
            ("/", false),
            ("/?v=2&q=a%2", false),
        ] {
            assert_eq!(m.matches(&req(Method::GET, uri, &[])), want, "{uri}");
        }
        let flag = RouteMatch::new(PathMatch::Prefix("/".into())).query("debug", Glob::new(""));
        assert!(flag.matches(&req(Method::GET, "/?debug", &[])));
        assert!(flag.matches(&req(Method::GET, "/?debug=", &[])));
        assert!(!flag.matches(&req(Method::GET, "/?debug=1", &[])));
    }

    #[test]
    fn remote_networks_read_the_client_through_trusted_proxies() {
        let m = RouteMatch::new(PathMatch::Prefix("/".into()))
            .remote(Networks::new(["10.0.0.0/8"]).unwrap())
            .trusted_proxies(TrustedProxies::new(["192.0.2.1"]).unwrap());
        let from = |peer: &str, xff: Option<&str>| {
            let mut r = req(Method::GET, "/", &[]);
            if let Some(xff) = xff {
                r.headers_mut()
                    .insert("x-forwarded-for", xff.parse().unwrap());
            }
            let peer: SocketAddr = peer.parse().unwrap();
            r.extensions_mut().insert(ConnectInfo {
                remote: peer,
                local: "127.0.0.1:80".parse().unwrap(),
                secure: false,
            });
            r
        };
        assert!(m.matches(&from("10.1.2.3:5000", None)));
        assert!(!m.matches(&from("203.0.113.5:5000", None)));
        // A trusted proxy's word is taken; anyone else's is not.
        assert!(m.matches(&from("192.0.2.1:5000", Some("10.9.9.9"))));
        assert!(!m.matches(&from("203.0.113.5:5000", Some("10.9.9.9"))));
        // No connection facts: no match.
        assert!(!m.matches(&req(Method::GET, "/", &[])));
    }

    #[test]
    fn conditions_print_as_the_config_says_them() {
        let m = RouteMatch::new(PathMatch::Prefix("/api/".into()))
            .methods([Method::POST, Method::PUT])
            .header(http::header::CONTENT_TYPE, Glob::new("application/json*"))
            .query("v", Glob::new("2"))
            .remote(Networks::new(["10.0.0.0/8"]).unwrap());
        assert_eq!(
            m.to_string(),
            "methods POST, PUT; header content-type = \"application/json*\"; query v = \"2\"; \
             remote 10.0.0.0/8"
        );
        assert_eq!(
            RouteMatch::new(PathMatch::Prefix("/".into())).to_string(),
            ""
        );
    }
}
