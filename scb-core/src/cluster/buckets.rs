//! The cluster as the store of shared rate limits: each bucket one key, `rl:ROUTE:KEY`,
//! updated by one script call (GCRA on Redis's clock, so the instances' clocks do not
//! matter).

use std::time::Duration;

use super::Cluster;
use super::scripts::TAKE;
use crate::rate_limit::{SharedBuckets, SharedUnavailable, TakeFuture, Taken};

impl SharedBuckets for Cluster {
    fn take(&self, key: String, interval: Duration, tolerance: Duration, want: u32) -> TakeFuture {
        let cluster = self.clone();
        let key = self.key(&format!("rl:{key}"));
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        let (interval, tolerance) = (micros(interval), micros(tolerance));
        Box::pin(async move {
            let answer: Result<(u32, i64), _> = cluster
                .run("rate_limit", None, move |mut conn| async move {
                    TAKE.key(key)
                        .arg(interval)
                        .arg(tolerance)
                        .arg(want)
                        .invoke_async(&mut conn)
                        .await
                })
                .await;
            match answer {
                Ok((granted, wait_us)) => Ok(Taken {
                    granted,
                    wait: Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)),
                }),
                Err(_) => Err(SharedUnavailable),
            }
        })
    }
}
