//! Keep-alive connections to the upstreams, one pool per worker.
//!
//! Why not hyper-util's pooled `Client`: it is built for a multi-threaded runtime (its
//! pool sits behind a lock shared by every thread and spawns its own background tasks),
//! it gives no say over how a stale connection is told apart from a failed request (the
//! retry rules below need that), and it hides which upstream a connection belongs to from
//! the balancer and the health state. The pool here is small: per upstream, a stack of
//! hyper `http1::SendRequest`s, the connection tasks spawned on the worker's own runtime.
//!
//! A connection goes back on the stack as soon as its response head is in, still busy
//! with the body; a checkout takes the most recently used one that hyper says is ready
//! (`is_ready`: its previous exchange is done and it has not seen the upstream close),
//! drops the closed and the expired ones, and leaves the busy ones for later. The stack is
//! bounded by `max_idle`: beyond it the oldest is dropped, which closes it once its
//! current exchange ends.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use scb_core::Body;
use tokio::net::TcpStream;

use crate::error::ProxyError;
use crate::upstream::Upstream;

/// Settings of a pool.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolConfig {
    pub(crate) max_idle: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_response_head: usize,
}

/// A connection checked out of the pool, or new.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) sender: SendRequest<Body>,
    /// Whether it has carried a request before: a failure on a reused connection may be
    /// the upstream closing it while idle, which a retry answers.
    pub(crate) reused: bool,
}

#[derive(Debug)]
struct Pooled {
    sender: SendRequest<Body>,
    since: Instant,
}

/// The connections of one worker to each upstream (indexed like the upstream list).
#[derive(Debug)]
pub(crate) struct Pool {
    slots: Box<[Mutex<Vec<Pooled>>]>,
    config: PoolConfig,
}

impl Pool {
    pub(crate) fn new(upstreams: usize, config: PoolConfig) -> Self {
        Self {
            slots: (0..upstreams).map(|_| Mutex::new(Vec::new())).collect(),
            config,
        }
    }

    /// A ready pooled connection to upstream `index`, if there is one.
    pub(crate) fn checkout(&self, index: usize) -> Option<Conn> {
        let now = Instant::now();
        let mut slot = self.slots[index].lock().unwrap_or_else(|e| e.into_inner());
        let mut i = slot.len();
        while i > 0 {
            i -= 1;
            let pooled = &slot[i];
            if pooled.sender.is_closed()
                || now.duration_since(pooled.since) > self.config.idle_timeout
            {
                slot.swap_remove(i);
                continue;
            }
            if pooled.sender.is_ready() {
                let pooled = slot.swap_remove(i);
                return Some(Conn {
                    sender: pooled.sender,
                    reused: true,
                });
            }
        }
        None
    }

    /// Puts a connection back once its request has its response head.
    pub(crate) fn checkin(&self, index: usize, sender: SendRequest<Body>) {
        if sender.is_closed() || self.config.max_idle == 0 {
            return;
        }
        let mut slot = self.slots[index].lock().unwrap_or_else(|e| e.into_inner());
        if slot.len() >= self.config.max_idle {
            slot.remove(0);
        }
        slot.push(Pooled {
            sender,
            since: Instant::now(),
        });
    }

    /// Connects to `upstream`: TCP with `TCP_NODELAY`, the HTTP/1.1 handshake, and the
    /// connection task spawned on the current runtime (the worker's own thread under
    /// scb's server).
    pub(crate) async fn connect(&self, upstream: &Upstream) -> Result<Conn, ProxyError> {
        let stream = tokio::time::timeout(
            self.config.connect_timeout,
            TcpStream::connect(upstream.authority().as_str()),
        )
        .await
        .map_err(|_| ProxyError::ConnectTimeout)?
        .map_err(ProxyError::Connect)?;
        // Requests and responses are written whole; Nagle would only hold the last segment.
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::Builder::new()
            .max_buf_size(self.config.max_response_head.max(8192))
            .max_header_size(self.config.max_response_head)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ProxyError::Protocol(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(Conn {
            sender,
            reused: false,
        })
    }
}
