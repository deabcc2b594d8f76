//! h2load: the command line and its report.
//!
//! h2load reports counts, a mean and a standard deviation, but no latency percentiles; the
//! harness reports its mean and leaves p50/p95/p99 empty rather than inventing them.

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::harness::load::{LoadGen, LoadResult, Tool};
use crate::harness::server::Launch;
use crate::harness::tools;

/// The h2load command: `-c` connections, `streams` streams each (the scenario's:
/// [`H2_STREAMS`](crate::harness::load::H2_STREAMS) but for the one-stream scenario), one thread per load CPU, timing-based
/// for `window` (h2load takes milliseconds, so fractions need no trick).
pub(crate) fn launch(load: &LoadGen, url: &str, window: Duration, streams: usize) -> Launch {
    Launch {
        program: tools::program("h2load"),
        args: vec![
            format!("-c{}", load.connections).into(),
            format!("-m{streams}").into(),
            format!("-t{}", load.threads()).into(),
            "-D".into(),
            format!("{}ms", window.as_millis().max(1)).into(),
            url.into(),
        ],
        env: vec![],
    }
}

/// A duration as h2load prints it (`2.03s`, `501.32ms`, `39us`), in microseconds.
fn parse_duration_us(text: &str) -> Option<f64> {
    let text = text.trim().trim_end_matches(',');
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    Some(number.parse::<f64>().ok()? * scale)
}

/// `"33518 total, 34158 started, ..."` -> the number before `label`.
fn count_before(line: &str, label: &str) -> Option<u64> {
    line.split(',').find_map(|part| {
        let mut words = part.split_ascii_whitespace();
        let n = words.next()?;
        (words.next()? == label).then(|| n.parse().ok())?
    })
}

/// Parses h2load's report.
///
/// # Errors
///
/// When a line the harness needs is missing or malformed (h2load failed early).
pub(crate) fn parse(stdout: &str) -> anyhow::Result<LoadResult> {
    let line = |prefix: &str| -> anyhow::Result<&str> {
        stdout
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(prefix))
            .with_context(|| format!("h2load printed no {prefix:?} line"))
    };
    let finished = line("finished in ")?;
    let duration_us = finished
        .split(',')
        .next()
        .and_then(parse_duration_us)
        .with_context(|| format!("unparsable duration in {finished:?}"))?;

    // Only the `requests:` counts are confined to the measured window: h2load also counts
    // the status codes of responses that arrive after it (seen here: 5611 2xx for 5459
    // done), so `status codes:` is not used for the figures.
    let requests = line("requests:")?;
    let get = |label: &str| {
        count_before(requests, label).with_context(|| format!("no {label:?} count in {requests:?}"))
    };
    let done = get("done")?;
    let succeeded = get("succeeded")?;
    let failed = get("failed")?;
    // Streams that ended without a response (reset, connection lost or timed out); h2load
    // counts them in `done` and in `failed` too.
    let errored = get("errored")?;
    if succeeded + failed != done || errored > failed {
        bail!("h2load: inconsistent counts in {requests:?}");
    }

    let request_times = line("time for request:")?;
    let fields: Vec<&str> = request_times.split_ascii_whitespace().collect();
    // min max mean sd +/-sd
    let mean_us = fields
        .get(2)
        .and_then(|f| parse_duration_us(f))
        .with_context(|| format!("no mean in {request_times:?}"))?;
    Ok(LoadResult {
        tool: Tool::H2load,
        // h2load's `succeeded` are 2xx and 3xx responses (like wrk, it treats 3xx as
        // success); `failed` holds statuses >= 400 and the errored streams.
        responses: done - errored,
        non_2xx: failed - errored,
        transport_errors: errored,
        duration_s: duration_us / 1e6,
        mean_us,
        p50_us: None,
        p95_us: None,
        p99_us: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::cpuset::CpuSet;

    /// Captured on this machine: `taskset -c 1 h2load -c64 -m10 -t1 -D 2
    /// https://127.0.0.1:P/small.txt` against nginx 1.22.1 (TLS 1.3, h2).
    const TLS: &str = include_str!("testdata/h2load_tls.txt");
    /// The same for a path nginx answers 404 (`-c4 -D 1`).
    const NOT_FOUND: &str = include_str!("testdata/h2load_404.txt");

    #[test]
    fn a_real_report_parses() {
        let r = parse(TLS).unwrap();
        assert_eq!(r.tool, Tool::H2load);
        assert_eq!(r.responses, 33_518);
        assert_eq!(r.non_2xx, 0);
        assert_eq!(r.transport_errors, 0);
        assert!((r.duration_s - 2.03).abs() < 1e-9);
        assert!((r.mean_us - 31_710.0).abs() < 1e-6);
        assert_eq!((r.p50_us, r.p95_us, r.p99_us), (None, None, None));
        assert_eq!(r.success_rate(), 1.0);
    }

    #[test]
    fn error_statuses_are_non_2xx() {
        let r = parse(NOT_FOUND).unwrap();
        assert_eq!(r.responses, 21_877);
        assert_eq!(r.non_2xx, 21_877);
        assert!((r.mean_us - 1760.0).abs() < 1e-6);
        assert!((r.duration_s - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_truncated_report_is_an_error() {
        let cut: String = TLS.lines().take(20).collect::<Vec<_>>().join("\n");
        assert!(parse(&cut).is_err());
    }

    #[test]
    fn durations_in_every_unit() {
        let close = |text: &str, us: f64| (parse_duration_us(text).unwrap() - us).abs() < 1e-6;
        assert!(close("39us", 39.0));
        assert!(close("501.32ms,", 501_320.0));
        assert!(close("2.03s", 2_030_000.0));
        assert_eq!(parse_duration_us("2.03"), None);
    }

    #[test]
    fn command_line_uses_milliseconds_and_streams() {
        let load = LoadGen {
            cpus: CpuSet::parse("1").unwrap(),
            connections: 64,
        };
        let l = launch(
            &load,
            "https://127.0.0.1:1/small.txt",
            Duration::from_millis(500),
            10,
        );
        let args: Vec<_> = l.args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "-c64",
                "-m10",
                "-t1",
                "-D",
                "500ms",
                "https://127.0.0.1:1/small.txt"
            ]
        );
        let one = launch(&load, "https://127.0.0.1:1/", Duration::from_secs(1), 1);
        assert!(one.args.iter().any(|a| a == "-m1"));
    }
}
