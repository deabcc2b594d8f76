//! The load generators' common result, and running one pinned to the load CPUs.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::harness::cpuset::CpuSet;
use crate::harness::server::Launch;
use crate::harness::{h2load, process, tools, wrk};

/// Concurrent HTTP/2 streams per h2load connection. One would make HTTP/2 a slower
/// HTTP/1.1; browsers and proxies keep several in flight, and 10 with 64 connections keeps
/// a single server CPU saturated without queueing hundreds of requests per connection.
pub(crate) const H2_STREAMS: usize = 10;

/// How long a load run may overrun its duration before it is killed: wrk and h2load stop
/// on their own at the end, but a server that stops answering must not hang the harness.
const OVERRUN: Duration = Duration::from_secs(30);

/// Which tool produced a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Tool {
    /// wrk (HTTP/1.1).
    Wrk,
    /// h2load (HTTP/2).
    H2load,
    /// h3load (HTTP/3, the harness's own: `src/bin/h3load.rs`).
    H3load,
    /// tlsload (TLS handshakes resumed, the harness's own: `src/bin/tlsload.rs`).
    Tlsload,
}

/// What a load run measured, in the tool's own terms, normalised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct LoadResult {
    /// The tool.
    pub(crate) tool: Tool,
    /// Completed responses (any status).
    pub(crate) responses: u64,
    /// Responses with an error status. Both tools count statuses >= 400 only (wrk's
    /// `errors.status`, h2load's failed-with-a-response), so a 3xx would pass unnoticed
    /// here; verification has already seen 200 for every URL.
    pub(crate) non_2xx: u64,
    /// Connect, read, write and timeout errors (wrk); streams that ended without a response
    /// (h2load's `errored`).
    pub(crate) transport_errors: u64,
    /// The measured window as the tool timed it, seconds.
    pub(crate) duration_s: f64,
    /// Mean latency, µs.
    pub(crate) mean_us: f64,
    /// Median latency, µs (wrk only: h2load reports no percentiles).
    pub(crate) p50_us: Option<f64>,
    /// 95th percentile, µs (wrk only).
    pub(crate) p95_us: Option<f64>,
    /// 99th percentile, µs (wrk only).
    pub(crate) p99_us: Option<f64>,
}

impl LoadResult {
    /// Responses per second over the tool's window.
    pub(crate) fn rps(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.responses as f64 / self.duration_s
        } else {
            0.0
        }
    }

    /// 2xx responses over all attempts that ended (responses plus transport errors).
    pub(crate) fn success_rate(&self) -> f64 {
        let attempts = self.responses + self.transport_errors;
        if attempts == 0 {
            0.0
        } else {
            (self.responses - self.non_2xx.min(self.responses)) as f64 / attempts as f64
        }
    }
}

/// The load generator's settings.
#[derive(Clone, Debug)]
pub(crate) struct LoadGen {
    /// Where it runs (shared with the upstream nginx).
    pub(crate) cpus: CpuSet,
    /// Connections.
    pub(crate) connections: usize,
}

/// What to load.
#[derive(Debug)]
pub(crate) enum Target<'a> {
    /// HTTP/1.1 (plain or over TLS) with wrk: the URL and its Lua script (which prints the summary line and,
    /// for `static-many`, picks the paths).
    Http1 {
        /// Base URL.
        url: &'a str,
        /// The Lua script.
        script: &'a Path,
    },
    /// HTTP/2 over TLS with h2load.
    H2 {
        /// The URL.
        url: &'a str,
        /// Streams in flight per connection.
        streams: usize,
    },
    /// HTTP/3 with h3load.
    H3 {
        /// The URL.
        url: &'a str,
        /// Streams in flight per connection.
        streams: usize,
    },
    /// A connection per request over TLS, sessions resumed, with tlsload.
    TlsResume {
        /// The URL.
        url: &'a str,
    },
}

impl LoadGen {
    /// One thread per load CPU: the load generator must not be the bottleneck, and more
    /// threads than CPUs only adds switching.
    pub(crate) fn threads(&self) -> usize {
        self.cpus.count()
    }

    /// Runs the load for `duration` seconds (fractions allowed) and parses its result. The
    /// tool's own output is kept in `transcript` (for reading when a figure looks odd).
    ///
    /// # Errors
    ///
    /// When the tool cannot be run, fails, or prints no parsable summary.
    pub(crate) fn run(
        &self,
        target: &Target<'_>,
        duration: f64,
        transcript: &Path,
    ) -> anyhow::Result<LoadResult> {
        if !(duration > 0.0 && duration.is_finite()) {
            bail!("invalid duration {duration}");
        }
        let window = Duration::from_secs_f64(duration);
        match target {
            Target::Http1 { url, script } => {
                let (launch, interrupt) = wrk::launch(self, url, script, window);
                let out = process::run_tool(&self.cpus, &launch, interrupt, window + OVERRUN)?;
                keep(transcript, &launch, &self.cpus, &out);
                wrk::parse(&out.stdout).map_err(|e| {
                    anyhow::anyhow!(
                        "{e:#} (wrk {}; stderr: {}; stdout: {})",
                        out.status,
                        out.stderr.trim(),
                        out.stdout.trim()
                    )
                })
            }
            Target::H2 { url, streams } => {
                let launch = h2load::launch(self, url, window, *streams);
                let out = process::run_tool(&self.cpus, &launch, None, window + OVERRUN)?;
                keep(transcript, &launch, &self.cpus, &out);
                h2load::parse(&out.stdout).map_err(|e| {
                    anyhow::anyhow!(
                        "{e:#} (h2load {}; stderr: {}; end of stdout: {})",
                        out.status,
                        out.stderr.trim(),
                        process_tail(&out.stdout)
                    )
                })
            }
            Target::H3 { url, streams } => {
                let mut launch = h2load::launch(self, url, window, *streams);
                // The same flags; h3load prints h2load's report.
                launch.program = tools::h3load();
                let out = process::run_tool(&self.cpus, &launch, None, window + OVERRUN)?;
                keep(transcript, &launch, &self.cpus, &out);
                let mut result = h2load::parse(&out.stdout).map_err(|e| {
                    anyhow::anyhow!(
                        "{e:#} (h3load {}; stderr: {}; end of stdout: {})",
                        out.status,
                        out.stderr.trim(),
                        process_tail(&out.stdout)
                    )
                })?;
                result.tool = Tool::H3load;
                Ok(result)
            }
            Target::TlsResume { url } => {
                let launch = Launch {
                    program: tools::tlsload(),
                    args: vec![
                        format!("-c{}", self.connections).into(),
                        format!("-t{}", self.threads()).into(),
                        "-D".into(),
                        format!("{}ms", window.as_millis().max(1)).into(),
                        "--resume".into(),
                        (*url).into(),
                    ],
                    env: vec![],
                };
                let out = process::run_tool(&self.cpus, &launch, None, window + OVERRUN)?;
                keep(transcript, &launch, &self.cpus, &out);
                let failed = |e: anyhow::Error| {
                    anyhow::anyhow!(
                        "{e:#} (tlsload {}; stderr: {}; end of stdout: {})",
                        out.status,
                        out.stderr.trim(),
                        process_tail(&out.stdout)
                    )
                };
                let mut result = h2load::parse(&out.stdout).map_err(failed)?;
                tlsload_resumed(&out.stdout).map_err(failed)?;
                result.tool = Tool::Tlsload;
                Ok(result)
            }
        }
    }
}

/// Writes the command and its output; a transcript that cannot be written is not worth
/// failing a row for.
fn keep(path: &Path, launch: &Launch, cpus: &CpuSet, out: &process::ToolOutput) {
    let text = format!(
        "$ {}\n# {}\n{}\n# stderr:\n{}",
        process::display_command(cpus, launch),
        out.status,
        out.stdout,
        out.stderr
    );
    let _ = std::fs::write(path, text);
}

/// The least share of tlsload's handshakes that must have resumed for its figures to be a
/// resumed handshake's: each client's first is a full one, and a ticket can expire or be
/// refused now and then.
const RESUMED_AT_LEAST: f64 = 0.9;

/// Checks tlsload's `handshakes: F full, R resumed` line: a server that sends no tickets
/// or refuses them would be measured doing full handshakes under the resumed name.
fn tlsload_resumed(stdout: &str) -> anyhow::Result<()> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("handshakes: "))
        .context("tlsload printed no \"handshakes:\" line")?;
    let count = |label: &str| -> anyhow::Result<u64> {
        line.split(',')
            .find_map(|part| part.trim().strip_suffix(label)?.trim().parse().ok())
            .with_context(|| format!("no {label:?} count in {line:?}"))
    };
    let (full, resumed) = (count("full")?, count("resumed")?);
    let all = full + resumed;
    if all == 0 || (resumed as f64) < RESUMED_AT_LEAST * all as f64 {
        bail!("only {resumed} of {all} handshakes resumed a session");
    }
    Ok(())
}

fn process_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(responses: u64, non_2xx: u64, transport_errors: u64) -> LoadResult {
        LoadResult {
            tool: Tool::Wrk,
            responses,
            non_2xx,
            transport_errors,
            duration_s: 2.0,
            mean_us: 1.0,
            p50_us: None,
            p95_us: None,
            p99_us: None,
        }
    }

    #[test]
    fn a_resumed_run_must_have_resumed_nine_handshakes_in_ten() {
        assert!(tlsload_resumed("x\nhandshakes: 64 full, 9000 resumed\n").is_ok());
        assert!(tlsload_resumed("handshakes: 64 full, 576 resumed").is_ok());
        let refused = tlsload_resumed("handshakes: 9000 full, 0 resumed").unwrap_err();
        assert!(refused.to_string().contains("only 0 of 9000"), "{refused}");
        assert!(tlsload_resumed("handshakes: 65 full, 576 resumed").is_err());
        assert!(tlsload_resumed("handshakes: 0 full, 0 resumed").is_err());
        assert!(tlsload_resumed("requests: 10 total").is_err());
    }

    #[test]
    fn success_rate_counts_transport_errors_as_failures() {
        assert_eq!(result(100, 0, 0).success_rate(), 1.0);
        assert_eq!(result(100, 10, 0).success_rate(), 0.9);
        assert_eq!(result(90, 0, 10).success_rate(), 0.9);
        assert_eq!(result(0, 0, 0).success_rate(), 0.0);
        assert_eq!(result(100, 0, 0).rps(), 50.0);
    }
}
