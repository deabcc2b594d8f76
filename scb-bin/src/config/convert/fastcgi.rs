//! `fastcgi = { ... }` onto scb-proxy's [`FastCgiBuilder`].

use scb_proxy::fastcgi::{FastCgi, FastCgiBuilder};
use toml::Spanned;

use super::{MAX_TRIES, balance, nonzero, nonzero_duration, upstreams};
use crate::config::{ByteSize, FastCgiConfig, HumanDuration, Located};

impl TryFrom<&FastCgiConfig> for FastCgiBuilder {
    type Error = Located;

    fn try_from(config: &FastCgiConfig) -> Result<Self, Located> {
        let root = config.root.get_ref();
        if !root.is_absolute() {
            return Err(Located::at(
                &config.root,
                "root",
                "must be an absolute path",
            ));
        }
        let mut b = FastCgi::builder(upstreams(&config.upstreams)?, root)
            .balance(balance(config.balance.as_ref(), config.hash_key.as_ref())?);
        if let Some(index) = &config.index {
            if index.get_ref().is_empty() || index.get_ref().contains('/') {
                return Err(Located::at(index, "index", "must be a file name"));
            }
            b = b.index(index.get_ref().clone());
        }
        if let Some(extensions) = &config.extensions {
            let list = extensions.get_ref();
            if list.is_empty() || list.iter().any(|e| !e.starts_with('.') || e.len() < 2) {
                return Err(Located::at(
                    extensions,
                    "extensions",
                    "must be a list of extensions with their dot, such as [\".php\"]",
                ));
            }
            b = b.extensions(list.iter().cloned());
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
        if let Some(ByteSize(bytes)) = config.max_body {
            b = b.max_body(Some(bytes));
        }
        if let Some(max) = &config.max_unsized_body {
            let bytes = usize::try_from(max.get_ref().0)
                .map_err(|_| Located::at(max, "max_unsized_body", "too large"))?;
            b = b.max_unsized_body(bytes);
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
        if let Some(max) = config.max_idle {
            b = b.max_idle_per_upstream(max);
        }
        if let Some(head) = &config.max_response_head {
            let bytes = usize::try_from(head.get_ref().0)
                .map_err(|_| Located::at(head, "max_response_head", "too large"))?;
            b = b.max_response_head(nonzero(head, bytes, "max_response_head")?);
        }
        if let Some(keep) = config.keep_conn {
            b = b.keep_conn(keep);
        }
        if let Some(HumanDuration(valid)) = config.script_cache {
            b = b.script_cache(valid);
        }
        if let Some(passive) = &config.passive {
            b = b.passive_health(
                scb_proxy::PassiveHealth::try_from(passive).map_err(|e| e.within("passive"))?,
            );
        }
        Ok(b)
    }
}
