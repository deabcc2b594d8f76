//! Config types into scb-core's builders. Each conversion checks what it converts and
//! reports errors with the key relative to its own table.

mod basic_auth;
mod cache;
mod cors;
mod dns01;
mod fastcgi;
mod forward_auth;
mod header_rules;
mod rate_limit;
mod rewrite;

pub(crate) use basic_auth::basic_auth;
pub(crate) use cache::cache_layer;
pub(crate) use cors::cors;
pub(crate) use dns01::dns01;
pub(crate) use forward_auth::forward_auth;
pub(crate) use header_rules::header_rules;
pub(crate) use rate_limit::rate_limit;
pub(crate) use rewrite::rewrite;

use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderName, HeaderValue, StatusCode, header};
use scb_core::respond::Respond;
use scb_core::server::Limits;
use toml::Spanned;

use super::{
    ByteSize, FileCacheConfig, FileCacheTable, HealthConfig, HumanDuration, LimitsConfig, Located,
    PassiveConfig, ProxyConfig, RequestIdConfig, RespondConfig, StaticConfig, UpstreamConfig,
};

impl TryFrom<&LimitsConfig> for Limits {
    type Error = Located;

    fn try_from(config: &LimitsConfig) -> Result<Self, Located> {
        let mut limits = Limits::default();
        if let Some(value) = &config.header_read_timeout {
            limits.header_read_timeout = nonzero_duration(value, "header_read_timeout")?;
        }
        if let Some(value) = &config.body_read_timeout {
            limits.body_read_timeout = nonzero_duration(value, "body_read_timeout")?;
        }
        if let Some(value) = &config.send_timeout {
            limits.send_timeout = nonzero_duration(value, "send_timeout")?;
        }
        if let Some(value) = &config.keep_alive_timeout {
            limits.keep_alive_timeout = nonzero_duration(value, "keep_alive_timeout")?;
        }
        if let Some(value) = &config.max_header_bytes {
            let bytes = usize::try_from(value.get_ref().0)
                .map_err(|_| Located::at(value, "max_header_bytes", "too large"))?;
            limits.max_header_bytes = nonzero(value, bytes, "max_header_bytes")?;
        }
        if let Some(value) = &config.max_headers {
            limits.max_headers = nonzero(value, *value.get_ref(), "max_headers")?;
        }
        if let Some(value) = &config.max_connections {
            limits.max_connections = nonzero(value, *value.get_ref(), "max_connections")?;
        }
        // Zero is meaningful here: no request may have a body.
        if let Some(value) = config.max_body_bytes {
            limits.max_body_bytes = value.0;
        }
        if let Some(value) = &config.handshake_timeout {
            limits.handshake_timeout = nonzero_duration(value, "handshake_timeout")?;
        }
        if let Some(value) = &config.h2_max_concurrent_streams {
            limits.h2_max_concurrent_streams =
                nonzero(value, *value.get_ref(), "h2_max_concurrent_streams")?;
        }
        if let Some(value) = &config.h2_stream_window {
            limits.h2_stream_window = h2_window(value, "h2_stream_window")?;
        }
        if let Some(value) = &config.h2_connection_window {
            limits.h2_connection_window = h2_window(value, "h2_connection_window")?;
        }
        if let Some(value) = &config.h2_max_pending_reset_streams {
            limits.h2_max_pending_reset_streams =
                nonzero(value, *value.get_ref(), "h2_max_pending_reset_streams")?;
        }
        if let Some(value) = &config.h2_max_local_error_reset_streams {
            limits.h2_max_local_error_reset_streams =
                nonzero(value, *value.get_ref(), "h2_max_local_error_reset_streams")?;
        }
        Ok(limits)
    }
}

/// An HTTP/2 flow-control window: RFC 9113 allows 65,535 bytes up to 2^31 - 1.
fn h2_window(value: &Spanned<ByteSize>, key: &str) -> Result<u32, Located> {
    let bytes = value.get_ref().0;
    if !(65_535..=0x7fff_ffff).contains(&bytes) {
        return Err(Located::at(
            value,
            key,
            "must be between 65535 bytes and 2 GiB - 1 (RFC 9113)",
        ));
    }
    Ok(u32::try_from(bytes).unwrap_or(u32::MAX))
}

/// A zero timeout would fail every request at once; nobody means that.
fn nonzero_duration(value: &Spanned<HumanDuration>, key: &str) -> Result<Duration, Located> {
    let duration = value.get_ref().0;
    if duration.is_zero() {
        return Err(Located::at(value, key, "must be greater than zero"));
    }
    Ok(duration)
}

/// A limit of zero would refuse everything.
fn nonzero<T, N: Copy + PartialEq + From<u8>>(
    at: &Spanned<T>,
    n: N,
    key: &str,
) -> Result<N, Located> {
    if n == N::from(0) {
        return Err(Located::at(at, key, "must be at least 1"));
    }
    Ok(n)
}

impl RequestIdConfig {
    /// The header name, `x-request-id` if none is given.
    pub(crate) fn header_name(&self) -> Result<HeaderName, Located> {
        let Some(name) = &self.header else {
            return Ok(scb_core::request_id::X_REQUEST_ID);
        };
        HeaderName::from_bytes(name.get_ref().as_bytes()).map_err(|_| {
            Located::at(
                name,
                "header",
                format_args!("invalid header name {:?}", name.get_ref()),
            )
        })
    }
}

/// Headers the server derives from the response itself; setting them by hand could only
/// contradict the framing it writes.
const FRAMING_HEADERS: [HeaderName; 3] = [
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
];

impl TryFrom<&RespondConfig> for Respond {
    type Error = Located;

    fn try_from(config: &RespondConfig) -> Result<Self, Located> {
        let status = match &config.status {
            None => StatusCode::OK,
            Some(status) => {
                // RFC 9110 15: the classes are 1xx to 5xx; 600-999 parse but mean nothing
                // to a client.
                let code = StatusCode::from_u16(*status.get_ref())
                    .ok()
                    .filter(|code| code.as_u16() < 600)
                    .ok_or_else(|| {
                        Located::at(status, "status", "must be a status code from 200 to 599")
                    })?;
                if code.is_informational() {
                    // A 1xx is never a final response: the client would keep waiting.
                    return Err(Located::at(
                        status,
                        "status",
                        "must not be 1xx (informational)",
                    ));
                }
                if matches!(code, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
                    && !config.body.is_empty()
                {
                    return Err(Located::at(
                        status,
                        "status",
                        format_args!("a {code} response cannot have a body"),
                    ));
                }
                code
            }
        };
        let mut respond = Respond::new(status);
        if let Some(value) = &config.content_type {
            let value = HeaderValue::from_str(value.get_ref())
                .map_err(|_| Located::at(value, "content_type", "invalid header value"))?;
            respond = respond.content_type(value);
        }
        for (name, value) in &config.headers {
            let key = format!("headers.{}", name.get_ref());
            let header = HeaderName::from_bytes(name.get_ref().as_bytes())
                .map_err(|_| Located::at(name, key.as_str(), "invalid header name"))?;
            if FRAMING_HEADERS.contains(&header) {
                return Err(Located::at(
                    name,
                    key,
                    "is set by the server from the response itself",
                ));
            }
            if header == header::CONTENT_TYPE {
                return Err(Located::at(name, key, "set it with `content_type`"));
            }
            let value = HeaderValue::from_str(value.get_ref())
                .map_err(|_| Located::at(value, key.as_str(), "invalid header value"))?;
            respond = respond.header(header, value);
        }
        Ok(respond.body(config.body.clone()))
    }
}

impl TryFrom<&StaticConfig> for scb_static::ServeStatic {
    type Error = Located;

    fn try_from(config: &StaticConfig) -> Result<Self, Located> {
        let mut builder =
            scb_static::ServeStatic::builder(config.root.get_ref()).show_hidden(config.show_hidden);
        if let Some(index) = &config.index {
            let index = index.get_ref();
            if index.contains('/') {
                return Err(Located::at(
                    config
                        .index
                        .as_ref()
                        .unwrap_or(&Spanned::new(0..0, String::new())),
                    "index",
                    "must be a file name, without '/'",
                ));
            }
            builder = if index.is_empty() {
                builder.no_index()
            } else {
                builder.index(index.clone())
            };
        }
        if let Some(codings) = &config.precompressed {
            builder = builder.precompressed(codings.get_ref().iter().cloned());
        }
        if let Some(symlinks) = &config.symlinks {
            builder = builder.symlinks(match symlinks.get_ref().as_str() {
                "beneath" => scb_static::Symlinks::Beneath,
                "none" => scb_static::Symlinks::None,
                _ => {
                    return Err(Located::at(
                        symlinks,
                        "symlinks",
                        "must be \"beneath\" or \"none\"",
                    ));
                }
            });
        }
        for rule in &config.cache_control {
            let r = rule.get_ref();
            builder = builder.cache_control(r.glob.clone(), r.value.clone());
        }
        if let Some(file) = &config.fallback {
            builder = builder.fallback(site_file(file, "fallback")?);
        }
        if let Some(file) = &config.not_found {
            builder = builder.not_found(site_file(file, "not_found")?);
        }
        builder = builder.list_directories(config.list_directories);
        if let Some(cache) = &config.cache {
            builder = match cache.get_ref() {
                FileCacheConfig::Off => builder.no_cache(),
                FileCacheConfig::On(table) => builder.cache(
                    scb_static::OpenFileCache::try_from(table).map_err(|e| e.within("cache"))?,
                ),
            };
        }
        let files = builder.build().map_err(|e| match e {
            scb_static::BuildError::Root { .. } => Located::at(&config.root, "root", e),
            scb_static::BuildError::Coding(_) => match &config.precompressed {
                Some(p) => Located::at(p, "precompressed", e),
                None => Located::at(&config.root, "precompressed", e),
            },
            scb_static::BuildError::CacheControl(ref why) => {
                let rule = why.rule().unwrap_or(0);
                match config.cache_control.get(rule) {
                    Some(entry) => Located::at(entry, format!("cache_control[{rule}]"), e),
                    None => Located::at(&config.root, "cache_control", e),
                }
            }
            scb_static::BuildError::SiteFile { setting, .. } => {
                let at = match setting {
                    "fallback" => config.fallback.as_ref(),
                    _ => config.not_found.as_ref(),
                };
                match at {
                    Some(at) => Located::at(at, setting, e),
                    None => Located::at(&config.root, setting, e),
                }
            }
        })?;
        // The site's own pages must exist now (the root does): a missing one would only show as every
        // fallback path or every 404 turning into the plain 404 later.
        for (key, file) in [
            ("fallback", &config.fallback),
            ("not_found", &config.not_found),
        ] {
            let Some(file) = file else { continue };
            let path = config.root.get_ref().join(file.get_ref());
            if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                return Err(Located::at(
                    file,
                    key,
                    format_args!("no such file: {}", path.display()),
                ));
            }
        }
        Ok(files)
    }
}

/// `fallback` and `not_found` name files beneath `root` as a request path would. A
/// filesystem path (absolute, or climbing out with `..`) there is a misunderstanding, so
/// it is refused rather than read as relative.
fn site_file<'a>(value: &'a Spanned<String>, key: &str) -> Result<&'a str, Located> {
    let name = value.get_ref();
    if name.starts_with('/') {
        return Err(Located::at(
            value,
            key,
            "must be a path relative to root, not an absolute path",
        ));
    }
    if name.split('/').any(|segment| segment == "..") {
        return Err(Located::at(
            value,
            key,
            "must not contain `..`: the file is beneath root",
        ));
    }
    if name
        .split('/')
        .all(|segment| segment.is_empty() || segment == ".")
    {
        return Err(Located::at(value, key, "must name a file beneath root"));
    }
    Ok(name)
}

/// Tries per request, counting the first: scb-proxy's own ceiling (it clamps, the config
/// refuses, so that a value is never silently changed).
const MAX_TRIES: usize = 8;

/// Everything but `strip_prefix`, which needs the route's prefix (see `plan.rs`): the
/// config's settings onto scb-proxy's own builder, each absent one left at its default.
impl TryFrom<&ProxyConfig> for scb_proxy::ReverseProxyBuilder {
    type Error = Located;

    fn try_from(config: &ProxyConfig) -> Result<Self, Located> {
        let mut b = scb_proxy::ReverseProxy::builder(upstreams(&config.upstreams)?)
            .balance(balance(config.balance.as_ref(), config.hash_key.as_ref())?);
        if let Some(trusted) = config.trusted_proxies.as_deref() {
            b = b.trusted_proxies(trusted_proxies(trusted)?);
        }
        if let Some(preserve) = config.preserve_host {
            b = b.preserve_host(preserve);
        }
        let timeout = |value: Option<&Spanned<HumanDuration>>, key: &str| {
            value.map(|v| nonzero_duration(v, key)).transpose()
        };
        if let Some(t) = timeout(config.connect_timeout.as_ref(), "connect_timeout")? {
            b = b.connect_timeout(t);
        }
        if let Some(t) = timeout(config.response_timeout.as_ref(), "response_timeout")? {
            b = b.response_timeout(t);
        }
        if let Some(t) = timeout(config.idle_timeout.as_ref(), "idle_timeout")? {
            b = b.idle_timeout(t);
        }
        if let Some(t) = timeout(config.try_timeout.as_ref(), "try_timeout")? {
            b = b.try_timeout(t);
        }
        if let Some(t) = timeout(config.pool_idle_timeout.as_ref(), "pool_idle_timeout")? {
            b = b.pool_idle_timeout(t);
        }
        // Zero is meaningful here, as in `[limits]`: no request body goes upstream.
        if let Some(ByteSize(bytes)) = config.max_body {
            b = b.max_body(Some(bytes));
        }
        if let Some(tries) = &config.max_tries {
            if !(1..=MAX_TRIES).contains(tries.get_ref()) {
                return Err(Located::at(
                    tries,
                    "max_tries",
                    format_args!("must be from 1 to {MAX_TRIES}"),
                ));
            }
            b = b.max_tries(*tries.get_ref());
        }
        // Zero too: no connection is kept for reuse.
        if let Some(max) = config.max_idle {
            b = b.max_idle_per_upstream(max);
        }
        if let Some(head) = &config.max_response_head {
            let bytes = usize::try_from(head.get_ref().0)
                .map_err(|_| Located::at(head, "max_response_head", "too large"))?;
            b = b.max_response_head(nonzero(head, bytes, "max_response_head")?);
        }
        if let Some(passive) = &config.passive {
            b = b.passive_health(
                scb_proxy::PassiveHealth::try_from(passive).map_err(|e| e.within("passive"))?,
            );
        }
        if let Some(health) = &config.health {
            b = b.active_health(
                scb_proxy::ActiveHealth::try_from(health).map_err(|e| e.within("health"))?,
            );
        }
        let wants_tls = config.ca_file.is_some()
            || config.client_cert.is_some()
            || config.client_key.is_some()
            || config.insecure_skip_verify.is_some()
            || config.pin.is_some();
        if wants_tls {
            let mut tls = scb_proxy::UpstreamTls::new();
            if let Some(ca) = &config.ca_file {
                tls = tls.ca_file(ca.get_ref().clone());
            }
            match (&config.client_cert, &config.client_key) {
                (Some(cert), Some(key)) => {
                    tls = tls.client_cert(cert.get_ref().clone(), key.get_ref().clone());
                }
                (None, None) => {}
                (Some(cert), None) => {
                    return Err(Located::at(
                        cert,
                        "client_key",
                        "`client_cert` needs its `client_key`",
                    ));
                }
                (None, Some(key)) => {
                    return Err(Located::at(
                        key,
                        "client_cert",
                        "`client_key` needs its `client_cert`",
                    ));
                }
            }
            if let Some(skip) = config.insecure_skip_verify {
                tls = tls.insecure_skip_verify(skip);
            }
            if let Some(pins) = &config.pin {
                if pins.get_ref().0.is_empty() {
                    return Err(Located::at(pins, "pin", "an empty list trusts nothing"));
                }
                let mut parsed = Vec::new();
                for (i, pin) in pins.get_ref().0.iter().enumerate() {
                    let key = if pins.get_ref().0.len() == 1 {
                        "pin".to_owned()
                    } else {
                        format!("pin[{i}]")
                    };
                    parsed.push(pin.parse().map_err(|e| Located::at(pins, key, e))?);
                }
                tls = tls.pins(parsed);
            }
            b = b.upstream_tls(tls);
        }
        if let Some(forward) = config.forward_client_cert {
            b = b.forward_client_cert(forward);
        }
        if let Some(protocol) = &config.protocol {
            b = b.protocol(match protocol.get_ref().as_str() {
                "http1" => scb_proxy::UpstreamProtocol::Http1,
                "h2" => scb_proxy::UpstreamProtocol::H2,
                "h2c" => scb_proxy::UpstreamProtocol::H2c,
                _ => {
                    return Err(Located::at(
                        protocol,
                        "protocol",
                        "expected \"http1\", \"h2\" (HTTP/2 over TLS) or \"h2c\" (HTTP/2 in the clear)",
                    ));
                }
            });
        }
        if let Some(version) = &config.proxy_protocol {
            b = b.send_proxy_protocol(match version.get_ref().as_str() {
                "v1" => scb_proxy::ProxyHeader::V1,
                "v2" => scb_proxy::ProxyHeader::V2,
                _ => {
                    return Err(Located::at(
                        version,
                        "proxy_protocol",
                        "expected \"v1\" or \"v2\"",
                    ));
                }
            });
        }
        Ok(b)
    }
}

pub(crate) fn upstreams(
    list: &Spanned<Vec<Spanned<UpstreamConfig>>>,
) -> Result<Vec<scb_proxy::Upstream>, Located> {
    if list.get_ref().is_empty() {
        return Err(Located::at(
            list,
            "upstreams",
            "at least one upstream is required",
        ));
    }
    list.get_ref()
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let key = format!("upstreams[{i}]");
            match entry.get_ref() {
                UpstreamConfig::Addr(addr) => {
                    scb_proxy::Upstream::new(addr).map_err(|e| Located::at(entry, key, e))
                }
                UpstreamConfig::Weighted(w) => {
                    let upstream = scb_proxy::Upstream::new(w.addr.get_ref())
                        .map_err(|e| Located::at(&w.addr, format!("{key}.addr"), e))?;
                    match &w.weight {
                        None => Ok(upstream),
                        // The builder would take 0 as 1; a config that says 0 likely means
                        // "off", which is not what it would get.
                        Some(weight) if *weight.get_ref() == 0 => Err(Located::at(
                            weight,
                            format!("{key}.weight"),
                            "must be at least 1 (remove the upstream to take it out)",
                        )),
                        Some(weight) => Ok(upstream.weight(*weight.get_ref())),
                    }
                }
            }
        })
        .collect()
}

/// `balance` and its `hash_key`, of a `proxy` or `fastcgi` table.
pub(crate) fn balance(
    balance: Option<&Spanned<String>>,
    hash_key_value: Option<&Spanned<String>>,
) -> Result<scb_proxy::Balance, Located> {
    use scb_proxy::{Balance, HashKey};

    let policy = match balance {
        None => Balance::default(),
        Some(balance) => match balance.get_ref().as_str() {
            "round_robin" => Balance::RoundRobin,
            "least_conn" => Balance::LeastConn,
            "random_two" => Balance::RandomTwo,
            "hash" => Balance::Hash(match hash_key_value {
                None => HashKey::ClientIp,
                Some(key) => hash_key(key)?,
            }),
            _ => {
                return Err(Located::at(
                    balance,
                    "balance",
                    "must be \"round_robin\", \"least_conn\", \"random_two\" or \"hash\"",
                ));
            }
        },
    };
    if let Some(key) = hash_key_value
        && !matches!(policy, Balance::Hash(_))
    {
        return Err(Located::at(
            key,
            "hash_key",
            "is only used with balance = \"hash\"",
        ));
    }
    Ok(policy)
}

/// `client_ip` or `header:NAME`.
fn hash_key(key: &Spanned<String>) -> Result<scb_proxy::HashKey, Located> {
    let value = key.get_ref();
    if value == "client_ip" {
        return Ok(scb_proxy::HashKey::ClientIp);
    }
    let Some(name) = value.strip_prefix("header:") else {
        return Err(Located::at(
            key,
            "hash_key",
            "must be \"client_ip\" or \"header:NAME\"",
        ));
    };
    HeaderName::from_bytes(name.as_bytes())
        .map(scb_proxy::HashKey::Header)
        .map_err(|_| {
            Located::at(
                key,
                "hash_key",
                format_args!("invalid header name {name:?}"),
            )
        })
}

/// Each entry a network (`10.0.0.0/8`) or an address; an error names the first bad one.
pub(crate) fn trusted_proxies(
    entries: &[Spanned<String>],
) -> Result<scb_core::client_ip::TrustedProxies, Located> {
    scb_core::client_ip::TrustedProxies::new(entries.iter().map(|e| e.get_ref().as_str())).map_err(
        |bad| {
            Located::at(
                &entries[bad.index],
                format!("trusted_proxies[{}]", bad.index),
                bad,
            )
        },
    )
}

impl TryFrom<&FileCacheTable> for scb_static::OpenFileCache {
    type Error = Located;

    fn try_from(config: &FileCacheTable) -> Result<Self, Located> {
        let mut cache = Self::new();
        if let Some(entries) = &config.entries {
            cache = cache.entries(*entries.get_ref());
        }
        if let Some(max_bytes) = &config.max_bytes {
            let bytes = usize::try_from(max_bytes.get_ref().0)
                .map_err(|_| Located::at(max_bytes, "max_bytes", "too large"))?;
            cache = cache.max_bytes(bytes);
        }
        if let Some(entries) = &config.negative_entries {
            cache = cache.negative_entries(*entries.get_ref());
        }
        if let Some(revalidate) = &config.revalidate {
            cache = cache.revalidate(revalidate.get_ref().0);
        }
        Ok(cache)
    }
}

impl TryFrom<&PassiveConfig> for scb_proxy::PassiveHealth {
    type Error = Located;

    fn try_from(config: &PassiveConfig) -> Result<Self, Located> {
        let mut passive = Self::default();
        if let Some(max_fails) = config.max_fails {
            passive.max_fails = max_fails;
        }
        if let Some(timeout) = &config.fail_timeout {
            passive.fail_timeout = nonzero_duration(timeout, "fail_timeout")?;
        }
        if let Some(count) = config.count_invalid_responses {
            passive.count_invalid_responses = count;
        }
        Ok(passive)
    }
}

impl TryFrom<&HealthConfig> for scb_proxy::ActiveHealth {
    type Error = Located;

    fn try_from(config: &HealthConfig) -> Result<Self, Located> {
        let path = &config.path;
        if !path.get_ref().starts_with('/') {
            return Err(Located::at(path, "path", "must start with '/'"));
        }
        if path.get_ref().contains('#') || path.get_ref().parse::<PathAndQuery>().is_err() {
            return Err(Located::at(
                path,
                "path",
                "must be a URI path and query (no spaces or fragment)",
            ));
        }
        let mut active = Self::new(path.get_ref().clone());
        if let Some(interval) = &config.interval {
            active.interval = nonzero_duration(interval, "interval")?;
        }
        if let Some(timeout) = &config.timeout {
            active.timeout = nonzero_duration(timeout, "timeout")?;
        }
        // The proxy takes 0 as 1; refused here so that the file says what happens.
        if let Some(passes) = &config.passes {
            active.passes = nonzero_count(passes, "passes")?;
        }
        if let Some(fails) = &config.fails {
            active.fails = nonzero_count(fails, "fails")?;
        }
        Ok(active)
    }
}

fn nonzero_count(value: &Spanned<u32>, key: &str) -> Result<u32, Located> {
    match *value.get_ref() {
        0 => Err(Located::at(value, key, "must be at least 1")),
        n => Ok(n),
    }
}

/// `compress = ...` onto scb-static's layer: `None` when off. Keys in errors are relative
/// to the `compress` value.
pub(crate) fn compress_layer(
    config: &super::CompressConfig,
) -> Result<Option<scb_static::compress::CompressLayer>, Located> {
    use scb_static::compress::{CompressLayer, CompressTypes, CompressionLevel};
    let super::CompressConfig::On(table) = config else {
        return Ok(None);
    };
    let mut layer = CompressLayer::new();
    if let Some(ByteSize(bytes)) = table.min_length {
        layer = layer.min_size(bytes);
    }
    if let Some(level) = &table.level {
        let level = match level.get_ref() {
            super::CompressLevelConfig::Named(name) => match name.as_str() {
                "fastest" => CompressionLevel::Fastest,
                "default" => CompressionLevel::Default,
                "best" => CompressionLevel::Best,
                _ => {
                    return Err(Located::at(
                        level,
                        "level",
                        "must be \"fastest\", \"default\", \"best\" or a number",
                    ));
                }
            },
            super::CompressLevelConfig::Number(n) => {
                // gzip takes 0-9, brotli 0-11, zstd up to 22: each algorithm clamps a
                // number to its own range.
                let n = i32::try_from(*n)
                    .ok()
                    .filter(|n| (0..=22).contains(n))
                    .ok_or_else(|| Located::at(level, "level", "must be from 0 to 22"))?;
                CompressionLevel::Precise(n)
            }
        };
        layer = layer.level(level);
    }
    if let Some(types) = &table.types {
        let parsed = CompressTypes::new(types.iter().map(|t| t.get_ref().as_str()))
            .map_err(|bad| Located::at(&types[bad.index], format!("types[{}]", bad.index), bad))?;
        layer = layer.types(parsed);
    }
    Ok(Some(layer))
}
