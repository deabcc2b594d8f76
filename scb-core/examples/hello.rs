//! A minimal server built from scb-core's pieces: a request-id layer over a fixed response,
//! on scb's per-core runtime.
//!
//! ```text
//! cargo run --release -p scb-core --example hello -- 127.0.0.1:8080 1
//! curl -i http://127.0.0.1:8080/
//! ```

use scb_core::request_id::RequestIdLayer;
use scb_core::respond::Respond;
use scb_core::server::Server;
use tower::ServiceBuilder;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".into())
        .parse()
        .map_err(std::io::Error::other)?;
    let workers = args.next().and_then(|w| w.parse().ok()).unwrap_or(1);

    let server = Server::builder().workers(workers).listen(addr).bind()?;
    let handle = server.start(|_worker| {
        ServiceBuilder::new().layer(RequestIdLayer::new()).service(
            Respond::new(http::StatusCode::OK)
                .content_type(http::HeaderValue::from_static("text/plain"))
                .body("Hello, world!"),
        )
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        scb_core::server::shutdown_signal()?.await;
        std::io::Result::Ok(())
    })?;
    handle.shutdown();
    handle.join();
    Ok(())
}
