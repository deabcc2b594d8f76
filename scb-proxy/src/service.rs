//! [`ReverseProxy`]: the tower service that forwards a request to an upstream.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::Scheme;
use http::{Method, Request, Response, Uri, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use scb_core::access_log::AccessNotes;
use scb_core::connection::{ClientCertificate, ConnectInfo};
use scb_core::request_id::Id;
use scb_core::spans::SpanNotes;
use scb_core::trace_context::TraceContext;
use scb_core::{Body, BoxError};
use tokio::io::AsyncWriteExt as _;
use tower::Service;

use crate::balance::{Balance, Balancer};
use crate::body::{BodyFault, Guarded, Watched, too_large};
use crate::client::h2;
use crate::client::pool::{Conn, Home, Owner, Pool};
use crate::client::{Connection, Framing, ResponseHead, SendError, Start};
use crate::error::{InvalidResponse, ProxyError};
use crate::forward::{self, Hop};
use crate::health::ActiveHealth;
use crate::settings::{MAX_TRIES, ProxySettings};
use crate::upstream::{InFlight, Upstream, UpstreamState, UpstreamStatus};

/// The client's address, for servers other than scb's (which sets
/// [`ConnectInfo`](scb_core::connection::ConnectInfo)): insert it into a request's extensions
/// and the proxy uses it for `X-Forwarded-For` and client-address hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientIp(pub std::net::IpAddr);

/// Forwards requests to a set of upstream HTTP/1.1 servers.
///
/// Cloning is cheap and clones share everything, the connection pool included (what an
/// axum app on a multi-threaded runtime wants). Under scb's per-core server each worker
/// takes [`with_own_pool`](Self::with_own_pool): the upstream state (health, in-flight
/// counts, balancing) stays shared across workers, the connections do not, so a worker
/// never waits on another's lock or wakes another's thread.
#[derive(Clone)]
pub struct ReverseProxy {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pool: Arc<Pool>,
}

/// What every worker shares.
pub(crate) struct Shared {
    pub(crate) upstreams: Arc<[UpstreamState]>,
    pub(crate) balancer: Balancer,
    pub(crate) settings: ProxySettings,
    pub(crate) active: Option<ActiveHealth>,
    pub(crate) active_started: AtomicBool,
    /// The active checks' task, stopped when the last clone of the proxy goes.
    pub(crate) active_task: std::sync::OnceLock<tokio::task::AbortHandle>,
    /// The TLS client, when some upstream is `https://`.
    pub(crate) tls: Option<tokio_rustls::TlsConnector>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.active_task.get() {
            task.abort();
        }
    }
}

impl fmt::Debug for ReverseProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReverseProxy")
            .field(
                "upstreams",
                &self
                    .shared
                    .upstreams
                    .iter()
                    .map(|u| u.upstream.to_string())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ReverseProxy {
    pub(crate) fn from_parts(shared: Arc<Shared>, pool: Arc<Pool>) -> Self {
        Self { shared, pool }
    }

    /// The settings the proxy was built with, defaults filled in.
    pub fn settings(&self) -> &ProxySettings {
        &self.shared.settings
    }

    /// The upstreams, in the order they were given.
    pub fn upstreams(&self) -> impl Iterator<Item = &Upstream> {
        self.shared.upstreams.iter().map(|state| &state.upstream)
    }

    /// Each upstream's health and in-flight count now, in the order they were given.
    pub fn upstream_status(&self) -> impl Iterator<Item = UpstreamStatus<'_>> {
        let now = Instant::now();
        self.shared
            .upstreams
            .iter()
            .map(move |state| UpstreamStatus::of(state, now))
    }

    /// How requests are spread over the upstreams.
    pub fn balance(&self) -> &Balance {
        self.shared.balancer.policy()
    }

    /// The active health checks, if any.
    pub fn active_health(&self) -> Option<&ActiveHealth> {
        self.shared.active.as_ref()
    }

    /// A proxy sharing this one's upstream state (health, balancing, in-flight counts)
    /// with a connection pool of its own: one per worker of a per-core server.
    #[must_use]
    pub fn with_own_pool(&self) -> Self {
        let config = &self.shared.settings;
        Self {
            shared: Arc::clone(&self.shared),
            pool: Arc::new(Pool::new(self.shared.upstreams.len(), config.pool())),
        }
    }

    /// Starts the active health checks the first time a request comes through, on the
    /// runtime serving it (the checks need a runtime; the builder may run before one).
    fn start_active_checks(&self) {
        let Some(active) = &self.shared.active else {
            return;
        };
        if self.shared.active_started.swap(true, Ordering::Relaxed) {
            return;
        }
        let task = tokio::spawn(crate::probe::run_active(
            Arc::clone(&self.shared.upstreams),
            active.clone(),
            self.shared.settings.send_proxy_protocol,
            self.shared.tls.clone(),
            self.shared.settings.protocol,
        ));
        let _ = self.shared.active_task.set(task.abort_handle());
    }

    /// Checks `req` and addresses it for the upstream: everything a request's tries need
    /// that can be done before the first await.
    ///
    /// Apart from [`forward`](Self::forward) so that the request lives in the proxy's
    /// future once, in the caller's [`Outbound`], which `forward` borrows: as an `async fn`'s
    /// argument it would be kept twice (the argument and the local it moves into) beside its
    /// parts, and the future, 3.5 KiB, was copied whole into its box on every request.
    pub(crate) fn outbound<B>(&self, mut req: Request<B>) -> Result<Outbound, ProxyError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.start_active_checks();
        let shared = &*self.shared;
        let config = &shared.settings;
        // scb's server refuses these already; a proxy inside another server (axum) must
        // not forward a Host that is not `host[:port]` either.
        let valid = |v: &[u8]| scb_core::http1::is_valid_host(v);
        if req
            .uri()
            .authority()
            .is_some_and(|a| !valid(a.as_str().as_bytes()))
            || req
                .headers()
                .get_all(header::HOST)
                .iter()
                .any(|v| !valid(v.as_bytes()))
        {
            return Err(ProxyError::InvalidHost);
        }
        if let Some(max) = config.max_body
            && declared_length(req.headers()).is_some_and(|len| len > max)
        {
            return Err(ProxyError::BodyTooLarge);
        }
        let upgrade = forward::wants_upgrade(req.headers())
            .then(|| req.headers().get(header::UPGRADE).cloned())
            .flatten();
        let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut req));

        let (mut parts, body) = req.into_parts();
        // For the log lines of failed tries (a reference count, not a copy).
        let id = parts.extensions.get::<Id>().cloned();
        let notes = parts.extensions.get::<AccessNotes>().cloned();
        let connect = parts.extensions.get::<ConnectInfo>();
        let secure = connect.is_some_and(|info| info.secure);
        let owner = config
            .send_proxy_protocol
            .and(connect.map(|info| (info.remote, info.local)));
        let client = connect
            .map(|info| info.remote.ip())
            .or_else(|| parts.extensions.get::<ClientIp>().map(|ip| ip.0));
        let key = shared.balancer.key(&parts.headers, client);
        let upgrade = upgrade.filter(|_| !config.protocol.is_h2());
        prepare(&mut parts, config, client, secure, upgrade);
        // A traced request: a sampled one's exchange is a span of its own, and the
        // upstream is told that span, else the server's.
        let span = parts.extensions.get::<SpanNotes>().cloned();
        let told = span.as_ref().map(SpanNotes::upstream_exchange);
        if config.propagate_trace
            && let Some(told) = told.or_else(|| parts.extensions.get::<TraceContext>().cloned())
        {
            told.write_fields(&mut parts.headers);
        }
        let body_empty = body.is_end_stream();
        let body = if body_empty {
            Body::empty()
        } else {
            Body::new(Guarded::new(body, config.idle_timeout, config.max_body))
        };
        let replayable = body_empty && is_idempotent(&parts.method);
        let keep_host = config.preserve_host && parts.headers.contains_key(header::HOST);
        // HTTP/2 names the host in the target; the client's, kept across tries.
        let client_host = (keep_host && self.pool.multiplexed.is_some())
            .then(|| parts.headers.get(header::HOST).cloned())
            .flatten();
        Ok(Outbound {
            request: Some(Request::from_parts(parts, body)),
            client_upgrade,
            id,
            notes,
            span,
            owner,
            key,
            client_host,
            keep_host,
            replayable,
            tried_last: None,
        })
    }

    /// Sends `out`'s request up; `out.tried_last` is set to each upstream tried, so that an
    /// error answer can name the last; the upstream that answered is noted in the access
    /// log's notes, with its status and the time from the first try to its response head
    /// (connects and failed tries count: the time the client waited on upstreams). Also
    /// the forward-auth check's way up, which needs the error as an error (to log it).
    pub(crate) async fn forward(&self, out: &mut Outbound) -> Result<Response<Body>, ProxyError> {
        let shared = &*self.shared;
        let config = &shared.settings;
        let id = out.id.as_ref();
        let span = out.span.as_ref();
        let notes = out.notes.as_ref();
        let mut replayed = false;

        // One clock read for the deadline and the first pick; later picks (after a
        // failure) read it again.
        let started = tokio::time::Instant::now();
        let mut pick_at = Some(started.into_std());
        let deadline = started + config.try_timeout;
        let mut tried = [usize::MAX; MAX_TRIES];
        let mut tries = 0;
        let mut last = ProxyError::NoUpstream;
        while tries < config.max_tries {
            // Passive marks steer, never refuse: with nothing available, the least
            // recently failed untried upstream gets the try.
            let Some(index) = shared
                .balancer
                .pick(
                    &shared.upstreams,
                    out.key,
                    &tried[..tries],
                    pick_at.take().unwrap_or_else(Instant::now),
                )
                .or_else(|| {
                    shared
                        .balancer
                        .least_recently_failed(&shared.upstreams, &tried[..tries])
                })
            else {
                break;
            };
            tried[tries] = index;
            tries += 1;
            out.tried_last = Some(index);
            let state = &shared.upstreams[index];

            if self.pool.multiplexed.is_some() {
                // Stays in `out` across tries: a failed try gives it back whole unless its
                // body went out, and only bodiless requests are sent again.
                let Some(req) = out.request.take() else {
                    break;
                };
                // Boxed: the HTTP/1.1 path's future stays as small as it was.
                let tried =
                    Box::pin(self.try_h2(index, req, deadline, out.client_host.as_ref(), id));
                match tried.await {
                    H2Try::Done(Ok(response)) => {
                        if let Some(span) = span {
                            span.upstream_response(state.upstream.authority(), response.status());
                        }
                        if let Some(notes) = notes {
                            notes.upstream_response(
                                state.upstream.authority(),
                                response.status(),
                                started.elapsed(),
                            );
                        }
                        return Ok(response);
                    }
                    H2Try::Done(Err(e)) => return Err(e),
                    H2Try::Again { req, error } => {
                        out.request = Some(req);
                        match error {
                            Some(e) => {
                                if let Some(span) = span {
                                    span.upstream_retry(state.upstream.authority(), &e);
                                }
                                last = e;
                            }
                            // Not the upstream's failure: the try does not count.
                            None => tries -= 1,
                        }
                        continue;
                    }
                }
            }
            let Some(request) = out.request.as_mut() else {
                break;
            };

            let Conn {
                mut connection,
                reused,
            } = match self.pool.checkout(index, out.owner) {
                Some(conn) => conn,
                // Boxed: with keep-alive upstreams a new connection is the rare case, and
                // its future (1.5 KiB, a TLS handshake's) would otherwise be part of every
                // request's.
                None => match Box::pin(tokio::time::timeout_at(
                    deadline,
                    self.pool
                        .connect(&state.upstream, out.owner, shared.tls.as_ref()),
                ))
                .await
                {
                    Err(_) => return Err(ProxyError::TryTimeout),
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => {
                        // Nothing was sent: another upstream may take it.
                        self.failed(state, &e, id);
                        if let Some(span) = span {
                            span.upstream_retry(state.upstream.authority(), &e);
                        }
                        last = e;
                        continue;
                    }
                },
            };
            if let Some(span) = span {
                span.upstream_connected(state.upstream.authority(), reused);
            }
            forward::set_host(
                request.headers_mut(),
                state.upstream.authority(),
                out.keep_host,
            );
            state.metrics.request();
            let in_flight = InFlight::start(state);
            let sent = tokio::time::Instant::now();
            let limit = deadline.min(sent + config.response_timeout);
            let answer = tokio::time::timeout_at(limit, connection.send(request)).await;
            drop(in_flight);
            match answer {
                Err(_) => return Err(self.timed_out(state, limit == deadline, id)),
                Ok(Ok(head)) => {
                    // One clock read for the upstream's metric and the access log's time.
                    let answered = tokio::time::Instant::now();
                    state.metrics.response(answered - sent);
                    state.health.record_success(&state.metrics);
                    let response = self.client_response(
                        index,
                        out.owner,
                        connection,
                        head,
                        out.client_upgrade.take(),
                        id,
                    );
                    if let Some(span) = span {
                        span.upstream_response(state.upstream.authority(), response.status());
                    }
                    if let Some(notes) = notes {
                        notes.upstream_response(
                            state.upstream.authority(),
                            response.status(),
                            answered - started,
                        );
                    }
                    return Ok(response);
                }
                Ok(Err(SendError::Unsent(e))) => {
                    if reused {
                        // A pooled connection found closed before the request was written
                        // (the upstream closed it while idle): not the upstream's failure,
                        // and the try does not count. Each such connection leaves the
                        // pool, so this ends.
                        tries -= 1;
                        continue;
                    }
                    // A fresh connection closed at once: the upstream is failing.
                    let e = ProxyError::Reset(e);
                    self.failed(state, &e, id);
                    if let Some(span) = span {
                        span.upstream_retry(state.upstream.authority(), &e);
                    }
                    last = e;
                }
                Ok(Err(SendError::Body(e))) => return Err(client_body_error(&e)),
                Ok(Err(SendError::Invalid(why))) => {
                    let e = ProxyError::Protocol(InvalidResponse(why));
                    if config.passive.count_invalid_responses {
                        self.failed(state, &e, id);
                    } else {
                        // That request's 502, not evidence that the upstream is down.
                        self.noted(state, &e, id);
                    }
                    return Err(e);
                }
                Ok(Err(SendError::Io(e))) => {
                    if reused && out.replayable && !replayed {
                        // Failed on a reused connection before any response byte: most
                        // likely the upstream closed it as the request went out. An
                        // idempotent request without a body is safe to send once more.
                        replayed = true;
                        tries -= 1;
                        continue;
                    }
                    let e = ProxyError::Reset(e);
                    self.failed(state, &e, id);
                    return Err(e);
                }
            }
        }
        Err(last)
    }

    /// One try on an HTTP/2 upstream: its multiplexed connection (made if there is none),
    /// the request addressed for HTTP/2, the response head within the timeouts.
    async fn try_h2(
        &self,
        index: usize,
        mut req: Request<Body>,
        deadline: tokio::time::Instant,
        client_host: Option<&HeaderValue>,
        id: Option<&Id>,
    ) -> H2Try {
        let shared = &*self.shared;
        let state = &shared.upstreams[index];
        let Some(multiplexed) = &self.pool.multiplexed else {
            return H2Try::Done(Err(ProxyError::NoUpstream));
        };
        let sender = tokio::time::timeout_at(
            deadline,
            multiplexed.sender(index, &state.upstream, shared.tls.as_ref()),
        )
        .await;
        let h2::Sender { mut send, reused } = match sender {
            Err(_) => return H2Try::Done(Err(ProxyError::TryTimeout)),
            Ok(Ok(sender)) => sender,
            Ok(Err(e)) => {
                // Nothing was sent: another upstream may take it.
                self.failed(state, &e, id);
                return H2Try::Again {
                    req,
                    error: Some(e),
                };
            }
        };
        let authority = match client_host {
            Some(host) => host.clone(),
            None => HeaderValue::from_str(state.upstream.authority().as_str())
                .unwrap_or_else(|_| HeaderValue::from_static("localhost")),
        };
        let scheme = if state.upstream.tls {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        h2::address(&mut req, scheme, &authority, state.upstream.authority());
        // hyper sends the body from its own task and reports a failure of it as a reset
        // stream: the fault is read here, so that the client's own body is not counted
        // against the upstream.
        let fault = Arc::new(BodyFault::default());
        let req = if http_body::Body::is_end_stream(req.body()) {
            req
        } else {
            let watched = Arc::clone(&fault);
            req.map(|body| Body::new(Watched::new(body, watched)))
        };
        state.metrics.request();
        let in_flight = InFlight::start(state);
        let sent = tokio::time::Instant::now();
        let limit = deadline.min(sent + shared.settings.response_timeout);
        let answer = tokio::time::timeout_at(limit, h2::send(&mut send, req)).await;
        drop(in_flight);
        match answer {
            Err(_) => H2Try::Done(Err(self.timed_out(state, limit == deadline, id))),
            Ok(Ok(response)) => {
                state.metrics.response(sent.elapsed());
                state.health.record_success(&state.metrics);
                H2Try::Done(Ok(self.h2_response(index, response)))
            }
            // Nothing went out: the connection had closed under it. On a reused
            // connection, as for a stale HTTP/1.1 one, the next try makes a new one.
            Ok(Err((Some(req), _))) if reused => H2Try::Again { req, error: None },
            Ok(Err((Some(req), e))) => {
                let e = ProxyError::Reset(io::Error::other(e));
                self.failed(state, &e, id);
                H2Try::Again {
                    req,
                    error: Some(e),
                }
            }
            Ok(Err((None, e))) => {
                let e = match fault.too_large() {
                    Some(true) => ProxyError::BodyTooLarge,
                    Some(false) => ProxyError::RequestBody,
                    None => h2_error(e),
                };
                if e.kind().is_some() {
                    self.failed(state, &e, id);
                }
                H2Try::Done(Err(e))
            }
        }
    }

    /// A try that got no response head in time, counted against `state`: the error for the
    /// client, 504 either way (`TryTimeout` when the whole budget ran out).
    fn timed_out(&self, state: &UpstreamState, budget_spent: bool, id: Option<&Id>) -> ProxyError {
        self.failed(state, &ProxyError::ResponseTimeout, id);
        if budget_spent {
            ProxyError::TryTimeout
        } else {
            ProxyError::ResponseTimeout
        }
    }

    /// The client's response from an HTTP/2 upstream's: connection fields removed, the
    /// body (and its trailers) streamed with the idle timeout.
    fn h2_response(
        &self,
        index: usize,
        response: Response<hyper::body::Incoming>,
    ) -> Response<Body> {
        let (mut parts, body) = response.into_parts();
        forward::strip_hop_by_hop(&mut parts.headers);
        parts.version = Version::HTTP_11;
        let body = if http_body::Body::is_end_stream(&body) {
            Body::empty()
        } else {
            Body::new(
                Guarded::new(body, self.shared.settings.idle_timeout, None)
                    .counted(&self.shared.upstreams, index),
            )
        };
        Response::from_parts(parts, body)
    }

    /// Counts a failed try against `state`'s health and metrics; `id` is the request's,
    /// for the log line.
    fn failed(&self, state: &UpstreamState, e: &ProxyError, id: Option<&Id>) {
        self.noted(state, e, id);
        state.health.record_failure(
            Instant::now(),
            &self.shared.settings.passive,
            &state.metrics,
        );
    }

    /// Counts a failed try in `state`'s metrics and the log only.
    fn noted(&self, state: &UpstreamState, e: &ProxyError, id: Option<&Id>) {
        if let Some(kind) = e.kind() {
            state.metrics.error(kind);
        }
        tracing::warn!(
            upstream = %state.upstream,
            request_id = id.map_or("-", Id::as_str),
            error = %e,
            "upstream try failed"
        );
    }

    /// The client's response from the upstream's head: hop-by-hop fields removed, the
    /// body streamed with the idle timeout (or passed whole when it came with the head); a
    /// 101 joins the two upgraded connections.
    fn client_response(
        &self,
        index: usize,
        owner: Owner,
        connection: Connection,
        head: ResponseHead,
        client_upgrade: Option<OnUpgrade>,
        id: Option<&Id>,
    ) -> Response<Body> {
        let ResponseHead {
            mut parts,
            framing,
            keep_alive,
        } = head;
        if framing == Framing::Upgrade {
            if let Some(client) = client_upgrade {
                tokio::spawn(join_upgraded(client, connection));
                return Response::from_parts(parts, Body::empty());
            }
            // A 101 nobody asked for: the connection is of no further use, and the
            // client is told nothing happened.
            let e = ProxyError::Protocol(InvalidResponse(
                "101 to a request that asked for no upgrade",
            ));
            self.failed(&self.shared.upstreams[index], &e, id);
            return e.into_response();
        }
        forward::strip_hop_by_hop(&mut parts.headers);
        let body = match Start::new(connection, framing, keep_alive) {
            Start::Complete { body, reusable } => {
                if let Some(connection) = reusable {
                    self.pool.checkin(index, connection, owner);
                }
                Body::full(body)
            }
            Start::Streaming(body) => Body::new(
                Guarded::new(
                    body.returning_to(Home::new(&self.pool, index, owner)),
                    self.shared.settings.idle_timeout,
                    None,
                )
                .counted(&self.shared.upstreams, index),
            ),
        };
        Response::from_parts(parts, body)
    }
}

/// How an HTTP/2 try ended: with the answer for the client, or with the request back for
/// another try (and the error that try counts, if any).
enum H2Try {
    Done(Result<Response<Body>, ProxyError>),
    Again {
        req: Request<Body>,
        error: Option<ProxyError>,
    },
}

/// Rewrites a request's head for the upstream: origin-form target, HTTP/1.1, hop-by-hop
/// fields out (an upgrade's back in), the forwarding fields.
fn prepare(
    parts: &mut Parts,
    config: &ProxySettings,
    client: Option<std::net::IpAddr>,
    secure: bool,
    upgrade: Option<HeaderValue>,
) {
    // An HTTP/2 client names the host in `:authority`, which the origin-form target below
    // drops: it becomes the `Host` every upstream reads.
    // (The authority first: HTTP/1.1 requests, which carry `Host`, have none, and skip
    // the lookup.)
    if let Some(authority) = parts.uri.authority()
        && !parts.headers.contains_key(header::HOST)
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        parts.headers.insert(header::HOST, host);
    }
    // gRPC needs it to reach an HTTP/2 upstream; it is the one `TE` HTTP/2 allows.
    let te_trailers = config.protocol.is_h2()
        && parts
            .headers
            .get_all(header::TE)
            .iter()
            .any(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    parts.uri = Uri::from(forward::target(
        parts.uri.path_and_query(),
        config.strip_prefix.as_deref(),
    ));
    parts.version = Version::HTTP_11;
    forward::strip_hop_by_hop(&mut parts.headers);
    if te_trailers {
        parts
            .headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Some(upgrade) = upgrade {
        parts.headers.insert(header::UPGRADE, upgrade);
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    forward::add_forwarded(
        &mut parts.headers,
        Hop {
            client,
            proto: if secure { "https" } else { "http" },
            trusted: &config.trusted_proxies,
        },
    );
    // A client's own claims to a certificate never reach the upstream: the fields are
    // scb's to set, from the certificate the handshake verified.
    // (Looked for by a pass over the names first: each removal of a name not in http's
    // table hashes it, 200 instructions, and a client almost never sends them.)
    if scb_core::http1::has_any(&parts.headers, &[CLIENT_CERT_SUBJECT, CLIENT_CERT_SAN]) {
        parts.headers.remove(CLIENT_CERT_SUBJECT);
        parts.headers.remove(CLIENT_CERT_SAN);
    }
    if config.forward_client_cert
        && let Some(cert) = parts.extensions.get::<ClientCertificate>()
    {
        // Both are visible ASCII (scb-tls escapes the subject, and keeps only such names).
        if let Ok(subject) = HeaderValue::try_from(cert.subject()) {
            parts.headers.insert(CLIENT_CERT_SUBJECT, subject);
        }
        if let Ok(sans) = HeaderValue::try_from(cert.sans().join(",")) {
            parts.headers.insert(CLIENT_CERT_SAN, sans);
        }
    }
}

/// The verified client certificate's subject (RFC 4514), with
/// [`forward_client_cert`](crate::ReverseProxyBuilder::forward_client_cert).
pub const CLIENT_CERT_SUBJECT: HeaderName = HeaderName::from_static("x-client-cert-subject");
/// Its subject alternative names, comma-separated.
pub const CLIENT_CERT_SAN: HeaderName = HeaderName::from_static("x-client-cert-san");

/// Whether a request is gRPC (`application/grpc`, `application/grpc+proto`, ...), whose
/// client reads errors from `grpc-status`. gRPC-Web (`application/grpc-web`) is not: it
/// reads its status from the body.
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| {
            v.as_bytes()
                .get(..16)
                .map(|head| (head, &v.as_bytes()[16..]))
        })
        .is_some_and(|(head, rest)| {
            head.eq_ignore_ascii_case(b"application/grpc")
                && matches!(rest.first(), None | Some(b'+' | b';'))
        })
}

/// RFC 9110 §9.2.2.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// The request's `Content-Length`, when it has one valid value.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The error the client gets when its own request body failed the send.
fn client_body_error(e: &BoxError) -> ProxyError {
    if too_large(Some(&**e)) {
        ProxyError::BodyTooLarge
    } else {
        ProxyError::RequestBody
    }
}

/// The error for an HTTP/2 exchange that failed after the request went out: the client's
/// own body (which hyper sends from its own task, and reports here), or the upstream.
fn h2_error(e: hyper::Error) -> ProxyError {
    use std::error::Error as _;
    if too_large(e.source()) {
        ProxyError::BodyTooLarge
    } else if e.is_user() {
        ProxyError::RequestBody
    } else {
        ProxyError::Reset(io::Error::other(e))
    }
}

/// Copies bytes both ways between an upgraded client connection and the upstream's until
/// either side closes.
async fn join_upgraded(client: OnUpgrade, upstream: Connection) {
    let client = match client.await {
        Ok(client) => client,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let (mut upstream, early) = upstream.into_parts();
    // What the upstream sent right behind its 101 was read with the head.
    let copied = async {
        client.write_all(&early).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await
    };
    if let Err(e) = copied.await {
        tracing::debug!(error = %e, "upgraded connection ended");
    }
}

impl<B> Service<Request<B>> for ReverseProxy
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> ResponseFuture {
        // Only HTTP/2 upstreams carry gRPC (it needs trailers): HTTP/1.1 proxies skip the
        // lookup.
        let grpc = self.shared.settings.protocol.is_h2() && is_grpc(req.headers());
        let answer = move |e: ProxyError| {
            if grpc {
                e.into_grpc_response()
            } else {
                e.into_response()
            }
        };
        let mut out = match self.outbound(req) {
            Ok(out) => out,
            Err(e) => {
                return ResponseFuture {
                    inner: Box::pin(std::future::ready(Ok(answer(e)))),
                };
            }
        };
        let proxy = self.clone();
        ResponseFuture {
            inner: Box::pin(async move {
                Ok(proxy.forward(&mut out).await.unwrap_or_else(|e| {
                    // The upstream that failed, for the access log, as for an answer.
                    if let Some(index) = out.tried_last {
                        let upstream = proxy.shared.upstreams[index].upstream.authority();
                        if let Some(notes) = &out.notes {
                            notes.upstream(upstream);
                        }
                        if let Some(span) = &out.span {
                            span.upstream_failed(upstream);
                        }
                    }
                    answer(e)
                }))
            }),
        }
    }
}

/// A request checked and addressed for the upstream ([`ReverseProxy::outbound`]), with
/// what its tries need of the client's.
pub(crate) struct Outbound {
    /// Taken by an HTTP/2 try and given back when the try may be made again: a failed
    /// send leaves it whole unless its body went out, and only bodiless requests are sent
    /// again.
    request: Option<Request<Body>>,
    /// The client's side of an upgrade it asked for.
    client_upgrade: Option<OnUpgrade>,
    /// The request id, for the log lines of failed tries (a reference count, not a copy).
    id: Option<Id>,
    /// The access log's notes, when it records: the upstream is noted there.
    notes: Option<AccessNotes>,
    span: Option<SpanNotes>,
    owner: Owner,
    /// The balancer's hash of the request, if it hashes.
    key: Option<u64>,
    /// The client's Host, kept for an HTTP/2 upstream's target.
    client_host: Option<HeaderValue>,
    keep_host: bool,
    /// An idempotent request without a body: safe to send once more.
    replayable: bool,
    /// The last upstream tried, if any.
    tried_last: Option<usize>,
}

/// Response future of [`ReverseProxy`].
///
/// A boxed `async` block: a request's life (pick, connect, send, maybe retry) is a loop
/// with awaits in it, which a hand-written state machine would spell out at great length
/// for the price of the one allocation saved.
pub struct ResponseFuture {
    inner: Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>,
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
