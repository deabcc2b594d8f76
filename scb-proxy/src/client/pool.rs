//! Keep-alive connections to the upstreams, one pool per worker.
//!
//! Why not hyper-util's pooled `Client`: it is built for a multi-threaded runtime (its
//! pool sits behind a lock shared by every thread and spawns its own background tasks),
//! it gives no say over how a stale connection is told apart from a failed request (the
//! retry rules need that), and it hides which upstream a connection belongs to from the
//! balancer and the health state. The pool here is small: per upstream, a stack of idle
//! [`Connection`]s of scb's own client.
//!
//! A connection is out of the pool while it carries an exchange, and goes back when its
//! response body has been read to the end ([`Home`]). A checkout takes the most recently
//! used one, dropping those the upstream has closed and those idle for longer than
//! `idle_timeout`; a checkin closes such connections from the bottom. The stack is bounded
//! by `max_idle`: beyond it the oldest is closed. An idle pool is not swept: with no
//! traffic at all, connections the upstream closed stay half-closed until the next
//! request.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scb_core::server::proxy_protocol;

use crate::client::h2::Multiplexed;
use crate::client::{Connection, Stream};
use crate::error::ProxyError;
use crate::upstream::Upstream;

/// Settings of a pool.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolConfig {
    pub(crate) max_idle: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_response_head: usize,
    /// The PROXY header each new connection begins with, if any.
    pub(crate) proxy_header: Option<proxy_protocol::Version>,
    /// HTTP/2 upstreams: one multiplexed connection each instead of a stack.
    pub(crate) multiplexed: bool,
}

/// Whose a connection is: with PROXY headers sent, the client connection (its address and
/// the address it reached) the header named; `None` for everyone's.
pub(crate) type Owner = Option<(SocketAddr, SocketAddr)>;

/// A connection checked out of the pool, or new.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) connection: Connection,
    /// Whether it has carried a request before: a failure on a reused connection may be
    /// the upstream closing it while idle, which a retry answers.
    pub(crate) reused: bool,
}

#[derive(Debug)]
struct Pooled {
    connection: Connection,
    since: Instant,
    owner: Owner,
}

/// Where a connection goes back when its response body has been read.
#[derive(Debug)]
pub(crate) struct Home {
    pool: Arc<Pool>,
    index: usize,
    owner: Owner,
}

impl Home {
    pub(crate) fn new(pool: &Arc<Pool>, index: usize, owner: Owner) -> Self {
        Self {
            pool: Arc::clone(pool),
            index,
            owner,
        }
    }

    pub(crate) fn put(self, connection: Connection) {
        self.pool.checkin(self.index, connection, self.owner);
    }
}

/// The connections of one worker to each upstream (indexed like the upstream list).
#[derive(Debug)]
pub(crate) struct Pool {
    slots: Box<[Mutex<Vec<Pooled>>]>,
    config: PoolConfig,
    /// With an HTTP/2 protocol, the connections (and `slots` stay empty).
    pub(crate) multiplexed: Option<Multiplexed>,
}

impl Pool {
    pub(crate) fn new(upstreams: usize, config: PoolConfig) -> Self {
        Self {
            slots: (0..upstreams).map(|_| Mutex::new(Vec::new())).collect(),
            config,
            multiplexed: config
                .multiplexed
                .then(|| Multiplexed::new(upstreams, config.connect_timeout)),
        }
    }

    /// An open pooled connection to upstream `index` of `owner`, if there is one (the
    /// top of the stack when no PROXY headers are sent: every connection is everyone's).
    pub(crate) fn checkout(&self, index: usize, owner: Owner) -> Option<Conn> {
        let now = Instant::now();
        let mut slot = self.slots[index].lock().unwrap_or_else(|e| e.into_inner());
        while let Some(at) = slot.iter().rposition(|pooled| pooled.owner == owner) {
            let mut pooled = slot.remove(at);
            if now.duration_since(pooled.since) > self.config.idle_timeout {
                // Everything below it is older still.
                slot.drain(..at);
                return None;
            }
            if !pooled.connection.is_closed() {
                return Some(Conn {
                    connection: pooled.connection,
                    reused: true,
                });
            }
        }
        None
    }

    /// Puts a connection whose exchange is over back.
    pub(crate) fn checkin(&self, index: usize, connection: Connection, owner: Owner) {
        if self.config.max_idle == 0 {
            return;
        }
        let now = Instant::now();
        let mut slot = self.slots[index].lock().unwrap_or_else(|e| e.into_inner());
        // Checkouts take from the top, so the bottom is where connections go stale: the
        // expired ones and those the upstream closed (its keep-alive timeout) are closed
        // here, oldest first, up to the first one still good. Without this a burst's extra
        // connections would sit half-closed until traffic reached down to them.
        while let Some(oldest) = slot.first_mut() {
            if now.duration_since(oldest.since) > self.config.idle_timeout
                || oldest.connection.is_closed()
            {
                slot.remove(0);
            } else {
                break;
            }
        }
        if slot.len() >= self.config.max_idle {
            slot.remove(0);
        }
        slot.push(Pooled {
            connection,
            since: now,
            owner,
        });
    }

    /// Closes the idle connections that have expired or that the upstream closed. A pool
    /// is otherwise only tidied when it is used: FastCGI's sweeps it on a timer, since an
    /// idle FastCGI connection holds a php-fpm child of its own.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        for slot in &self.slots {
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            slot.retain_mut(|pooled| {
                now.duration_since(pooled.since) <= self.config.idle_timeout
                    && !pooled.connection.is_closed()
            });
        }
    }

    /// How long an idle connection is kept.
    pub(crate) fn idle_timeout(&self) -> Duration {
        self.config.idle_timeout
    }

    /// How many idle connections to upstream `index` the pool holds.
    #[cfg(test)]
    pub(crate) fn idle(&self, index: usize) -> usize {
        self.slots[index]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Connects to `upstream` (TCP with `TCP_NODELAY`, TLS over it for `https://`, or its
    /// Unix socket), the PROXY header naming `owner` first when the proxy sends them.
    pub(crate) async fn connect(
        &self,
        upstream: &Upstream,
        owner: Owner,
        tls: Option<&tokio_rustls::TlsConnector>,
    ) -> Result<Conn, ProxyError> {
        let preface = self
            .config
            .proxy_header
            .map(|version| proxy_protocol::header(version, owner));
        let connect = Stream::connect(upstream, tls, preface.as_deref());
        // The TLS handshake counts as part of the connect: a failure sent nothing.
        let stream = tokio::time::timeout(self.config.connect_timeout, connect)
            .await
            .map_err(|_| ProxyError::ConnectTimeout)?
            .map_err(ProxyError::Connect)?;
        Ok(Conn {
            connection: Connection::new(stream, self.config.max_response_head),
            reused: false,
        })
    }
}
