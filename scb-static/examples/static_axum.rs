//! scb-static inside an axum app, where tower-http's `ServeDir` would go: a directory
//! mounted under `/assets` with `nest_service`, and the site itself as the router's
//! fallback, next to ordinary axum routes.
//!
//! ```text
//! cargo run -p scb-static --example static_axum -- ./public
//! curl -i http://127.0.0.1:3000/api/hello
//! curl -i http://127.0.0.1:3000/assets/app.js
//! ```

use axum::Router;
use axum::routing::get;
use scb_static::ServeStatic;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::env::args().nth(1).unwrap_or_else(|| ".".to_owned());

    // Fingerprinted assets: sidecars when present, cached for a year.
    let assets = ServeStatic::builder(&root)
        .precompressed(["br", "zstd", "gzip"])
        .cache_control("*", "public, max-age=31536000, immutable")
        .build()?;
    // Everything else: the site, revalidated on every visit.
    let site = ServeStatic::builder(&root)
        .cache_control("*.html", "no-cache")
        .build()?;

    let app = Router::new()
        .route("/api/hello", get(|| async { "hello from axum\n" }))
        // Redirects (`/assets/docs` -> `docs/`) are relative, so they stay under the mount.
        .nest_service("/assets", assets)
        .fallback_service(site);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app).await?;
    Ok(())
}
