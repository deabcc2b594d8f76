//! Child processes: started pinned with `taskset`, each in its own process group, stopped
//! with SIGTERM then SIGKILL, and never left behind.
//!
//! Every child is the leader of a new process group, so stopping it can reach every
//! process it started (nginx's workers) even after its parent is gone, and a check of the
//! group afterwards proves that nothing survived. Because a terminal's Ctrl-C then no
//! longer reaches the children, [`install_signal_cleanup`] kills every live group itself
//! when the harness gets SIGINT, SIGTERM or SIGHUP.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rustix::process::{Pid, Signal};

use crate::harness::cpuset::CpuSet;
use crate::harness::proctree;
use crate::harness::server::Launch;

/// Process groups started and not yet stopped, for the signal handler; `None` once the
/// handler has run, so that a child started while the harness exits is killed at once.
static LIVE_GROUPS: Mutex<Option<BTreeSet<i32>>> = Mutex::new(Some(BTreeSet::new()));

/// How long a server gets to exit after SIGTERM before SIGKILL. nginx's fast shutdown and
/// Caddy's are well under a second when idle; a server that takes longer is not waited for.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// How long the processes of a killed group get to disappear.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// The polling interval while waiting for a process to exit.
const POLL: Duration = Duration::from_millis(10);

fn register(pgid: i32) {
    let mut live = LIVE_GROUPS.lock().unwrap_or_else(PoisonError::into_inner);
    match live.as_mut() {
        Some(groups) => {
            groups.insert(pgid);
        }
        // The harness is exiting on a signal: this child must not outlive it.
        None => signal_group(pgid, Signal::KILL),
    }
}

fn unregister(pgid: i32) {
    if let Some(groups) = LIVE_GROUPS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        groups.remove(&pgid);
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid) {
        // ESRCH (the group is already gone) is the outcome wanted.
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// Kills every live child group on SIGINT, SIGTERM or SIGHUP, then exits with 128 + the
/// signal number.
///
/// # Errors
///
/// When the signal handlers cannot be installed.
pub(crate) fn install_signal_cleanup() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing signal handlers")?;
    thread::Builder::new()
        .name("signal-cleanup".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let groups: Vec<i32> = LIVE_GROUPS
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                for pgid in &groups {
                    signal_group(*pgid, Signal::TERM);
                }
                // A moment for a clean exit (nginx removes its pid file), then no choice.
                let deadline = Instant::now() + Duration::from_millis(500);
                while Instant::now() < deadline
                    && groups
                        .iter()
                        .any(|g| proctree::group_members(*g).is_ok_and(|m| !m.is_empty()))
                {
                    thread::sleep(POLL);
                }
                for pgid in &groups {
                    signal_group(*pgid, Signal::KILL);
                }
                crate::harness::run::progress(&format!(
                    "interrupted (signal {signal}): stopped {} process group(s)",
                    groups.len()
                ));
                std::process::exit(128 + signal);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// `taskset -c CPUS program args...` with `launch`'s environment, in a new process group.
fn pinned_command(cpus: &CpuSet, launch: &Launch) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c")
        .arg(cpus.as_str())
        .arg(&launch.program)
        .args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(0);
    cmd
}

/// Renders a command line for logs and reports (arguments with spaces are quoted).
pub(crate) fn display_command(cpus: &CpuSet, launch: &Launch) -> String {
    let mut parts = vec![
        "taskset".to_owned(),
        "-c".to_owned(),
        cpus.as_str().to_owned(),
        launch.program.display().to_string(),
    ];
    parts.extend(launch.args.iter().map(|a| a.to_string_lossy().into_owned()));
    let env: Vec<String> = launch
        .env
        .iter()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    env.into_iter()
        .chain(parts.into_iter().map(|p| {
            if p.contains(' ') || p.is_empty() {
                format!("'{p}'")
            } else {
                p
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A server (or the upstream) running in its own process group.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    name: String,
    child: Child,
    pgid: i32,
    log: PathBuf,
    stopped: bool,
}

impl ServerProcess {
    /// Starts `launch` pinned to `cpus`, stdout and stderr appended to `log`.
    ///
    /// # Errors
    ///
    /// When the log cannot be created or the process cannot be started.
    pub(crate) fn start(
        name: &str,
        cpus: &CpuSet,
        launch: &Launch,
        log: &Path,
    ) -> anyhow::Result<ServerProcess> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("duplicating the log file")?;
        let child = pinned_command(cpus, launch)
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {}", display_command(cpus, launch)))?;
        // taskset execs the server, so the child's pid is the server's, and it leads its
        // own group.
        let pgid = i32::try_from(child.id()).context("pid out of range")?;
        register(pgid);
        Ok(ServerProcess {
            name: name.to_owned(),
            child,
            pgid,
            log: log.to_path_buf(),
            stopped: false,
        })
    }

    /// The server's pid (the root of its process tree).
    pub(crate) fn pid(&self) -> i32 {
        self.pgid
    }

    /// The log file.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// An error if the server has exited, with the end of its log.
    ///
    /// # Errors
    ///
    /// When it has exited or cannot be waited for.
    pub(crate) fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait().context("waiting for the server")? {
            None => Ok(()),
            Some(status) => {
                self.stopped = true;
                unregister(self.pgid);
                // Its workers, if any, must not outlive it.
                signal_group(self.pgid, Signal::KILL);
                bail!(
                    "{} exited ({status}); end of {}:\n{}",
                    self.name,
                    self.log.display(),
                    log_tail(&self.log, 20)
                )
            }
        }
    }

    /// SIGTERM, wait up to [`TERM_GRACE`], then SIGKILL to the whole group, then check that
    /// no process of the group is left.
    ///
    /// # Errors
    ///
    /// When processes of the group survive SIGKILL (they are named).
    pub(crate) fn stop(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        self.stop_within(TERM_GRACE)
    }

    /// [`ServerProcess::stop`] with a given grace period after SIGTERM.
    fn stop_within(&mut self, grace: Duration) -> anyhow::Result<Option<ExitStatus>> {
        if self.stopped {
            return Ok(None);
        }
        self.stopped = true;
        if let Some(pid) = Pid::from_raw(self.pgid) {
            let _ = rustix::process::kill_process(pid, Signal::TERM);
        }
        let status = wait_deadline(&mut self.child, grace)?;
        // Whatever is left of the group (everything, if the root ignored SIGTERM; an
        // orphaned worker, if it did not wait for its workers) is killed.
        signal_group(self.pgid, Signal::KILL);
        let status = match status {
            Some(status) => status,
            None => self.child.wait().context("waiting for the killed server")?,
        };
        let deadline = Instant::now() + KILL_GRACE;
        loop {
            let left = proctree::group_members(self.pgid).context("reading /proc")?;
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!("{}: processes {left:?} survived SIGKILL", self.name);
            }
            thread::sleep(POLL);
        }
        unregister(self.pgid);
        Ok(Some(status))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Waits up to `limit` for the child; `None` if it is still running.
fn wait_deadline(child: &mut Child, limit: Duration) -> anyhow::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().context("waiting for a child")? {
            return Ok(Some(status));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        thread::sleep(POLL);
    }
}

/// The last `lines` lines of a log file (or why it could not be read).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read: {e})"),
    }
}

/// What a finished tool printed.
#[derive(Debug)]
pub(crate) struct ToolOutput {
    /// Exit status.
    pub(crate) status: ExitStatus,
    /// Standard output.
    pub(crate) stdout: String,
    /// Standard error.
    pub(crate) stderr: String,
}

/// Runs a load tool pinned to `cpus` in its own group and collects its output.
///
/// `interrupt_after`: send SIGINT then (wrk ends its run early and still reports, which is
/// how it runs for fractions of a second). `limit`: kill the group after this long.
///
/// # Errors
///
/// When the tool cannot be started, or is killed at `limit`.
pub(crate) fn run_tool(
    cpus: &CpuSet,
    launch: &Launch,
    interrupt_after: Option<Duration>,
    limit: Duration,
) -> anyhow::Result<ToolOutput> {
    let mut child = pinned_command(cpus, launch)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", display_command(cpus, launch)))?;
    let pgid = i32::try_from(child.id()).context("pid out of range")?;
    register(pgid);
    let reader = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let stdout = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = reader(child.stderr.take().map(|p| Box::new(p) as _));

    let start = Instant::now();
    let mut interrupted = false;
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the load tool")? {
            break status;
        }
        let elapsed = start.elapsed();
        if let Some(after) = interrupt_after
            && !interrupted
            && elapsed >= after
        {
            signal_group(pgid, Signal::INT);
            interrupted = true;
        }
        if elapsed > limit && !killed {
            signal_group(pgid, Signal::KILL);
            killed = true;
        }
        thread::sleep(POLL);
    };
    unregister(pgid);
    let out = ToolOutput {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    if killed {
        bail!(
            "{} did not finish within {limit:?}; killed. stderr: {}",
            launch.program.display(),
            out.stderr.trim()
        );
    }
    Ok(out)
}

/// Runs a short command (a version query) and returns its stdout and stderr together.
///
/// # Errors
///
/// When it cannot be started.
pub(crate) fn capture(program: &str, args: &[&str]) -> anyhow::Result<(ExitStatus, String)> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Launch {
        Launch {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: vec![],
        }
    }

    fn any_cpu() -> CpuSet {
        CpuSet::parse("0").unwrap()
    }

    #[test]
    fn stop_kills_a_child_that_ignores_sigterm_and_its_children() {
        let log = std::env::temp_dir().join(format!("scb-bench-proc-{}.log", std::process::id()));
        // A parent ignoring TERM with a grandchild: both must be gone after stop().
        let mut server =
            ServerProcess::start("t", &any_cpu(), &sh("trap '' TERM; sleep 30 & wait"), &log)
                .unwrap();
        let pgid = server.pid();
        thread::sleep(Duration::from_millis(100));
        server.ensure_running().unwrap();
        server.stop_within(Duration::from_millis(200)).unwrap();
        assert!(proctree::group_members(pgid).unwrap().is_empty());
        std::fs::remove_file(&log).unwrap();
    }

    #[test]
    fn an_exited_server_is_reported_with_its_log() {
        let log = std::env::temp_dir().join(format!("scb-bench-exit-{}.log", std::process::id()));
        let mut server =
            ServerProcess::start("t", &any_cpu(), &sh("echo bind failed >&2; exit 3"), &log)
                .unwrap();
        thread::sleep(Duration::from_millis(200));
        let err = server.ensure_running().unwrap_err().to_string();
        assert!(err.contains("bind failed"), "{err}");
        std::fs::remove_file(&log).unwrap();
    }

    #[test]
    fn run_tool_interrupts_and_collects_output() {
        let out = run_tool(
            &any_cpu(),
            &sh("trap 'echo stopped; exit 0' INT; echo started; while :; do sleep 0.01; done"),
            Some(Duration::from_millis(100)),
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(out.stdout.contains("started"), "{out:?}");
        assert!(out.stdout.contains("stopped"), "{out:?}");
    }
}
