//! The shared core of scb: the [`Body`] type, the request-id, metrics, access-log and
//! catch-panic layers, the [`Respond`](respond::Respond) service, the
//! [`Router`](router::Router), and the per-core [`server`] runtime.
//!
//! Every piece is an ordinary tower `Service` or `Layer`, usable on its own in any
//! tower, hyper or axum stack; the `scb` binary is only one way of composing them.
//!
//! ```
//! use scb_core::{Body, request_id::RequestIdLayer, respond::Respond};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(RequestIdLayer::new())
//!     .service(Respond::new(http::StatusCode::OK).body("Hello, world!"));
//! let res = svc.oneshot(http::Request::new(Body::empty())).await.unwrap();
//! assert!(res.headers().contains_key("x-request-id"));
//! # }
//! ```
//!
//! # Features
//!
//! The layers with heavy dependencies are behind features, both on by default:
//!
//! - `auth`: [`basic_auth`] (bcrypt and argon2 password hashes, a blake2 digest cache);
//! - `rewrite`: [`rewrite`] (the regex crate).
//!
//! With `default-features = false` the crate is the light layers, the router and the
//! server, and compiles none of those crates.

pub mod access_log;
pub mod admission;
pub mod alt_svc;
#[cfg(feature = "auth")]
pub mod basic_auth;
pub mod body;
pub mod catch_panic;
pub mod client_ip;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod conditional;
pub mod connection;
pub mod date;
pub mod error_pages;
pub mod header_rules;
pub mod health;
pub mod http1;
pub mod https;
pub mod ip_filter;
pub mod max_concurrent;
pub mod metrics;
pub mod original_uri;
pub mod range;
pub mod rate_limit;
pub mod redirect;
pub mod request_id;
pub mod respond;
#[cfg(feature = "rewrite")]
pub mod rewrite;
pub mod router;
pub mod server;
pub mod spans;
pub mod template;
pub mod trace_context;
pub mod virtual_hosts;

pub use body::{Body, FileRegion, FileStamp};

/// The error type at tower boundaries: any error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The README's Rust examples, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// Entry points for the fuzz targets in `fuzz/`; not API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

/// This crate's README examples, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
