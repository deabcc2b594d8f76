//! `axum-servedir`: the axum peer in the benchmark — what an axum user writes today for the
//! benchmark's layout, not an optimized server.
//!
//! ```text
//! axum-servedir --http 127.0.0.1:8080 --tls 127.0.0.1:8443 --root DIR \
//!               --upstream 127.0.0.1:9000 --cert cert.pem --key key.pem --workers 1
//! ```
//!
//! - `GET /respond`: 200 `text/plain` `Hello, world!`, from a handler;
//! - `/proxy/{*rest}`: forwarded to the upstream with hyper-util's pooled client (keep-alive),
//!   path and query unchanged, the response body streamed back;
//! - anything else: `tower_http::services::ServeDir` on `--root` (it never lists directories).
//!
//! The same router is served on plain HTTP/1.1 with `axum::serve` and on TLS (ALPN h2 and
//! http/1.1) with `axum-server` and rustls, on one multi-thread tokio runtime with
//! `--workers` worker threads. SIGTERM or SIGINT stops both listeners gracefully.
//!
//! rustls runs on ring rather than aws-lc-rs (see `bench/Cargo.toml`): the same TLS 1.3,
//! a much shorter build. As with `RustlsConfig::from_pem_file` in any axum-server app,
//! TLS 1.2 is accepted too; every client of the benchmark negotiates 1.3.

use std::net::SocketAddr;
use std::num::NonZero;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{StatusCode, Uri, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::serve::ListenerExt as _;
use axum_server::Handle;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use clap::Parser;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tower_http::services::ServeDir;

/// How long TLS connections may finish their requests after a shutdown signal.
const GRACE: Duration = Duration::from_secs(5);

/// Serve the benchmark layout with axum, tower-http ServeDir and axum-server + rustls.
#[derive(Debug, Parser)]
#[command(name = "axum-servedir")]
struct Args {
    /// Plain HTTP/1.1 listen address.
    #[arg(long)]
    http: SocketAddr,
    /// TLS listen address (ALPN h2 and http/1.1).
    #[arg(long)]
    tls: SocketAddr,
    /// Directory served as static files.
    #[arg(long)]
    root: PathBuf,
    /// Upstream of `/proxy/`, as host:port.
    #[arg(long)]
    upstream: Authority,
    /// PEM certificate chain for the TLS listener.
    #[arg(long)]
    cert: PathBuf,
    /// PEM private key for the TLS listener.
    #[arg(long)]
    key: PathBuf,
    /// Tokio worker threads.
    #[arg(long, default_value = "1")]
    workers: NonZero<usize>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.get())
        .enable_all()
        .build()
        .context("building the tokio runtime")?
        .block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    // Before the listeners exist: a signal that arrives as soon as a port accepts must stop
    // the server gracefully, not kill it by the default action.
    let shutdown = shutdown_signal().context("installing the SIGTERM and SIGINT handlers")?;
    let app = app(args.root, args.upstream);

    // TCP_NODELAY on both listeners, as nginx (`tcp_nodelay on`) and Go's net/http do.
    let http = TcpListener::bind(args.http)
        .await
        .with_context(|| format!("binding {}", args.http))?
        .tap_io(|tcp| {
            // Only fails on a socket that is already dead; its requests will fail anyway.
            let _ = tcp.set_nodelay(true);
        });
    let tls_config = RustlsConfig::from_pem_file(&args.cert, &args.key)
        .await
        .with_context(|| format!("loading {} and {}", args.cert.display(), args.key.display()))?;
    let acceptor = RustlsAcceptor::new(tls_config).acceptor(NoDelayAcceptor::new());
    let tls_handle = Handle::new();

    let http_server = axum::serve(http, app.clone()).with_graceful_shutdown({
        let tls_handle = tls_handle.clone();
        async move {
            shutdown.await;
            tls_handle.graceful_shutdown(Some(GRACE));
        }
    });
    let tls_server = axum_server::bind(args.tls)
        .acceptor(acceptor)
        .handle(tls_handle)
        .serve(app.into_make_service());

    tokio::try_join!(
        async { http_server.await.context("plain HTTP listener") },
        async {
            tls_server
                .await
                .with_context(|| format!("TLS listener on {}", args.tls))
        },
    )?;
    Ok(())
}

/// The router: the benchmark's three kinds of request.
fn app(root: PathBuf, upstream: Authority) -> Router {
    let upstream = Upstream {
        client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        authority: upstream,
    };
    Router::new()
        .route("/respond", get(respond))
        .route("/proxy/{*rest}", any(proxy).with_state(upstream))
        .fallback_service(ServeDir::new(root))
}

async fn respond() -> impl IntoResponse {
    // The header replaces the `text/plain; charset=utf-8` a `&str` body would get.
    ([(header::CONTENT_TYPE, "text/plain")], "Hello, world!")
}

/// The upstream of `/proxy/`: a pooled client and where it connects.
#[derive(Clone, Debug)]
struct Upstream {
    client: Client<HttpConnector, Body>,
    authority: Authority,
}

async fn proxy(State(upstream): State<Upstream>, mut req: Request) -> Response {
    let path_and_query = req
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let uri = Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(upstream.authority)
        .path_and_query(path_and_query)
        .build();
    let Ok(uri) = uri else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    *req.uri_mut() = uri;
    // The pool speaks HTTP/1.1 to the upstream whatever the client spoke (h2 over TLS):
    // hyper-util refuses to send an HTTP/2 request on an HTTP/1 connection.
    *req.version_mut() = Version::HTTP_11;
    match upstream.client.request(req).await {
        Ok(response) => response.into_response(),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// A future that resolves at the first SIGTERM or SIGINT after this call.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
