//! Static files for scb.
//!
//! This crate is filled by issue 4 (`ServeStatic`: kernel-enforced path resolution with
//! `openat2`, inline I/O, precompressed sidecars, RFC 9110 validators and ranges). It
//! exports nothing yet, so nothing can mistake it for a working file server.
