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

mod cache;
mod serve;
mod sys;

mod path;

mod encoding;

mod mime;

mod cache_control;

mod conditional;

mod range;

#[cfg(feature = "compress")]
pub mod compress;

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
