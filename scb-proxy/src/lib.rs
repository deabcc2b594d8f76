//! Reverse proxy for scb.
//!
//! This crate is filled by issue 5 (`ReverseProxy`: per-worker upstream pools, balancing,
//! health checks, safe retries). It exports nothing yet, so nothing can mistake it for a
//! working proxy.
