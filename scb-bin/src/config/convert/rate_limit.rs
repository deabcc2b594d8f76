//! `rate_limit = { key, rate, burst, max_keys, shared }` into scb-core's rate limit.

use std::sync::Arc;

use http::HeaderName;
use scb_core::client_ip::TrustedProxies;
use scb_core::cluster::Cluster;
use scb_core::rate_limit::{Rate, RateKey, RateLimitLayer};

use crate::config::{Located, RateLimitConfig};

/// `rate_limit = { key, rate, burst, max_keys, shared }`; a shared limit counts in
/// `cluster` under the route's `name`.
pub(crate) fn rate_limit(
    config: &RateLimitConfig,
    trusted: &TrustedProxies,
    cluster: Option<&Cluster>,
    name: &str,
) -> Result<RateLimitLayer, Located> {
    let rate: Rate = config
        .rate
        .get_ref()
        .parse()
        .map_err(|e| Located::at(&config.rate, "rate", e))?;
    let mut layer = RateLimitLayer::new(rate).trusted_proxies(trusted.clone());
    if let Some(key) = &config.key {
        let text = key.get_ref();
        layer = layer.key(if text == "client_ip" {
            RateKey::ClientIp
        } else if let Some(name) = text.strip_prefix("header:") {
            RateKey::Header(HeaderName::try_from(name).map_err(|_| {
                Located::at(key, "key", format_args!("`{name}` is not a header name"))
            })?)
        } else {
            return Err(Located::at(
                key,
                "key",
                "expected `client_ip` or `header:NAME`",
            ));
        });
    }
    if let Some(burst) = &config.burst {
        if *burst.get_ref() == 0 {
            return Err(Located::at(burst, "burst", "must be at least 1"));
        }
        layer = layer.burst(*burst.get_ref());
    }
    if let Some(max) = &config.max_keys {
        if *max.get_ref() == 0 {
            return Err(Located::at(max, "max_keys", "must be at least 1"));
        }
        layer = layer.max_keys(*max.get_ref());
    }
    if let Some(shared) = &config.shared
        && *shared.get_ref()
    {
        let Some(cluster) = cluster else {
            return Err(Located::at(
                shared,
                "shared",
                "a shared limit counts in the fleet's Redis: add a [cluster] table",
            ));
        };
        layer = layer.shared(Arc::new(cluster.clone()), name);
    }
    Ok(layer)
}
