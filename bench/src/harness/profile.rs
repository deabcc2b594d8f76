//! `bench profile SCENARIO`: why scb costs what it costs, in counts that explain a
//! benchmark figure — syscalls per request (`strace -c -f`), context switches per request
//! (`/proc/PID/task/*/status`), instructions and cycles per request (`perf stat`, where the
//! machine has counters), and user-space instructions per request from callgrind, which do
//! not depend on machine noise.
//!
//! Each count comes from its own load window against the same scb build and config as the
//! benchmark, with only that instrument attached (strace and valgrind slow the server a lot;
//! their counts per request stay exact).

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use crate::harness::cli::ProfileArgs;
use crate::harness::load::LoadResult;
use crate::harness::run::{Ctx, Started, prepare, start_upstream, start_verified};
use crate::harness::scenario::Scenario;
use crate::harness::server::Server;
use crate::harness::settings::Settings;
use crate::harness::{php, tools, wrk};

/// Default measured seconds per instrument.
const DURATION: f64 = 5.0;
/// Connections under callgrind: valgrind serialises the server, and fewer connections keep
/// the window's request count high enough without timeouts.
const CALLGRIND_CONNECTIONS: usize = 8;

/// Runs the profile; `Ok(false)` never happens (a failure is an error).
pub(crate) fn run(args: ProfileArgs, argv: &[String]) -> anyhow::Result<bool> {
    crate::harness::process::install_signal_cleanup()?;
    let scenario = args.scenario;
    let mut run_args = args.run;
    run_args.servers = vec![Server::Scb];
    run_args.scenarios = vec![scenario];
    run_args.duration = Some(run_args.duration.unwrap_or(DURATION));
    run_args.warmup = Some(run_args.warmup.unwrap_or(1.0));
    let settings = Settings::from_args(run_args, argv)?;
    if !Server::Scb.supports(scenario) {
        bail!("scb does not serve {scenario} yet, so there is nothing to profile");
    }
    let mut needed = tools::needed(&settings);
    needed.extend([tools::STRACE, tools::VALGRIND, tools::CALLGRIND_CONTROL]);
    tools::ensure_tools(needed)?;

    let (work, fixtures, cert) = prepare(&settings)?;
    let ctx = Ctx {
        settings: &settings,
        fixtures: &fixtures,
        cert: &cert,
        work: &work,
    };
    let dir = work.join(format!("profile-{scenario}"));
    fs::create_dir_all(&dir)?;
    let script = dir.join("load.lua");
    let mut lua = wrk::script(&scenario.load_paths(&fixtures), settings.load.threads());
    if scenario.closes() {
        lua = wrk::closing(&lua);
    }
    fs::write(&script, lua)?;
    let expected = scenario.expected(&fixtures);
    let mut upstream = if scenario.needs_upstream() {
        Some(start_upstream(&ctx, &dir, scenario)?)
    } else {
        None
    };
    let upstream_port = upstream.as_ref().map_or(0, |u| u.port);
    let mut php_fpm = if scenario.needs_php_fpm() {
        let binary = php::binary().with_context(php::missing)?;
        Some(php::start(&ctx, &dir, &binary)?)
    } else {
        None
    };

    let mut report = String::new();
    let _ = writeln!(
        report,
        "# scb profile: {scenario}\n\n{} s per instrument, {} connections (callgrind: {}), \
         server CPUs {}, load CPUs {}, {} worker(s).\n",
        settings.duration,
        settings.load.connections,
        CALLGRIND_CONNECTIONS,
        settings.server_cpus.as_str(),
        settings.load.cpus.as_str(),
        settings.workers
    );

    // 1. Plain: context switches, threads, and perf counters where there are any.
    let plain = |name: &str| {
        start_verified(
            &ctx,
            scenario,
            Server::Scb,
            &dir.join(name),
            upstream_port,
            &expected,
            &[],
        )
        .map_err(|(stage, e)| e.context(format!("starting scb ({stage:?})")))
    };
    let mut started = plain("switches")?;
    warm_up(&settings, &started, scenario, &script)?;
    let pid = started.process.pid();
    let before = switches(pid)?;
    let perf = perf_available().then(|| PerfStat::start(pid, &started.dir));
    let load = measured(&settings, &started, scenario, &script, "load-switches.txt")?;
    let after = switches(pid)?;
    let perf = perf.transpose()?.map(PerfStat::finish).transpose()?;
    let threads = fs::read_dir(format!("/proc/{pid}/task"))?.count();
    started.process.stop()?;
    let requests = load.responses.max(1) as f64;
    let _ = writeln!(
        report,
        "| figure | per request | total |\n|---|--:|--:|\n\
         | requests (plain run) | 1 | {} |\n\
         | voluntary context switches | {:.4} | {} |\n\
         | involuntary context switches | {:.4} | {} |\n\
         | server threads | - | {threads} |",
        load.responses,
        (after.0 - before.0) as f64 / requests,
        after.0 - before.0,
        (after.1 - before.1) as f64 / requests,
        after.1 - before.1,
    );
    match perf {
        Some((instructions, cycles)) => {
            let _ = writeln!(
                report,
                "| instructions, user + kernel (perf) | {:.0} | {instructions} |\n\
                 | cycles (perf) | {:.0} | {cycles} |",
                instructions as f64 / requests,
                cycles as f64 / requests
            );
        }
        None => {
            let _ = writeln!(report, "| perf counters | n/a on this machine | |");
        }
    }

    // 2. strace: syscalls per request, by call.
    let mut started = plain("strace")?;
    warm_up(&settings, &started, scenario, &script)?;
    let strace_out = started.dir.join("strace.txt");
    let strace = Strace::attach(started.process.pid(), &strace_out)?;
    let load = measured(&settings, &started, scenario, &script, "load-strace.txt")?;
    let calls = strace.finish(&strace_out)?;
    started.process.stop()?;
    let requests = load.responses.max(1) as f64;
    let total: u64 = calls.iter().map(|(_, n)| n).sum();
    let _ = writeln!(
        report,
        "| syscalls (strace -c -f) | {:.2} | {total} |",
        total as f64 / requests
    );
    for (name, n) in calls.iter().take(8) {
        let _ = writeln!(
            report,
            "| &nbsp;&nbsp;{name} | {:.3} | {n} |",
            *n as f64 / requests
        );
    }

    // 3. callgrind: user-space instructions per request, counted only in the window.
    let cg_out = dir.join("callgrind").join("callgrind.out");
    fs::create_dir_all(dir.join("callgrind"))?;
    let cg_flag = format!("--callgrind-out-file={}", cg_out.display());
    let wrap = [
        "valgrind",
        "--tool=callgrind",
        // Uninstrumented (fast) until the measured window switches it on: start-up and
        // warm-up cost nothing and count nothing.
        "--instr-atstart=no",
        cg_flag.as_str(),
    ];
    let mut started = start_verified(
        &ctx,
        scenario,
        Server::Scb,
        &dir.join("callgrind"),
        upstream_port,
        &expected,
        &wrap,
    )
    .map_err(|(stage, e)| e.context(format!("starting scb under callgrind ({stage:?})")))?;
    let pid = started.process.pid();
    callgrind_control(pid, "on")?;
    let mut cg_settings = settings.clone();
    cg_settings.load.connections = CALLGRIND_CONNECTIONS.max(settings.load.threads());
    let load = measured(
        &cg_settings,
        &started,
        scenario,
        &script,
        "load-callgrind.txt",
    )?;
    callgrind_control(pid, "off")?;
    started.process.stop()?;
    let instructions = callgrind_total(&cg_out)?;
    let responses = load.responses.max(1) as f64;
    let _ = writeln!(
        report,
        "| user-space instructions (callgrind) | {:.0} | {instructions} |",
        instructions as f64 / responses
    );
    let text = fs::read_to_string(&cg_out)?;
    let allocs = allocations(&text);
    let _ = writeln!(
        report,
        "| heap allocations (callgrind: calls into the allocator) | {:.2} | {} |",
        allocs.total as f64 / responses,
        allocs.total
    );
    for (caller, n) in allocs.by_caller.iter().take(6) {
        let _ = writeln!(
            report,
            "| &nbsp;&nbsp;from `{}` | {:.2} | {n} |",
            short(caller),
            *n as f64 / responses
        );
    }
    let _ = writeln!(
        report,
        "\nThe callgrind profile is in `{}` (`callgrind_annotate --inclusive=yes` reads it).",
        cg_out.display()
    );

    if let Some(up) = &mut upstream {
        up.process.stop()?;
    }
    if let Some(php_fpm) = &mut php_fpm {
        php_fpm.stop()?;
    }
    crate::harness::run::publish(&settings.out, "profile.md", &report)?;
    Ok(true)
}

fn warm_up(
    settings: &Settings,
    started: &Started,
    scenario: Scenario,
    script: &Path,
) -> anyhow::Result<()> {
    if settings.warmup > 0.0 {
        settings
            .load
            .run(
                &started.target(scenario, script),
                settings.warmup,
                &started.dir.join("load-warmup.txt"),
            )
            .context("warm-up")?;
    }
    Ok(())
}

fn measured(
    settings: &Settings,
    started: &Started,
    scenario: Scenario,
    script: &Path,
    transcript: &str,
) -> anyhow::Result<LoadResult> {
    let load = settings.load.run(
        &started.target(scenario, script),
        settings.duration,
        &started.dir.join(transcript),
    )?;
    if load.responses == 0 {
        bail!("no responses in the measured window");
    }
    Ok(load)
}

/// Voluntary and involuntary context switches of every thread of `pid`.
fn switches(pid: i32) -> anyhow::Result<(u64, u64)> {
    let mut total = (0, 0);
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let status = fs::read_to_string(task?.path().join("status")).unwrap_or_default();
        let (v, n) = parse_switches(&status);
        total.0 += v;
        total.1 += n;
    }
    Ok(total)
}

/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` from a status file.
fn parse_switches(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// Whether `perf stat` can count instructions here (many VMs have no counters).
fn perf_available() -> bool {
    Command::new("perf")
        .args(["stat", "-x,", "-e", "instructions", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .is_ok_and(|o| {
            o.status.success() && !String::from_utf8_lossy(&o.stderr).contains("not supported")
        })
}

/// `perf stat` attached to the server for the window.
struct PerfStat {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl PerfStat {
    fn start(pid: i32, dir: &Path) -> anyhow::Result<Self> {
        let out = dir.join("perf.csv");
        let child = Command::new("perf")
            .args(["stat", "-x,", "-e", "instructions,cycles", "-o"])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting perf stat")?;
        Ok(Self { child, out })
    }

    /// Stops perf (SIGINT makes it print) and returns (instructions, cycles).
    fn finish(mut self) -> anyhow::Result<(u64, u64)> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id())?)
            .context("perf's pid")?;
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        self.child.wait()?;
        let text = fs::read_to_string(&self.out)?;
        let count = |event: &str| {
            text.lines()
                .find(|l| l.contains(event))
                .and_then(|l| l.split(',').next())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok((count("instructions"), count("cycles")))
    }
}

/// `strace -c -f` attached to the server for the window.
struct Strace {
    child: std::process::Child,
}

impl Strace {
    /// Attaches and waits until strace reports itself attached to the server's threads.
    fn attach(pid: i32, out: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(tools::program("strace"))
            .args(["-c", "-f", "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting strace")?;
        let stderr = child.stderr.take().context("strace's stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        // strace announces each thread it attaches to; the first line means it is in.
        match lines.next() {
            Some(Ok(line)) if line.contains("attached") => {}
            other => bail!("strace did not attach: {other:?}"),
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Self { child })
    }

    /// Detaches (SIGINT) and returns the calls per syscall, most frequent first.
    fn finish(mut self, out: &Path) -> anyhow::Result<Vec<(String, u64)>> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id())?)
            .context("strace's pid")?;
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        self.child.wait()?;
        let text = fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
        Ok(parse_strace(&text))
    }
}

/// The `calls` column of an `strace -c` summary, by syscall, most frequent first.
fn parse_strace(text: &str) -> Vec<(String, u64)> {
    let mut calls: Vec<(String, u64)> = text
        .lines()
        .filter(|l| !l.starts_with('%') && !l.starts_with('-'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let name = (*fields.last()?).to_owned();
            if name == "total" || fields.len() < 5 {
                return None;
            }
            // % time, seconds, usecs/call, calls, [errors,] syscall
            let n = fields.get(3)?.parse().ok()?;
            Some((name, n))
        })
        .collect();
    calls.sort_by_key(|c| std::cmp::Reverse(c.1));
    calls
}

fn callgrind_control(pid: i32, state: &str) -> anyhow::Result<()> {
    let status = Command::new(tools::program("callgrind_control"))
        .args(["-i", state, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running callgrind_control")?;
    if !status.success() {
        bail!("callgrind_control -i {state} {pid} failed ({status})");
    }
    Ok(())
}

/// Heap allocations in a callgrind profile: calls into the allocator's entry points from
/// outside the allocator, by calling function, most first.
#[derive(Debug, Default, PartialEq, Eq)]
struct Allocations {
    total: u64,
    by_caller: Vec<(String, u64)>,
}

/// Whether `function` is an entry point that allocates: mimalloc's (the `scb` binary's
/// allocator) or the C library's.
fn allocates(function: &str) -> bool {
    const ENTRIES: [&str; 7] = [
        "mi_malloc",
        "mi_zalloc",
        "mi_calloc",
        "mi_realloc",
        "malloc",
        "calloc",
        "realloc",
    ];
    ENTRIES.iter().any(|e| {
        function == *e
            || function
                .strip_prefix(e)
                .is_some_and(|rest| rest.starts_with('_'))
    })
}

/// Whether `function` belongs to an allocator (its internal calls are not allocations).
fn in_allocator(function: &str) -> bool {
    function.starts_with("mi_") || function.starts_with("_mi_") || allocates(function)
}

/// Reads callgrind's format: `fn=(id) name` starts a function's records, `cfn=(id)
/// [name]` names a callee and the `calls=N ...` line after it counts the calls; a name is
/// given once per id and then referred to by the id alone.
fn allocations(text: &str) -> Allocations {
    use std::collections::HashMap;
    fn name_of<'a>(spec: &'a str, names: &mut HashMap<&'a str, &'a str>) -> &'a str {
        let spec = spec.trim();
        let (id, name) = match spec.split_once(' ') {
            Some((id, name)) => (id, name.trim()),
            None => (spec, ""),
        };
        if !name.is_empty() {
            names.insert(id, name);
        }
        names.get(id).copied().unwrap_or(id)
    }
    let mut names = HashMap::new();
    let mut counts: HashMap<&str, u64> = HashMap::new();
    let (mut function, mut callee) = ("", "");
    for line in text.lines() {
        if let Some(spec) = line.strip_prefix("fn=") {
            function = name_of(spec, &mut names);
        } else if let Some(spec) = line.strip_prefix("cfn=") {
            callee = name_of(spec, &mut names);
        } else if let Some(rest) = line.strip_prefix("calls=")
            && allocates(callee)
            && !in_allocator(function)
        {
            let n: u64 = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            *counts.entry(function).or_default() += n;
        }
    }
    let mut by_caller: Vec<(String, u64)> =
        counts.into_iter().map(|(f, n)| (f.to_owned(), n)).collect();
    by_caller.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Allocations {
        total: by_caller.iter().map(|(_, n)| n).sum(),
        by_caller,
    }
}

/// A function name without its generic arguments, for a table cell.
fn short(function: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in function.chars() {
        match c {
            '<' => {
                if depth == 0 {
                    out.push_str("<..>");
                }
                depth += 1;
            }
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The instruction total of a callgrind output file (`totals:` or `summary:` line).
fn callgrind_total(path: &Path) -> anyhow::Result<u64> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_callgrind_total(&text).with_context(|| format!("no totals line in {}", path.display()))
}

/// `totals:` is written at the end; the header's `summary:` is only right when the
/// whole run was collected, so it is the fallback.
fn parse_callgrind_total(text: &str) -> Option<u64> {
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_summary_is_parsed_by_calls() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 72.55    0.520524           9     56902           sendto
 24.81    0.178042           3     56967        33 recvfrom
  2.41    0.017273          12      1425           epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.717515           6    115294        33 total
";
        assert_eq!(
            parse_strace(text),
            [
                ("recvfrom".to_owned(), 56967),
                ("sendto".to_owned(), 56902),
                ("epoll_wait".to_owned(), 1425)
            ]
        );
    }

    #[test]
    fn context_switches_are_read_from_status() {
        let status = "Name:\tscb\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_switches(status), (120, 7));
        assert_eq!(parse_switches("Name:\tx\n"), (0, 0));
    }

    #[test]
    fn allocations_are_calls_into_the_allocator_from_outside_it() {
        let text = "\
fn=(1) http::header::map::HeaderMap<T>::try_with_capacity
cfn=(2) mi_malloc_aligned
calls=4 0
0 100
fn=(3) scb::handler
cfn=(2)
calls=3 0
0 50
cfn=(4) mi_free
calls=7 0
0 20
fn=(2)
cfn=(5) _mi_malloc_generic
calls=9 0
0 10
fn=(6) mi_theap_malloc_aligned
cfn=(2)
calls=5 0
0 1
";
        let allocs = allocations(text);
        assert_eq!(allocs.total, 7);
        assert_eq!(
            allocs.by_caller,
            [
                (
                    "http::header::map::HeaderMap<T>::try_with_capacity".to_owned(),
                    4
                ),
                ("scb::handler".to_owned(), 3)
            ]
        );
        assert_eq!(
            short("http::header::map::HeaderMap<T>::try_with_capacity"),
            "http::header::map::HeaderMap<..>::try_with_capacity"
        );
    }

    #[test]
    fn callgrind_totals_are_found() {
        assert_eq!(
            parse_callgrind_total("events: Ir\nfl=x\n0 1\ntotals: 4242\n"),
            Some(4242)
        );
        assert_eq!(parse_callgrind_total("summary: 17\n"), Some(17));
        // Instrumentation switched on late: the header's summary says 0.
        assert_eq!(
            parse_callgrind_total("summary: 0\nfl=a\n0 5\ntotals: 5\n"),
            Some(5)
        );
        assert_eq!(parse_callgrind_total("events: Ir\n"), None);
    }
}
