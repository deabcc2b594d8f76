//! Command-line flags, as typed; [`crate::harness::settings`] resolves them into a plan.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::harness::scenario::Scenario;
use crate::harness::server::Server;

/// scb against nginx, Caddy and axum + ServeDir: same machine, same files, one run.
///
/// `bench [FLAGS]` and `bench run [FLAGS]` are the same (`cargo xtask bench` says `run`).
#[derive(Debug, Parser)]
#[command(name = "bench", about, long_about = None, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    args: Args,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the benchmark (the same as giving the flags without a subcommand).
    Run(Args),
    /// Syscalls, context switches and instructions per request for scb in one scenario.
    Profile(ProfileArgs),
    /// The HTTP/2 conformance suite (h2spec) against scb's plain and TLS listeners.
    H2spec(crate::harness::h2spec::H2specArgs),
    /// scb under mixed load for a while: RSS, descriptors and errors.
    Soak(crate::harness::soak::SoakArgs),
    /// mnot's HTTP cache test suite against scb's cache and nginx's proxy_cache.
    CacheTests(crate::harness::cache_tests::CacheTestsArgs),
    /// Resident memory per idle keep-alive connection (plain and TLS), scb beside nginx.
    Idle(crate::harness::idle::IdleArgs),
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Mode {
    /// The benchmark.
    Run(Args),
    /// A profile of scb.
    Profile(ProfileArgs),
    /// h2spec against scb.
    H2spec(crate::harness::h2spec::H2specArgs),
    /// The soak.
    Soak(crate::harness::soak::SoakArgs),
    /// The cache test suite.
    CacheTests(crate::harness::cache_tests::CacheTestsArgs),
    /// Memory per idle connection.
    Idle(crate::harness::idle::IdleArgs),
}

/// The flags of `bench profile`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProfileArgs {
    /// The scenario to profile scb in.
    pub(crate) scenario: Scenario,
    /// Everything else as for a run (`--servers` and `--scenarios` are ignored);
    /// `--duration` defaults to 5 s.
    #[command(flatten)]
    pub(crate) run: Args,
}

impl Cli {
    /// What to do, with its flags.
    pub(crate) fn into_mode(self) -> Mode {
        match self.command {
            Some(Command::Run(args)) => Mode::Run(args),
            Some(Command::Profile(args)) => Mode::Profile(args),
            Some(Command::H2spec(args)) => Mode::H2spec(args),
            Some(Command::Soak(args)) => Mode::Soak(args),
            Some(Command::CacheTests(args)) => Mode::CacheTests(args),
            Some(Command::Idle(args)) => Mode::Idle(args),
            None => Mode::Run(self.args),
        }
    }

    /// The run's flags, wherever they were given (tests).
    #[cfg(test)]
    pub(crate) fn into_args(self) -> Args {
        match self.into_mode() {
            Mode::Run(args) | Mode::Profile(ProfileArgs { run: args, .. }) => args,
            Mode::Idle(crate::harness::idle::IdleArgs { run: args, .. }) => args,
            Mode::H2spec(_) | Mode::Soak(_) | Mode::CacheTests(_) => panic!("no run flags"),
        }
    }
}

/// The flags of a run.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A smoke test of every server config: 1 s measured, 0.5 s warm-up; fails only when a
    /// server does not start, a URL does not verify, or a load run sees errors.
    #[arg(long)]
    pub(crate) quick: bool,

    /// Servers to measure, in table order.
    #[arg(long, value_delimiter = ',', default_values_t = Server::ALL)]
    pub(crate) servers: Vec<Server>,

    /// Scenarios to run, in table order.
    #[arg(long, value_delimiter = ',', default_values_t = Scenario::ALL)]
    pub(crate) scenarios: Vec<Scenario>,

    /// Seconds measured per server and scenario (fractions allowed). Default 10, or 1 with
    /// `--quick`.
    #[arg(long, value_name = "S")]
    pub(crate) duration: Option<f64>,

    /// Seconds of warm-up before each measured window (fractions allowed). Default 3, or
    /// 0.5 with `--quick`.
    #[arg(long, value_name = "S")]
    pub(crate) warmup: Option<f64>,

    /// Rounds per scenario: each round measures every server once, in table order, so a
    /// shared machine's drift over minutes falls on every server alike. The table shows each
    /// server's median round (by req/CPU-s); results.md lists every round and the median of
    /// the per-round ratios to nginx.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) rounds: usize,

    /// Worker processes or threads for every server (nginx `worker_processes`, Caddy
    /// `GOMAXPROCS`, scb and axum-servedir workers).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) workers: usize,

    /// CPUs the server runs on (`taskset -c` syntax).
    #[arg(long, default_value = "0", value_name = "LIST")]
    pub(crate) server_cpus: String,

    /// CPUs the load generator and the proxy scenario's upstream nginx run on.
    #[arg(long, default_value = "1", value_name = "LIST")]
    pub(crate) load_cpus: String,

    /// Concurrent connections of the load generator.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub(crate) connections: usize,

    /// Output directory. Default `bench/out/<UTC timestamp>`.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,

    /// The scb binary (a release build); needed when scb is among the servers.
    #[arg(long, value_name = "PATH")]
    pub(crate) scb: Option<PathBuf>,

    /// The axum-servedir binary (a release build); needed when it is among the servers.
    #[arg(long, value_name = "PATH")]
    pub(crate) axum_servedir: Option<PathBuf>,

    /// Directory of the server config templates.
    #[arg(long, default_value = "bench/configs", value_name = "DIR")]
    pub(crate) configs: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn parse(argv: &[&str]) -> Args {
        Cli::try_parse_from(argv).unwrap().into_args()
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_run_subcommand_takes_the_same_flags() {
        let plain = parse(&["bench", "--quick", "--servers", "nginx"]);
        let run = parse(&["bench", "run", "--quick", "--servers", "nginx"]);
        assert!(plain.quick && run.quick);
        assert_eq!(plain.servers, run.servers);
        assert!(Cli::try_parse_from(["bench", "--quick", "run"]).is_err());
    }

    #[test]
    fn lists_parse_comma_separated_in_the_given_order() {
        let args = parse(&[
            "bench",
            "--servers",
            "nginx,scb",
            "--scenarios",
            "static-1m,tls-h2-static-small",
        ]);
        assert_eq!(args.servers, [Server::Nginx, Server::Scb]);
        assert_eq!(
            args.scenarios,
            [Scenario::Static1m, Scenario::TlsH2StaticSmall]
        );
    }

    #[test]
    fn defaults_select_everything() {
        let args = parse(&["bench"]);
        assert_eq!(args.servers, Server::ALL);
        assert_eq!(args.scenarios, Scenario::ALL);
        assert_eq!(args.connections, 64);
        assert_eq!(args.workers, 1);
    }
}
