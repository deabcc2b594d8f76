//! Static files for scb.
//!
//! This crate is being filled by issue 4 (`ServeStatic`: kernel-enforced path resolution
//! with `openat2`, inline I/O, precompressed sidecars, RFC 9110 validators and ranges).
//! So far it holds the resolver (`sys`) and its tests; it exports no service yet, so
//! nothing can mistake it for a working file server.

#[allow(
    dead_code,
    unused_imports,
    reason = "the resolver is tested on its own; ServeStatic, later in issue 4, calls it"
)]
mod sys;

#[allow(dead_code, reason = "ServeStatic, later in issue 4, calls it")]
mod path;

pub use sys::Symlinks;
