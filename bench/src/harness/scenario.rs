//! The scenarios: what is requested, over which protocol, and what a server needs to serve
//! it.

use std::fmt;

use clap::ValueEnum;
use serde::Serialize;

use crate::harness::fixtures::Fixtures;

/// One benchmark scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Scenario {
    /// A fixed 13-byte response (`GET /respond`), no file system.
    #[value(name = "respond")]
    Respond,
    /// A 13-byte file: per-request cost of the file path when the answer is tiny.
    #[value(name = "static-small")]
    StaticSmall,
    /// A 1 MiB file: the cost of moving bytes (sendfile or copies).
    #[value(name = "static-1m")]
    #[serde(rename = "static-1m")]
    Static1m,
    /// 10,000 distinct 1 KiB files in a shuffled order: per-lookup cost, not one hot path.
    #[value(name = "static-many")]
    StaticMany,
    /// `GET /proxy/hello` forwarded to a local nginx that answers 13 bytes.
    #[value(name = "proxy")]
    Proxy,
    /// `GET /proxy-tls/hello` forwarded over TLS (verified, sessions resumed, keep-alive)
    /// to the same nginx on an HTTPS port.
    #[value(name = "proxy-tls")]
    ProxyTls,
    /// `GET /proxy-h2c/hello` forwarded over HTTP/2 in the clear (prior knowledge, one
    /// multiplexed connection) to the same nginx on an h2c port; nginx proxies with
    /// `grpc_pass`, its HTTP/2 upstream module.
    #[value(name = "proxy-h2c")]
    ProxyH2c,
    /// The 13-byte file over TLS 1.3 + HTTP/2 (h2load).
    #[value(name = "tls-h2-static-small")]
    TlsH2StaticSmall,
    /// `GET /respond` with `Connection: close`: a new TCP connection per request (accept,
    /// the first read, close), the shape of clients that do not keep connections.
    #[value(name = "close-respond")]
    CloseRespond,
    /// The 13-byte file over TLS 1.3 + HTTP/1.1 (wrk, keep-alive).
    #[value(name = "tls-h1-static-small")]
    TlsH1StaticSmall,
    /// `GET /respond` over TLS 1.3 + HTTP/1.1 with `Connection: close`: a full handshake
    /// per request (wrk does not resume sessions).
    #[value(name = "tls-handshake")]
    TlsHandshake,
    /// `GET /respond` over TLS 1.3 + HTTP/1.1 with `Connection: close`, every handshake
    /// but each client's first resuming its session with a ticket the server sent
    /// (tlsload, the harness's own: 64 clients, each a loop of connections), as a browser
    /// coming back does.
    #[value(name = "tls-resume")]
    TlsResume,
    /// The 13-byte file over TLS 1.3 + HTTP/2 with one stream in flight per connection
    /// (h2load `-m1`), as many HTTP/2 clients use it.
    #[value(name = "tls-h2-static-small-1stream")]
    TlsH2StaticSmall1Stream,
    /// `GET /cache/hello` through a response cache in front of the upstream, which
    /// answers 13 bytes cacheable for a day: every measured request is a hit.
    #[value(name = "proxy-cache-hit")]
    ProxyCacheHit,
    /// `GET /cache/100k.bin`, a 100 KiB file of the upstream's, cached: hits.
    #[value(name = "proxy-cache-100k")]
    #[serde(rename = "proxy-cache-100k")]
    ProxyCache100k,
    /// `GET /cache/1m.bin`, a 1 MiB file of the upstream's, cached: hits.
    #[value(name = "proxy-cache-1m")]
    #[serde(rename = "proxy-cache-1m")]
    ProxyCache1m,
    /// `GET /cache/miss/<unique>`: a new URL for every request, which the upstream
    /// answers with 13 bytes cacheable for a day. Every request misses, goes upstream
    /// and is stored (evicting others once the cache is full): the cost of a miss,
    /// against `proxy`.
    #[value(name = "proxy-cache-miss")]
    ProxyCacheMiss,
    /// The 13-byte file over HTTP/3 (QUIC on the TLS port; h3load, the harness's own,
    /// with 10 streams per connection). nginx 1.22 has no HTTP/3: Caddy is the peer.
    #[value(name = "h3-static-small")]
    H3StaticSmall,
    /// `GET /respond` over HTTP/3, as `h3-static-small`.
    #[value(name = "h3-respond")]
    H3Respond,
    /// `GET /php/hello.php`: a PHP script echoing the 13 bytes, run by php-fpm (a static
    /// pool on a Unix socket, pinned with the load generator) over FastCGI, a new
    /// connection to php-fpm per request (scb's and nginx's default). The figure is the
    /// server's CPU only: php-fpm is no process of the server's.
    #[value(name = "fastcgi-hello")]
    FastcgiHello,
    /// The same script at `/php-keepconn/hello.php`, through connections to php-fpm kept
    /// open between requests (`FCGI_KEEP_CONN`: scb's `keep_conn = true`, nginx's
    /// `fastcgi_keep_conn on` with upstream `keepalive`). Caddy 2.6 has no such setting.
    #[value(name = "fastcgi-hello-keepconn")]
    FastcgiHelloKeepconn,
}

/// What a server must be able to do for a scenario; see
/// [`crate::harness::server::Capabilities`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Feature {
    /// A fixed response from the config.
    Respond,
    /// Files from a document root.
    StaticFiles,
    /// A reverse proxy with keep-alive upstream connections.
    Proxy,
    /// The same to an HTTPS upstream.
    ProxyTls,
    /// The same to an HTTP/2 upstream in the clear.
    ProxyH2c,
    /// TLS 1.3 with ALPN h2.
    TlsH2,
    /// A response cache in front of the proxy (nginx `proxy_cache`).
    ProxyCache,
    /// HTTP/3 on the TLS port.
    Http3,
    /// Scripts through a FastCGI server (php-fpm), a connection per request.
    FastCgi,
    /// The same through connections kept open between requests (`FCGI_KEEP_CONN`).
    FastCgiKeepConn,
}

/// How the load reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Plain HTTP/1.1 on the HTTP port (wrk).
    Http1,
    /// TLS 1.3 + HTTP/1.1 on the TLS port (wrk).
    TlsHttp1,
    /// TLS 1.3 + HTTP/2 on the TLS port (h2load).
    TlsH2,
    /// HTTP/3 on the TLS port over UDP (h3load).
    H3,
    /// TLS 1.3 + HTTP/1.1 on the TLS port, a connection per request, sessions resumed
    /// (tlsload).
    TlsResume,
}

/// The path requested by the `proxy` scenario; the upstream answers every path.
pub(crate) const PROXY_PATH: &str = "/proxy/hello";

/// The path requested by the `proxy-tls` scenario.
pub(crate) const PROXY_TLS_PATH: &str = "/proxy-tls/hello";

/// The path requested by the `proxy-h2c` scenario.
pub(crate) const PROXY_H2C_PATH: &str = "/proxy-h2c/hello";

/// The path requested by the `proxy-cache-hit` scenario; the upstream answers it as
/// `/proxy/hello`, with `Cache-Control: max-age=86400`.
pub(crate) const CACHE_HIT_PATH: &str = "/cache/hello";

/// The paths requested by the `proxy-cache-miss` scenario, each once (see
/// [`wrk::UNIQUE`](crate::harness::wrk::UNIQUE)); the upstream answers them as
/// `/proxy/hello`, with `Cache-Control: max-age=86400`.
pub(crate) const CACHE_MISS_PATHS: &str = "/cache/miss/*";

/// The path requested by the `fastcgi-hello` scenario: a script beneath the PHP root
/// (see [`php`](crate::harness::php)).
pub(crate) const FASTCGI_PATH: &str = "/php/hello.php";

/// The path requested by the `fastcgi-hello-keepconn` scenario: the same script, under
/// the route that keeps its connections to php-fpm.
pub(crate) const FASTCGI_KEEPCONN_PATH: &str = "/php-keepconn/hello.php";

/// The path verified before `proxy-cache-miss`.
const CACHE_MISS_VERIFIED: &str = "/cache/miss/verified";

/// Where the upstream serves the docroot's files, cacheable for a day: `/cache/1m.bin`
/// is the docroot's `/1m.bin`.
pub(crate) const CACHE_FILES: &str = "/cache";

/// How many `static-many` paths are verified besides the first and the last: enough to
/// catch a server that serves one file for all, without 10,000 requests before each run.
const MANY_SAMPLE: usize = 20;

/// One URL path and the exact body it must return.
#[derive(Clone, Debug)]
pub(crate) struct Expected {
    /// Absolute path, e.g. `/small.txt`.
    pub(crate) path: String,
    /// The exact response body.
    pub(crate) body: Vec<u8>,
}

impl Scenario {
    /// Every scenario, in the report's order.
    pub(crate) const ALL: [Scenario; 21] = [
        Scenario::Respond,
        Scenario::StaticSmall,
        Scenario::Static1m,
        Scenario::StaticMany,
        Scenario::Proxy,
        Scenario::ProxyTls,
        Scenario::ProxyH2c,
        Scenario::TlsH2StaticSmall,
        Scenario::CloseRespond,
        Scenario::TlsH1StaticSmall,
        Scenario::TlsHandshake,
        Scenario::TlsResume,
        Scenario::TlsH2StaticSmall1Stream,
        Scenario::ProxyCacheHit,
        Scenario::ProxyCache100k,
        Scenario::ProxyCache1m,
        Scenario::ProxyCacheMiss,
        Scenario::H3StaticSmall,
        Scenario::H3Respond,
        Scenario::FastcgiHello,
        Scenario::FastcgiHelloKeepconn,
    ];

    /// The scenario's name in flags and reports.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Scenario::Respond => "respond",
            Scenario::StaticSmall => "static-small",
            Scenario::Static1m => "static-1m",
            Scenario::StaticMany => "static-many",
            Scenario::Proxy => "proxy",
            Scenario::ProxyTls => "proxy-tls",
            Scenario::ProxyH2c => "proxy-h2c",
            Scenario::TlsH2StaticSmall => "tls-h2-static-small",
            Scenario::CloseRespond => "close-respond",
            Scenario::TlsH1StaticSmall => "tls-h1-static-small",
            Scenario::TlsHandshake => "tls-handshake",
            Scenario::TlsResume => "tls-resume",
            Scenario::TlsH2StaticSmall1Stream => "tls-h2-static-small-1stream",
            Scenario::ProxyCacheHit => "proxy-cache-hit",
            Scenario::ProxyCache100k => "proxy-cache-100k",
            Scenario::ProxyCache1m => "proxy-cache-1m",
            Scenario::ProxyCacheMiss => "proxy-cache-miss",
            Scenario::H3StaticSmall => "h3-static-small",
            Scenario::H3Respond => "h3-respond",
            Scenario::FastcgiHello => "fastcgi-hello",
            Scenario::FastcgiHelloKeepconn => "fastcgi-hello-keepconn",
        }
    }

    /// What a server needs to serve this scenario.
    pub(crate) const fn requires(self) -> &'static [Feature] {
        match self {
            Scenario::Respond | Scenario::CloseRespond => &[Feature::Respond],
            Scenario::TlsHandshake | Scenario::TlsResume => &[Feature::Respond, Feature::TlsH2],
            Scenario::TlsH1StaticSmall | Scenario::TlsH2StaticSmall1Stream => {
                &[Feature::StaticFiles, Feature::TlsH2]
            }
            Scenario::StaticSmall | Scenario::Static1m | Scenario::StaticMany => {
                &[Feature::StaticFiles]
            }
            Scenario::Proxy => &[Feature::Proxy],
            Scenario::ProxyTls => &[Feature::ProxyTls],
            Scenario::ProxyH2c => &[Feature::ProxyH2c],
            Scenario::TlsH2StaticSmall => &[Feature::StaticFiles, Feature::TlsH2],
            Scenario::ProxyCacheHit
            | Scenario::ProxyCache100k
            | Scenario::ProxyCache1m
            | Scenario::ProxyCacheMiss => &[Feature::Proxy, Feature::ProxyCache],
            Scenario::H3StaticSmall => &[Feature::StaticFiles, Feature::Http3],
            Scenario::H3Respond => &[Feature::Respond, Feature::Http3],
            Scenario::FastcgiHello => &[Feature::FastCgi],
            Scenario::FastcgiHelloKeepconn => &[Feature::FastCgiKeepConn],
        }
    }

    /// The protocol and load generator.
    pub(crate) const fn protocol(self) -> Protocol {
        match self {
            Scenario::TlsH2StaticSmall | Scenario::TlsH2StaticSmall1Stream => Protocol::TlsH2,
            Scenario::TlsH1StaticSmall | Scenario::TlsHandshake => Protocol::TlsHttp1,
            Scenario::H3StaticSmall | Scenario::H3Respond => Protocol::H3,
            Scenario::TlsResume => Protocol::TlsResume,
            _ => Protocol::Http1,
        }
    }

    /// Whether each request asks for its connection to be closed (`Connection: close`):
    /// a new connection, and over TLS a new full handshake, per request.
    pub(crate) const fn closes(self) -> bool {
        matches!(
            self,
            Scenario::CloseRespond | Scenario::TlsHandshake | Scenario::TlsResume
        )
    }

    /// HTTP/2 streams in flight per connection (h2load `-m`).
    pub(crate) const fn h2_streams(self) -> usize {
        match self {
            Scenario::TlsH2StaticSmall1Stream => 1,
            _ => crate::harness::load::H2_STREAMS,
        }
    }

    /// Whether the upstream nginx must run.
    pub(crate) const fn needs_upstream(self) -> bool {
        matches!(
            self,
            Scenario::Proxy
                | Scenario::ProxyTls
                | Scenario::ProxyH2c
                | Scenario::ProxyCacheHit
                | Scenario::ProxyCache100k
                | Scenario::ProxyCache1m
                | Scenario::ProxyCacheMiss
        )
    }

    /// Whether php-fpm must run.
    pub(crate) const fn needs_php_fpm(self) -> bool {
        matches!(
            self,
            Scenario::FastcgiHello | Scenario::FastcgiHelloKeepconn
        )
    }

    /// The paths the load requests: one, or for `static-many` all 10,000 in the fixed
    /// shuffled order (the same for every server).
    pub(crate) fn load_paths(self, fixtures: &Fixtures) -> Vec<String> {
        match self {
            Scenario::Respond
            | Scenario::CloseRespond
            | Scenario::TlsHandshake
            | Scenario::TlsResume
            | Scenario::H3Respond => {
                vec!["/respond".to_owned()]
            }
            Scenario::StaticSmall
            | Scenario::TlsH2StaticSmall
            | Scenario::TlsH1StaticSmall
            | Scenario::TlsH2StaticSmall1Stream
            | Scenario::H3StaticSmall => {
                vec![Fixtures::SMALL_PATH.to_owned()]
            }
            Scenario::Static1m => vec![Fixtures::ONE_MIB_PATH.to_owned()],
            Scenario::StaticMany => fixtures.many_paths_shuffled(),
            Scenario::Proxy => vec![PROXY_PATH.to_owned()],
            Scenario::ProxyTls => vec![PROXY_TLS_PATH.to_owned()],
            Scenario::ProxyH2c => vec![PROXY_H2C_PATH.to_owned()],
            Scenario::ProxyCacheHit => vec![CACHE_HIT_PATH.to_owned()],
            Scenario::ProxyCache100k => vec![format!("{CACHE_FILES}{}", Fixtures::HUNDRED_K_PATH)],
            Scenario::ProxyCache1m => vec![format!("{CACHE_FILES}{}", Fixtures::ONE_MIB_PATH)],
            Scenario::ProxyCacheMiss => vec![CACHE_MISS_PATHS.to_owned()],
            Scenario::FastcgiHello => vec![FASTCGI_PATH.to_owned()],
            Scenario::FastcgiHelloKeepconn => vec![FASTCGI_KEEPCONN_PATH.to_owned()],
        }
    }

    /// The URLs verified before the scenario is measured, with their exact bodies.
    pub(crate) fn expected(self, fixtures: &Fixtures) -> Vec<Expected> {
        let hello = || Fixtures::SMALL_BODY.to_vec();
        match self {
            Scenario::Respond
            | Scenario::CloseRespond
            | Scenario::TlsHandshake
            | Scenario::TlsResume
            | Scenario::H3Respond => {
                vec![Expected {
                    path: "/respond".to_owned(),
                    body: hello(),
                }]
            }
            Scenario::StaticSmall
            | Scenario::TlsH2StaticSmall
            | Scenario::TlsH1StaticSmall
            | Scenario::TlsH2StaticSmall1Stream
            | Scenario::H3StaticSmall => vec![Expected {
                path: Fixtures::SMALL_PATH.to_owned(),
                body: hello(),
            }],
            Scenario::Static1m => vec![Expected {
                path: Fixtures::ONE_MIB_PATH.to_owned(),
                body: fixtures.one_mib(),
            }],
            Scenario::StaticMany => fixtures
                .many_sample(MANY_SAMPLE)
                .into_iter()
                .map(|i| Expected {
                    path: Fixtures::many_path(i),
                    body: Fixtures::many_body(i),
                })
                .collect(),
            Scenario::Proxy => vec![Expected {
                path: PROXY_PATH.to_owned(),
                body: hello(),
            }],
            Scenario::ProxyTls => vec![Expected {
                path: PROXY_TLS_PATH.to_owned(),
                body: hello(),
            }],
            Scenario::ProxyH2c => vec![Expected {
                path: PROXY_H2C_PATH.to_owned(),
                body: hello(),
            }],
            Scenario::ProxyCacheHit => vec![Expected {
                path: CACHE_HIT_PATH.to_owned(),
                body: hello(),
            }],
            Scenario::ProxyCache100k => vec![Expected {
                path: format!("{CACHE_FILES}{}", Fixtures::HUNDRED_K_PATH),
                body: fixtures.hundred_k(),
            }],
            Scenario::ProxyCache1m => vec![Expected {
                path: format!("{CACHE_FILES}{}", Fixtures::ONE_MIB_PATH),
                body: fixtures.one_mib(),
            }],
            Scenario::ProxyCacheMiss => vec![Expected {
                path: CACHE_MISS_VERIFIED.to_owned(),
                body: hello(),
            }],
            Scenario::FastcgiHello => vec![Expected {
                path: FASTCGI_PATH.to_owned(),
                body: hello(),
            }],
            Scenario::FastcgiHelloKeepconn => vec![Expected {
                path: FASTCGI_KEEPCONN_PATH.to_owned(),
                body: hello(),
            }],
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_the_flag_parser() {
        for scenario in Scenario::ALL {
            assert_eq!(
                Scenario::from_str(scenario.name(), false).unwrap(),
                scenario
            );
        }
    }

    #[test]
    fn only_the_tls_h2_scenarios_use_h2load_and_only_one_keeps_one_stream() {
        let tls: Vec<_> = Scenario::ALL
            .into_iter()
            .filter(|s| s.protocol() == Protocol::TlsH2)
            .collect();
        assert_eq!(
            tls,
            [
                Scenario::TlsH2StaticSmall,
                Scenario::TlsH2StaticSmall1Stream
            ]
        );
        assert_eq!(Scenario::TlsH2StaticSmall.h2_streams(), 10);
        assert_eq!(Scenario::TlsH2StaticSmall1Stream.h2_streams(), 1);
    }

    #[test]
    fn only_the_fastcgi_scenarios_need_php_fpm_and_no_upstream() {
        let php: Vec<_> = Scenario::ALL
            .into_iter()
            .filter(|s| s.needs_php_fpm())
            .collect();
        assert_eq!(
            php,
            [Scenario::FastcgiHello, Scenario::FastcgiHelloKeepconn]
        );
        assert!(php.iter().all(|s| !s.needs_upstream()));
        assert!(php.iter().all(|s| s.protocol() == Protocol::Http1));
    }

    #[test]
    fn the_closing_scenarios_are_the_connection_per_request_ones() {
        let closing: Vec<_> = Scenario::ALL.into_iter().filter(|s| s.closes()).collect();
        assert_eq!(
            closing,
            [
                Scenario::CloseRespond,
                Scenario::TlsHandshake,
                Scenario::TlsResume
            ]
        );
        assert_eq!(Scenario::TlsHandshake.protocol(), Protocol::TlsHttp1);
        // wrk resumes no session: the resumed handshakes need the harness's own client.
        assert_eq!(Scenario::TlsResume.protocol(), Protocol::TlsResume);
    }
}
