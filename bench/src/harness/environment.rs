//! The environment block: the machine, the settings and the versions of everything that
//! ran, so that a table can be read (and repeated) without the person who made it.

use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::harness::load::H2_STREAMS;
use crate::harness::process::capture;
use crate::harness::server::Server;
use crate::harness::settings::Settings;
use crate::harness::tools;

/// One tool's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Version {
    /// The tool.
    pub(crate) name: String,
    /// What it says about itself (first line), or why it could not say.
    pub(crate) version: String,
}

/// The environment of a run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Environment {
    /// Start of the run, RFC 3339 UTC.
    pub(crate) date_utc: String,
    /// `uname -srm`.
    pub(crate) kernel: String,
    /// `model name` from /proc/cpuinfo.
    pub(crate) cpu_model: String,
    /// Online CPUs: count and list.
    pub(crate) cpus_online: String,
    /// MemTotal.
    pub(crate) memory: String,
    /// Server CPU list.
    pub(crate) server_cpus: String,
    /// Load generator CPU list (also the upstream's).
    pub(crate) load_cpus: String,
    /// Workers per server.
    pub(crate) workers: usize,
    /// Measured seconds.
    pub(crate) duration_s: f64,
    /// Warm-up seconds.
    pub(crate) warmup_s: f64,
    /// Load connections.
    pub(crate) connections: usize,
    /// Load generator threads.
    pub(crate) load_threads: usize,
    /// h2load streams per connection.
    pub(crate) h2_streams: usize,
    /// Tool and server versions.
    pub(crate) versions: Vec<Version>,
    /// The harness's command line.
    pub(crate) command: String,
}

/// The first non-empty line of a command's output, or `-` with the reason.
fn first_line(program: &Path, args: &[&str]) -> String {
    match capture(&program.to_string_lossy(), args) {
        Ok((_, text)) => text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("-")
            .to_owned(),
        Err(e) => format!("- ({e})"),
    }
}

fn cpuinfo_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "-".to_owned())
}

fn cpus_online() -> String {
    let list = fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let count = crate::harness::cpuset::CpuSet::parse(&list).map_or(0, |s| s.count());
    format!("{count} ({list})")
}

fn memory() -> String {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let kib: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kib / 1024.0 / 1024.0))
        })
        .unwrap_or_else(|| "-".to_owned())
}

/// `version = "..."` of package `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let needle = format!("name = \"{name}\"\nversion = \"");
    let start = lock.find(&needle)? + needle.len();
    let end = lock[start..].find('"')?;
    Some(lock[start..start + end].to_owned())
}

impl Environment {
    /// Gathers the environment of the run described by `settings`.
    pub(crate) fn collect(settings: &Settings) -> Environment {
        let mut versions = Vec::new();
        let mut add = |name: &str, version: String| {
            versions.push(Version {
                name: name.to_owned(),
                version,
            });
        };
        if let Some(scb) = settings.scb.as_deref()
            && (settings.servers.contains(&Server::Scb)
                || settings.servers.contains(&Server::ScbMetrics))
        {
            add("scb", first_line(scb, &["--version"]));
        }
        if settings.needs_nginx() {
            add("nginx", first_line(&tools::program("nginx"), &["-v"]));
        }
        if settings.servers.contains(&Server::Caddy) {
            add("caddy", first_line(&tools::program("caddy"), &["version"]));
        }
        if settings.servers.contains(&Server::AxumServedir) {
            let lock = fs::read_to_string("Cargo.lock").unwrap_or_default();
            let crates: Vec<String> = ["axum", "tower-http", "axum-server", "hyper-util", "rustls"]
                .iter()
                .filter_map(|c| Some(format!("{c} {}", locked_version(&lock, c)?)))
                .collect();
            add(
                "axum-servedir",
                if crates.is_empty() {
                    "- (no Cargo.lock in the current directory)".to_owned()
                } else {
                    crates.join(", ")
                },
            );
        }
        if settings.needs_wrk() {
            // `wrk -v` prints "wrk 4.x [epoll] Copyright (C) ..." then its usage.
            let line = first_line(&tools::program("wrk"), &["-v"]);
            let line = line.split(" Copyright").next().unwrap_or(&line).to_owned();
            add("wrk", line);
        }
        if settings.needs_tls() {
            add(
                "h2load",
                first_line(&tools::program("h2load"), &["--version"]),
            );
            let curl = first_line(&tools::program("curl"), &["--version"]);
            add(
                "curl",
                curl.split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
        if settings.needs_php_fpm() {
            add("php-fpm", crate::harness::php::version(settings));
        }
        add("rustc", first_line(Path::new("rustc"), &["-V"]));

        Environment {
            date_utc: settings.started.rfc3339(),
            kernel: first_line(Path::new("uname"), &["-srm"]),
            cpu_model: cpuinfo_model(),
            cpus_online: cpus_online(),
            memory: memory(),
            server_cpus: settings.server_cpus.as_str().to_owned(),
            load_cpus: settings.load.cpus.as_str().to_owned(),
            workers: settings.workers,
            duration_s: settings.duration,
            warmup_s: settings.warmup,
            connections: settings.load.connections,
            load_threads: settings.load.threads(),
            h2_streams: H2_STREAMS,
            versions,
            command: settings.command_line.clone(),
        }
    }

    /// The block's lines, in order, as `key: value`.
    pub(crate) fn lines(&self) -> Vec<(String, String)> {
        let mut lines = vec![
            ("date".to_owned(), self.date_utc.clone()),
            ("kernel".to_owned(), self.kernel.clone()),
            ("cpu_model".to_owned(), self.cpu_model.clone()),
            ("cpus_online".to_owned(), self.cpus_online.clone()),
            ("memory".to_owned(), self.memory.clone()),
            (
                "server_cpus".to_owned(),
                format!("{} ({} workers)", self.server_cpus, self.workers),
            ),
            (
                "load_cpus".to_owned(),
                format!(
                    "{} (load generator, {} threads; upstream nginx for proxy, php-fpm for fastcgi)",
                    self.load_cpus, self.load_threads
                ),
            ),
            (
                "duration_s".to_owned(),
                format!(
                    "{}  warmup_s: {}  connections: {}  h2_streams: {}",
                    self.duration_s, self.warmup_s, self.connections, self.h2_streams
                ),
            ),
        ];
        lines.extend(
            self.versions
                .iter()
                .map(|v| (v.name.clone(), v.version.clone())),
        );
        lines
    }

    /// A fixed environment for tests.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Environment {
        Environment {
            date_utc: "2026-11-30T12:00:00Z".into(),
            kernel: "Linux 6.18.0 x86_64".into(),
            cpu_model: "Test CPU".into(),
            cpus_online: "2 (0-1)".into(),
            memory: "24.0 GiB".into(),
            server_cpus: "0".into(),
            load_cpus: "1".into(),
            workers: 1,
            duration_s: 10.0,
            warmup_s: 3.0,
            connections: 64,
            load_threads: 1,
            h2_streams: H2_STREAMS,
            versions: vec![Version {
                name: "nginx".into(),
                version: "nginx version: nginx/1.22.1".into(),
            }],
            command: "bench --quick".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_versions_are_found_by_exact_name() {
        let lock = "[[package]]\nname = \"axum-core\"\nversion = \"0.5.0\"\n\n\
                    [[package]]\nname = \"axum\"\nversion = \"0.8.9\"\n";
        assert_eq!(locked_version(lock, "axum").as_deref(), Some("0.8.9"));
        assert_eq!(locked_version(lock, "tower"), None);
    }

    #[test]
    fn block_lists_settings_then_versions() {
        let lines = Environment::for_tests().lines();
        assert_eq!(lines[0], ("date".into(), "2026-11-30T12:00:00Z".into()));
        assert_eq!(lines.last().unwrap().0, "nginx");
        assert!(
            lines
                .iter()
                .any(|(k, v)| k == "server_cpus" && v == "0 (1 workers)")
        );
    }
}
