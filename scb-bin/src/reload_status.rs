//! How `scb reload` learns what became of the reload it asked for.
//!
//! A signal carries no answer, so the running server writes one: after every reload it
//! attempts (SIGHUP from anyone, or `scb reload`), it writes a status file beside its pid
//! file, `PID_FILE.reload`:
//!
//! ```text
//! pid 4242
//! generation 3
//! failed binding 127.0.0.1:18080: address already in use
//! ```
//!
//! (`ok` in place of the `failed` line after a reload that took effect). `generation`
//! counts the reloads this process attempted, from 0 at start. `scb reload` reads the
//! generation, signals, and waits (bounded) for a file with the same pid and a higher
//! generation; then it exits 0 or prints the reason and exits 1, so that `ExecReload`,
//! scripts and CI see a failed reload.
//!
//! A file is written whole (a temporary file renamed over it), so a reader sees the old
//! status or the new one, never half of one. Reloads asked for while one runs coalesce
//! into one more (the signal stream keeps one pending); a waiter takes the first outcome
//! after its signal, which read the file as it was then or later.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// The outcome of a process's latest reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReloadStatus {
    pub(crate) pid: u32,
    pub(crate) generation: u64,
    /// `None` when the reload took effect (or at start), else why it did not.
    pub(crate) failure: Option<String>,
}

/// Where the status of the process with pid file `pid_file` is written.
pub(crate) fn path(pid_file: &Path) -> PathBuf {
    let mut path = pid_file.as_os_str().to_owned();
    path.push(".reload");
    PathBuf::from(path)
}

impl ReloadStatus {
    /// Writes the status to `path`, whole (see the module docs).
    pub(crate) fn write(&self, path: &Path) -> anyhow::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", self.pid));
        let tmp = PathBuf::from(tmp);
        // One line per fact; a reason is one line too, whatever it contained.
        let outcome = match &self.failure {
            None => "ok".to_owned(),
            Some(why) => format!("failed {}", why.replace(['\n', '\r'], " ")),
        };
        let text = format!(
            "pid {}\ngeneration {}\n{outcome}\n",
            self.pid, self.generation
        );
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("writing the reload status {}", path.display()))
    }

    /// Reads the status at `path`; `None` when there is none, or none that parses (a
    /// file from some other program, or none yet).
    pub(crate) fn read(path: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut lines = text.lines();
        let pid = lines.next()?.strip_prefix("pid ")?.parse().ok()?;
        let generation = lines.next()?.strip_prefix("generation ")?.parse().ok()?;
        let failure = match lines.next()? {
            "ok" => None,
            line => Some(line.strip_prefix("failed ")?.to_owned()),
        };
        Some(Self {
            pid,
            generation,
            failure,
        })
    }
}

/// How often [`wait_for_outcome`] looks at the file: a reload takes tens of milliseconds
/// to a few seconds (certificates, bindings), and a look is one small read.
const POLL: Duration = Duration::from_millis(20);

/// What became of a reload asked of process `pid` after its status said `before`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Reloaded,
    Failed(String),
    /// No new status within the time allowed.
    NoAnswer,
}

/// Waits up to `timeout` for the status at `path` to show a reload of `pid` newer than
/// generation `before` (`None`: any generation).
pub(crate) fn wait_for_outcome(
    path: &Path,
    pid: u32,
    before: Option<u64>,
    timeout: Duration,
) -> Outcome {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = ReloadStatus::read(path)
            && status.pid == pid
            && before.is_none_or(|before| status.generation > before)
        {
            return match status.failure {
                None => Outcome::Reloaded,
                Some(why) => Outcome::Failed(why),
            };
        }
        if Instant::now() >= deadline {
            return Outcome::NoAnswer;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("scb-reload-status-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_status_reads_back_as_written_with_its_reason_on_one_line() {
        let path = temp("roundtrip");
        for failure in [
            None,
            Some("binding 127.0.0.1:1: in use\nsecond line".to_owned()),
        ] {
            let status = ReloadStatus {
                pid: 42,
                generation: 7,
                failure: failure.clone(),
            };
            status.write(&path).unwrap();
            let read = ReloadStatus::read(&path).unwrap();
            assert_eq!(read.pid, 42);
            assert_eq!(read.generation, 7);
            assert_eq!(
                read.failure,
                failure.map(|f| f.replace('\n', " ")),
                "{read:?}"
            );
        }
        std::fs::write(&path, "not a status\n").unwrap();
        assert_eq!(ReloadStatus::read(&path), None);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn waiting_takes_only_a_newer_generation_of_the_same_process() {
        let path = temp("wait");
        let write = |pid, generation, failure: Option<&str>| {
            ReloadStatus {
                pid,
                generation,
                failure: failure.map(str::to_owned),
            }
            .write(&path)
            .unwrap();
        };
        write(42, 3, None);
        // Not newer, or another process's: no answer.
        assert_eq!(
            wait_for_outcome(&path, 42, Some(3), Duration::ZERO),
            Outcome::NoAnswer
        );
        write(43, 9, None);
        assert_eq!(
            wait_for_outcome(&path, 42, Some(3), Duration::ZERO),
            Outcome::NoAnswer
        );
        write(42, 4, Some("bad"));
        assert_eq!(
            wait_for_outcome(&path, 42, Some(3), Duration::ZERO),
            Outcome::Failed("bad".to_owned())
        );
        write(42, 5, None);
        assert_eq!(
            wait_for_outcome(&path, 42, Some(4), Duration::ZERO),
            Outcome::Reloaded
        );
        let _ = std::fs::remove_file(&path);
    }
}
