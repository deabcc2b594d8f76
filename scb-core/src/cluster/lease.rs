//! [`Lease`]: a lock in Redis held for a while, renewed while its work goes on, with a
//! fencing token that Redis itself checks before a holder's writes.
//!
//! The holder's own view of its lease is a deadline: the time of the last successful
//! renewal plus the lease, less a margin for clock rate and the round trip. Work done
//! under [`Lease::guard`] is dropped when that deadline passes, before Redis would give
//! the lock to another instance; and a write made by a holder that lost the lock anyway
//! (a pause longer than the lease) is refused by Redis ([`Lease::hset_fenced`] compares
//! the token in the same script that writes).

use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use super::scripts::{ACQUIRE, FENCED_HSET, RELEASE, RENEW};
use super::{Cluster, ClusterError};

/// The lease ran out (or was taken over) before the guarded work ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the lease ran out before the work was done")]
pub struct LeaseLost;

/// A lock held in Redis, from [`Cluster::acquire`]: renewed while held, with a fencing
/// token Redis checks before the holder's writes ([`hset_fenced`](Self::hset_fenced)),
/// and a deadline (the last renewal plus the lease, less a margin) past which
/// [`guard`](Self::guard) drops the holder's work, before another instance can take the
/// lock. Dropping it stops the renewals (the lock then expires);
/// [`release`](Self::release) gives it up at once.
#[derive(Debug)]
pub struct Lease {
    cluster: Cluster,
    lock: String,
    token: String,
    fence: u64,
    valid_until: watch::Receiver<Instant>,
    renewer: tokio::task::AbortHandle,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// What is taken off a lease for the holder's own deadline: the call's round trip and
/// clock drift over the lease (a tenth of it, at least 100 ms).
fn margin(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_millis(100))
}

impl Cluster {
    /// Takes the lock `name` (a key under the prefix) for `lease`, renewed every third
    /// of it until the [`Lease`] is released or dropped; `None` when another instance
    /// holds it.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached: then nobody can know who holds the lock.
    pub async fn acquire(
        &self,
        name: &str,
        lease: Duration,
    ) -> Result<Option<Lease>, ClusterError> {
        let lock = self.key(name);
        let fence_key = self.key("fence");
        let owner = self.instance().to_owned();
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
        let started = Instant::now();
        let answer: Vec<Value> = {
            let lock = lock.clone();
            self.run("lease", None, move |mut conn| async move {
                ACQUIRE
                    .key(lock)
                    .key(fence_key)
                    .arg(owner)
                    .arg(lease_ms)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?
        };
        let (taken, fence, token) = match answer.as_slice() {
            [Value::Int(taken), Value::Int(fence), token] => {
                (*taken == 1, u64::try_from(*fence).unwrap_or(0), text(token))
            }
            _ => return Err(unexpected("the lock script's answer")),
        };
        if !taken {
            tracing::debug!(lock, holder = token, "lock held by another instance");
            return Ok(None);
        }
        let (deadline, valid_until) = watch::channel(started + lease - margin(lease));
        let renewer = {
            let cluster = self.clone();
            let lock = lock.clone();
            let token = token.clone();
            self.inner.runtime.spawn(async move {
                renew(cluster, lock, token, lease, deadline).await;
            })
        };
        Ok(Some(Lease {
            cluster: self.clone(),
            lock,
            token,
            fence,
            valid_until,
            renewer: renewer.abort_handle(),
        }))
    }
}

/// Renews the lease every third of it, moving the holder's deadline; stops when the lock
/// is found to be another's (the deadline then moves to now).
async fn renew(
    cluster: Cluster,
    lock: String,
    token: String,
    lease: Duration,
    deadline: watch::Sender<Instant>,
) {
    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
    loop {
        tokio::time::sleep(lease / 3).await;
        let started = Instant::now();
        let (lock, token) = (lock.clone(), token.clone());
        let renewed: Result<i64, _> = cluster
            .run("lease", None, move |mut conn| async move {
                RENEW
                    .key(lock)
                    .arg(token)
                    .arg(lease_ms)
                    .invoke_async(&mut conn)
                    .await
            })
            .await;
        match renewed {
            Ok(1) => {
                deadline.send_replace(started + lease - margin(lease));
            }
            Ok(_) => {
                tracing::warn!("a lease was taken over before it ran out");
                deadline.send_replace(Instant::now());
                return;
            }
            // Unknown: the deadline stays, and lapses unless a later renewal succeeds.
            Err(_) => {}
        }
    }
}

impl Lease {
    /// The fencing token: larger for every lease ever taken in this Redis.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The lock's value while this lease holds it (`instance/fence`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the holder's deadline has not passed.
    pub fn is_held(&self) -> bool {
        *self.valid_until.borrow() > Instant::now()
    }

    /// Runs `work` while the lease holds: dropped, with [`LeaseLost`], when the
    /// deadline passes first.
    ///
    /// # Errors
    ///
    /// [`LeaseLost`] when the lease ran out.
    pub async fn guard<F: Future>(&self, work: F) -> Result<F::Output, LeaseLost> {
        let mut valid_until = self.valid_until.clone();
        let lapsed = async move {
            loop {
                let deadline = *valid_until.borrow_and_update();
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {
                        let now_valid_until = *valid_until.borrow();
                        if now_valid_until <= Instant::now() {
                            return;
                        }
                    }
                    changed = valid_until.changed() => {
                        if changed.is_err() {
                            // The renewer is gone: the deadline is final.
                            let last = *valid_until.borrow();
                            tokio::time::sleep_until(last).await;
                            return;
                        }
                    }
                }
            }
        };
        tokio::select! {
            output = work => Ok(output),
            () = lapsed => Err(LeaseLost),
        }
    }

    /// Sets `fields` of the hash `key` (under the prefix) if this lease still holds the
    /// lock, checked by Redis in the same step, and bumps the cluster's `version`
    /// counter. `Ok(None)` when the lock was lost: nothing was written.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached.
    pub async fn hset_fenced(
        &self,
        key: &str,
        fields: Vec<(String, Vec<u8>)>,
    ) -> Result<Option<u64>, ClusterError> {
        let (lock, hash, version) = (
            self.lock.clone(),
            self.cluster.key(key),
            self.cluster.key("version"),
        );
        let token = self.token.clone();
        let written: u64 = self
            .cluster
            .run("lease", None, move |mut conn| async move {
                let mut call = FENCED_HSET.key(lock);
                call.key(hash).key(version).arg(token);
                for (field, value) in fields {
                    call.arg(field).arg(value);
                }
                call.invoke_async(&mut conn).await
            })
            .await?;
        Ok((written > 0).then_some(written))
    }

    /// Gives the lock up now (when this lease still holds it).
    pub async fn release(self) {
        self.renewer.abort();
        let (lock, token) = (self.lock.clone(), self.token.clone());
        let released: Result<i64, _> = self
            .cluster
            .run("lease", None, move |mut conn| async move {
                RELEASE.key(lock).arg(token).invoke_async(&mut conn).await
            })
            .await;
        if let Err(e) = released {
            tracing::debug!(error = %e, "a lease could not be released; it will expire");
        }
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

fn unexpected(what: &'static str) -> ClusterError {
    ClusterError::Redis(redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected answer",
        what.to_owned(),
    )))
}
