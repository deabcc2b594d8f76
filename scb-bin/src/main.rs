//! `scb`: a web server composed from scb's tower layers by a TOML config file.
//!
//! ```text
//! scb run   [CONFIG]              serve until SIGTERM/SIGINT, then drain and exit 0
//! scb run   [CONFIG] --upgrade    take the listeners of the running scb over
//! scb check [CONFIG] [--print]    validate: "scb.toml: ok", or file:line:column: key: error
//! scb reload [CONFIG]             check, SIGHUP the running server ([server] pid_file),
//!                                 and wait for its verdict: exit 0 reloaded, 1 failed
//! scb serve DIR                   static files, no config
//! scb --version
//! ```
//!
//! CONFIG is a path, given as is or as `--config PATH`; without one, `./scb.toml`, then
//! `/etc/scb/scb.toml`.
//!
//! Logs go to stderr, human-readable by default or JSON with `--log-format json`, filtered
//! by `RUST_LOG` (default `info`).

mod activation;
mod cluster;
mod config;
mod labels;
mod one_of;
mod otlp;
mod plan;
mod purge;
mod recorder;
mod reload_status;
mod route;
mod run;
mod script_route;
mod stack;
mod status;
mod switch;
mod tickets;
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

Upgrade the binary: install the new one, then `scb run --upgrade FILE`: it
takes the listeners from the running scb over [server] upgrade_socket, and the old
process drains and exits. Under systemd, use dist/systemd/scb.socket instead.

Config: TOML; ${VAR} and ${VAR:-default} come from the environment, `include =
[\"conf.d/*.toml\"]` appends files of tables; `scb check --print` shows the result.

Environment: RUST_LOG filters the process's log (default `info`, `debug` at most in a
release build; `scb::access=info` adds the access log's tracing events); LISTEN_FDS/LISTEN_PID (systemd) hand sockets
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
        #[command(flatten)]
        config: ConfigArg,
        /// Take the listening sockets over from the `scb run` listening on the config's
        /// `[server] upgrade_socket` (a binary upgrade): once this process serves, that
        /// one drains and exits.
        #[arg(long)]
        upgrade: bool,
    },
    /// Check a config file, then tell the `scb run` it names (by its `[server] pid_file`)
    /// to reload it, as SIGHUP does, and wait for the outcome: exit 0 once new requests
    /// get the new routes, listeners and certificates; 1, with the server's reason, when
    /// the server finds the config wrong (nothing changes then) or does not answer.
    Reload {
        #[command(flatten)]
        config: ConfigArg,
        /// How long to wait for the server's verdict.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        timeout: std::time::Duration,
    },
    /// Check a config file and exit: 0 if it is valid, 1 with the error otherwise.
    Check {
        #[command(flatten)]
        config: ConfigArg,
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

/// The config files looked for, in order, when a command names none: the working
/// directory's, then the system's, as nginx and Caddy look for theirs.
const DEFAULT_CONFIGS: [&str; 2] = ["scb.toml", "/etc/scb/scb.toml"];

/// Which config file a command reads.
#[derive(Debug, clap::Args)]
struct ConfigArg {
    /// The config file (TOML). Default: ./scb.toml, then /etc/scb/scb.toml.
    #[arg(value_name = "CONFIG", conflicts_with = "config")]
    file: Option<PathBuf>,
    /// The config file (TOML), the same as the positional CONFIG.
    #[arg(long, short, value_name = "CONFIG")]
    config: Option<PathBuf>,
}

impl ConfigArg {
    /// The file named, or the first of [`DEFAULT_CONFIGS`] that exists.
    fn path(self) -> Result<PathBuf, String> {
        if let Some(path) = self.file.or(self.config) {
            return Ok(path);
        }
        DEFAULT_CONFIGS
            .iter()
            .map(PathBuf::from)
            .find(|path| path.exists())
            .ok_or_else(|| {
                format!(
                    "no config file given, and neither ./{} nor {} exists",
                    DEFAULT_CONFIGS[0], DEFAULT_CONFIGS[1]
                )
            })
    }
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
        Command::Check { config, print } => {
            let config = match config.path() {
                Ok(path) => path,
                Err(e) => return usage_error("check", &e),
            };
            match Plan::load(&config) {
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
            }
        }
        Command::Serve {
            dir,
            listen,
            workers,
            compress,
        } => {
            let plan = match Plan::serve(&dir, listen, workers, compress) {
                Ok(plan) => plan,
                Err(e) => return usage_error("serve", &e.to_string()),
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
        Command::Reload { config, timeout } => {
            let config = match config.path() {
                Ok(path) => path,
                Err(e) => return usage_error("reload", &e),
            };
            let plan = match Plan::load(&config) {
                Ok(plan) => plan,
                Err(e) => return config_error(&e),
            };
            let Some(pid_file) = plan.pid_file else {
                return usage_error(
                    "reload",
                    &format!(
                        "{} sets no [server] pid_file; send SIGHUP to the server instead",
                        config.display()
                    ),
                );
            };
            match run::reload(&pid_file, timeout) {
                Ok((pid, reload_status::Outcome::Reloaded)) => {
                    #[allow(clippy::print_stdout, reason = "the result is the command's output")]
                    {
                        println!("scb (pid {pid}) reloaded {}", config.display());
                    }
                    ExitCode::SUCCESS
                }
                Ok((pid, reload_status::Outcome::Failed(why))) => usage_error(
                    "reload",
                    &format!("scb (pid {pid}) kept its running config: {why}"),
                ),
                Ok((pid, reload_status::Outcome::NoAnswer)) => usage_error(
                    "reload",
                    &format!(
                        "scb (pid {pid}) was signalled but said nothing of the reload \
                         within {}; see its log",
                        humantime::format_duration(timeout)
                    ),
                ),
                Err(e) => usage_error("reload", &format!("{e:#}")),
            }
        }
        Command::Run { config, upgrade } => {
            let config = match config.path() {
                Ok(path) => path,
                Err(e) => return usage_error("run", &e),
            };
            let (plan, recorder) = match run::load_with_recorder(&config) {
                Ok(loaded) => loaded,
                Err(run::LoadError::Config(e)) => return config_error(&e),
                Err(run::LoadError::Recorder(e)) => return usage_error("run", &format!("{e:#}")),
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

/// Prints `scb COMMAND: message` and fails: for what goes wrong before there is a log.
fn usage_error(command: &str, message: &str) -> ExitCode {
    #[allow(clippy::print_stderr, reason = "the error is the command's output")]
    {
        eprintln!("scb {command}: {message}");
    }
    ExitCode::FAILURE
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
