//! CPU time and peak memory of a process tree, from `/proc`.
//!
//! A server is its whole tree: nginx's master and workers, Caddy's one process, scb's and
//! axum's threads. CPU time is `utime + stime` of every process in the tree (a process's
//! figures in `/proc/PID/stat` already include all its threads, live and exited) plus
//! `cutime + cstime` (children it has reaped, so a worker that exits in the window still
//! counts). The tree is the root and every process whose parent chain leads to it, found
//! by scanning `/proc/*/stat` for parent ids. Peak memory is the sum of `VmHWM` over the
//! tree (each process's resident-set high-water mark; pages shared between an nginx master
//! and its workers count once per process, as `ps` would count them).

use std::collections::HashMap;
use std::fs;
use std::io;

/// The fields of `/proc/PID/stat` the harness uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// Process id.
    pub(crate) pid: i32,
    /// Parent's id.
    pub(crate) ppid: i32,
    /// Process group id.
    pub(crate) pgrp: i32,
    /// User CPU, clock ticks.
    pub(crate) utime: u64,
    /// System CPU, clock ticks.
    pub(crate) stime: u64,
    /// User CPU of reaped children, clock ticks.
    pub(crate) cutime: u64,
    /// System CPU of reaped children, clock ticks.
    pub(crate) cstime: u64,
}

impl ProcStat {
    /// Own CPU plus reaped children's, in clock ticks.
    pub(crate) fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime + self.cutime + self.cstime
    }
}

/// Parses the text of `/proc/PID/stat`.
///
/// The command name (field 2) is in parentheses and may contain spaces and parentheses
/// itself, so the fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let (head, tail) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    // tail: " S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime ..."
    let fields: Vec<&str> = tail.split_ascii_whitespace().collect();
    // Field numbers from proc(5), minus 3 (pid, comm, and 1-based).
    let num = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    let int = |field: usize| fields.get(field - 3)?.parse::<i32>().ok();
    Some(ProcStat {
        pid,
        ppid: int(4)?,
        pgrp: int(5)?,
        utime: num(14)?,
        stime: num(15)?,
        cutime: num(16)?,
        cstime: num(17)?,
    })
}

/// Reads `/proc/PID/stat`.
///
/// # Errors
///
/// When the process does not exist (any more) or the file cannot be parsed.
pub(crate) fn read_stat(pid: i32) -> io::Result<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::other(format!("unparsable /proc/{pid}/stat")))
}

/// Every process's stat, skipping those that exit while being read.
///
/// # Errors
///
/// When `/proc` cannot be listed.
pub(crate) fn all_processes() -> io::Result<Vec<ProcStat>> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Ok(stat) = read_stat(pid) {
            out.push(stat);
        }
    }
    Ok(out)
}

/// The root and all its descendants (by parent id), root first.
///
/// # Errors
///
/// When the root does not exist or `/proc` cannot be read.
pub(crate) fn tree(root: i32) -> io::Result<Vec<ProcStat>> {
    let root_stat = read_stat(root)?;
    let mut children: HashMap<i32, Vec<ProcStat>> = HashMap::new();
    for stat in all_processes()? {
        if stat.pid != root {
            children.entry(stat.ppid).or_default().push(stat);
        }
    }
    let mut out = vec![root_stat];
    let mut next = 0;
    while next < out.len() {
        if let Some(kids) = children.remove(&out[next].pid) {
            out.extend(kids);
        }
        next += 1;
    }
    Ok(out)
}

/// CPU time of a process tree: all of it, and the part spent in user space (the rest is
/// the kernel's: system calls, and the network stack's work done on the server's CPU).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CpuTime {
    /// User and system CPU, seconds.
    pub(crate) total_s: f64,
    /// User CPU, seconds.
    pub(crate) user_s: f64,
}

impl CpuTime {
    /// The CPU time spent between `before` and `self` (never negative).
    pub(crate) fn since(self, before: CpuTime) -> CpuTime {
        // A process that left the tree unreaped takes its ticks with it; the user share
        // never exceeds what is left of the total.
        let total_s = (self.total_s - before.total_s).max(0.0);
        CpuTime {
            total_s,
            user_s: (self.user_s - before.user_s).clamp(0.0, total_s),
        }
    }
}

/// CPU time of the whole tree, all of it and user space's share.
///
/// # Errors
///
/// As [`tree`].
pub(crate) fn tree_cpu(root: i32) -> io::Result<CpuTime> {
    let stats = tree(root)?;
    let total: u64 = stats.iter().map(ProcStat::cpu_ticks).sum();
    let user: u64 = stats.iter().map(|s| s.utime + s.cutime).sum();
    // Ticks are counted in whole numbers far below 2^52, so the conversion is exact.
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Ok(CpuTime {
        total_s: total as f64 / hz,
        user_s: user as f64 / hz,
    })
}

/// `VmHWM` from the text of `/proc/PID/status`, in KiB.
pub(crate) fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Sum of `VmHWM` over the tree, in KiB (processes without one, such as zombies, count 0).
///
/// # Errors
///
/// As [`tree`].
pub(crate) fn tree_peak_rss_kib(root: i32) -> io::Result<u64> {
    Ok(tree(root)?
        .iter()
        .filter_map(|stat| fs::read_to_string(format!("/proc/{}/status", stat.pid)).ok())
        .filter_map(|status| parse_vm_hwm_kib(&status))
        .sum())
}

/// Sum of `VmRSS` (resident now) over the tree, in KiB.
///
/// # Errors
///
/// As [`tree`].
pub(crate) fn tree_rss_kib(root: i32) -> io::Result<u64> {
    Ok(tree(root)?
        .iter()
        .filter_map(|stat| fs::read_to_string(format!("/proc/{}/status", stat.pid)).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .sum())
}

/// Processes in a process group.
///
/// # Errors
///
/// When `/proc` cannot be listed.
pub(crate) fn group_members(pgrp: i32) -> io::Result<Vec<i32>> {
    Ok(all_processes()?
        .into_iter()
        .filter(|stat| stat.pgrp == pgrp)
        .map(|stat| stat.pid)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn stat_with_spaces_and_parentheses_in_the_name_parses() {
        let text = "4242 (nginx: (worker) x) S 4241 4240 4240 0 -1 4194624 10 0 0 0 \
                    17 23 5 7 20 0 1 0 1234 1000 100 18446744073709551615";
        let stat = parse_stat(text).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 4242,
                ppid: 4241,
                pgrp: 4240,
                utime: 17,
                stime: 23,
                cutime: 5,
                cstime: 7,
            }
        );
        assert_eq!(stat.cpu_ticks(), 52);
    }

    #[test]
    fn vm_hwm_is_read_in_kib() {
        let status = "Name:\tnginx\nVmPeak:\t  10 kB\nVmHWM:\t    5120 kB\nVmRSS:\t 4000 kB\n";
        assert_eq!(parse_vm_hwm_kib(status), Some(5120));
        assert_eq!(parse_vm_hwm_kib("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn this_process_cpu_grows_with_work_and_children_are_in_its_tree() {
        let me = i32::try_from(std::process::id()).unwrap();
        let before = tree_cpu(me).unwrap();
        // Burn CPU in user space until its tick counter moves (ticks are 10 ms at 100 Hz).
        let start = Instant::now();
        let mut x = 0u64;
        while tree_cpu(me).unwrap().user_s <= before.user_s
            && start.elapsed() < Duration::from_secs(5)
        {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        let spent = tree_cpu(me).unwrap().since(before);
        assert!(spent.user_s > 0.0, "no user CPU time seen");
        assert!(spent.total_s >= spent.user_s, "{spent:?}");

        let mut child = Command::new("sleep")
            .arg("5")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let child_pid = i32::try_from(child.id()).unwrap();
        let pids: Vec<i32> = tree(me).unwrap().iter().map(|s| s.pid).collect();
        assert_eq!(pids[0], me);
        assert!(pids.contains(&child_pid), "{pids:?} lacks {child_pid}");
        assert!(tree_peak_rss_kib(me).unwrap() > 0);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
