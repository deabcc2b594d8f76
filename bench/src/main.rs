//! `bench`: scb against nginx, Caddy and an axum + tower-http `ServeDir` app, on the same
//! machine, the same files and the same load, in one run.
//!
//! ```text
//! bench --scb target/release/scb --axum-servedir target/release/axum-servedir
//! bench --quick ...        1 s per scenario: a smoke test that every server config works
//! ```
//!
//! For each scenario and server it renders the server's config from `bench/configs/`,
//! starts the server pinned to the server CPUs, checks that every URL of the scenario
//! answers 200 with the fixture's exact bytes, warms it up, then measures a window with wrk
//! (HTTP/1.1) or h2load (TLS + HTTP/2) pinned to the load CPUs, sampling the server's
//! whole process tree from `/proc`. Results go to `results.md`, `results.csv`,
//! `results.json` and `chart.svg` in the output directory, and the table to stdout.
//!
//! The exit status is non-zero when any row failed: a server that did not start, a URL
//! that did not verify, or a load run that saw errors.

mod harness;

use std::process::ExitCode;

fn main() -> ExitCode {
    harness::run::main()
}
