//! The local table: one GCRA timestamp per key, in shards behind their own mutexes, shared
//! by every worker of the process.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use http::Request;
use rustc_hash::FxHashMap;
use tokio::time::Instant;

use super::{Rate, RateKey};
use crate::client_ip::{TrustedProxies, client_ip};
use crate::connection::ConnectInfo;

/// How many shards the table has: enough that workers rarely meet on one lock.
pub(super) const SHARDS: usize = 16;

/// The default bound on keys held (about 2 MiB at most).
pub(super) const DEFAULT_MAX_KEYS: usize = 100_000;

pub(super) struct Limiter {
    /// Nanoseconds per request at the rate (the GCRA's emission interval).
    pub(super) interval: u64,
    /// How far ahead of now a key's bucket may run: `burst` intervals.
    pub(super) tolerance: u64,
    key: RateKey,
    trusted: TrustedProxies,
    hasher: std::hash::RandomState,
    pub(super) per_shard: usize,
    pub(super) shards: Box<[Mutex<Shard>]>,
    epoch: Instant,
}

#[derive(Default)]
pub(super) struct Shard {
    /// Key hash to the time, in nanoseconds from `epoch`, at which the key's bucket is
    /// full again (its "theoretical arrival time").
    pub(super) full_at: FxHashMap<u64, u64>,
}

impl Limiter {
    pub(super) fn new(
        rate: Rate,
        burst: u32,
        max_keys: usize,
        key: RateKey,
        trusted: TrustedProxies,
    ) -> Self {
        let interval = u64::try_from(rate.period.as_nanos() / u128::from(rate.requests))
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst.max(1))),
            key,
            trusted,
            hasher: std::hash::RandomState::new(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            epoch: Instant::now(),
        }
    }

    pub(super) fn key_of<B>(&self, req: &Request<B>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        if let RateKey::Header(name) = &self.key
            && let Some(value) = req.headers().get(name)
        {
            hasher.write_u8(2);
            hasher.write(value.as_bytes());
            return hasher.finish();
        }
        match req.extensions().get::<ConnectInfo>() {
            Some(info) => {
                match client_ip(info.remote.ip(), req.headers(), &self.trusted).to_canonical() {
                    IpAddr::V4(ip) => {
                        hasher.write_u8(4);
                        hasher.write_u32(ip.to_bits());
                    }
                    IpAddr::V6(ip) => {
                        hasher.write_u8(6);
                        hasher.write_u64((ip.to_bits() >> 64) as u64);
                    }
                }
            }
            None => hasher.write_u8(0),
        }
        hasher.finish()
    }

    /// Nanoseconds since the table was made.
    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The request's key as every instance of a fleet writes it (the local hash is
    /// keyed per process): `ip:203.0.113.9`, `ip6:2001:db8:1:2::/64` (the client's
    /// /64), `h:` and the header's value (its first 128 bytes, lossily as text), or
    /// `none` when nothing is known.
    pub(super) fn key_text<B>(&self, req: &Request<B>) -> String {
        if let RateKey::Header(name) = &self.key
            && let Some(value) = req.headers().get(name)
        {
            let bytes = value.as_bytes();
            return format!(
                "h:{}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(128)])
            );
        }
        match req.extensions().get::<ConnectInfo>() {
            Some(info) => {
                match client_ip(info.remote.ip(), req.headers(), &self.trusted).to_canonical() {
                    IpAddr::V4(ip) => format!("ip:{ip}"),
                    IpAddr::V6(ip) => {
                        let net =
                            std::net::Ipv6Addr::from_bits(ip.to_bits() & !u128::from(u64::MAX));
                        format!("ip6:{net}/64")
                    }
                }
            }
            None => "none".to_owned(),
        }
    }

    /// Takes a token for `key`; when there is none, how long until there is.
    pub(super) fn check(&self, key: u64) -> Result<(), Duration> {
        let now = self.now();
        // The high bits pick the shard: the map hashes with the low ones.
        let shard = &self.shards[(key >> 60) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let full_at = shard.full_at.get(&key).map_or(now, |&t| t.max(now));
        let next = full_at.saturating_add(self.interval);
        if next - now > self.tolerance {
            return Err(Duration::from_nanos(next - now - self.tolerance));
        }
        if shard.full_at.len() >= self.per_shard && !shard.full_at.contains_key(&key) {
            shard.make_room(now, self.per_shard);
        }
        shard.full_at.insert(key, next);
        Ok(())
    }
}

impl Shard {
    /// Drops keys whose buckets are full again; then, if the shard is still more than
    /// three quarters full, arbitrary keys down to that (the keys are hashes, so which
    /// ones is not up to a client). Each call frees a quarter of the shard at least, so
    /// the cost per new key stays constant on average.
    pub(super) fn make_room(&mut self, now: u64, capacity: usize) {
        self.full_at.retain(|_, full_at| *full_at > now);
        let keep = capacity - capacity / 4;
        let excess = self.full_at.len().saturating_sub(keep);
        if excess > 0 {
            let dropped: Vec<u64> = self.full_at.keys().take(excess).copied().collect();
            for key in &dropped {
                self.full_at.remove(key);
            }
            metrics::counter!("scb_rate_limit_evicted_total").increment(dropped.len() as u64);
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("interval_ns", &self.interval)
            .field("tolerance_ns", &self.tolerance)
            .field("key", &self.key)
            .field("per_shard", &self.per_shard)
            .finish_non_exhaustive()
    }
}
