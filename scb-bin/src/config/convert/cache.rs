//! `cache = { max_bytes, max_object, path, disk_max_bytes, key, collapse_timeout,
//! stale_if_error }` into
//! scb-proxy's cache layer.

use scb_proxy::cache::CacheLayer;

use crate::config::{CacheConfig, Located};

/// The disk tier's bound when `path` is set without `disk_max_bytes`: enough for a
/// useful tier, and not the whole disk of a small machine.
const DEFAULT_DISK_MAX_BYTES: u64 = 1 << 30;

/// `cache = { ... }`. Keys in errors are relative to the table.
pub(crate) fn cache_layer(config: &CacheConfig) -> Result<CacheLayer, Located> {
    let max_bytes = config.max_bytes.get_ref().0;
    if max_bytes == 0 {
        return Err(Located::at(
            &config.max_bytes,
            "max_bytes",
            "must be more than 0 (remove `cache` to cache nothing)",
        ));
    }
    let mut layer = CacheLayer::new(max_bytes);
    if let Some(max_object) = &config.max_object {
        let bytes = max_object.get_ref().0;
        if bytes == 0 || bytes > max_bytes {
            return Err(Located::at(
                max_object,
                "max_object",
                format_args!("must be between 1 byte and max_bytes ({max_bytes})"),
            ));
        }
        layer = layer.max_object(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    if let Some(path) = &config.path {
        let max_object = config.max_object.as_ref().map_or(0, |b| b.get_ref().0);
        let disk_max = match &config.disk_max_bytes {
            Some(bytes) if bytes.get_ref().0 == 0 || bytes.get_ref().0 < max_object => {
                return Err(Located::at(
                    bytes,
                    "disk_max_bytes",
                    format_args!("must be more than 0 and at least max_object ({max_object})"),
                ));
            }
            Some(bytes) => bytes.get_ref().0,
            None => DEFAULT_DISK_MAX_BYTES.max(max_object),
        };
        layer = layer.disk(path.get_ref(), disk_max);
    } else if let Some(disk_max) = &config.disk_max_bytes {
        return Err(Located::at(
            disk_max,
            "disk_max_bytes",
            "bounds the disk tier, and there is none: set `path` too",
        ));
    }
    if let Some(key) = &config.key {
        layer = layer
            .key(key.get_ref())
            .map_err(|e| Located::at(key, "key", e))?;
    }
    if let Some(timeout) = &config.collapse_timeout {
        layer = layer.collapse_timeout(timeout.get_ref().0);
    }
    if let Some(window) = &config.stale_if_error {
        layer = layer.stale_if_error(window.get_ref().0);
    }
    Ok(layer)
}
