//! `bench soak`: scb under mixed load for a bounded time, with its resident memory and open
//! descriptors sampled as it goes and every error counted by kind.
//!
//! One `scb run` (two workers, a plain and a TLS listener) serves a fixed response, static
//! files and a reverse proxy to an upstream of the harness's own that drops one request in
//! 25 without an answer. In every chunk of the run, side by side:
//!
//! - wrk, keep-alive, over the fixed response and a hundred static files: no error allowed;
//! - wrk on the proxy route: 502s expected (the upstream's drops), nothing else;
//! - wrk with `Connection: close`: a new connection per request, no error allowed;
//! - h2load over TLS (HTTP/2) on a static file: no error allowed;
//! - misbehaving clients: garbage, a half head then a close, a slow head, a connect and
//!   close, a request abandoned mid-response.
//!
//! Beside the load, idle keep-alive connections (`--idle-plain`, `--idle-tls`) stay open
//! for the whole run after one request each, and must all answer a second one at the
//! end: a crowded worker gives their buffers back while they wait.
//!
//! After each chunk the server's RSS and descriptors are sampled. The run passes when no
//! unexpected error was seen, the RSS of the last sample is within 10% (and 2 MiB) of the
//! first, the descriptors settle back to the count of an idle server once the load stops,
//! and the server logged no error.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::harness::cert;
use crate::harness::cpuset::CpuSet;
use crate::harness::load::LoadResult;
use crate::harness::ports::{free_ports, local, wait_until_accepting};
use crate::harness::process::ServerProcess;
use crate::harness::run::progress;
use crate::harness::server::Launch;
use crate::harness::{h2load, tools, wrk};

/// The flags of `bench soak`.
#[derive(Debug, clap::Args)]
pub(crate) struct SoakArgs {
    /// Seconds of load in all.
    #[arg(long, default_value_t = 600, value_name = "S")]
    pub(crate) time: u64,
    /// Seconds per chunk: the loads restart and the server is sampled after each.
    #[arg(long, default_value_t = 20, value_name = "S")]
    pub(crate) chunk: u64,
    /// The scb binary (a release build).
    #[arg(long, value_name = "PATH")]
    pub(crate) scb: PathBuf,
    /// Idle plain keep-alive connections held open through the run.
    #[arg(long, default_value_t = 2_000, value_name = "N")]
    pub(crate) idle_plain: usize,
    /// Idle TLS keep-alive connections held open through the run.
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub(crate) idle_tls: usize,
    /// Output directory. Default `bench/out/<UTC timestamp>-soak`.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

/// One in this many upstream requests is dropped without an answer.
const UPSTREAM_DROP_EVERY: u64 = 25;

/// Idle upstream connections each worker keeps: after the load they stay open (an idle
/// pool is not swept without traffic), so the descriptor check allows this many per
/// worker above the idle count.
const POOL_PER_WORKER: usize = 4;

/// scb's workers in the soak.
const WORKERS: usize = 2;

/// Static files in the mix (1 KiB each).
const FILES: usize = 100;

/// The server's state after a chunk.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    at_s: f64,
    rss_kib: u64,
    fds: usize,
    threads: usize,
}

/// What the loads of the whole run saw.
#[derive(Debug, Default)]
struct Tally {
    keep_alive: Counts,
    proxy: Counts,
    new_connections: Counts,
    h2: Counts,
    broken_clients: u64,
    /// Idle connections opened before the load.
    idle_opened: usize,
    /// Of those, how many did not answer their second request at the end.
    idle_lost: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    responses: u64,
    non_2xx: u64,
    transport_errors: u64,
}

impl Counts {
    fn add(&mut self, load: &LoadResult) {
        self.responses += load.responses;
        self.non_2xx += load.non_2xx;
        self.transport_errors += load.transport_errors;
    }
}

/// Runs the soak; `Ok(false)` when it saw an unexpected error, growth or a leak.
pub(crate) fn run(args: &SoakArgs) -> anyhow::Result<bool> {
    crate::harness::process::install_signal_cleanup()?;
    tools::ensure_tools(vec![tools::WRK, tools::H2LOAD])?;
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench/out")
            .join(format!("{}-soak", scb_core::date::UtcTime::now().compact()))
    });
    let work = out.join("work");
    fs::create_dir_all(work.join("docroot/files"))?;
    let work = work.canonicalize()?;
    let docroot = work.join("docroot");
    for i in 0..FILES {
        fs::write(
            docroot.join(format!("files/{i:03}.txt")),
            &format!("{i:03}").repeat(342).as_bytes()[..1024],
        )?;
    }
    let cert = cert::create(&work)?;
    crate::harness::idle::raise_descriptor_limit(args.idle_plain + args.idle_tls + 1024)?;

    let upstream = Upstream::start()?;
    let [plain, tls] = free_ports::<2>()?;
    let config = work.join("scb.toml");
    fs::write(
        &config,
        format!(
            "[server]\nworkers = {WORKERS}\n\n\
             [limits]\nkeep_alive_timeout = \"{}s\"\n\n[[listen]]\naddr = \"127.0.0.1:{plain}\"\n\n\
             [[listen]]\naddr = \"127.0.0.1:{tls}\"\ntls = {{ cert = {:?}, key = {:?} }}\n\n\
             [[route]]\npath = \"/respond\"\nrespond = {{ status = 200, body = \"Hello, world!\" }}\n\n\
             [[route]]\nprefix = \"/proxy/\"\nproxy = {{ upstreams = [\"{}\"], max_idle = {POOL_PER_WORKER} }}\n\n\
             [[route]]\nprefix = \"/\"\nstatic = {{ root = {:?} }}\n",
            // The idle connections stay open through the run.
            args.time + 120,
            cert.cert.display().to_string(),
            cert.key.display().to_string(),
            upstream.addr,
            docroot.display().to_string()
        ),
    )?;
    let launch = Launch {
        program: args.scb.clone(),
        args: vec!["run".into(), "--config".into(), config.into()],
        env: vec![("RUST_LOG".into(), "warn".into())],
    };
    let log = work.join("scb.log");
    let mut server = ServerProcess::start("scb", &CpuSet::online()?, &launch, &log)?;
    wait_until_accepting(&mut server, local(plain))?;
    wait_until_accepting(&mut server, local(tls))?;
    let pid = server.pid();
    let idle_fds = count_fds(pid)?;

    let mix = work.join("mix.lua");
    let mut paths: Vec<String> = (0..FILES).map(|i| format!("/files/{i:03}.txt")).collect();
    paths.extend(std::iter::repeat_n("/respond".to_owned(), FILES / 4));
    fs::write(&mix, wrk::script(&paths, 1))?;
    let plain_script = work.join("plain.lua");
    fs::write(&plain_script, wrk::script(&["/".to_owned()], 1))?;

    let mut tally = Tally::default();
    let tls_config = crate::harness::idle::client_config(&cert)?;
    let mut idle = Vec::with_capacity(args.idle_plain + args.idle_tls);
    for (port, count, tls) in [
        (plain, args.idle_plain, None),
        (tls, args.idle_tls, Some(&tls_config)),
    ] {
        for i in 0..count {
            let mut stream = crate::harness::idle::connect(local(port), tls)
                .with_context(|| format!("idle connection {i} to port {port}"))?;
            crate::harness::idle::exchange(&mut stream)
                .with_context(|| format!("idle connection {i} to port {port}"))?;
            idle.push(stream);
        }
    }
    tally.idle_opened = idle.len();
    progress(&format!("soak: {} idle connections open", idle.len()));

    let start = Instant::now();
    let mut samples = Vec::new();
    let mut chunk = 0;
    while start.elapsed() < Duration::from_secs(args.time) {
        chunk += 1;
        let secs = args
            .chunk
            .min(args.time.saturating_sub(start.elapsed().as_secs()))
            .max(1);
        run_chunk(plain, tls, secs, &mix, &plain_script, &work, &mut tally)
            .with_context(|| format!("chunk {chunk}"))?;
        server.ensure_running()?;
        let sample = sample(pid, start)?;
        progress(&format!(
            "soak {:.0}/{} s: rss {} KiB, {} descriptors, {} threads",
            sample.at_s, args.time, sample.rss_kib, sample.fds, sample.threads
        ));
        samples.push(sample);
    }
    // Every idle connection is still there and still answers.
    tally.idle_lost = idle
        .iter_mut()
        .map(crate::harness::idle::exchange)
        .filter(Result::is_err)
        .count();
    drop(idle);
    // Once the load stops, every connection closes: the descriptors go back to idle.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut settled = count_fds(pid)?;
    let allowed_fds = idle_fds + WORKERS * POOL_PER_WORKER;
    while settled > allowed_fds && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
        settled = count_fds(pid)?;
    }
    server.stop()?;
    let logged_errors = fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" ERROR "))
        .count();

    let verdict = Verdict::of(
        &samples,
        allowed_fds,
        settled,
        &tally,
        upstream.dropped(),
        logged_errors,
    );
    let report = render(
        args, &samples, idle_fds, settled, &tally, &upstream, &verdict,
    );
    crate::harness::run::publish(&out, "soak.md", &report)?;
    Ok(verdict.problems.is_empty())
}

/// Runs every load of one chunk side by side.
fn run_chunk(
    plain: u16,
    tls: u16,
    secs: u64,
    mix: &Path,
    plain_script: &Path,
    work: &Path,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let base = format!("http://127.0.0.1:{plain}");
    let wrk = |connections: usize, script: &Path, url: String, extra: &[&str]| {
        let mut command = Command::new(tools::program("wrk"));
        command
            .args(["-t1", &format!("-c{connections}"), &format!("-d{secs}s")])
            .args(extra)
            .arg("-s")
            .arg(script)
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        command.spawn()
    };
    let keep_alive = wrk(32, mix, format!("{base}/"), &[])?;
    let proxy = wrk(8, plain_script, format!("{base}/proxy/soak"), &[])?;
    let new_connections = wrk(
        4,
        plain_script,
        format!("{base}/respond"),
        &["-H", "Connection: close"],
    )?;
    let h2 = Command::new(tools::program("h2load"))
        .args([
            "-c8",
            "-m10",
            "-t1",
            "-D",
            &format!("{}ms", secs * 1000),
            &format!("https://127.0.0.1:{tls}/files/007.txt"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stop = Arc::new(AtomicBool::new(false));
    let broken = {
        let stop = Arc::clone(&stop);
        let addr = local(plain);
        thread::spawn(move || misbehave(addr, &stop))
    };

    let output = |child: std::process::Child, name: &str| -> anyhow::Result<String> {
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        fs::write(work.join(format!("last-{name}.txt")), &text)?;
        Ok(text)
    };
    tally
        .keep_alive
        .add(&wrk::parse(&output(keep_alive, "keep-alive")?)?);
    tally.proxy.add(&wrk::parse(&output(proxy, "proxy")?)?);
    tally
        .new_connections
        .add(&wrk::parse(&output(new_connections, "new-connections")?)?);
    tally.h2.add(&h2load::parse(&output(h2, "h2")?)?);
    stop.store(true, Ordering::Relaxed);
    tally.broken_clients += broken
        .join()
        .map_err(|_| anyhow::anyhow!("client thread"))?;
    Ok(())
}

/// Misbehaving clients, one after another until `stop`; returns how many.
fn misbehave(addr: SocketAddr, stop: &AtomicBool) -> u64 {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let Ok(mut s) = TcpStream::connect(addr) else {
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let _ = match n % 5 {
            0 => s.write_all(b"\x16\x03\x01 garbage\r\n\r\n"),
            1 => s.write_all(b"GET /respond HTTP/1.1\r\nHo"),
            2 => (|| {
                for b in b"GET /res" {
                    s.write_all(&[*b])?;
                    thread::sleep(Duration::from_millis(20));
                }
                Ok(())
            })(),
            3 => Ok(()),
            _ => s
                .write_all(b"GET /files/001.txt HTTP/1.1\r\nHost: t\r\n\r\n")
                .and_then(|()| s.read(&mut [0u8; 16]).map(drop)),
        };
        drop(s);
    }
    n
}

/// The upstream of the proxy route: answers `ok` on keep-alive connections, and drops one
/// request in [`UPSTREAM_DROP_EVERY`] by closing its connection without a word.
struct Upstream {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
}

impl Upstream {
    fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the upstream")?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&requests);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let count = Arc::clone(&count);
                thread::spawn(move || serve_upstream(stream, &count));
            }
        });
        Ok(Self { addr, requests })
    }

    fn dropped(&self) -> u64 {
        self.requests.load(Ordering::Relaxed) / UPSTREAM_DROP_EVERY
    }
}

fn serve_upstream(mut stream: TcpStream, count: &AtomicU64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            let n = count.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(UPSTREAM_DROP_EVERY) {
                return;
            }
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn count_fds(pid: i32) -> anyhow::Result<usize> {
    Ok(fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("reading /proc/{pid}/fd"))?
        .count())
}

fn sample(pid: i32, start: Instant) -> anyhow::Result<Sample> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let (Some(rss_kib), Some(threads)) = (field("VmRSS:"), field("Threads:")) else {
        bail!("no VmRSS or Threads in /proc/{pid}/status");
    };
    Ok(Sample {
        at_s: start.elapsed().as_secs_f64(),
        rss_kib,
        fds: count_fds(pid)?,
        threads: usize::try_from(threads)?,
    })
}

/// Whether the run passed, and what went wrong if not.
#[derive(Debug, Default)]
struct Verdict {
    problems: Vec<String>,
}

impl Verdict {
    fn of(
        samples: &[Sample],
        allowed_fds: usize,
        settled_fds: usize,
        tally: &Tally,
        upstream_drops: u64,
        logged_errors: usize,
    ) -> Self {
        let mut problems = Vec::new();
        for (name, counts) in [
            ("keep-alive mix", tally.keep_alive),
            ("new connections", tally.new_connections),
            ("HTTP/2 over TLS", tally.h2),
        ] {
            if counts.non_2xx + counts.transport_errors > 0 {
                problems.push(format!(
                    "{name}: {} non-2xx, {} transport errors",
                    counts.non_2xx, counts.transport_errors
                ));
            }
        }
        // Each drop is a 502 (on a fresh connection) or, on a reused one, a replay that
        // succeeds: never more 502s than drops, never a transport error.
        if tally.proxy.non_2xx > upstream_drops || tally.proxy.transport_errors > 0 {
            problems.push(format!(
                "proxy: {} non-2xx for {upstream_drops} upstream drops, {} transport errors",
                tally.proxy.non_2xx, tally.proxy.transport_errors
            ));
        }
        if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
            let allowed = first.rss_kib + (first.rss_kib / 10).max(2048);
            if last.rss_kib > allowed {
                problems.push(format!(
                    "RSS grew from {} KiB to {} KiB",
                    first.rss_kib, last.rss_kib
                ));
            }
        }
        if settled_fds > allowed_fds {
            problems.push(format!(
                "{settled_fds} descriptors open after the load, at most {allowed_fds} allowed"
            ));
        }
        if logged_errors > 0 {
            problems.push(format!("{logged_errors} ERROR lines in the server's log"));
        }
        if tally.idle_lost > 0 {
            problems.push(format!(
                "{} of {} idle connections did not answer at the end",
                tally.idle_lost, tally.idle_opened
            ));
        }
        Self { problems }
    }
}

fn render(
    args: &SoakArgs,
    samples: &[Sample],
    idle_fds: usize,
    settled_fds: usize,
    tally: &Tally,
    upstream: &Upstream,
    verdict: &Verdict,
) -> String {
    let mut out = format!(
        "# soak: {} s of mixed load in {} s chunks\n\n\
         | load | responses | non-2xx | transport errors |\n| --- | --: | --: | --: |\n",
        args.time, args.chunk
    );
    for (name, c) in [
        (
            "keep-alive mix (respond, 100 static files)",
            tally.keep_alive,
        ),
        ("proxy (upstream drops 1 in 25)", tally.proxy),
        ("new connection per request", tally.new_connections),
        ("HTTP/2 over TLS", tally.h2),
    ] {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} |",
            c.responses, c.non_2xx, c.transport_errors
        );
    }
    let _ = writeln!(
        out,
        "\nMisbehaving clients: {}. Idle keep-alive connections held through the run: {} \
         ({} plain, {} TLS; {} did not answer at the end). Upstream requests: {}, dropped: {}.\n\n\
         | at s | RSS KiB | descriptors | threads |\n| --: | --: | --: | --: |",
        tally.broken_clients,
        tally.idle_opened,
        args.idle_plain,
        args.idle_tls,
        tally.idle_lost,
        upstream.requests.load(Ordering::Relaxed),
        upstream.dropped()
    );
    for s in samples {
        let _ = writeln!(
            out,
            "| {:.0} | {} | {} | {} |",
            s.at_s, s.rss_kib, s.fds, s.threads
        );
    }
    let _ = writeln!(
        out,
        "\nDescriptors when idle before the load: {idle_fds}; after it: {settled_fds} (up to \
         {} idle upstream connections may stay pooled).\n",
        WORKERS * POOL_PER_WORKER
    );
    if verdict.problems.is_empty() {
        out.push_str("Verdict: passed.\n");
    } else {
        out.push_str("Verdict: FAILED\n");
        for p in &verdict.problems {
            let _ = writeln!(out, "- {p}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rss_kib: u64, fds: usize) -> Sample {
        Sample {
            at_s: 0.0,
            rss_kib,
            fds,
            threads: 3,
        }
    }

    fn clean() -> Tally {
        let ok = Counts {
            responses: 1000,
            non_2xx: 0,
            transport_errors: 0,
        };
        Tally {
            keep_alive: ok,
            proxy: Counts { non_2xx: 3, ..ok },
            new_connections: ok,
            h2: ok,
            broken_clients: 10,
            idle_opened: 100,
            idle_lost: 0,
        }
    }

    #[test]
    fn a_clean_run_passes() {
        let v = Verdict::of(
            &[sample(10_000, 20), sample(10_500, 40)],
            12,
            12,
            &clean(),
            3,
            0,
        );
        assert!(v.problems.is_empty(), "{:?}", v.problems);
    }

    #[test]
    fn growth_leaks_and_unexpected_errors_fail_the_run() {
        let mut tally = clean();
        tally.h2.transport_errors = 1;
        tally.proxy.non_2xx = 5;
        tally.idle_lost = 2;
        let v = Verdict::of(
            &[sample(10_000, 20), sample(13_000, 40)],
            12,
            14,
            &tally,
            3,
            2,
        );
        let text = v.problems.join("\n");
        assert!(
            text.contains("HTTP/2 over TLS: 0 non-2xx, 1 transport errors"),
            "{text}"
        );
        assert!(
            text.contains("proxy: 5 non-2xx for 3 upstream drops"),
            "{text}"
        );
        assert!(
            text.contains("RSS grew from 10000 KiB to 13000 KiB"),
            "{text}"
        );
        assert!(
            text.contains("14 descriptors open after the load, at most 12 allowed"),
            "{text}"
        );
        assert!(
            text.contains("2 of 100 idle connections did not answer at the end"),
            "{text}"
        );
        assert!(text.contains("2 ERROR lines"), "{text}");
    }
}
