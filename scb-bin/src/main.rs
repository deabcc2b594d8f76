//! `scb`: a web server composed from scb's tower layers by a TOML config file.
//!
//! ```text
//! scb run   --config scb.toml     serve until SIGTERM/SIGINT, then drain and exit 0
//! scb run   --config scb.toml --upgrade   take the listeners of the running scb over
//! scb check --config scb.toml [--print]   validate: "scb.toml: ok", or file:line:column: key: error
//! scb reload --config scb.toml    check, then SIGHUP the running server ([server] pid_file): reload
//! scb serve DIR                   static files, no config
//! scb --version
//! ```
//!
//! Logs go to stderr, human-readable by default or JSON with `--log-format json`, filtered
//! by `RUST_LOG` (default `info`).

mod activation;
mod config;
mod one_of;
mod plan;
mod route;
mod run;
mod stack;
mod switch;
mod upgrade;
mod users;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use scb_core::access_log;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{Directive, LevelFilter};

use crate::plan::Plan;

/// mimalloc instead of the system allocator: a request on the respond path makes about ten
/// short-lived allocations (header maps, extensions, the request id). callgrind on
/// `/respond`: 11.3k instructions per request with glibc malloc, 10.7k with mimalloc.
/// nginx avoids the same cost with its per-request pools. Only the binary chooses an
/// allocator; the library crates leave it to their users.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `scb --help` says after the commands: enough to run it without other docs.
const OPERATIONS: &str = "\
Signals (to `scb run`):
  SIGTERM, SIGINT  drain: /readyz says 503, listeners serve on for [health] drain_delay,
                   then close; in-flight requests get [server] grace_period (10 s).
                   A second signal ends the drain delay.
  SIGHUP           reload the config (as `scb reload`): checked whole first; new
                   requests get the new routes, layers, listeners and certificates,
                   in-flight ones finish on the old. A bad config is logged (file, line,
                   key) and changes nothing.
  SIGUSR1          reopen the access log file (after logrotate moved it).

Upgrade the binary: install the new one, then `scb run --upgrade --config FILE`: it
takes the listeners from the running scb over [server] upgrade_socket, and the old
process drains and exits. Under systemd, use dist/systemd/scb.socket instead.

Config: TOML; ${VAR} and ${VAR:-default} come from the environment, `include =
[\"conf.d/*.toml\"]` appends files of tables; `scb check --print` shows the result.

Environment: RUST_LOG filters the process's log (default `info`; `scb::access=info`
adds the access log's tracing events); LISTEN_FDS/LISTEN_PID (systemd) hand sockets
over.

Exit status: 0 after a clean stop or a valid check, 1 on any error.";

/// A web server built from composable tower layers.
#[derive(Debug, Parser)]
#[command(name = "scb", version, about, after_long_help = OPERATIONS)]
struct Cli {
    /// Log output format (to stderr).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server until SIGTERM or SIGINT.
    ///
    /// Binds every `[[listen]]` (or takes the socket systemd passed for it), starts one
    /// worker thread per CPU (`[server] workers`), and serves until SIGTERM or SIGINT,
    /// then drains. SIGHUP reloads the config, SIGUSR1 reopens the access log; see
    /// `scb --help`.
    Run {
        /// The config file (TOML).
        #[arg(long, short)]
        config: PathBuf,
        /// Take the listening sockets over from the `scb run` listening on the config's
        /// `[server] upgrade_socket` (a binary upgrade): once this process serves, that
        /// one drains and exits.
        #[arg(long)]
        upgrade: bool,
    },
    /// Check a config file, then tell the `scb run` it names (by its `[server] pid_file`)
    /// to reload it, as SIGHUP does: new requests get the new routes, listeners and
    /// certificates; a config the server finds wrong is logged and changes nothing.
    Reload {
        /// The config file (TOML) the server runs with.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check a config file and exit: 0 if it is valid, 1 with the error otherwise.
    Check {
        /// The config file (TOML).
        #[arg(long, short)]
        config: PathBuf,
        /// Print the effective plan: the files read, the listeners, the routes in match
        /// order with their upstreams, metrics and the access log.
        #[arg(long)]
        print: bool,
    },
    /// Serve the files of a directory, no config file needed (precompressed `.br`, `.zst`
    /// and `.gz` sidecars are used when present; access log on).
    Serve {
        /// The directory to serve.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The address to listen on.
        #[arg(long, short, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Worker threads (default: one per CPU).
        #[arg(long)]
        workers: Option<usize>,
        /// Compress text responses that have no sidecar on the fly (gzip, br, zstd).
        #[arg(long)]
        compress: bool,
    },
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The access log's format when the config names none: lines people read beside
    /// text, JSON beside JSON.
    fn access_format(self) -> access_log::AccessLogFormat {
        match self {
            Self::Text => access_log::AccessLogFormat::Combined,
            Self::Json => access_log::AccessLogFormat::Json,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config, print } => match Plan::load(&config) {
            Ok(plan) => {
                #[allow(clippy::print_stdout, reason = "the verdict is the command's output")]
                {
                    if print {
                        print!("{}", plan.describe());
                    }
                    println!("{}: ok", config.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => config_error(&e),
        },
        Command::Serve {
            dir,
            listen,
            workers,
            compress,
        } => {
            let plan = match Plan::serve(&dir, listen, workers, compress) {
                Ok(plan) => plan,
                Err(e) => {
                    #[allow(clippy::print_stderr, reason = "the error is the command's output")]
                    {
                        eprintln!("scb serve: {e}");
                    }
                    return ExitCode::FAILURE;
                }
            };
            let _log = init_logging(cli.log_format);
            match run::run(None, plan, None, cli.log_format.access_format(), false) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Reload { config } => {
            let plan = match Plan::load(&config) {
                Ok(plan) => plan,
                Err(e) => return config_error(&e),
            };
            let Some(pid_file) = plan.pid_file else {
                #[allow(clippy::print_stderr, reason = "the error is the command's output")]
                {
                    eprintln!(
                        "scb reload: {} sets no [server] pid_file; send SIGHUP to the server instead",
                        config.display()
                    );
                }
                return ExitCode::FAILURE;
            };
            match run::signal_reload(&pid_file) {
                Ok(pid) => {
                    #[allow(clippy::print_stdout, reason = "the result is the command's output")]
                    {
                        println!("signalled scb (pid {pid}) to reload its config");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    #[allow(clippy::print_stderr, reason = "the error is the command's output")]
                    {
                        eprintln!("scb reload: {e:#}");
                    }
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run { config, upgrade } => {
            let (plan, recorder) = match run::load_with_recorder(&config) {
                Ok(loaded) => loaded,
                Err(run::LoadError::Config(e)) => return config_error(&e),
                Err(run::LoadError::Recorder(e)) => {
                    #[allow(clippy::print_stderr, reason = "the error is the command's output")]
                    {
                        eprintln!("scb run: {e:#}");
                    }
                    return ExitCode::FAILURE;
                }
            };
            let _log = init_logging(cli.log_format);
            match run::run(
                Some(config),
                plan,
                recorder,
                cli.log_format.access_format(),
                upgrade,
            ) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Prints a config error as is: `file:line:column: key: message` is meant for people and
/// editors alike, so it is not wrapped in a log line.
fn config_error(err: &config::ConfigError) -> ExitCode {
    #[allow(clippy::print_stderr, reason = "the error is the command's output")]
    {
        eprintln!("{err}");
    }
    ExitCode::FAILURE
}

/// Lines the process log's queue holds before it drops; see [`init_logging`].
const PROCESS_LOG_LINES: usize = 4096;

/// Installs the global subscriber: `RUST_LOG` (default `info`), with the access log's
/// `tracing` target off unless `RUST_LOG` names it: the access log has its own writer
/// (`[log] access`), and the events of the layer's `tracing` sink would only repeat it.
///
/// Lines go to stderr through `tracing-appender`'s non-blocking writer: a thread of its
/// own writes them, and when a reader stops reading (a full pipe to journald), lines are
/// dropped instead of blocking a worker or the signal handling. The guard writes out the
/// rest when dropped, waiting a second at most.
fn init_logging(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    let mut filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env_lossy();
    let env_names_access = std::env::var(EnvFilter::DEFAULT_ENV)
        .is_ok_and(|directives| directives.contains(access_log::TARGET));
    if !env_names_access {
        let directive: Directive = format!("{}=off", access_log::TARGET)
            .parse()
            .expect("a target and a level make a valid directive");
        filter = filter.add_directive(directive);
    }
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        // The queue's slots are allocated up front: the default 128,000 lines were 4 MiB
        // of every process's resident memory. The process log is a few lines a second
        // (requests go to the access log's own writer); 4,096 lines absorb any burst of it.
        .buffered_lines_limit(PROCESS_LOG_LINES)
        .lossy(true)
        .thread_name("scb-log")
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        // Each worker is a thread named scb-worker-N: which one logged says which one served.
        .with_thread_names(true);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().init(),
    }
    guard
}
