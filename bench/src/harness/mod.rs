//! The harness, one concept per module.
//!
//! - Input: [`cli`] (flags), [`settings`] (flags resolved into one run's plan),
//!   [`cpuset`] (CPU lists), [`scenario`] and [`server`] (what is measured, and the
//!   capability table of what each server can serve today).
//! - Preparation: [`tools`] (nginx, Caddy, wrk, h2load, curl; installed with apt-get when
//!   missing and root), [`fixtures`] and [`prng`] (the files every server serves),
//!   [`cert`] (the self-signed certificate), [`template`] (`{{NAME}}` config rendering),
//!   [`php`] (php-fpm and the script of the FastCGI scenarios).
//! - Running: [`process`] (pinned child processes, stopping them, cleanup on a signal),
//!   [`ports`] (free ports, waiting until a server accepts), [`verify`] and
//!   [`http_client`] (the exact bytes, before anything is measured), [`load`], [`wrk`] and
//!   [`h2load`] (the load generators and their output), [`proctree`] (CPU time and peak RSS
//!   of a process tree).
//! - Output: [`figures`] (rows and ratios), [`report`] (Markdown), [`export`] (CSV and
//!   JSON), [`chart`] (SVG), [`environment`] (the environment block); timestamps come
//!   from `scb_core::date`.
//! - [`run`]: the whole run, scenario by scenario, server by server.
//! - [`profile`]: why scb costs what it costs in one scenario (strace, /proc, perf,
//!   callgrind).
//! - [`cache_tests`]: mnot's HTTP cache test suite against scb's cache and nginx's.
//! - [`h2spec`]: the HTTP/2 conformance suite against scb's listeners, repeated.
//! - [`idle`]: resident memory per idle keep-alive connection, plain and TLS.
//! - [`soak`]: scb under mixed and misbehaving load for a bounded time, RSS and
//!   descriptors sampled, errors counted by kind.

pub(crate) mod cache_tests;
pub(crate) mod cert;
pub(crate) mod chart;
pub(crate) mod cli;
pub(crate) mod cpuset;
pub(crate) mod environment;
pub(crate) mod export;
pub(crate) mod figures;
pub(crate) mod fixtures;
pub(crate) mod h2load;
pub(crate) mod h2spec;
pub(crate) mod http_client;
pub(crate) mod idle;
pub(crate) mod load;
pub(crate) mod php;
pub(crate) mod ports;
pub(crate) mod prng;
pub(crate) mod process;
pub(crate) mod proctree;
pub(crate) mod profile;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod scenario;
pub(crate) mod server;
pub(crate) mod settings;
pub(crate) mod soak;
pub(crate) mod template;
pub(crate) mod tools;
pub(crate) mod verify;
pub(crate) mod wrk;
