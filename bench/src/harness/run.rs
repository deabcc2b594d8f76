//! The whole run: prepare, then scenario by scenario and server by server start, verify,
//! warm up, measure, stop; then write the reports.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use crate::harness::cert::{self, CertFiles};
use crate::harness::cli::{Args, Cli, Mode};
use crate::harness::environment::Environment;
use crate::harness::figures::{Figures, Outcome, Row, Stage, fill_ratios, median_round};
use crate::harness::fixtures::Fixtures;
use crate::harness::load::Target;
use crate::harness::ports::{free_ports, local, wait_until_accepting};
use crate::harness::process::{ServerProcess, display_command};
use crate::harness::scenario::{Expected, PROXY_PATH, Protocol, Scenario};
use crate::harness::server::{LaunchInput, Server, nginx_launch};
use crate::harness::settings::Settings;
use crate::harness::template::{self, Vars};
use crate::harness::{chart, export, php, proctree, report, tools, verify, wrk};

/// A progress line on stderr (stdout carries only the final table).
pub(crate) fn progress(message: &str) {
    #[allow(
        clippy::print_stderr,
        reason = "progress lines are the harness's interface"
    )]
    {
        eprintln!("bench: {message}");
    }
}

/// Writes a command's report into `dir` as `name` (making `dir` first), prints it (stdout
/// carries only the report) and says on stderr where it is.
pub(crate) fn publish(dir: &Path, name: &str, report: &str) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
    #[allow(clippy::print_stdout, reason = "the report is the command's output")]
    {
        print!("{report}");
    }
    progress(&format!("report in {}", path.display()));
    Ok(())
}

/// Entry point: exit 0 when every row is measured or not supported, 1 when any row failed,
/// 2 when the run could not be set up at all.
pub(crate) fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let result = match Cli::parse().into_mode() {
        Mode::Run(args) => run(args, &argv),
        Mode::Profile(args) => crate::harness::profile::run(args, &argv),
        Mode::H2spec(args) => crate::harness::h2spec::run(&args),
        Mode::Soak(args) => crate::harness::soak::run(&args),
        Mode::CacheTests(args) => crate::harness::cache_tests::run(&args),
        Mode::Idle(args) => crate::harness::idle::run(args, &argv),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            progress(&format!("error: {e:#}"));
            ExitCode::from(2)
        }
    }
}

/// What every row of the run shares.
pub(crate) struct Ctx<'a> {
    pub(crate) settings: &'a Settings,
    pub(crate) fixtures: &'a Fixtures,
    pub(crate) cert: &'a CertFiles,
    pub(crate) work: &'a Path,
}

/// Runs everything; `Ok(false)` when some row failed.
fn run(args: Args, argv: &[String]) -> anyhow::Result<bool> {
    crate::harness::process::install_signal_cleanup()?;
    let settings = Settings::from_args(args, argv)?;
    if settings.server_cpus.overlaps(&settings.load.cpus) {
        progress("warning: server and load CPUs overlap; the figures include their contention");
    }
    tools::ensure(&settings)?;

    let (work, fixtures, cert) = prepare(&settings)?;
    let env = Environment::collect(&settings);
    let ctx = Ctx {
        settings: &settings,
        fixtures: &fixtures,
        cert: &cert,
        work: &work,
    };

    let mut rows = Vec::new();
    for &scenario in &settings.scenarios {
        rows.extend(run_scenario(&ctx, scenario)?);
    }
    fill_ratios(&mut rows);

    let out = &settings.out;
    let write = |name: &str, text: &str| -> anyhow::Result<()> {
        let path = out.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("results.md", &report::markdown(&env, &rows, settings.quick))?;
    write("results.csv", &export::csv(&rows))?;
    write("results.json", &export::json(&env, &rows)?)?;
    write("chart.svg", &chart::svg(&rows))?;
    // 11 MiB of fixtures per run are not worth keeping: they are a function of the seeds.
    // The rendered configs and server logs stay for reading.
    let _ = fs::remove_dir_all(fixtures.docroot());

    #[allow(clippy::print_stdout, reason = "the table is the command's output")]
    {
        print!("{}", report::table(&rows));
    }
    progress(&format!(
        "results in {} (results.md, results.csv, results.json, chart.svg)",
        out.display()
    ));
    let problems: Vec<String> = rows
        .iter()
        .filter_map(|r| Some(format!("{} {}: {}", r.server, r.scenario, r.problem()?)))
        .collect();
    for problem in &problems {
        progress(problem);
    }
    Ok(problems.is_empty())
}

/// The run's work directory with the fixtures and the certificate in it.
pub(crate) fn prepare(settings: &Settings) -> anyhow::Result<(PathBuf, Fixtures, CertFiles)> {
    let work = settings.out.join("work");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    // Configs get absolute paths: nginx resolves relative ones against its own prefix.
    let work = work
        .canonicalize()
        .with_context(|| format!("resolving {}", work.display()))?;
    progress(&format!("fixtures and certificate in {}", work.display()));
    let fixtures = Fixtures::create(&work)?;
    let cert = cert::create(&work)?;
    Ok((work, fixtures, cert))
}

/// The upstream nginx of the proxy scenario, pinned to the load CPUs.
pub(crate) struct Upstream {
    pub(crate) process: ServerProcess,
    pub(crate) port: u16,
}

/// Every placeholder of the config contract.
fn vars(ctx: &Ctx<'_>, http: u16, tls: u16, upstream: u16, workers: usize, dir: &Path) -> Vars {
    let path = |p: &Path| p.display().to_string();
    Vars::new()
        .set("HTTP_PORT", http.to_string())
        .set("TLS_PORT", tls.to_string())
        .set("UPSTREAM", format!("127.0.0.1:{upstream}"))
        .set("UPSTREAM_PORT", upstream.to_string())
        // The proxy-tls and proxy-h2c scenarios' upstream: the same nginx, listening with
        // TLS or h2c on its port then (`UPSTREAM_LISTEN`); elsewhere nobody uses them.
        .set("UPSTREAM_TLS", format!("127.0.0.1:{upstream}"))
        .set("UPSTREAM_H2C", format!("127.0.0.1:{upstream}"))
        .set("UPSTREAM_LISTEN", "")
        .set("DOCROOT", path(ctx.fixtures.docroot()))
        .set("CERT", path(&ctx.cert.cert))
        .set("KEY", path(&ctx.cert.key))
        .set("WORKERS", workers.to_string())
        .set("MAX_CONNECTIONS", ctx.settings.max_connections.to_string())
        .set("WORKDIR", path(dir))
        .set("METRICS", "")
        .set("HTTP3", "false")
        .set("CADDY_PROTOCOLS", "h1 h2")
        // The FastCGI scenarios' php-fpm; in the others nothing listens on the socket.
        .set("PHP_FPM_SOCKET", path(&php::socket(ctx.work)))
        .set("PHP_ROOT", path(ctx.fixtures.php_root()))
}

/// Renders template `name` from the configs directory into `dir`.
fn render_config(ctx: &Ctx<'_>, name: &str, vars: &Vars, dir: &Path) -> anyhow::Result<PathBuf> {
    let source = ctx.settings.configs.join(name);
    let template = fs::read_to_string(&source)
        .with_context(|| format!("reading config template {}", source.display()))?;
    let text = template::render(&source.display().to_string(), &template, vars)?;
    let target = dir.join(name);
    fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
    Ok(target)
}

/// Starts the upstream nginx for `scenario`: its listener speaks TLS with the run's
/// certificate for `proxy-tls`, HTTP/2 with prior knowledge for `proxy-h2c`, HTTP/1.1
/// otherwise.
pub(crate) fn start_upstream(
    ctx: &Ctx<'_>,
    dir: &Path,
    scenario: Scenario,
) -> anyhow::Result<Upstream> {
    let listen = match scenario {
        Scenario::ProxyTls => " ssl",
        // nginx 1.22: `http2` on a listener without `ssl` is h2c with prior knowledge only.
        Scenario::ProxyH2c => " http2",
        _ => "",
    };
    let dir = dir.join("upstream");
    fs::create_dir_all(&dir)?;
    let [port, unused_http, unused_tls] = free_ports::<3>()?;
    // The upstream gets one worker per load CPU: it shares them with the load generator.
    let workers = ctx.settings.load.cpus.count();
    let vars =
        vars(ctx, unused_http, unused_tls, port, workers, &dir).set("UPSTREAM_LISTEN", listen);
    let config = render_config(ctx, "nginx-upstream.conf", &vars, &dir)?;
    let launch = nginx_launch(&config);
    let cpus = &ctx.settings.load.cpus;
    fs::write(
        dir.join("command.txt"),
        format!("{}\n", display_command(cpus, &launch)),
    )?;
    let mut process =
        ServerProcess::start("upstream nginx", cpus, &launch, &dir.join("server.log"))?;
    wait_until_accepting(&mut process, local(port))?;
    // Over TLS or h2c, the servers' own verification of the scenario's URL checks it end
    // to end.
    if listen.is_empty() {
        verify::plain(
            port,
            &[Expected {
                path: PROXY_PATH.to_owned(),
                body: Fixtures::SMALL_BODY.to_vec(),
            }],
        )
        .context("the upstream itself")?;
    }
    Ok(Upstream { process, port })
}

fn run_scenario(ctx: &Ctx<'_>, scenario: Scenario) -> anyhow::Result<Vec<Row>> {
    let settings = ctx.settings;
    let dir = ctx.work.join(scenario.name());
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let script = dir.join("load.lua");
    if matches!(scenario.protocol(), Protocol::Http1 | Protocol::TlsHttp1) {
        let paths = scenario.load_paths(ctx.fixtures);
        let mut lua = wrk::script(&paths, settings.load.threads());
        if scenario.closes() {
            lua = wrk::closing(&lua);
        }
        fs::write(&script, lua).with_context(|| format!("writing {}", script.display()))?;
    }
    let expected = scenario.expected(ctx.fixtures);

    let anyone = settings.servers.iter().any(|s| s.supports(scenario));
    let php_fpm = if scenario.needs_php_fpm() && anyone {
        match php::binary() {
            Some(binary) => {
                progress(&format!("[{scenario}] starting php-fpm"));
                php::start(ctx, &dir, &binary)
                    .map(Some)
                    .map_err(|e| format!("php-fpm: {e:#}"))
            }
            None if php::required() => Err(format!(
                "{}, and SCB_REQUIRE_TOOLS says the FastCGI scenarios must run",
                php::missing()
            )),
            None => {
                progress(&format!("[{scenario}] skipped: {}", php::missing()));
                return Ok(Vec::new());
            }
        }
    } else {
        Ok(None)
    };
    let upstream = if scenario.needs_upstream() && anyone {
        progress(&format!("[{scenario}] starting the upstream nginx"));
        start_upstream(ctx, &dir, scenario)
            .map(Some)
            .map_err(|e| format!("upstream nginx: {e:#}"))
    } else {
        Ok(None)
    };
    // Without a running upstream, the servers still get a port in their config: one that
    // nobody listens on.
    let upstream_port = match &upstream {
        Ok(Some(u)) => u.port,
        _ => free_ports::<1>()?[0],
    };

    // Each round measures every server once, in table order: a drift of the machine over
    // the minutes of a scenario falls on every server alike instead of on whoever ran last.
    let mut measured: Vec<Result<Vec<Figures>, Outcome>> = settings
        .servers
        .iter()
        .map(|&server| {
            if server.supports(scenario) {
                Ok(Vec::new())
            } else {
                progress(&format!("[{scenario}] {server}: {}", report::NOT_SUPPORTED));
                Err(Outcome::NotSupported)
            }
        })
        .collect();
    for message in [&upstream.as_ref().err(), &php_fpm.as_ref().err()]
        .into_iter()
        .flatten()
    {
        for slot in measured.iter_mut().filter(|slot| slot.is_ok()) {
            *slot = Err(Outcome::Failed {
                stage: Stage::Start,
                message: (*message).clone(),
            });
        }
    }
    for round in 0..settings.rounds {
        for (&server, slot) in settings.servers.iter().zip(measured.iter_mut()) {
            let Ok(rounds) = slot else {
                continue;
            };
            let tag = if settings.rounds > 1 {
                format!(" (round {}/{})", round + 1, settings.rounds)
            } else {
                String::new()
            };
            match measure(
                ctx,
                scenario,
                server,
                &dir,
                round,
                upstream_port,
                &script,
                &expected,
            ) {
                Ok(figures) => {
                    progress(&format!(
                        "[{scenario}] {server}{tag}: {:.0} req/s, {:.2} cpu-s, {} req/cpu-s, {:.1} MiB",
                        figures.load.rps(),
                        figures.cpu_s,
                        report::num(figures.req_per_cpu_s(), 0),
                        figures.peak_rss_mib()
                    ));
                    rounds.push(figures);
                }
                Err((stage, error)) => {
                    *slot = Err(Outcome::Failed {
                        stage,
                        message: format!("{error:#}"),
                    });
                }
            }
        }
    }

    let mut rows = Vec::new();
    for (&server, slot) in settings.servers.iter().zip(measured) {
        let row = match slot {
            Err(outcome) => Row::new(server, scenario, outcome),
            Ok(mut rounds) => {
                let rates = if rounds.len() > 1 {
                    rounds
                        .iter()
                        .map(|f| f.req_per_cpu_s().unwrap_or(0.0))
                        .collect()
                } else {
                    Vec::new()
                };
                let median = median_round(&rounds).context("no round was measured")?;
                let mut row = Row::new(
                    server,
                    scenario,
                    Outcome::Measured(rounds.swap_remove(median)),
                );
                row.rounds = rates;
                row
            }
        };
        if let Some(problem) = row.problem() {
            progress(&format!("[{scenario}] {server}: {problem}"));
        }
        rows.push(row);
    }
    if let Ok(Some(mut upstream)) = upstream
        && let Err(e) = upstream.process.stop()
    {
        progress(&format!("[{scenario}] upstream nginx: {e:#}"));
    }
    if let Ok(Some(mut php_fpm)) = php_fpm
        && let Err(e) = php_fpm.stop()
    {
        progress(&format!("[{scenario}] php-fpm: {e:#}"));
    }
    Ok(rows)
}

/// Tags an error with the stage it happened in.
pub(crate) fn at(stage: Stage) -> impl Fn(anyhow::Error) -> (Stage, anyhow::Error) {
    move |e| (stage, e)
}

/// A server started from its committed config, accepting, and verified.
pub(crate) struct Started {
    /// The server's process.
    pub(crate) process: ServerProcess,
    /// The row's own directory (config, logs, transcripts).
    pub(crate) dir: PathBuf,
    /// The URL the load generator aims at.
    pub(crate) url: String,
}

impl Started {
    /// What to load.
    pub(crate) fn target<'a>(&'a self, scenario: Scenario, script: &'a Path) -> Target<'a> {
        match scenario.protocol() {
            Protocol::Http1 => Target::Http1 {
                url: &self.url,
                script,
            },
            Protocol::TlsHttp1 => Target::Http1 {
                url: &self.url,
                script,
            },
            Protocol::TlsH2 => Target::H2 {
                url: &self.url,
                streams: scenario.h2_streams(),
            },
            Protocol::H3 => Target::H3 {
                url: &self.url,
                streams: scenario.h2_streams(),
            },
            Protocol::TlsResume => Target::TlsResume { url: &self.url },
        }
    }
}

/// Starts `server` for `scenario` from its committed config, waits until it accepts and
/// checks every URL of the scenario for status 200 and the exact bytes. `wrap` goes in
/// front of the server's command line (e.g. `valgrind --tool=callgrind`).
pub(crate) fn start_verified(
    ctx: &Ctx<'_>,
    scenario: Scenario,
    server: Server,
    dir: &Path,
    upstream_port: u16,
    expected: &[Expected],
    wrap: &[&str],
) -> Result<Started, (Stage, anyhow::Error)> {
    let settings = ctx.settings;
    fs::create_dir_all(dir).map_err(|e| (Stage::Start, e.into()))?;
    let [http_port, tls_port] = free_ports::<2>().map_err(at(Stage::Start))?;
    let vars = vars(
        ctx,
        http_port,
        tls_port,
        upstream_port,
        settings.workers,
        dir,
    )
    .set("OPEN_FILE_CACHE", server.nginx_open_file_cache())
    .set("METRICS", server.scb_metrics())
    // QUIC only for the HTTP/3 rows: elsewhere a UDP listener and an Alt-Svc field on
    // every TLS answer would be a difference nginx does not have.
    .set(
        "HTTP3",
        if scenario.protocol() == Protocol::H3 {
            "true"
        } else {
            "false"
        },
    )
    .set(
        "CADDY_PROTOCOLS",
        if scenario.protocol() == Protocol::H3 {
            "h1 h2 h3"
        } else {
            "h1 h2"
        },
    );
    let config = server
        .config_template()
        .map(|name| render_config(ctx, name, &vars, dir))
        .transpose()
        .map_err(at(Stage::Start))?;
    let mut launch = server
        .launch(&LaunchInput {
            config: config.as_deref(),
            binary: settings.binary(server),
            http_port,
            tls_port,
            upstream: &format!("127.0.0.1:{upstream_port}"),
            docroot: ctx.fixtures.docroot(),
            cert: &ctx.cert.cert,
            key: &ctx.cert.key,
            workers: settings.workers,
            workdir: dir,
        })
        .map_err(at(Stage::Start))?;
    if let Some((program, rest)) = wrap.split_first() {
        let mut args: Vec<std::ffi::OsString> = rest.iter().map(Into::into).collect();
        args.push(launch.program.into_os_string());
        args.append(&mut launch.args);
        launch.program = tools::program(program);
        launch.args = args;
    }
    let command = display_command(&settings.server_cpus, &launch);
    let _ = fs::write(dir.join("command.txt"), format!("{command}\n"));
    let mut process = ServerProcess::start(
        server.name(),
        &settings.server_cpus,
        &launch,
        &dir.join("server.log"),
    )
    .map_err(at(Stage::Start))?;

    let (port, url) = match scenario.protocol() {
        Protocol::Http1 => {
            let paths = scenario.load_paths(ctx.fixtures);
            // With several paths the Lua script picks them; the URL only names the server.
            let path = if paths.len() == 1 && !paths[0].ends_with(wrk::UNIQUE) {
                paths[0].as_str()
            } else {
                "/"
            };
            (http_port, format!("http://127.0.0.1:{http_port}{path}"))
        }
        Protocol::TlsH2 | Protocol::TlsHttp1 | Protocol::TlsResume | Protocol::H3 => (
            tls_port,
            format!(
                "https://127.0.0.1:{tls_port}{}",
                scenario.load_paths(ctx.fixtures)[0]
            ),
        ),
    };
    let waited = wait_until_accepting(&mut process, local(port)).map_err(at(Stage::Start))?;
    match scenario.protocol() {
        Protocol::Http1 => verify::plain(port, expected),
        // Over TLS the URLs are checked with HTTP/2 (curl, ALPN h2): the same listener
        // and certificate the HTTP/1.1 load then uses.
        Protocol::TlsH2 | Protocol::TlsHttp1 | Protocol::TlsResume => {
            verify::tls_h2(port, expected, dir)
        }
        Protocol::H3 => verify::h3(port, expected),
    }
    .map_err(at(Stage::Verification))?;
    progress(&format!(
        "[{scenario}] {server}: accepting after {} ms, {} URL(s) verified",
        waited.as_millis(),
        expected.len(),
    ));
    Ok(Started {
        process,
        dir: dir.to_path_buf(),
        url,
    })
}

/// One row: start, verify, warm up, measure, stop.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site, each argument named there"
)]
fn measure(
    ctx: &Ctx<'_>,
    scenario: Scenario,
    server: Server,
    scenario_dir: &Path,
    round: usize,
    upstream_port: u16,
    script: &Path,
    expected: &[Expected],
) -> Result<Figures, (Stage, anyhow::Error)> {
    let settings = ctx.settings;
    // Every round's configs and logs stay for reading.
    let dir = match round {
        0 => scenario_dir.join(server.name()),
        n => scenario_dir.join(format!("{}-round{}", server.name(), n + 1)),
    };
    let mut started = start_verified(ctx, scenario, server, &dir, upstream_port, expected, &[])?;
    progress(&format!(
        "[{scenario}] {server}: warm-up {} s, measuring {} s",
        settings.warmup, settings.duration
    ));
    let target = started.target(scenario, script);
    if settings.warmup > 0.0 {
        settings
            .load
            .run(&target, settings.warmup, &dir.join("load-warmup.txt"))
            .context("warm-up")
            .map_err(at(Stage::Load))?;
    }
    let pid = started.process.pid();
    let cpu_before = proctree::tree_cpu(pid)
        .context("reading the server's CPU time")
        .map_err(at(Stage::Load))?;
    let load = settings
        .load
        .run(&target, settings.duration, &dir.join("load-measured.txt"))
        .map_err(at(Stage::Load))?;
    let cpu = proctree::tree_cpu(pid)
        .context("reading the server's CPU time")
        .map_err(at(Stage::Load))?
        .since(cpu_before);
    let peak_rss_kib = proctree::tree_peak_rss_kib(pid)
        .context("reading the server's memory")
        .map_err(at(Stage::Load))?;
    started
        .process
        .ensure_running()
        .context("the server died during the measured window")
        .map_err(at(Stage::Load))?;
    started.process.stop().map_err(at(Stage::Stop))?;
    Ok(Figures {
        load,
        cpu_s: cpu.total_s,
        user_cpu_s: cpu.user_s,
        peak_rss_kib,
    })
}
