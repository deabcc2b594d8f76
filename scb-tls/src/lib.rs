//! TLS for scb.
//!
//! This crate is filled by issue 6 (rustls configuration from PEM files, SNI, ALPN HTTP/2,
//! reload). It is the only crate of the workspace that will name rustls. It exports nothing
//! yet, so nothing can mistake it for a working TLS listener.
