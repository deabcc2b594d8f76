//! The flags resolved into one run's settings, validated before anything starts.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::harness::cli::Args;
use crate::harness::cpuset::CpuSet;
use crate::harness::load::LoadGen;
use crate::harness::scenario::{Protocol, Scenario};
use crate::harness::server::Server;
use scb_core::date::UtcTime;

/// Measured seconds of a normal run: long enough that start-up of the connections and
/// 10 ms CPU ticks are under 1% of the window.
const DURATION: f64 = 10.0;
/// Warm-up seconds of a normal run: page cache, the servers' own caches, TCP.
const WARMUP: f64 = 3.0;
/// `--quick`: every config exercised, in about 1.5 s per row.
const QUICK_DURATION: f64 = 1.0;
const QUICK_WARMUP: f64 = 0.5;
/// Connections a server may hold (nginx's `worker_connections`): far above the load's 64.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// One run's settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `--quick`.
    pub(crate) quick: bool,
    /// Servers, deduplicated, in the given order.
    pub(crate) servers: Vec<Server>,
    /// Scenarios, deduplicated, in the given order.
    pub(crate) scenarios: Vec<Scenario>,
    /// Measured seconds.
    pub(crate) duration: f64,
    /// Warm-up seconds (0: none).
    pub(crate) warmup: f64,
    /// Rounds per scenario.
    pub(crate) rounds: usize,
    /// Workers per server.
    pub(crate) workers: usize,
    /// Connections each server may hold open (nginx's `worker_connections`, scb's
    /// `max_connections`): 4096, raised by `bench idle`.
    pub(crate) max_connections: usize,
    /// Server CPUs.
    pub(crate) server_cpus: CpuSet,
    /// The load generator (and the upstream's CPUs).
    pub(crate) load: LoadGen,
    /// Output directory.
    pub(crate) out: PathBuf,
    /// scb binary.
    pub(crate) scb: Option<PathBuf>,
    /// axum-servedir binary.
    pub(crate) axum_servedir: Option<PathBuf>,
    /// Config templates.
    pub(crate) configs: PathBuf,
    /// The command line, shell-quoted.
    pub(crate) command_line: String,
    /// When the run started.
    pub(crate) started: UtcTime,
}

fn dedup<T: PartialEq + Copy>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(item) {
            out.push(*item);
        }
    }
    out
}

/// Quotes an argument for a shell when it needs it.
pub(crate) fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@%+".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

impl Settings {
    /// Resolves and checks the flags.
    ///
    /// # Errors
    ///
    /// On an invalid CPU list, duration, worker or connection count, or a selected
    /// workspace server whose binary was not given or does not exist.
    pub(crate) fn from_args(args: Args, argv: &[String]) -> anyhow::Result<Settings> {
        let started = UtcTime::now();
        let duration = args
            .duration
            .unwrap_or(if args.quick { QUICK_DURATION } else { DURATION });
        let warmup = args
            .warmup
            .unwrap_or(if args.quick { QUICK_WARMUP } else { WARMUP });
        if !(duration > 0.0 && duration.is_finite()) {
            bail!("--duration must be a positive number of seconds, not {duration}");
        }
        if !(warmup >= 0.0 && warmup.is_finite()) {
            bail!("--warmup must be zero or a positive number of seconds, not {warmup}");
        }
        if args.workers == 0 {
            bail!("--workers must be at least 1");
        }
        if args.rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        let server_cpus = CpuSet::parse(&args.server_cpus).context("--server-cpus")?;
        let load_cpus = CpuSet::parse(&args.load_cpus).context("--load-cpus")?;
        let online = CpuSet::online()?;
        for (flag, set) in [("--server-cpus", &server_cpus), ("--load-cpus", &load_cpus)] {
            if !set.is_subset(&online) {
                bail!(
                    "{flag} {}: not all of these CPUs are online (online: {})",
                    set.as_str(),
                    online.as_str()
                );
            }
        }
        if args.connections < load_cpus.count() {
            bail!(
                "--connections {} is fewer than the load threads ({}, one per load CPU)",
                args.connections,
                load_cpus.count()
            );
        }
        let servers = dedup(&args.servers);
        let scenarios = dedup(&args.scenarios);
        if servers.is_empty() || scenarios.is_empty() {
            bail!("nothing to run: --servers and --scenarios must name at least one each");
        }
        for (server, path, flag) in [
            (Server::Scb, &args.scb, "--scb"),
            (Server::ScbMetrics, &args.scb, "--scb"),
            (Server::AxumServedir, &args.axum_servedir, "--axum-servedir"),
        ] {
            if !servers.contains(&server) {
                continue;
            }
            match path {
                None => bail!("{server} is among the servers: give its binary with {flag} PATH"),
                Some(p) if !p.is_file() => bail!("{flag} {}: no such file", p.display()),
                Some(_) => {}
            }
        }
        if !args.configs.is_dir() {
            bail!(
                "--configs {}: no such directory (run from the workspace root, or pass --configs)",
                args.configs.display()
            );
        }
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("bench/out").join(started.compact()));
        Ok(Settings {
            quick: args.quick,
            servers,
            scenarios,
            duration,
            warmup,
            rounds: args.rounds,
            workers: args.workers,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            server_cpus,
            load: LoadGen {
                cpus: load_cpus,
                connections: args.connections,
            },
            out,
            scb: args.scb,
            axum_servedir: args.axum_servedir,
            configs: args.configs,
            command_line: argv
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" "),
            started,
        })
    }

    /// Whether some selected server runs the scenario.
    pub(crate) fn runs(&self, scenario: Scenario) -> bool {
        self.scenarios.contains(&scenario) && self.servers.iter().any(|s| s.supports(scenario))
    }

    /// Whether nginx runs at all (as a server, or as the proxy scenario's upstream).
    pub(crate) fn needs_nginx(&self) -> bool {
        self.servers.contains(&Server::Nginx)
            || self.servers.contains(&Server::NginxTuned)
            || self.runs(Scenario::Proxy)
            || self.runs(Scenario::ProxyTls)
            || self.runs(Scenario::ProxyH2c)
    }

    /// Whether any FastCGI scenario runs (php-fpm, if it is installed).
    pub(crate) fn needs_php_fpm(&self) -> bool {
        Scenario::ALL
            .into_iter()
            .any(|s| s.needs_php_fpm() && self.runs(s))
    }

    /// Whether any HTTP/1.1 scenario runs.
    pub(crate) fn needs_wrk(&self) -> bool {
        Scenario::ALL
            .into_iter()
            .any(|s| matches!(s.protocol(), Protocol::Http1 | Protocol::TlsHttp1) && self.runs(s))
    }

    /// Whether any TLS scenario runs.
    pub(crate) fn needs_tls(&self) -> bool {
        Scenario::ALL.into_iter().any(|s| {
            matches!(
                s.protocol(),
                Protocol::TlsH2 | Protocol::TlsHttp1 | Protocol::TlsResume | Protocol::H3
            ) && self.runs(s)
        })
    }

    /// The binary of a workspace server.
    pub(crate) fn binary(&self, server: Server) -> Option<&std::path::Path> {
        match server {
            Server::Scb | Server::ScbMetrics => self.scb.as_deref(),
            Server::AxumServedir => self.axum_servedir.as_deref(),
            Server::Nginx | Server::NginxTuned | Server::Haproxy | Server::Caddy => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn settings(extra: &[&str]) -> anyhow::Result<Settings> {
        let mut argv = vec!["bench", "--configs", "."];
        argv.extend_from_slice(extra);
        let args = crate::harness::cli::Cli::try_parse_from(&argv)
            .unwrap()
            .into_args();
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        Settings::from_args(args, &argv)
    }

    #[test]
    fn quick_shortens_the_windows_unless_given() {
        let s = settings(&["--quick", "--servers", "nginx"]).unwrap();
        assert_eq!((s.duration, s.warmup), (1.0, 0.5));
        let s = settings(&["--quick", "--servers", "nginx", "--duration", "2"]).unwrap();
        assert_eq!((s.duration, s.warmup), (2.0, 0.5));
        let s = settings(&["--servers", "nginx"]).unwrap();
        assert_eq!((s.duration, s.warmup), (10.0, 3.0));
    }

    #[test]
    fn workspace_servers_need_their_binaries() {
        let err = settings(&["--servers", "scb"]).unwrap_err().to_string();
        assert!(err.contains("--scb PATH"), "{err}");
        let err = settings(&[
            "--servers",
            "axum-servedir",
            "--axum-servedir",
            "/nonexistent",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("no such file"), "{err}");
    }

    #[test]
    fn nonsense_values_are_refused() {
        assert!(settings(&["--servers", "nginx", "--duration", "0"]).is_err());
        assert!(settings(&["--servers", "nginx", "--workers", "0"]).is_err());
        assert!(
            settings(&[
                "--servers",
                "nginx",
                "--load-cpus",
                "1-4",
                "--connections",
                "2"
            ])
            .is_err()
        );
        assert!(settings(&["--servers", "nginx", "--server-cpus", "x"]).is_err());
        assert!(settings(&["--servers", "nginx", "--server-cpus", "4095"]).is_err());
    }

    #[test]
    fn tools_needed_follow_the_capability_table() {
        // scb serves every scenario: wrk, the TLS tools, and the proxy scenario's upstream
        // nginx; with only `respond`, neither nginx nor the TLS tools.
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let s = settings(&["--servers", "scb", "--scb", exe]).unwrap();
        assert!(s.needs_wrk());
        assert!(s.needs_tls());
        assert!(s.needs_nginx());
        let s = settings(&["--servers", "scb", "--scb", exe, "--scenarios", "respond"]).unwrap();
        assert!(!s.needs_nginx());
        assert!(!s.needs_tls());
        let s = settings(&["--servers", "caddy", "--scenarios", "proxy"]).unwrap();
        assert!(s.needs_nginx());
    }

    #[test]
    fn command_line_is_shell_quoted() {
        assert_eq!(shell_quote("--servers"), "--servers");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
