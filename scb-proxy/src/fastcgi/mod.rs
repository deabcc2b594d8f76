//! [`FastCgi`]: a tower service that runs scripts through FastCGI application servers
//! (php-fpm), beside [`ReverseProxy`] and on its machinery: the same upstream list and
//! balancing, passive health, per-worker keep-alive pools, timeouts and metrics.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use scb_proxy::fastcgi::FastCgi;
//! use scb_proxy::Upstream;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let php = FastCgi::builder(
//!     [Upstream::new("unix:/run/php/php8.2-fpm.sock")?],
//!     "/srv/app/public",
//! )
//! .index("index.php")
//! .response_timeout(Duration::from_secs(60))
//! .build()?;
//! // An axum app: `Router::new().fallback_service(php)`.
//! # let _ = php;
//! # Ok(())
//! # }
//! ```
//!
//! What a request goes through:
//!
//! - **The script** ([`script`](self) rules): the path is split after its first segment
//!   ending in a script extension (`.php`), the rest being `PATH_INFO`; a path ending in
//!   `/` names its directory's index script. The script must exist beneath the root as a
//!   regular file, resolved by the kernel beneath the root's descriptor (`openat2`), or
//!   the answer is 404 and nothing reaches the interpreter: `/uploads/evil.jpg/x.php`
//!   never makes PHP run `evil.jpg`.
//! - **The variables**: CGI/1.1 as php-fpm expects them (`SCRIPT_FILENAME`,
//!   `SCRIPT_NAME`, `PATH_INFO`, `DOCUMENT_ROOT`, `REQUEST_URI` (the client's, from
//!   [`OriginalUri`](scb_core::original_uri::OriginalUri) after a rewrite), `HTTPS`, `REMOTE_ADDR`
//!   through [`TrustedProxies`], each header as `HTTP_*`), never
//!   `HTTP_PROXY` (httpoxy), never a header name with `_` (which could pose as another).
//! - **The body** streams as `FCGI_STDIN` when its length is known; a body without a
//!   length (chunked, or HTTP/2 without `content-length`) is gathered up to
//!   [`max_unsized_body`](FastCgiBuilder::max_unsized_body) first, since
//!   `CONTENT_LENGTH` must be sent before it, and over that is 411.
//! - **The answer**: `Status:` gives the status, a `Location:` without one is 302, the
//!   body streams from `FCGI_STDOUT`; `FCGI_STDERR` lines are logged with the request id.
//!   Connection failures are 502, timeouts 504, as for the proxy.
//! - **Connections** are never multiplexed: php-fpm answers `FCGI_MPXS_CONNS=0`, as does
//!   every common FastCGI server, so one request per connection at a time is what they
//!   all can do. By default each request has a connection of its own, closed after it
//!   (nginx's default too): an idle connection kept open holds a php-fpm child of its
//!   own, and with several workers each keeping some, php-fpm's default pool (5
//!   children) is soon all held idle while a request waits in its backlog until one is
//!   let go. [`keep_conn`](FastCgiBuilder::keep_conn) keeps them (`FCGI_KEEP_CONN`) in
//!   the worker's pool, swept on a timer (4 idle per upstream and worker, 5 s): then keep
//!   `max_idle_per_upstream` times scb's workers below php-fpm's `pm.max_children`.

mod exchange;
mod lookups;
mod params;
mod record;
mod script;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use scb_core::access_log::AccessNotes;
use scb_core::connection::ConnectInfo;
use scb_core::request_id::Id;
use scb_core::spans::SpanNotes;
use scb_core::trace_context::TraceContext;
use scb_core::{Body, BoxError};
use tower::Service;

use crate::body::Guarded;
use crate::client::SendError;
use crate::client::pool::{Conn, Home};
use crate::error::{InvalidResponse, ProxyError};
use crate::service::{ClientIp, ReverseProxy};
use crate::upstream::InFlight;
use crate::{Balance, BuildError, PassiveHealth, ReverseProxyBuilder, TrustedProxies, Upstream};
use exchange::{Head, LogAs, Start};
use lookups::Lookups;
use script::Scripts;

/// Runs scripts beneath a root through FastCGI servers. See the [module](self).
///
/// Cloning is cheap and clones share everything; under scb's per-core server each worker
/// takes [`with_own_pool`](Self::with_own_pool), as with [`ReverseProxy`].
#[derive(Clone)]
pub struct FastCgi {
    proxy: ReverseProxy,
    app: Arc<App>,
    /// This worker's recent script lookups.
    lookups: Arc<Lookups>,
    /// The timer that closes this pool's expired idle connections, started by the first
    /// request (it needs the runtime).
    sweeper: Arc<OnceLock<tokio::task::AbortHandle>>,
}

/// What every worker shares.
#[derive(Debug)]
struct App {
    scripts: Scripts,
    /// `DOCUMENT_ROOT`, as text.
    root: String,
    keep_conn: bool,
    max_unsized_body: usize,
    script_cache: Duration,
}

impl fmt::Debug for FastCgi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FastCgi")
            .field("root", &self.app.root)
            .field("upstreams", &self.proxy)
            .finish_non_exhaustive()
    }
}

impl Drop for FastCgi {
    fn drop(&mut self) {
        // The last clone of this pool's service stops its sweeper.
        if Arc::strong_count(&self.sweeper) == 1
            && let Some(task) = self.sweeper.get()
        {
            task.abort();
        }
    }
}

impl FastCgi {
    /// A builder for the scripts beneath `root`, run by `upstreams` (`host:port` or
    /// `unix:/path`; not `https://`).
    pub fn builder(
        upstreams: impl IntoIterator<Item = Upstream>,
        root: impl AsRef<Path>,
    ) -> FastCgiBuilder {
        FastCgiBuilder {
            proxy: ReverseProxy::builder(upstreams)
                .max_idle_per_upstream(4)
                .pool_idle_timeout(Duration::from_secs(5))
                // A failed connect moves on; nothing that reached an interpreter is sent
                // twice (see `run`).
                .max_tries(3),
            root: root.as_ref().to_owned(),
            index: "index.php".into(),
            extensions: vec![".php".into()],
            keep_conn: false,
            max_unsized_body: 1024 * 1024,
            script_cache: Duration::from_secs(1),
        }
    }

    /// A service sharing this one's upstream state with a connection pool of its own: one
    /// per worker of a per-core server.
    #[must_use]
    pub fn with_own_pool(&self) -> Self {
        Self {
            proxy: self.proxy.with_own_pool(),
            app: Arc::clone(&self.app),
            lookups: Arc::new(Lookups::new(self.app.script_cache)),
            sweeper: Arc::default(),
        }
    }

    /// The root, canonical.
    pub fn root(&self) -> &Path {
        self.app.scripts.root()
    }

    /// The extensions that are scripts (lower case, each with its dot).
    pub fn extensions(&self) -> &[String] {
        self.app.scripts.extensions()
    }

    /// Whether `path` (a request path) ends in a script extension: what `try_files`
    /// candidates are run rather than served as files.
    pub fn is_script(&self, path: &str) -> bool {
        self.app.scripts.is_script(path)
    }

    /// Whether `path` (a request path) may name a script, so that a route serving files
    /// beside its scripts sends it here and never to a file server (which would send the
    /// script's source): it ends in `/`, a segment of it ends in a script extension after
    /// percent-decoding, or it does not decode.
    pub fn names_script(&self, path: &str) -> bool {
        self.app.scripts.names_script(path)
    }

    /// The upstreams, in the order they were given.
    pub fn upstreams(&self) -> impl Iterator<Item = &Upstream> {
        self.proxy.upstreams()
    }

    /// Each upstream's health and in-flight count now, in the order they were given.
    pub fn upstream_status(&self) -> impl Iterator<Item = crate::UpstreamStatus<'_>> {
        self.proxy.upstream_status()
    }

    fn start_sweeper(&self) {
        if self.sweeper.get().is_some() {
            return;
        }
        let pool = Arc::downgrade(&self.proxy.pool);
        let every = self
            .proxy
            .pool
            .idle_timeout()
            .max(Duration::from_millis(100));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                pool.sweep();
            }
        });
        if let Err(task) = self.sweeper.set(task.abort_handle()) {
            task.abort();
        }
    }

    /// Answers `req`: its script run, or 404 when it names none.
    async fn run<B>(self, req: Request<B>, notes: Option<AccessNotes>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.start_sweeper();
        let Some(script) = self.lookups.find(&self.app.scripts, req.uri().path()) else {
            return scb_core::respond::reason(StatusCode::NOT_FOUND);
        };
        let settings = self.proxy.settings();
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let (Some(max), Some(len)) = (settings.max_body, declared)
            && len > max
        {
            return ProxyError::BodyTooLarge.into_response();
        }
        let (mut parts, body) = req.into_parts();
        // A traced request: a sampled one's exchange is a span of its own, and the
        // application is told that span (HTTP_TRACEPARENT), else the
        // server's.
        let span = parts.extensions.get::<SpanNotes>().cloned();
        let told = span.as_ref().map(SpanNotes::upstream_exchange);
        if settings.propagate_trace
            && let Some(told) = told.or_else(|| parts.extensions.get::<TraceContext>().cloned())
        {
            told.write_fields(&mut parts.headers);
        }
        let (body, length) = if body.is_end_stream() {
            (None, 0)
        } else if let Some(len) = declared {
            let body = Guarded::new(body, settings.idle_timeout, settings.max_body);
            (Some(Body::new(body)), len)
        } else {
            match gather(body, self.app.max_unsized_body, settings.idle_timeout).await {
                Ok(Some(bytes)) => {
                    let len = bytes.len() as u64;
                    ((!bytes.is_empty()).then(|| Body::full(bytes)), len)
                }
                Ok(None) => {
                    let mut res = scb_core::respond::reason(StatusCode::LENGTH_REQUIRED);
                    res.headers_mut()
                        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
                    return res;
                }
                Err(e) => return e.into_response(),
            }
        };
        let connect = parts.extensions.get::<ConnectInfo>();
        let peer_ip = connect
            .map(|c| c.remote.ip())
            .or_else(|| parts.extensions.get::<ClientIp>().map(|ip| ip.0));
        let client = peer_ip.map(|peer| {
            let ip =
                scb_core::client_ip::client_ip(peer, &parts.headers, &settings.trusted_proxies);
            match connect {
                Some(c) if c.remote.ip().to_canonical() == ip => c.remote,
                _ => SocketAddr::new(ip, 0),
            }
        });
        let peer = params::Peer {
            client,
            local: connect.map(|c| c.local),
            secure: connect.is_some_and(|c| c.secure),
        };
        let params = params::cgi(&parts, &script, &self.app.root, peer, length);
        let id = parts.extensions.get::<Id>().cloned();
        let key = self.proxy.shared.balancer.key(&parts.headers, peer_ip);
        let mut tried = None;
        let answer = self
            .exchange(&params, body, key, id.as_ref(), span.as_ref(), &mut tried)
            .await
            .map(|(res, time)| (head_length(res, &parts.method), time));
        if let (Some(span), Some(index)) = (&span, tried) {
            let upstream = self.proxy.shared.upstreams[index].upstream.authority();
            match &answer {
                Ok((res, _)) => span.upstream_response(upstream, res.status()),
                Err(_) => span.upstream_failed(upstream),
            }
        }
        if let (Some(notes), Some(index)) = (&notes, tried) {
            let upstream = self.proxy.shared.upstreams[index].upstream.authority();
            match &answer {
                Ok((res, time)) => notes.upstream_response(upstream, res.status(), *time),
                Err(_) => notes.upstream(upstream),
            }
        }
        answer.map_or_else(ProxyError::into_response, |(res, _)| res)
    }

    /// Sends the request to an upstream and reads its answer's head: a failed connect
    /// moves to the next upstream, as does a pooled connection found closed before
    /// anything was written; nothing that reached an application is sent again. The
    /// answer comes with the time from the first try to its head (the access log's).
    async fn exchange(
        &self,
        params: &record::Params,
        body: Option<Body>,
        key: Option<u64>,
        id: Option<&Id>,
        span: Option<&SpanNotes>,
        tried_last: &mut Option<usize>,
    ) -> Result<(Response<Body>, std::time::Duration), ProxyError> {
        let shared = &*self.proxy.shared;
        let settings = &shared.settings;
        let pool = &self.proxy.pool;
        let started = tokio::time::Instant::now();
        let deadline = started + settings.try_timeout;
        let mut tried = [usize::MAX; crate::settings::MAX_TRIES];
        let mut tries = 0;
        let mut last = ProxyError::NoUpstream;
        let mut body = Some(body);
        while tries < settings.max_tries {
            let Some(index) = shared
                .balancer
                .pick(&shared.upstreams, key, &tried[..tries], Instant::now())
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
            *tried_last = Some(index);
            let state = &shared.upstreams[index];
            let Conn {
                mut connection,
                reused,
            } = match pool.checkout(index, None) {
                Some(conn) => conn,
                None => match tokio::time::timeout_at(
                    deadline,
                    pool.connect(&state.upstream, None, None),
                )
                .await
                {
                    Err(_) => return Err(ProxyError::TryTimeout),
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => {
                        self.failed(index, &e, id);
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
            let Some(request_body) = body.take() else {
                break;
            };
            let has_body = request_body.is_some();
            connection.wbuf.clear();
            record::begin_request(&mut connection.wbuf, self.app.keep_conn);
            params.write(&mut connection.wbuf);
            if !has_body {
                record::header(&mut connection.wbuf, record::Kind::Stdin, 0);
            }
            state.metrics.request();
            let in_flight = InFlight::start(state);
            let sent = tokio::time::Instant::now();
            let limit = deadline.min(sent + settings.response_timeout);
            let log = LogAs {
                id: id.cloned(),
                upstream: state.upstream.clone(),
            };
            let keep = self.app.keep_conn;
            let answer = tokio::time::timeout_at(limit, async {
                let whole = exchange::send(&mut connection, request_body).await?;
                exchange::read_head(connection, keep && whole, log).await
            })
            .await;
            drop(in_flight);
            match answer {
                Err(_) => {
                    self.failed(index, &ProxyError::ResponseTimeout, id);
                    return Err(if limit == deadline {
                        ProxyError::TryTimeout
                    } else {
                        ProxyError::ResponseTimeout
                    });
                }
                Ok(Ok(head)) => {
                    let answered = tokio::time::Instant::now();
                    state.metrics.response(answered - sent);
                    state.health.record_success(&state.metrics);
                    return Ok((self.response(index, head), answered - started));
                }
                Ok(Err(SendError::Unsent(e))) if reused && !has_body => {
                    // A kept connection the application closed while idle: the try does
                    // not count, and the request (which nothing read) goes again.
                    tracing::debug!(error = %e, "pooled fastcgi connection was closed");
                    tries -= 1;
                    body = Some(None);
                }
                Ok(Err(SendError::Unsent(e) | SendError::Io(e))) => {
                    let e = ProxyError::Reset(e);
                    self.failed(index, &e, id);
                    return Err(e);
                }
                Ok(Err(SendError::Body(e))) => {
                    return Err(if crate::body::too_large(Some(&*e)) {
                        ProxyError::BodyTooLarge
                    } else {
                        ProxyError::RequestBody
                    });
                }
                Ok(Err(SendError::Invalid(why))) => {
                    let e = ProxyError::Protocol(InvalidResponse(why));
                    self.failed(index, &e, id);
                    return Err(e);
                }
            }
        }
        Err(last)
    }

    fn failed(&self, index: usize, e: &ProxyError, id: Option<&Id>) {
        let state = &self.proxy.shared.upstreams[index];
        if let Some(kind) = e.kind() {
            state.metrics.error(kind);
        }
        tracing::warn!(
            upstream = %state.upstream,
            request_id = id.map_or("-", Id::as_str),
            error = %e,
            "fastcgi try failed"
        );
        state.health.record_failure(
            Instant::now(),
            &self.proxy.shared.settings.passive,
            &state.metrics,
        );
    }

    fn response(&self, index: usize, head: Head) -> Response<Body> {
        let Head {
            status,
            headers,
            body,
        } = head;
        let body = match body {
            Start::Complete { body, reusable } => {
                if let Some(connection) = reusable {
                    self.proxy.pool.checkin(index, connection, None);
                }
                Body::full(body)
            }
            Start::Streaming(body) => Body::new(
                Guarded::new(
                    body.returning_to(Home::new(&self.proxy.pool, index, None)),
                    self.proxy.settings().idle_timeout,
                    None,
                )
                .counted(&self.proxy.shared.upstreams, index),
            ),
        };
        let mut res = Response::new(body);
        *res.status_mut() = status;
        *res.headers_mut() = headers;
        res
    }
}

/// The answer to a HEAD as the client may see it: php-fpm runs the script without
/// sending its output, so without a `Content-Length` of the script's own, the empty body
/// would be taken for the length a GET gets (RFC 9110 8.6 forbids a HEAD's
/// `Content-Length` that differs from the GET's). Its body becomes one of unknown length:
/// the head then has no length, as a GET's streamed answer has none.
fn head_length(res: Response<Body>, method: &http::Method) -> Response<Body> {
    if *method != http::Method::HEAD || res.headers().contains_key(header::CONTENT_LENGTH) {
        return res;
    }
    let (parts, _empty) = res.into_parts();
    let unsized_empty = http_body_util::StreamBody::new(futures_util::stream::empty::<
        Result<http_body::Frame<Bytes>, Infallible>,
    >());
    Response::from_parts(parts, Body::new(unsized_empty))
}

/// A body of unknown length read whole, up to `max` bytes; `None` past that.
async fn gather<B>(body: B, max: usize, idle: Duration) -> Result<Option<Bytes>, ProxyError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let limited = http_body_util::Limited::new(Guarded::new(body, idle, None), max);
    match limited.collect().await {
        Ok(collected) => Ok(Some(collected.to_bytes())),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Ok(None),
        Err(_) => Err(ProxyError::RequestBody),
    }
}

impl<B> Service<Request<B>> for FastCgi
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
        let notes = req.extensions().get::<AccessNotes>().cloned();
        let this = self.clone();
        ResponseFuture {
            inner: Box::pin(async move { Ok(this.run(req, notes).await) }),
        }
    }
}

/// Response future of [`FastCgi`]: boxed, as [`ReverseProxy`]'s is.
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

/// Builds a [`FastCgi`]. The upstream settings are [`ReverseProxyBuilder`]'s, with the
/// defaults it documents except where said here.
#[derive(Clone, Debug)]
#[must_use]
pub struct FastCgiBuilder {
    proxy: ReverseProxyBuilder,
    root: std::path::PathBuf,
    index: String,
    extensions: Vec<String>,
    keep_conn: bool,
    max_unsized_body: usize,
    script_cache: Duration,
}

/// Builder methods handed to the proxy builder underneath.
macro_rules! upstream_setting {
    ($(#[$doc:meta])* $name:ident($ty:ty)) => {
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> Self {
            self.proxy = self.proxy.$name(value);
            self
        }
    };
}

impl FastCgiBuilder {
    /// The script a path ending in `/` names in its directory. Defaults to `index.php`.
    pub fn index(mut self, index: impl Into<String>) -> Self {
        self.index = index.into();
        self
    }

    /// The file extensions that are scripts (each with its `.`, matched in any case); a
    /// request for anything else is 404. Defaults to `.php`.
    pub fn extensions(mut self, extensions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.extensions = extensions.into_iter().map(Into::into).collect();
        self
    }

    /// Ask the application to keep each connection open for the next request
    /// (`FCGI_KEEP_CONN`), saving a connect and an accept per request; each kept
    /// connection holds an application process while idle (see the
    /// [module documentation](self)). Defaults to false.
    pub fn keep_conn(mut self, keep: bool) -> Self {
        self.keep_conn = keep;
        self
    }

    /// The largest request body of unknown length (chunked) gathered to learn its length;
    /// over it the client gets 411 Length Required. Defaults to 1 MiB.
    pub fn max_unsized_body(mut self, bytes: usize) -> Self {
        self.max_unsized_body = bytes;
        self
    }

    /// How long a worker takes a script it found (or did not find) beneath the root as
    /// found, before looking again: a script added or deleted shows within this time.
    /// `Duration::ZERO` looks on every request. Defaults to 1 s (nginx keeps a lookup
    /// for `open_file_cache_valid`, 60 s, when its cache is on).
    pub fn script_cache(mut self, valid: Duration) -> Self {
        self.script_cache = valid;
        self
    }

    upstream_setting! {
        /// How requests are spread over the upstreams. Defaults to round robin.
        balance(Balance)
    }
    upstream_setting! {
        /// Whether the application is told a traced request's place in its trace
        /// (`HTTP_TRACEPARENT`, `HTTP_TRACESTATE`; see
        /// [`ReverseProxyBuilder::propagate_trace`](crate::ReverseProxyBuilder::propagate_trace)).
        /// Defaults to on.
        propagate_trace(bool)
    }
    upstream_setting! {
        /// Connecting to an upstream. Defaults to 5 s.
        connect_timeout(Duration)
    }
    upstream_setting! {
        /// From the request sent to the response head. Defaults to 60 s.
        response_timeout(Duration)
    }
    upstream_setting! {
        /// The longest wait for the next piece of either body. Defaults to 60 s.
        idle_timeout(Duration)
    }
    upstream_setting! {
        /// The largest request body, else 413; `None` for no limit. Defaults to 16 MiB.
        max_body(Option<u64>)
    }
    upstream_setting! {
        /// Peers whose `X-Forwarded-For` names the client for `REMOTE_ADDR`. Defaults to
        /// none.
        trusted_proxies(TrustedProxies)
    }
    upstream_setting! {
        /// When an upstream counts as failing. Defaults to [`PassiveHealth::default`].
        passive_health(PassiveHealth)
    }
    upstream_setting! {
        /// Tries per request, counting the first, 1 to 8: only failed connects move on.
        /// Defaults to 3.
        max_tries(usize)
    }
    upstream_setting! {
        /// All tries of a request together. Defaults to 15 s.
        try_timeout(Duration)
    }
    upstream_setting! {
        /// Idle connections kept per upstream and worker. Defaults to 4 (each holds a
        /// php-fpm child).
        max_idle_per_upstream(usize)
    }
    upstream_setting! {
        /// How long an idle connection is kept. Defaults to 5 s.
        pool_idle_timeout(Duration)
    }
    upstream_setting! {
        /// The largest CGI response head. Defaults to 64 KiB.
        max_response_head(usize)
    }

    /// The service.
    ///
    /// # Errors
    ///
    /// No upstream, an `https://` one (FastCGI has no TLS), or a root that is not a
    /// directory.
    pub fn build(self) -> Result<FastCgi, BuildError> {
        if let Some(u) = self.proxy.upstream_list().iter().find(|u| u.tls) {
            return Err(BuildError::Protocol(format!(
                "FastCGI upstream {u} is https://: FastCGI runs over plain TCP or a Unix socket"
            )));
        }
        let scripts = Scripts::new(&self.root, self.index, self.extensions).map_err(|source| {
            BuildError::Root {
                path: self.root.clone(),
                source,
            }
        })?;
        let root = scripts.root().to_string_lossy().into_owned();
        Ok(FastCgi {
            proxy: self.proxy.build()?,
            app: Arc::new(App {
                scripts,
                root,
                keep_conn: self.keep_conn,
                max_unsized_body: self.max_unsized_body,
                script_cache: self.script_cache,
            }),
            lookups: Arc::new(Lookups::new(self.script_cache)),
            sweeper: Arc::default(),
        })
    }
}

#[cfg(test)]
mod tests;
