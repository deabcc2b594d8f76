//! `forward_auth = { upstream, uri, copy_headers, ... }` onto scb-proxy's
//! [`ForwardAuthBuilder`](scb_proxy::forward_auth::ForwardAuthBuilder).

use scb_core::client_ip::TrustedProxies;
use scb_proxy::forward_auth::ForwardAuthLayer;
use toml::Spanned;

use super::nonzero_duration;
use crate::config::{ForwardAuthConfig, Located};

/// The layer for `config`; whose `X-Forwarded-For` is believed is `[server]
/// trusted_proxies` (`trusted`), as everywhere.
pub(crate) fn forward_auth(
    config: &Spanned<ForwardAuthConfig>,
    trusted: &TrustedProxies,
) -> Result<ForwardAuthLayer, Located> {
    let c = config.get_ref();
    let upstream = scb_proxy::Upstream::new(c.upstream.get_ref())
        .map_err(|e| Located::at(&c.upstream, "upstream", e))?;
    let mut copy = Vec::new();
    for (i, name) in c.copy_headers.iter().flatten().enumerate() {
        let parsed = http::HeaderName::from_bytes(name.get_ref().as_bytes()).map_err(|_| {
            Located::at(
                name,
                format!("copy_headers[{i}]"),
                format_args!("{:?} is not a header name", name.get_ref()),
            )
        })?;
        copy.push(parsed);
    }
    let mut b = ForwardAuthLayer::builder([upstream], c.uri.get_ref().as_str())
        .copy_headers(copy)
        .trusted_proxies(trusted.clone());
    if let Some(t) = &c.connect_timeout {
        b = b.connect_timeout(nonzero_duration(t, "connect_timeout")?);
    }
    if let Some(t) = &c.timeout {
        let t = nonzero_duration(t, "timeout")?;
        b = b.try_timeout(t).response_timeout(t);
    }
    if let Some(preserve) = c.preserve_host {
        b = b.preserve_host(preserve);
    }
    b.build().map_err(|e| match e {
        scb_proxy::BuildError::AuthUri(_) => Located::at(&c.uri, "uri", e),
        e => Located::at(&c.upstream, "upstream", e),
    })
}
