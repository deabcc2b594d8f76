//! `[cluster]`: one Redis connection per URL and key prefix in the process, shared by the
//! running plan and the one a reload builds, so that a reload neither reconnects nor
//! leaves a connection behind.

use std::sync::{Mutex, PoisonError};

use scb_core::cluster::{Cluster, WeakCluster};
use toml::Spanned;

use crate::config::{ClusterConfig, Located};

/// The connection made last, by URL and prefix: reused while a plan still holds it.
static LAST: Mutex<Option<(String, String, WeakCluster)>> = Mutex::new(None);

/// The cluster `config` names: the running one when URL and prefix are the same.
pub(crate) fn shared(config: &Spanned<ClusterConfig>) -> Result<Cluster, Located> {
    let table = config.get_ref();
    let url = table.redis.get_ref();
    let prefix = table
        .key_prefix
        .as_ref()
        .map_or("scb:", |p| p.get_ref().as_str());
    if let Some(p) = &table.key_prefix
        && p.get_ref().is_empty()
    {
        return Err(Located::at(
            p,
            "key_prefix",
            "must not be empty: the keys of other programs in the same Redis could clash",
        ));
    }
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((u, p, weak)) = last.as_ref()
        && u == url
        && p == prefix
        && let Some(cluster) = weak.upgrade()
    {
        return Ok(cluster);
    }
    let cluster =
        Cluster::connect(url, prefix).map_err(|e| Located::at(&table.redis, "redis", e))?;
    *last = Some((url.clone(), prefix.to_owned(), cluster.downgrade()));
    Ok(cluster)
}
