//! The config file: TOML, deserialized with serde into the types below (unknown keys are
//! errors everywhere), then checked and converted into scb-core's builders by
//! [`Plan`](crate::plan::Plan).
//!
//! These types belong to the binary. The layer crates know nothing of them: each
//! conversion is a `From`/`TryFrom` here, from a config type into a layer's own builder
//! (see [`convert`]).
//!
//! Values whose meaning is checked after deserializing are kept [`Spanned`], so that an
//! error names the line, column and key it is about, like a deserializer error does.

pub(crate) mod convert;
mod error;
mod source;
mod units;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

pub(crate) use error::{ConfigError, Located};
pub(crate) use source::Source;
pub(crate) use units::{ByteSize, HumanDuration, ListenAddr};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// Files appended to this one (`conf.d/*.toml`): read by [`Source`], only named
    /// here so that the key is known.
    #[serde(default, rename = "include")]
    _include: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    pub(crate) server: ServerConfig,
    #[serde(default)]
    pub(crate) limits: LimitsConfig,
    #[serde(default)]
    pub(crate) request_id: RequestIdConfig,
    /// Absent: no metrics endpoint (the metrics layers record into nothing).
    pub(crate) metrics: Option<MetricsConfig>,
    /// Liveness and readiness on the metrics listener; absent means none there.
    pub(crate) health: Option<Spanned<ProbesConfig>>,
    /// The status page on the metrics listener; absent means none.
    pub(crate) status: Option<Spanned<StatusConfig>>,
    /// `[tracing]`: W3C trace context and OpenTelemetry spans; absent means none (no
    /// trace ids, nothing propagated, no cost).
    pub(crate) tracing: Option<Spanned<TracingConfig>>,
    #[serde(default)]
    pub(crate) log: LogConfig,
    /// At least one is required; that is checked with the rest, so that a missing
    /// `[[listen]]` reads like every other error.
    #[serde(default)]
    pub(crate) listen: Vec<ListenConfig>,
    #[serde(default)]
    pub(crate) route: Vec<Spanned<RouteConfig>>,
    /// `[[site]]`: virtual hosts, each with its own routes. The top-level `[[route]]`s
    /// are the default site's.
    #[serde(default)]
    pub(crate) site: Vec<Spanned<SiteConfig>>,
    /// `[cluster]`: state shared with the other instances of a fleet through Redis;
    /// absent, everything stays local.
    pub(crate) cluster: Option<Spanned<ClusterConfig>>,
}

/// `[cluster] redis = "redis://10.0.0.5:6379/0"`, `key_prefix = "scb:"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterConfig {
    /// `redis://[:password@]host[:port][/db]` or `redis+unix:///path`.
    pub(crate) redis: Spanned<String>,
    /// What every key starts with; absent means `scb:`.
    pub(crate) key_prefix: Option<Spanned<String>>,
    /// How often the fleet's TLS session ticket keys are replaced; absent means 6h.
    pub(crate) ticket_rotation: Option<Spanned<HumanDuration>>,
}

/// One `[[site]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SiteConfig {
    /// Host names and `*.example.com` wildcards; absent: the default site.
    pub(crate) hosts: Option<Spanned<Vec<Spanned<String>>>>,
    /// Header rules for every request and response of the site.
    pub(crate) headers: Option<Spanned<HeadersConfig>>,
    /// `X-Content-Type-Options`, `Referrer-Policy` and `X-Frame-Options` on responses
    /// that have none.
    #[serde(default)]
    pub(crate) security_headers: bool,
    /// `{ 404 = "404.html", 502 = "5xx.html" }`: pages for responses with those statuses.
    pub(crate) error_pages: Option<BTreeMap<String, Spanned<std::path::PathBuf>>>,
    #[serde(default)]
    pub(crate) route: Vec<Spanned<RouteConfig>>,
}

/// `headers = { request = { ... }, response = { ... } }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeadersConfig {
    #[serde(default)]
    pub(crate) request: HeaderRulesConfig,
    #[serde(default)]
    pub(crate) response: HeaderRulesConfig,
}

/// `{ set = { name = "value" }, add = { ... }, remove = ["name"] }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeaderRulesConfig {
    #[serde(default)]
    pub(crate) set: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub(crate) add: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub(crate) remove: Vec<Spanned<String>>,
}

/// `redirect = { to, status }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedirectConfig {
    /// The `Location`, with `{path}`, `{query}`, `{host}` and `{rest}`.
    pub(crate) to: Spanned<String>,
    /// 301, 302, 303, 307 or 308; absent means 308.
    pub(crate) status: Option<Spanned<u16>>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerConfig {
    /// Worker threads; absent means one per available CPU.
    pub(crate) workers: Option<Spanned<usize>>,
    /// How long in-flight requests may finish after SIGTERM; absent means scb-core's
    /// default.
    pub(crate) grace_period: Option<HumanDuration>,
    /// Where `scb run` writes its process id, for `scb reload`; absent means nowhere.
    pub(crate) pid_file: Option<std::path::PathBuf>,
    /// The Unix socket on which `scb run --upgrade` takes the listeners over; absent
    /// means no upgrades.
    pub(crate) upgrade_socket: Option<std::path::PathBuf>,
    /// Proxies whose `X-Forwarded-For` names the client, for the access log; absent
    /// means none (the peer is the client).
    pub(crate) trusted_proxies: Option<Vec<Spanned<String>>>,
}

/// `[limits]`: every key is optional and defaults to scb-core's `Limits::default()`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsConfig {
    pub(crate) header_read_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) body_read_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) send_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) keep_alive_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) max_header_bytes: Option<Spanned<ByteSize>>,
    pub(crate) max_headers: Option<Spanned<usize>>,
    pub(crate) max_body_bytes: Option<ByteSize>,
    pub(crate) max_connections: Option<Spanned<usize>>,
    pub(crate) handshake_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) h2_max_concurrent_streams: Option<Spanned<u32>>,
    pub(crate) h2_stream_window: Option<Spanned<ByteSize>>,
    pub(crate) h2_connection_window: Option<Spanned<ByteSize>>,
    pub(crate) h2_max_pending_reset_streams: Option<Spanned<usize>>,
    pub(crate) h2_max_local_error_reset_streams: Option<Spanned<usize>>,
}

/// `[request_id]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestIdConfig {
    /// Absent means `x-request-id`.
    pub(crate) header: Option<Spanned<String>>,
}

/// `[metrics]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsConfig {
    /// See [`units::listen_addr`].
    #[serde(deserialize_with = "units::listen_addr")]
    pub(crate) listen: Spanned<SocketAddr>,
    /// Absent means `/metrics`.
    pub(crate) path: Option<Spanned<String>>,
}

/// `[status] enabled = true`: the status page, `/status` and `/status.json` on the
/// `[metrics]` listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusConfig {
    /// Required: a bare `[status]` would leave a reader guessing.
    pub(crate) enabled: Spanned<bool>,
}

/// `[tracing]`: `otlp = "http://127.0.0.1:4318"`, `service_name`, `sample_ratio`,
/// `propagate`, `ca_root`, `headers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TracingConfig {
    /// The OpenTelemetry collector's OTLP/HTTP address (`/v1/traces` is added to a URL
    /// without a path); absent means no spans are exported, while trace ids are still
    /// made, logged and propagated.
    pub(crate) otlp: Option<Spanned<String>>,
    /// `service.name` of the spans; absent means `scb`.
    pub(crate) service_name: Option<Spanned<String>>,
    /// The share of traces starting here that are sampled, 0 to 1; absent means 1.
    pub(crate) sample_ratio: Option<Spanned<f64>>,
    /// Whether upstreams are told this server's span in `traceparent`; absent means
    /// true.
    pub(crate) propagate: Option<bool>,
    /// PEM roots an `https://` collector's certificate is checked against; absent means
    /// the system's store.
    pub(crate) ca_root: Option<Spanned<std::path::PathBuf>>,
    /// Fields sent with every export (a hosted collector's API key, as
    /// `OTEL_EXPORTER_OTLP_HEADERS` gives them); their values are never logged.
    #[serde(default)]
    pub(crate) headers: BTreeMap<Spanned<String>, Spanned<String>>,
}

/// `[health]`: probes on the `[metrics]` listener, and how long a drain is announced
/// before the listeners close.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProbesConfig {
    /// Absent means `/healthz`.
    pub(crate) liveness: Option<Spanned<String>>,
    /// Absent means `/readyz`.
    pub(crate) readiness: Option<Spanned<String>>,
    /// After SIGTERM, how long readiness says 503 while the listeners still accept, so
    /// that a load balancer stops sending first; absent means 0.
    pub(crate) drain_delay: Option<HumanDuration>,
}

/// `[log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogConfig {
    /// The access log: `true` (stderr), `false`, or `{ path, format }`; off by default.
    #[serde(default)]
    pub(crate) access: AccessConfig,
}

/// `[log] access`: `true`/`false`, or a table.
#[derive(Debug, Default)]
pub(crate) enum AccessConfig {
    #[default]
    Off,
    On(AccessTable),
}

/// `[log] access = { path, format }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AccessTable {
    /// The file to append to; absent means stderr.
    pub(crate) path: Option<std::path::PathBuf>,
    /// `combined`, `json` or a template; absent means the `--log-format` of the
    /// process's own log (`text`: combined, `json`: json).
    pub(crate) format: Option<Spanned<AccessFormat>>,
}

/// `[log] access.format`: a named format, or a template (any text with a `{`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AccessFormat {
    Combined,
    Json,
    /// Parsed when the plan is built, where its error gets the key.
    Template(String),
}

impl<'de> Deserialize<'de> for AccessFormat {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        match text.as_str() {
            "combined" => Ok(Self::Combined),
            "json" => Ok(Self::Json),
            _ if text.contains('{') => Ok(Self::Template(text)),
            _ => Err(serde::de::Error::custom(format_args!(
                "unknown format {text:?}: expected `combined`, `json` or a template with \
                 {{variables}}"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for AccessConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = AccessConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or a table { path, format }")
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<AccessConfig, E> {
                Ok(if on {
                    AccessConfig::On(AccessTable::default())
                } else {
                    AccessConfig::Off
                })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<AccessConfig, A::Error> {
                let table =
                    AccessTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(AccessConfig::On(table))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// One `[[listen]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListenConfig {
    /// See [`units::listen_or_unix`].
    #[serde(deserialize_with = "units::listen_or_unix")]
    pub(crate) addr: Spanned<ListenAddr>,
    /// A Unix socket's file mode, octal (`"0660"`).
    pub(crate) mode: Option<Spanned<String>>,
    /// A Unix socket's owner: a user name or id.
    pub(crate) owner: Option<Spanned<String>>,
    /// A Unix socket's group: a group name or id.
    pub(crate) group: Option<Spanned<String>>,
    /// `tls = { cert, key }` or `tls = { certs = [...] }`: a TLS listener.
    pub(crate) tls: Option<Spanned<TlsConfig>>,
    /// On a plain listener: answer every request with a 308 to its `https` URL.
    pub(crate) redirect_https: Option<Spanned<bool>>,
    /// `proxy_protocol = { trusted = ["10.0.0.0/8"] }`: connections from these peers
    /// begin with a PROXY protocol header (v1 or v2) naming the client.
    pub(crate) proxy_protocol: Option<Spanned<ProxyProtocolConfig>>,
    /// On a TLS listener: HTTP/3 over QUIC on the same port (UDP), advertised with
    /// `Alt-Svc` on the TCP answers.
    pub(crate) http3: Option<Spanned<bool>>,
    /// How long clients may remember the `Alt-Svc` advertisement (`ma`); `"0s"` sends
    /// none. Default 24 hours.
    pub(crate) alt_svc_max_age: Option<Spanned<units::HumanDuration>>,
}

/// `proxy_protocol = { trusted = [...] }` of a `[[listen]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProxyProtocolConfig {
    /// The balancers' networks or addresses; at least one.
    pub(crate) trusted: Spanned<Vec<Spanned<String>>>,
}

/// `tls = { ... }` of a `[[listen]]`: one certificate (`cert` and `key`) or several chosen
/// by SNI (`certs`, the first is the default), and an optional `Strict-Transport-Security`
/// value for this listener's responses.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsConfig {
    pub(crate) cert: Option<Spanned<std::path::PathBuf>>,
    pub(crate) key: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    pub(crate) certs: Vec<Spanned<CertConfig>>,
    pub(crate) hsts: Option<Spanned<String>>,
    /// PEM file of the CAs that sign client certificates (mutual TLS).
    pub(crate) client_ca: Option<Spanned<std::path::PathBuf>>,
    /// `required` (the default with `client_ca`) or `optional`.
    pub(crate) client_auth: Option<Spanned<String>>,
    /// Certificates from an ACME CA instead of files.
    pub(crate) acme: Option<Spanned<AcmeConfig>>,
    /// A certificate per name clients ask for, obtained when first asked if the `ask`
    /// URL allows the name.
    pub(crate) on_demand: Option<Spanned<OnDemandConfig>>,
}

/// `tls = { on_demand = { ask = "http://127.0.0.1:5555/allowed", email = "..." } }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnDemandConfig {
    /// Asked `?domain=NAME` before a name is ordered; 200 allows it.
    pub(crate) ask: Spanned<String>,
    pub(crate) email: Option<Spanned<String>>,
    pub(crate) directory: Option<Spanned<String>>,
    pub(crate) ca_root: Option<Spanned<std::path::PathBuf>>,
    /// Required without `[cluster]`.
    pub(crate) state_dir: Option<Spanned<std::path::PathBuf>>,
    /// `tls-alpn-01` (absent) or `http-01`.
    pub(crate) challenge: Option<Spanned<String>>,
    /// How long a handshake waits for its certificate; absent means 8s.
    pub(crate) wait: Option<Spanned<HumanDuration>>,
    /// New names ordered per hour; absent means 10.
    pub(crate) per_hour: Option<Spanned<u32>>,
    /// Names held at most; absent means 10,000.
    pub(crate) max_names: Option<Spanned<usize>>,
    /// Longest wait for one answer of the CA; absent means 30s.
    pub(crate) timeout: Option<Spanned<HumanDuration>>,
}

/// `tls = { acme = { domains, email, directory, ca_root, state_dir, challenge, dns, retry,
/// timeout } }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcmeConfig {
    /// The names the certificate covers: DNS names, `*.` wildcards (with DNS-01), or IP
    /// addresses (not with DNS-01).
    pub(crate) domains: Spanned<Vec<Spanned<String>>>,
    /// The account's contact address.
    pub(crate) email: Option<Spanned<String>>,
    /// The CA's directory URL; absent means Let's Encrypt's.
    pub(crate) directory: Option<Spanned<String>>,
    /// Extra roots (PEM) for the directory's own TLS, for a private CA.
    pub(crate) ca_root: Option<Spanned<std::path::PathBuf>>,
    /// Where the account and certificates are kept (with `[cluster]`, a local copy of
    /// what Redis keeps); required without `[cluster]`, else absent means a directory
    /// under the system's temporary one.
    pub(crate) state_dir: Option<Spanned<std::path::PathBuf>>,
    /// `tls-alpn-01` (absent), `http-01` or `dns-01`.
    pub(crate) challenge: Option<Spanned<String>>,
    /// With `challenge = "dns-01"` (and only then): how the TXT records are published,
    /// and how long scb waits for them.
    pub(crate) dns: Option<Spanned<DnsConfig>>,
    /// The wait after a first failure, doubling up to an hour.
    pub(crate) retry: Option<Spanned<HumanDuration>>,
    /// Longest wait for one answer of the CA.
    pub(crate) timeout: Option<Spanned<HumanDuration>>,
}

/// `dns = { rfc2136 = { ... }, ttl, propagation_timeout, ... }` of an `acme` table: the
/// DNS-01 records. `rfc2136` says how they are published; the keys beside it are about the
/// records and the wait for them, whatever publishes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DnsConfig {
    /// RFC 2136 dynamic updates signed with TSIG: how scb publishes the records.
    pub(crate) rfc2136: Spanned<Rfc2136Config>,
    /// The records' TTL, in seconds as in a zone file. Default 60.
    pub(crate) ttl: Option<Spanned<u32>>,
    /// Longest wait for the zone's servers to answer with the records. Default 120 s.
    pub(crate) propagation_timeout: Option<Spanned<HumanDuration>>,
    /// How often they are asked meanwhile. Default 2 s.
    pub(crate) propagation_interval: Option<Spanned<HumanDuration>>,
    /// A further wait once they all have the records, before the CA is told. Default
    /// none.
    pub(crate) propagation_delay: Option<Spanned<HumanDuration>>,
    /// Whether the zone's NS set is waited for too, besides `rfc2136.server`. Default
    /// true.
    pub(crate) check_nameservers: Option<Spanned<bool>>,
}

/// `rfc2136 = { server, zone, tsig_key, tsig_secret_file, tsig_algorithm, transport }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rfc2136Config {
    /// The zone's primary server: `"IP:port"`, or an IP address alone for port 53.
    pub(crate) server: Spanned<String>,
    /// The zone the records go in, `"example.com."` (the final dot may be left out).
    pub(crate) zone: Spanned<String>,
    /// The TSIG key's name, as the server knows it.
    pub(crate) tsig_key: Spanned<String>,
    /// The key's secret: a file holding it in base64, or `tsig-keygen`'s output.
    pub(crate) tsig_secret_file: Spanned<std::path::PathBuf>,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`. Default: the file's `algorithm`,
    /// else `hmac-sha256`.
    pub(crate) tsig_algorithm: Option<Spanned<String>>,
    /// `udp` (default) or `tcp`.
    pub(crate) transport: Option<Spanned<String>>,
}

/// One certificate chain and its key, PEM files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CertConfig {
    pub(crate) cert: std::path::PathBuf,
    pub(crate) key: std::path::PathBuf,
}

/// One `[[route]]`: a name, exactly one of `path` and `prefix`, and exactly one handler
/// (`respond`, `static` or `proxy`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteConfig {
    /// The route's name in metrics and logs; absent means one derived from the path.
    pub(crate) name: Option<Spanned<String>>,
    /// Exact match.
    pub(crate) path: Option<Spanned<String>>,
    /// Prefix match, on segment boundaries.
    pub(crate) prefix: Option<Spanned<String>>,
    /// A regular expression the path must match; its named groups are placeholders of
    /// the route's `rewrite`.
    pub(crate) path_regex: Option<Spanned<String>>,
    /// `match = { methods, headers, query, remote }`: what else a request must be for the
    /// route to take it.
    #[serde(rename = "match")]
    pub(crate) conditions: Option<Spanned<MatchConfig>>,
    pub(crate) respond: Option<Spanned<RespondConfig>>,
    /// `static = { ... }`: files beneath a directory.
    #[serde(rename = "static")]
    pub(crate) static_files: Option<Spanned<StaticConfig>>,
    /// `proxy = { ... }`: forwarded to upstream servers.
    pub(crate) proxy: Option<Spanned<ProxyConfig>>,
    /// `fastcgi = { upstreams, root, ... }`: scripts run by FastCGI servers (php-fpm),
    /// the other files beneath `root` served as static files.
    pub(crate) fastcgi: Option<Spanned<FastCgiConfig>>,
    /// `cache = { max_bytes, max_object, ... }`: a response cache in front of the proxy.
    pub(crate) cache: Option<Spanned<CacheConfig>>,
    /// `try_files = ["{path}", "{path}/index.php", "/index.php?{query}"]` on a static or
    /// FastCGI route: the first that exists beneath its root, else the last (a path, or
    /// `=404`).
    pub(crate) try_files: Option<Spanned<Vec<Spanned<String>>>>,
    /// `health = true`: the process's readiness, as `[health]`'s readiness path answers.
    pub(crate) health: Option<Spanned<bool>>,
    /// `redirect = { to, status }`: a redirect.
    pub(crate) redirect: Option<Spanned<RedirectConfig>>,
    /// Header rules for this route's requests and responses (after its site's on the
    /// request, before them on the response).
    pub(crate) headers: Option<Spanned<HeadersConfig>>,
    /// Only clients in these networks or addresses may use the route (403 otherwise).
    pub(crate) allow: Option<Vec<Spanned<String>>>,
    /// Clients in these get 403.
    pub(crate) deny: Option<Vec<Spanned<String>>>,
    /// `cors = { origins, methods, headers, expose, credentials, max_age }`.
    pub(crate) cors: Option<Spanned<CorsConfig>>,
    /// `rewrite = { prefix, to }` or `{ regex, to }`: the path the handler sees.
    pub(crate) rewrite: Option<Spanned<RewriteConfig>>,
    /// At most this many requests of the route in progress at once (all workers); 503
    /// over it.
    pub(crate) max_concurrent: Option<Spanned<usize>>,
    /// `basic_auth = { users = "FILE", realm = "..." }`: 401 without a user's password.
    pub(crate) basic_auth: Option<Spanned<BasicAuthConfig>>,
    /// `rate_limit = { key, rate, burst }`: 429 over a client's rate.
    pub(crate) rate_limit: Option<Spanned<RateLimitConfig>>,
    /// `forward_auth = { upstream, uri, copy_headers }`: an auth service decides first.
    pub(crate) forward_auth: Option<Spanned<ForwardAuthConfig>>,
    /// On-the-fly compression of whatever the handler answers (any handler; a static,
    /// proxy or fixed-response route may say it in its handler's table instead).
    pub(crate) compress: Option<Spanned<CompressConfig>>,
}

/// `match = { methods = ["POST"], headers = { "content-type" = "application/json*" },
/// query = { "v" = "2" }, remote = ["10.0.0.0/8"] }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MatchConfig {
    pub(crate) methods: Option<Spanned<Vec<Spanned<String>>>>,
    /// Field name to value pattern (`*` any run of bytes).
    pub(crate) headers: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
    /// Query parameter to value pattern.
    pub(crate) query: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
    /// Client networks, through `[server] trusted_proxies`.
    pub(crate) remote: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `cache = { max_bytes = "512MiB", max_object = "64MiB" }`: RFC 9111 caching of a proxy
/// route's responses.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheConfig {
    /// Bytes of stored responses held in memory (all workers share them).
    pub(crate) max_bytes: Spanned<ByteSize>,
    /// The largest response stored; absent means 64 MiB or an eighth of `max_bytes`.
    pub(crate) max_object: Option<Spanned<ByteSize>>,
    /// A directory for the disk tier (made if missing); absent means memory only.
    pub(crate) path: Option<Spanned<std::path::PathBuf>>,
    /// Bytes of records the disk tier keeps; absent means 1 GiB.
    pub(crate) disk_max_bytes: Option<Spanned<ByteSize>>,
    /// What responses are stored under: a template of `{scheme}`, `{host}`, `{path}`
    /// and `{query}`; absent means the whole URL.
    pub(crate) key: Option<Spanned<String>>,
    /// How long a miss waits for another request filling the same key before it goes
    /// upstream itself; absent means 5 s.
    pub(crate) collapse_timeout: Option<Spanned<HumanDuration>>,
    /// How long past its freshness a response may be served when the upstream fails or
    /// answers 5xx, where the response itself does not say (`stale-if-error`); absent
    /// means not at all.
    pub(crate) stale_if_error: Option<Spanned<HumanDuration>>,
}

/// `forward_auth = { upstream = "127.0.0.1:9091", uri = "/api/verify",
/// copy_headers = ["Remote-User"] }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForwardAuthConfig {
    /// `"host:port"`, `"unix:/path"` or `"https://host:port"`.
    pub(crate) upstream: Spanned<String>,
    /// The path (and query) each check asks for.
    pub(crate) uri: Spanned<String>,
    /// Fields of a 2xx answer set on the request (a client's own copies are removed).
    pub(crate) copy_headers: Option<Vec<Spanned<String>>>,
    pub(crate) connect_timeout: Option<Spanned<HumanDuration>>,
    /// A check's whole time (its tries together); absent means 15 s.
    pub(crate) timeout: Option<Spanned<HumanDuration>>,
    /// Absent means true: the auth service sees the client's `Host`.
    pub(crate) preserve_host: Option<bool>,
}

/// `basic_auth = { users = "/etc/scb/admin.htpasswd", realm = "admin" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BasicAuthConfig {
    /// An htpasswd file of bcrypt (`htpasswd -B`) or argon2 lines, read at load.
    pub(crate) users: Spanned<std::path::PathBuf>,
    /// Absent means `restricted`.
    pub(crate) realm: Option<Spanned<String>>,
}

/// `rate_limit = { key = "client_ip", rate = "10/s", burst = 20 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimitConfig {
    /// `client_ip` (absent) or `header:NAME`.
    pub(crate) key: Option<Spanned<String>>,
    /// `N/s`, `N/m` or `N/h`.
    pub(crate) rate: Spanned<String>,
    /// Requests at once after a pause; absent means the rate's N.
    pub(crate) burst: Option<Spanned<u32>>,
    /// Most keys held (all workers); absent means 100,000.
    pub(crate) max_keys: Option<Spanned<usize>>,
    /// Counted across the fleet in `[cluster]`'s Redis; absent means false.
    pub(crate) shared: Option<Spanned<bool>>,
}

/// `rewrite = { prefix = "/old/", to = "/new/" }`, `{ regex = "^/a/(\\d+)$", to = "/b/{1}" }`,
/// or `{ to = "/u/{id}" }` on a `path_regex` route (its groups).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RewriteConfig {
    pub(crate) prefix: Option<Spanned<String>>,
    pub(crate) regex: Option<Spanned<String>>,
    pub(crate) to: Spanned<String>,
}

/// `cors = { ... }`: tower-http's `CorsLayer`; preflights never reach the handler.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CorsConfig {
    /// `["https://app.example.com", ...]`, or `["*"]` for any origin.
    pub(crate) origins: Spanned<Vec<Spanned<String>>>,
    /// Absent means `GET`, `HEAD` and `POST`; `["*"]` any.
    pub(crate) methods: Option<Vec<Spanned<String>>>,
    /// Request fields a preflight may allow; absent means none; `["*"]` any.
    #[serde(default)]
    pub(crate) headers: Vec<Spanned<String>>,
    /// Response fields the page may read; absent means none.
    #[serde(default)]
    pub(crate) expose: Vec<Spanned<String>>,
    /// `Access-Control-Allow-Credentials: true`; not with any `*`.
    pub(crate) credentials: Option<Spanned<bool>>,
    /// How long a browser may cache a preflight; absent means not at all.
    pub(crate) max_age: Option<HumanDuration>,
}

/// `static = { ... }`: the files beneath `root`. The request path is looked up beneath the
/// root as it is, prefix included (nginx's `root`, not `alias`): with
/// `prefix = "/assets/"` and `root = "/srv/www"`, `/assets/app.js` is
/// `/srv/www/assets/app.js`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StaticConfig {
    pub(crate) root: Spanned<std::path::PathBuf>,
    /// Absent means `index.html`; `""` means no index file.
    pub(crate) index: Option<Spanned<String>>,
    /// Sidecar codings in the server's order of preference (`br`, `zstd`, `gzip`);
    /// absent means none.
    pub(crate) precompressed: Option<Spanned<Vec<String>>>,
    /// `beneath` (absent) or `none`.
    pub(crate) symlinks: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) show_hidden: bool,
    /// `[{ glob = "*.html", value = "no-cache" }, ...]`, first match wins.
    #[serde(default)]
    pub(crate) cache_control: Vec<Spanned<CacheRuleConfig>>,
    /// A file beneath the root (`index.html`) served with 200 for paths that name no
    /// file: a single-page app's entry point. Absent means none.
    pub(crate) fallback: Option<Spanned<String>>,
    /// A file beneath the root (`404.html`) sent with every 404. Absent means the plain
    /// 404.
    pub(crate) not_found: Option<Spanned<String>>,
    /// HTML listings of directories without an index file.
    #[serde(default)]
    pub(crate) list_directories: bool,
    /// On-the-fly gzip/br/zstd for compressible types that have no sidecar.
    pub(crate) compress: Option<Spanned<CompressConfig>>,
    /// `cache = { entries, max_bytes, negative_entries, revalidate }` or `cache = false`;
    /// absent means the open-file cache with scb-static's defaults.
    pub(crate) cache: Option<Spanned<FileCacheConfig>>,
}

/// `cache = false`, `cache = true` (the defaults) or `cache = { ... }` of a static route.
#[derive(Debug)]
pub(crate) enum FileCacheConfig {
    Off,
    On(FileCacheTable),
}

/// `cache = { ... }`: every key optional, defaulting to scb-static's `OpenFileCache`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileCacheTable {
    /// Names that found a file or directory, per worker.
    pub(crate) entries: Option<Spanned<usize>>,
    /// Bytes of small files (and entries) held, per worker.
    pub(crate) max_bytes: Option<Spanned<ByteSize>>,
    /// Names that found nothing, per worker.
    pub(crate) negative_entries: Option<Spanned<usize>>,
    /// How long an entry is trusted before one `stat` checks it.
    pub(crate) revalidate: Option<Spanned<HumanDuration>>,
}

impl<'de> Deserialize<'de> for FileCacheConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = FileCacheConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "false, true, or a table { entries, max_bytes, negative_entries, revalidate }",
                )
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<FileCacheConfig, E> {
                Ok(if on {
                    FileCacheConfig::On(FileCacheTable::default())
                } else {
                    FileCacheConfig::Off
                })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<FileCacheConfig, A::Error> {
                FileCacheTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(FileCacheConfig::On)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `compress = false`, `compress = true` (the defaults) or `compress = { min_length,
/// level, types }`: on-the-fly compression, on a route or in its handler's table.
#[derive(Debug)]
pub(crate) enum CompressConfig {
    Off,
    On(CompressTable),
}

/// `compress = { ... }`: every key optional, defaulting to scb-static's `CompressLayer`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompressTable {
    /// Smallest response compressed.
    pub(crate) min_length: Option<ByteSize>,
    /// `"fastest"`, `"default"`, `"best"`, or a number for every algorithm (clamped to
    /// each one's range).
    pub(crate) level: Option<Spanned<CompressLevelConfig>>,
    /// Media types compressed, in place of the built-in list: `text/*`, `application/json`.
    pub(crate) types: Option<Vec<Spanned<String>>>,
}

/// A compression level: a name or a number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum CompressLevelConfig {
    Named(String),
    Number(i64),
}

impl<'de> Deserialize<'de> for CompressConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CompressConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("false, true, or a table { min_length, level, types }")
            }

            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<CompressConfig, E> {
                Ok(if on {
                    CompressConfig::On(CompressTable::default())
                } else {
                    CompressConfig::Off
                })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<CompressConfig, A::Error> {
                CompressTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(CompressConfig::On)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// One Cache-Control rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheRuleConfig {
    pub(crate) glob: String,
    pub(crate) value: String,
}

/// `proxy = { ... }`: a reverse proxy to `upstreams`. Every key but `upstreams` is
/// optional; absent means scb-proxy's default (see `config/example.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProxyConfig {
    /// `"host:port"` or `{ addr = "host:port", weight = 2 }`; at least one.
    pub(crate) upstreams: Spanned<Vec<Spanned<UpstreamConfig>>>,
    /// `round_robin`, `least_conn`, `random_two` or `hash`.
    pub(crate) balance: Option<Spanned<String>>,
    /// With `balance = "hash"`: `client_ip` (absent) or `header:NAME`.
    pub(crate) hash_key: Option<Spanned<String>>,
    /// Strip the route's `prefix` from the path sent upstream (only on a `prefix` route).
    pub(crate) strip_prefix: Option<Spanned<bool>>,
    /// Send the client's `Host` (true) or the upstream's `host:port`.
    pub(crate) preserve_host: Option<bool>,
    /// Networks whose `X-Forwarded-*` fields are kept and appended to.
    pub(crate) trusted_proxies: Option<Vec<Spanned<String>>>,
    pub(crate) connect_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) response_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) idle_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) try_timeout: Option<Spanned<HumanDuration>>,
    /// Largest request body passed upstream.
    pub(crate) max_body: Option<ByteSize>,
    /// Tries per request, counting the first: 1 to 8.
    pub(crate) max_tries: Option<Spanned<usize>>,
    /// Idle keep-alive connections kept per upstream and worker.
    pub(crate) max_idle: Option<usize>,
    pub(crate) pool_idle_timeout: Option<Spanned<HumanDuration>>,
    /// Largest upstream response head.
    pub(crate) max_response_head: Option<Spanned<ByteSize>>,
    /// `passive = { max_fails = 3, fail_timeout = "10s" }`.
    pub(crate) passive: Option<PassiveConfig>,
    /// `health = { path = "/healthz", ... }`: active health checks; absent means none.
    pub(crate) health: Option<HealthConfig>,
    /// On-the-fly compression of compressible responses the upstream did not encode.
    pub(crate) compress: Option<Spanned<CompressConfig>>,
    /// `"v1"` or `"v2"`: each upstream connection begins with a PROXY header naming the
    /// client.
    pub(crate) proxy_protocol: Option<Spanned<String>>,
    /// Send a verified client certificate's subject and names upstream.
    pub(crate) forward_client_cert: Option<bool>,
    /// For `https://` upstreams: the CAs (PEM) their certificates are verified against;
    /// absent means the system's roots.
    pub(crate) ca_file: Option<Spanned<std::path::PathBuf>>,
    /// A certificate chain and key (PEM) presented to upstreams that ask (mutual TLS).
    pub(crate) client_cert: Option<Spanned<std::path::PathBuf>>,
    pub(crate) client_key: Option<Spanned<std::path::PathBuf>>,
    /// Accept any upstream certificate; logged as a warning.
    pub(crate) insecure_skip_verify: Option<bool>,
    /// For `https://` upstreams: the SHA-256 of the one certificate (or, in a list, the
    /// certificates) trusted, in place of roots: how a self-signed upstream is trusted.
    pub(crate) pin: Option<Spanned<PinsConfig>>,
    /// `"http1"` (absent), `"h2"` (HTTP/2 over TLS) or `"h2c"` (HTTP/2 in the clear).
    pub(crate) protocol: Option<Spanned<String>>,
}

/// `fastcgi = { upstreams = ["unix:/run/php/php8.2-fpm.sock"], root = "/srv/app/public" }`.
/// Every key but `upstreams` and `root` is optional; absent means scb-proxy's FastCGI
/// default (see `config/example.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FastCgiConfig {
    /// `"host:port"`, `"unix:/path"` or `{ addr, weight }`; at least one.
    pub(crate) upstreams: Spanned<Vec<Spanned<UpstreamConfig>>>,
    /// The directory of the scripts (and of the files served beside them).
    pub(crate) root: Spanned<std::path::PathBuf>,
    /// The script of a directory; absent means `index.php`.
    pub(crate) index: Option<Spanned<String>>,
    /// The extensions that are scripts; absent means `[".php"]`.
    pub(crate) extensions: Option<Spanned<Vec<String>>>,
    pub(crate) balance: Option<Spanned<String>>,
    pub(crate) hash_key: Option<Spanned<String>>,
    pub(crate) connect_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) response_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) idle_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) try_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) pool_idle_timeout: Option<Spanned<HumanDuration>>,
    /// Largest request body passed on.
    pub(crate) max_body: Option<ByteSize>,
    /// Largest body of unknown length gathered to learn its length (411 over it).
    pub(crate) max_unsized_body: Option<Spanned<ByteSize>>,
    /// Tries per request (only failed connects move on): 1 to 8.
    pub(crate) max_tries: Option<Spanned<usize>>,
    /// Idle connections kept per upstream and worker; each holds a php-fpm child.
    pub(crate) max_idle: Option<usize>,
    pub(crate) max_response_head: Option<Spanned<ByteSize>>,
    /// `FCGI_KEEP_CONN`; absent means false (each kept connection holds a php-fpm child).
    pub(crate) keep_conn: Option<bool>,
    /// How long a worker keeps a script lookup; absent means 1 s, `"0s"` looks every time.
    pub(crate) script_cache: Option<HumanDuration>,
    pub(crate) passive: Option<PassiveConfig>,
}

/// `pin = "AB:CD:..."` or `pin = ["AB:..", "CD:.."]` (two during a rotation).
#[derive(Debug)]
pub(crate) struct PinsConfig(pub(crate) Vec<String>);

impl<'de> Deserialize<'de> for PinsConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PinsConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a SHA-256 fingerprint, or a list of them")
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<PinsConfig, E> {
                Ok(PinsConfig(vec![s.to_owned()]))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<PinsConfig, A::Error> {
                Vec::<String>::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(PinsConfig)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// One entry of `upstreams`: a bare `"host:port"`, or a table with a weight.
#[derive(Debug)]
pub(crate) enum UpstreamConfig {
    /// `"host:port"`, weight 1.
    Addr(String),
    /// `{ addr = "host:port", weight = 2 }`.
    Weighted(WeightedUpstreamConfig),
}

/// `{ addr = "host:port", weight = 2 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WeightedUpstreamConfig {
    pub(crate) addr: Spanned<String>,
    /// Absent means 1.
    pub(crate) weight: Option<Spanned<u32>>,
}

/// Deserialized by hand rather than `#[serde(untagged)]`: an untagged enum buffers the
/// value and reports only "did not match any variant", losing the unknown key or bad type
/// inside a table (and its position) that the table's own deserializer names.
impl<'de> Deserialize<'de> for UpstreamConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = UpstreamConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("\"host:port\" or { addr = \"host:port\", weight = N }")
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<UpstreamConfig, E> {
                Ok(UpstreamConfig::Addr(s.to_owned()))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<UpstreamConfig, A::Error> {
                WeightedUpstreamConfig::deserialize(serde::de::value::MapAccessDeserializer::new(
                    map,
                ))
                .map(UpstreamConfig::Weighted)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `passive = { ... }`: upstreams whose tries keep failing are skipped for a while.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PassiveConfig {
    /// Failed tries in a row that take an upstream out; 0 turns passive health off.
    pub(crate) max_fails: Option<u32>,
    /// How long it stays out.
    pub(crate) fail_timeout: Option<Spanned<HumanDuration>>,
    /// Whether an invalid response counts as a failed try (default false).
    pub(crate) count_invalid_responses: Option<bool>,
}

/// `health = { ... }`: a `GET path` to every upstream every `interval`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HealthConfig {
    pub(crate) path: Spanned<String>,
    pub(crate) interval: Option<Spanned<HumanDuration>>,
    pub(crate) timeout: Option<Spanned<HumanDuration>>,
    pub(crate) passes: Option<Spanned<u32>>,
    pub(crate) fails: Option<Spanned<u32>>,
}

/// `respond = { ... }`: a fixed response.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RespondConfig {
    /// Absent means 200.
    pub(crate) status: Option<Spanned<u16>>,
    #[serde(default)]
    pub(crate) body: String,
    pub(crate) content_type: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<Spanned<String>, Spanned<String>>,
    /// On-the-fly compression of the body, for clients that accept it.
    pub(crate) compress: Option<Spanned<CompressConfig>>,
}

impl Config {
    /// Deserializes `source`; the result is well-typed but not yet checked (see
    /// [`Plan`](crate::plan::Plan)).
    pub(crate) fn parse(source: &str) -> Result<Self, Located> {
        toml::from_str(source).map_err(|e| Located::from_toml(&e, source))
    }

    /// Makes every relative file path of the config (`server.pid_file`, a listener's
    /// `cert` and `key`, a static route's `root`) relative to `dir`, the directory of the
    /// config file, as nginx and Caddy do with theirs: the same file means the same files
    /// from any working directory, and errors name them absolutely. `fallback` and
    /// `not_found` stay names beneath their root.
    pub(crate) fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |path: &mut std::path::PathBuf| {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        };
        for path in [&mut self.server.pid_file, &mut self.server.upgrade_socket]
            .into_iter()
            .flatten()
        {
            resolve(path);
        }
        if let AccessConfig::On(access) = &mut self.log.access
            && let Some(path) = &mut access.path
        {
            resolve(path);
        }
        if let Some(tracing) = &mut self.tracing
            && let Some(root) = &mut tracing.get_mut().ca_root
        {
            resolve(root.get_mut());
        }
        for listen in &mut self.listen {
            if let ListenAddr::Unix(path) = listen.addr.get_mut() {
                resolve(path);
            }
            let Some(tls) = &mut listen.tls else { continue };
            let tls = tls.get_mut();
            for path in [&mut tls.cert, &mut tls.key, &mut tls.client_ca]
                .into_iter()
                .flatten()
            {
                resolve(path.get_mut());
            }
            if let Some(acme) = &mut tls.acme {
                let acme = acme.get_mut();
                if let Some(dir) = acme.state_dir.as_mut() {
                    resolve(dir.get_mut());
                }
                if let Some(root) = &mut acme.ca_root {
                    resolve(root.get_mut());
                }
                if let Some(dns) = &mut acme.dns {
                    resolve(dns.get_mut().rfc2136.get_mut().tsig_secret_file.get_mut());
                }
            }
            if let Some(on_demand) = &mut tls.on_demand {
                let on_demand = on_demand.get_mut();
                if let Some(dir) = on_demand.state_dir.as_mut() {
                    resolve(dir.get_mut());
                }
                if let Some(root) = &mut on_demand.ca_root {
                    resolve(root.get_mut());
                }
            }
            for cert in &mut tls.certs {
                let cert = cert.get_mut();
                resolve(&mut cert.cert);
                resolve(&mut cert.key);
            }
        }
        let site_routes = self
            .site
            .iter_mut()
            .flat_map(|s| s.get_mut().route.iter_mut());
        for route in self.route.iter_mut().chain(site_routes) {
            let route = route.get_mut();
            if let Some(files) = &mut route.static_files {
                resolve(files.get_mut().root.get_mut());
            }
            if let Some(auth) = &mut route.basic_auth {
                resolve(auth.get_mut().users.get_mut());
            }
            if let Some(path) = route.cache.as_mut().and_then(|c| c.get_mut().path.as_mut()) {
                resolve(path.get_mut());
            }
            if let Some(proxy) = &mut route.proxy {
                let proxy = proxy.get_mut();
                for path in [
                    &mut proxy.ca_file,
                    &mut proxy.client_cert,
                    &mut proxy.client_key,
                ]
                .into_iter()
                .flatten()
                {
                    resolve(path.get_mut());
                }
            }
        }
        for site in &mut self.site {
            for page in site
                .get_mut()
                .error_pages
                .iter_mut()
                .flat_map(|p| p.values_mut())
            {
                resolve(page.get_mut());
            }
        }
    }
}
