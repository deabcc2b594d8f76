//! [`Cluster`]: state shared by several scb instances through Redis (feature `cluster`):
//! leases with fencing tokens ([`Lease`]), and the shared buckets of
//! [`RateLimitLayer::shared`](crate::rate_limit::RateLimitLayer::shared).
//!
//! ```no_run
//! use std::time::Duration;
//! use scb_core::cluster::Cluster;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = Cluster::connect("redis://10.0.0.5:6379/0", "scb:")?;
//! // One instance of the fleet renews the certificates at a time.
//! if let Some(lease) = cluster.acquire("lock:acme", Duration::from_secs(30)).await? {
//!     lease.guard(async { /* order, then write with lease.hset_fenced(..) */ }).await?;
//!     lease.release().await;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # One connection, on a thread of its own
//!
//! Every call goes through one [`redis::aio::ConnectionManager`] (one
//! multiplexed connection, reconnected when lost) driven by a current-thread runtime on
//! the `scb-cluster` thread, so that its reader task and its reconnections never run on a
//! worker, and a worker (or the main thread, busy with a reload) never stalls the lease
//! renewals. A call from elsewhere is spawned there and awaited.
//!
//! # When Redis is away
//!
//! Redis is never in the way of a request: each call is bounded by
//! [`op_timeout`](Cluster::op_timeout) (250 ms by default), and after a failure the
//! cluster counts as unavailable for a second, during which calls fail at once
//! ([`ClusterError::Unavailable`]) instead of each waiting for their timeout. Callers fall
//! back to what they can do alone (a rate limit counts locally, a certificate is served
//! from what this instance has) and each fallback is counted in
//! `scb_cluster_unavailable_total{op}`. The connection is not retried inside a call
//! (`number_of_retries = 0`): the next call after the pause reconnects.
//!
//! The URL's password, if any, is never logged: [`Cluster`]'s `Debug` shows the host.

mod buckets;
mod lease;
mod scripts;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

pub use lease::{Lease, LeaseLost};

/// How long the cluster counts as unavailable after a failed call: long enough that a
/// down Redis costs requests nothing, short enough that its return is noticed quickly.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Why a cluster call did not happen or did not succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The Redis URL is not one the client accepts (the URL itself is not repeated: it
    /// may hold a password).
    #[error("not a Redis URL (redis://[:password@]host[:port][/db] or redis+unix:///path): {0}")]
    Url(String),
    /// The cluster thread could not be started.
    #[error("cannot start the cluster thread: {0}")]
    Thread(#[source] std::io::Error),
    /// A call failed a moment ago; calls fail at once until the pause is over.
    #[error("Redis is unavailable (a call failed less than a second ago)")]
    Unavailable,
    /// The call took longer than [`Cluster::op_timeout`].
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered with an error, or the connection failed.
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// A connection to the fleet's Redis; cheap to clone (clones share it). See the
/// [module documentation](self).
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

/// A [`Cluster`] that does not keep its connection open: [`upgrade`](Self::upgrade)
/// gives it back while some `Cluster` still does.
#[derive(Clone, Debug)]
pub struct WeakCluster(std::sync::Weak<Inner>);

impl WeakCluster {
    /// The cluster, if a clone of it is still held.
    pub fn upgrade(&self) -> Option<Cluster> {
        self.0.upgrade().map(|inner| Cluster { inner })
    }
}

struct Inner {
    conn: ConnectionManager,
    runtime: tokio::runtime::Handle,
    prefix: String,
    /// This process's name in lock tokens: random, so that a lease of an earlier run (or
    /// of another instance with the same fence after Redis lost its counter) never
    /// matches.
    instance: String,
    /// `host:port` or the socket path, for logs.
    shown: String,
    epoch: Instant,
    /// Milliseconds from `epoch` before which calls fail at once.
    paused_until: AtomicU64,
    op_timeout: Duration,
    /// Dropped with the last clone: the cluster thread's runtime then ends.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("redis", &self.inner.shown)
            .field("prefix", &self.inner.prefix)
            .field("instance", &self.inner.instance)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster on the Redis at `url` (`redis://[:password@]host[:port][/db]` or
    /// `redis+unix:///path`), every key under `prefix`. Nothing is contacted yet: the
    /// connection is made by the first call, and a Redis that is down now is not an error.
    ///
    /// # Errors
    ///
    /// A URL the client does not accept, or no thread for the connection.
    pub fn connect(url: &str, prefix: impl Into<String>) -> Result<Self, ClusterError> {
        let client = redis::Client::open(url).map_err(|e| ClusterError::Url(e.to_string()))?;
        let shown = match &client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            redis::ConnectionAddr::Unix(path) => format!("unix:{}", path.display()),
            other => format!("{other:?}"),
        };
        let op_timeout = Duration::from_millis(250);
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(op_timeout));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, made) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("scb-cluster".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(ClusterError::Thread(e)));
                        return;
                    }
                };
                // The manager spawns its tasks on the runtime it is made in: this one.
                let conn = runtime.block_on(async {
                    ConnectionManager::new_lazy_with_config(client, config)
                        .map_err(ClusterError::Redis)
                });
                let _ = ready.send(conn.map(|conn| (conn, runtime.handle().clone())));
                // Runs the connection and every spawned call until the last clone goes.
                let _ = runtime.block_on(stopped);
            })
            .map_err(ClusterError::Thread)?;
        let (conn, runtime) = made.recv().map_err(|_| {
            ClusterError::Thread(std::io::Error::other("the cluster thread ended"))
        })??;
        Ok(Self {
            inner: Arc::new(Inner {
                conn,
                runtime,
                prefix: prefix.into(),
                instance: format!("{:016x}", fastrand::u64(..)),
                shown,
                epoch: Instant::now(),
                paused_until: AtomicU64::new(0),
                op_timeout,
                _stop: stop,
            }),
        })
    }

    /// A handle that does not keep the connection open.
    pub fn downgrade(&self) -> WeakCluster {
        WeakCluster(Arc::downgrade(&self.inner))
    }

    /// The key `name` under this cluster's prefix.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.inner.prefix)
    }

    /// Where Redis is (`host:port` or `unix:PATH`), without the URL's password.
    pub fn shown(&self) -> &str {
        &self.inner.shown
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// This process's random name in lock tokens.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The longest a call may take (250 ms): past it, the call fails with
    /// [`ClusterError::Timeout`] and the cluster pauses.
    pub fn op_timeout(&self) -> Duration {
        self.inner.op_timeout
    }

    /// Whether calls are being made (no failure in the last second).
    pub fn is_available(&self) -> bool {
        self.now_ms() >= self.inner.paused_until.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The field `field` of the hash `key` (under the prefix), if there is one.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), counted under `op`.
    pub async fn hget(
        &self,
        op: &'static str,
        key: &str,
        field: &str,
    ) -> Result<Option<Vec<u8>>, ClusterError> {
        let (key, field) = (self.key(key), field.to_owned());
        self.run(op, None, move |mut conn| async move {
            redis::cmd("HGET")
                .arg(key)
                .arg(field)
                .query_async(&mut conn)
                .await
        })
        .await
    }

    /// Every field of the hash `key` (under the prefix); empty when there is none.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), counted under `op`.
    pub async fn hgetall(
        &self,
        op: &'static str,
        key: &str,
    ) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        let key = self.key(key);
        self.run(op, None, move |mut conn| async move {
            redis::cmd("HGETALL").arg(key).query_async(&mut conn).await
        })
        .await
    }

    /// Sets `fields` of the hash `key` (under the prefix), which then expires after
    /// `ttl` unless set again: for short-lived shared state with no lock of its own.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), counted under `op`.
    pub async fn hset_expiring(
        &self,
        op: &'static str,
        key: &str,
        fields: Vec<(String, Vec<u8>)>,
        ttl: Duration,
    ) -> Result<(), ClusterError> {
        if fields.is_empty() {
            return Ok(());
        }
        let key = self.key(key);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.run(op, None, move |mut conn| async move {
            let mut pipe = redis::pipe();
            pipe.atomic().cmd("HSET").arg(&key);
            for (field, value) in fields {
                pipe.arg(field).arg(value);
            }
            pipe.ignore().cmd("PEXPIRE").arg(&key).arg(ttl_ms).ignore();
            pipe.query_async::<()>(&mut conn).await
        })
        .await
    }

    /// Removes the key `key` (under the prefix).
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), counted under `op`.
    pub async fn del(&self, op: &'static str, key: &str) -> Result<(), ClusterError> {
        let key = self.key(key);
        self.run(op, None, move |mut conn| async move {
            redis::cmd("DEL")
                .arg(key)
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// Runs `task` on the cluster thread (background work that keeps state in Redis: a
    /// renewal loop, a watcher), where it cannot hold up a worker or a reload.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.runtime.spawn(task)
    }

    /// Runs `call` with the connection on the cluster thread, bounded by
    /// [`op_timeout`](Self::op_timeout) (or `timeout`, when longer work is expected).
    /// A failure pauses the cluster and counts `scb_cluster_unavailable_total{op}`.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Unavailable`] at once during a pause; otherwise the call's error
    /// or [`ClusterError::Timeout`].
    pub async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        timeout: Option<Duration>,
        call: F,
    ) -> Result<T, ClusterError>
    where
        F: FnOnce(ConnectionManager) -> Fut + Send + 'static,
        Fut: Future<Output = redis::RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        if !self.is_available() {
            unavailable(op);
            return Err(ClusterError::Unavailable);
        }
        let limit = timeout.unwrap_or(self.inner.op_timeout);
        let conn = self.inner.conn.clone();
        let task = self
            .inner
            .runtime
            .spawn(async move { tokio::time::timeout(limit, call(conn)).await });
        let result = match task.await {
            Ok(Ok(Ok(value))) => return Ok(value),
            Ok(Ok(Err(e))) if !is_transport(&e) => {
                // Redis answered, with an error of its own (a script's, a wrong type):
                // the connection is fine.
                return Err(ClusterError::Redis(e));
            }
            Ok(Ok(Err(e))) => ClusterError::Redis(e),
            Ok(Err(_)) => ClusterError::Timeout(limit),
            Err(join) => ClusterError::Redis(redis::RedisError::from(std::io::Error::other(
                join.to_string(),
            ))),
        };
        let until = self.now_ms() + PAUSE_AFTER_FAILURE.as_millis() as u64;
        if self.inner.paused_until.swap(until, Ordering::Relaxed) <= self.now_ms() {
            tracing::warn!(redis = %self.inner.shown, op, error = %result, "cluster call failed; pausing calls for a second");
        }
        unavailable(op);
        Err(result)
    }
}

/// Counts one fallback of `op` for want of Redis.
fn unavailable(op: &'static str) {
    metrics::counter!("scb_cluster_unavailable_total", "op" => op).increment(1);
}

/// Whether `e` says the connection failed (rather than Redis refusing a command).
fn is_transport(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_refusal() || e.is_unrecoverable_error()
}
