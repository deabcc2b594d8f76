//! Static files for scb.
//!
//! [`ServeStatic`] serves the files beneath a directory: paths resolved by the kernel
//! beneath the root (`openat2(RESOLVE_BENEATH)`), decided inline on the worker when the
//! page cache is warm, precompressed sidecars, RFC 9110 validators, preconditions and
//! ranges, index files, directory redirects and listings, an SPA fallback and a custom 404
//! page. [`ServeStaticLayer`] is the same as a layer that passes requests naming no file
//! on to the inner service, and [`compress::CompressLayer`] adds on-the-fly compression
//! (tower-http's encoders) for the responses that have no sidecar.
//!
//! Each worker thread keeps an [`OpenFileCache`] of what it looked up (on by default):
//! a cached small file is answered from bytes held once and shared by every response,
//! with no system call, and checked again by one `stat` per name once per window.
//!
//! What a client gets: the file (200, 206, 304, 412, 416); 404 for a missing path, a
//! hidden dotfile or anything the kernel refuses to resolve beneath the root (the client
//! learns nothing of what lies outside); 403 for a file the server may not read; 400 for
//! a malformed path; 405 with `Allow: GET, HEAD` for other methods. Never a 500 for
//! anything a client sends, never a byte from outside the root.
//!
//! # In an axum app
//!
//! `ServeStatic` is a `tower::Service` that is `Clone + Send + Sync`: it goes wherever
//! tower-http's `ServeDir` goes (the whole program: `examples/static_axum.rs`).
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use scb_static::ServeStatic;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The root is opened here: a missing directory is an error now, not a 404 per request.
//! let site = ServeStatic::builder("public")
//!     .precompressed(["br", "gzip"])
//!     .cache_control("*.html", "no-cache")
//!     .build()?;
//! let app = Router::new()
//!     .route("/api/hello", get(|| async { "hello\n" }))
//!     .fallback_service(site);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # From tower-http's `ServeDir`
//!
//! | `ServeDir` | `ServeStatic` |
//! |---|---|
//! | `ServeDir::new(root)` | `ServeStatic::new(root)?` (a `Result`: the root is opened once, at start) |
//! | `.append_index_html_on_directories(false)` | `.no_index()`; another name: `.index("home.html")` |
//! | `.precompressed_br().precompressed_gzip()` | `.precompressed(["br", "gzip"])` (the order is the server's preference; `zstd` too; no `deflate`) |
//! | `.fallback(ServeFile::new("public/index.html"))` (an SPA) | `.fallback("index.html")`, a name beneath the root, served as itself |
//! | `.not_found_service(ServeFile::new("public/404.html"))` | `.not_found("404.html")` |
//! | `.fallback(other_service)` (files first, then the app) | `ServeStatic::new(root)?.into_layer()` on the app ([`ServeStaticLayer`]) |
//! | `.call_fallback_on_method_not_allowed(true)` | what [`ServeStaticLayer`] does: a POST goes to the inner service |
//! | `.with_buf_chunk_size(n)` | nothing to set: small files are answered from memory, large ones with `sendfile` |
//!
//! What behaves differently, on purpose:
//!
//! - **Directory redirects** are `308` with a *relative* `Location` (`docs/`), so they stay
//!   under a `nest_service("/assets", ...)` prefix that the service never sees.
//! - **Error answers** have a short text body (`Not Found\n`, and `405` with `Allow`),
//!   and text types carry `charset=utf-8`.
//! - **Validators**: a strong `ETag` from length, mtime (nanoseconds) and inode beside
//!   `Last-Modified`; caches that held `ServeDir`'s responses revalidate once.
//! - **Refused, as 404**: dotfiles (`.env`, `.git/`; [`show_hidden`](ServeStaticBuilder::show_hidden)
//!   turns that off) and anything a symlink would reach outside the root (the kernel
//!   resolves beneath it).
//! - **Ranges**: several ranges get a `multipart/byteranges` answer (up to 16, then the
//!   whole file).
//! - **On-the-fly compression** is a separate layer, [`compress::CompressLayer`] (feature
//!   `compress`, on by default), for responses without a sidecar.
//!
//! # Platforms
//!
//! The crate is for Unix: it holds the root as a directory descriptor and resolves every
//! path from it (Windows is not supported). What differs by system:
//!
//! | | Linux 5.12 and later | Linux without `openat2` (before 5.6, or seccomp) | other Unix (macOS, the BSDs) |
//! |---|---|---|---|
//! | lookup beneath the root | one `openat2(RESOLVE_BENEATH \| RESOLVE_NO_MAGICLINKS)`, the kernel keeps it beneath | a walk, one `openat(O_NOFOLLOW)` per component, chosen once at the first `ENOSYS`/`EPERM` | the same walk |
//! | symlinks ([`Symlinks`]) | all three modes | all three modes | `Beneath` acts as `None`: no link is followed (there is no race-free way) |
//! | a lookup or read that would wait for the disk | sees it (`RESOLVE_CACHED`, `preadv2(RWF_NOWAIT)`) and finishes on tokio's blocking pool | the lookup blocks the worker; reads as on Linux | blocks the worker (a local disk is assumed) |
//! | large bodies on plain TCP | `sendfile` from the page cache (scb-core's server) | `sendfile` | positional reads and writes, the same checks that the file did not change |
//!
//! On Linux 5.6 to 5.11, `openat2` lacks `RESOLVE_CACHED`: lookups beneath the root are
//! the kernel's, but run inline on the worker. Every system answers the same: the same status codes, the same bytes, nothing from
//! outside the root. Only Linux is tested in CI.

mod cache;
mod serve;
mod sys;

mod path;

mod encoding;

mod mime;

mod cache_control;

#[cfg(feature = "compress")]
pub mod compress;
pub mod try_files;

pub use cache::OpenFileCache;
pub use cache_control::CacheControlError;
pub use encoding::UnknownCoding;
pub use serve::{
    BuildError, ResponseFuture, ServeStatic, ServeStaticBuilder, ServeStaticLayer, ServeStaticOr,
};

/// The response future of [`ServeStaticOr`].
pub mod layer {
    pub use crate::serve::layer::ResponseFuture;
}
pub use sys::Symlinks;

/// Entry points for the fuzz targets in `fuzz/`; not API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

/// This crate's README examples, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
