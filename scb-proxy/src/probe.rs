//! Active checks: a `GET` to each upstream every interval, one task per upstream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::PathAndQuery;
use http::{Method, Request, StatusCode, header};
use scb_core::Body;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tokio_rustls::TlsConnector;

use crate::client::{Connection, SendError, Stream};
use crate::error::ProxyError;
use crate::health::ActiveHealth;
use crate::settings::{ProxyHeader, UpstreamProtocol};
use crate::upstream::{Upstream, UpstreamState};

/// Shortest active check interval: `tokio::time::interval` panics on zero, and checking more
/// often than every millisecond would be a load test, not a health check.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Longest response head a check reads.
const CHECK_MAX_HEAD: usize = 64 * 1024;

/// Runs active checks of all `upstreams` until dropped: one task per upstream, so a slow
/// upstream delays only its own checks. Dropping (aborting) this future stops them all.
///
/// Returns at once, checking nothing, when `config.path` is not an absolute path (logged as
/// an error) or there are no upstreams.
pub(crate) async fn run_active(
    upstreams: Arc<[UpstreamState]>,
    config: ActiveHealth,
    proxy_header: Option<ProxyHeader>,
    tls: Option<TlsConnector>,
    protocol: UpstreamProtocol,
) {
    let path = config
        .path
        .parse::<PathAndQuery>()
        .ok()
        .filter(|path| path.as_str().starts_with('/'));
    let Some(path) = path else {
        tracing::error!(path = %config.path, "active health checks off: not an absolute path");
        return;
    };
    let config = Arc::new(config);
    // A JoinSet aborts its tasks when dropped, so they end with this future.
    let mut checkers = JoinSet::new();
    for index in 0..upstreams.len() {
        checkers.spawn(check_forever(
            Arc::clone(&upstreams),
            index,
            path.clone(),
            Arc::clone(&config),
            proxy_header,
            tls.clone(),
            protocol,
        ));
    }
    while let Some(done) = checkers.join_next().await {
        if let Err(e) = done {
            tracing::error!(error = %e, "an active health checker ended");
        }
    }
}

async fn check_forever(
    upstreams: Arc<[UpstreamState]>,
    index: usize,
    path: PathAndQuery,
    config: Arc<ActiveHealth>,
    proxy_header: Option<ProxyHeader>,
    tls: Option<TlsConnector>,
    protocol: UpstreamProtocol,
) {
    let state = &upstreams[index];
    let mut ticks = tokio::time::interval(config.interval.max(MIN_INTERVAL));
    // After a check that overran the interval, wait a full interval rather than firing the
    // missed checks back to back at an upstream that is already slow.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let result = check(
            &state.upstream,
            &path,
            config.timeout,
            proxy_header,
            tls.as_ref(),
            protocol,
        )
        .await;
        let now = Instant::now();
        match (
            state
                .health
                .record_check(result.is_ok(), now, &config, &state.metrics),
            &result,
        ) {
            (Some(true), _) => tracing::info!(
                upstream = %state.upstream,
                passes = config.passes,
                "upstream up: passed its health checks"
            ),
            (Some(false), Err(e)) => tracing::warn!(
                upstream = %state.upstream,
                fails = config.fails,
                error = %e,
                "upstream down: failed its health checks"
            ),
            (_, Err(e)) => {
                tracing::debug!(upstream = %state.upstream, error = %e, "health check failed");
            }
            (_, Ok(())) => {}
        }
        // Without traffic nothing else would notice a passive cool-down running out.
        if state.health.settle(now, &state.metrics) {
            tracing::info!(upstream = %state.upstream, "upstream up: cool-down over");
        }
    }
}

/// Why an active check failed.
#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error("no response head within {0:?}")]
    Timeout(Duration),
    #[error("connect failed: {0}")]
    Connect(std::io::Error),
    #[error("request failed: {0}")]
    Http(SendError),
    #[error("{0}")]
    H2Connect(ProxyError),
    #[error("request failed: {0}")]
    H2(hyper::Error),
    #[error("request could not be built: {0}")]
    Request(http::Error),
    #[error("status {0}")]
    Status(StatusCode),
}

/// One check: `GET path` on a new connection, passed by a 2xx or 3xx head within `timeout`.
async fn check(
    upstream: &Upstream,
    path: &PathAndQuery,
    timeout: Duration,
    proxy_header: Option<ProxyHeader>,
    tls: Option<&TlsConnector>,
    protocol: UpstreamProtocol,
) -> Result<(), CheckError> {
    let status = if protocol.is_h2() {
        tokio::time::timeout(timeout, head_h2(upstream, path, tls)).await
    } else {
        tokio::time::timeout(timeout, head(upstream, path, proxy_header, tls)).await
    };
    let status = status.map_err(|_| CheckError::Timeout(timeout))??;
    if status.is_success() || status.is_redirection() {
        Ok(())
    } else {
        Err(CheckError::Status(status))
    }
}

async fn head(
    upstream: &Upstream,
    path: &PathAndQuery,
    proxy_header: Option<ProxyHeader>,
    tls: Option<&TlsConnector>,
) -> Result<StatusCode, CheckError> {
    let authority = &upstream.authority;
    // The check's connection is scb's own, not a client's.
    let preface =
        proxy_header.map(|version| scb_core::server::proxy_protocol::header(version, None));
    let stream = Stream::connect(upstream, tls, preface.as_deref())
        .await
        .map_err(CheckError::Connect)?;
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(path.clone())
        .header(header::HOST, authority.as_str())
        .header(header::USER_AGENT, "scb-health-check")
        .header(header::CONNECTION, "close")
        .body(Body::empty())
        .map_err(CheckError::Request)?;
    // The body is not read: the connection is dropped (closed) once the head is in.
    let head = Connection::new(stream, CHECK_MAX_HEAD)
        .send(&mut request)
        .await
        .map_err(CheckError::Http)?;
    Ok(head.parts.status)
}

/// The check over HTTP/2, on a connection of its own (closed when the head is in): a
/// worker's shared connection could pass while new ones fail.
async fn head_h2(
    upstream: &Upstream,
    path: &PathAndQuery,
    tls: Option<&TlsConnector>,
) -> Result<StatusCode, CheckError> {
    let mut send = crate::client::h2::connect(upstream, tls)
        .await
        .map_err(CheckError::H2Connect)?;
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(path.clone())
        .header(header::USER_AGENT, "scb-health-check")
        .body(Body::empty())
        .map_err(CheckError::Request)?;
    let authority = http::HeaderValue::from_str(upstream.authority.as_str())
        .map_err(|e| CheckError::Request(e.into()))?;
    let scheme = if upstream.tls {
        http::uri::Scheme::HTTPS
    } else {
        http::uri::Scheme::HTTP
    };
    crate::client::h2::address(&mut request, scheme, &authority, &upstream.authority);
    let response = send.send_request(request).await.map_err(CheckError::H2)?;
    Ok(response.status())
}
