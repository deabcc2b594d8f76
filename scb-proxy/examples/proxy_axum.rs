//! scb-proxy inside an axum app: `/api/*` forwarded to two upstreams, the rest answered
//! by axum itself. The client's address reaches the proxy as a [`ClientIp`] extension,
//! taken from axum's `ConnectInfo`, so the upstreams get a correct `X-Forwarded-For`.
//!
//! ```text
//! cargo run -p scb-proxy --example proxy_axum -- 127.0.0.1:8081 127.0.0.1:8082
//! curl -i http://127.0.0.1:3000/api/users      # upstream sees /users
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::map_request;
use axum::routing::get;
use scb_proxy::{ActiveHealth, Balance, ClientIp, ReverseProxy, Upstream};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let upstreams = std::env::args()
        .skip(1)
        .map(|addr| Upstream::new(&addr))
        .collect::<Result<Vec<_>, _>>()?;
    let proxy = ReverseProxy::builder(upstreams)
        .balance(Balance::LeastConn)
        .response_timeout(Duration::from_secs(30))
        .active_health(ActiveHealth::new("/healthz"))
        .build()?;

    let app = Router::new()
        .route("/", get(|| async { "hello from axum\n" }))
        // `nest_service` strips `/api` before the proxy sees the path.
        .nest_service("/api", proxy)
        .layer(map_request(client_ip));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// Copies axum's peer address into the extension the proxy reads.
async fn client_ip(mut req: Request) -> Request {
    if let Some(ConnectInfo(addr)) = req.extensions().get::<ConnectInfo<SocketAddr>>().copied() {
        req.extensions_mut().insert(ClientIp(addr.ip()));
    }
    req
}
