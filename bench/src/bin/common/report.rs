//! What the harness's load generators count, and their report in h2load's format (the
//! `finished in`, `requests:` and `time for request:` lines), so that the harness's one
//! h2load parser reads them all. Included by each load generator with `#[path]`.

use std::time::{Duration, Instant};

use anyhow::bail;

/// What one thread counted.
#[derive(Default)]
pub(crate) struct Counts {
    /// Requests that ended, with a response or not.
    pub(crate) done: u64,
    succeeded: u64,
    failed: u64,
    /// Requests that ended without a response.
    pub(crate) errored: u64,
    total_us: f64,
    min_us: f64,
    max_us: f64,
}

impl Counts {
    pub(crate) fn add(&mut self, other: &Counts) {
        self.done += other.done;
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.errored += other.errored;
        self.total_us += other.total_us;
        if other.done > 0 {
            self.min_us = if self.min_us == 0.0 {
                other.min_us
            } else {
                self.min_us.min(other.min_us)
            };
            self.max_us = self.max_us.max(other.max_us);
        }
    }

    pub(crate) fn record(&mut self, started: Instant, status: Option<u16>) {
        let us = started.elapsed().as_secs_f64() * 1e6;
        self.done += 1;
        match status {
            Some(s) if s < 400 => self.succeeded += 1,
            Some(_) => self.failed += 1,
            None => {
                self.failed += 1;
                self.errored += 1;
            }
        }
        self.total_us += us;
        self.min_us = if self.min_us == 0.0 {
            us
        } else {
            self.min_us.min(us)
        };
        self.max_us = self.max_us.max(us);
    }
}

/// `500ms` or `2s`.
pub(crate) fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    if let Some(ms) = text.strip_suffix("ms") {
        return Ok(Duration::from_millis(ms.parse()?));
    }
    if let Some(s) = text.strip_suffix('s') {
        return Ok(Duration::from_secs_f64(s.parse()?));
    }
    bail!("a duration is `500ms` or `2s`, not {text:?}")
}

/// Prints the report of `total` over `elapsed` seconds.
#[allow(clippy::print_stdout, reason = "the report is the command's output")]
pub(crate) fn print(total: &Counts, elapsed: f64) {
    let mean = if total.done > 0 {
        total.total_us / total.done as f64
    } else {
        0.0
    };
    println!(
        "finished in {elapsed:.2}s, {:.2} req/s, 0B/s",
        total.done as f64 / elapsed
    );
    println!(
        "requests: {done} total, {done} started, {done} done, {} succeeded, {} failed, {} errored, 0 timeout",
        total.succeeded,
        total.failed,
        total.errored,
        done = total.done,
    );
    println!(
        "time for request: {:.0}us {:.0}us {mean:.2}us 0us 0.00%",
        total.min_us, total.max_us
    );
}
