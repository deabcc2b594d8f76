//! Static files for scb.
//!
//! [`ServeStatic`] serves the files beneath a directory: paths resolved by the kernel
//! beneath the root (`openat2(RESOLVE_BENEATH)`), decided inline on the worker when the
//! page cache is warm, precompressed sidecars, RFC 9110 validators, preconditions and
//! ranges. Issue 4 is still adding to it (the fall-through layer, site features, the
//! binary's `static` routes and `scb serve`).

mod serve;
mod sys;

mod path;

mod encoding;

mod mime;

mod cache_control;

mod conditional;

mod range;

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
