//! `bench cache-tests`: mnot's HTTP cache test suite (`http-cache-tests` 0.4.5 from the
//! npm registry) against scb's response cache, and against nginx 1.22's `proxy_cache`
//! run the same way, side by side.
//!
//! The suite is an origin server and a client, both node programs: the client asks the
//! cache under test for URLs whose answers the origin scripts, and reads from what the
//! origin saw whether each answer came from the cache. Here one origin serves both
//! caches: scb with a `cache` route proxying to it, nginx with `proxy_cache` (keys zone
//! in memory, the cache on disk beside the run). Each cache runs the whole suite once;
//! the report counts the tests passed, all and those the suite marks required (a test
//! without a `kind`), and lists every test that failed for scb with nginx's result
//! beside it.
//!
//! node and npm come from Debian (`nodejs`, `npm`); without them the suite is skipped
//! with a line saying so, unless `SCB_REQUIRE_TOOLS` is set. The suite is installed
//! once under `target/cache-tests/` with npm.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::harness::cpuset::CpuSet;
use crate::harness::ports::{free_ports, local, wait_until_accepting};
use crate::harness::process::ServerProcess;
use crate::harness::run::progress;
use crate::harness::server::{Launch, nginx_launch};
use crate::harness::tools;

/// The suite's version: the one whose published results the issue compares with.
const SUITE: &str = "http-cache-tests@0.4.5";

/// The flags of `bench cache-tests`.
#[derive(Debug, clap::Args)]
pub(crate) struct CacheTestsArgs {
    /// The scb binary.
    #[arg(long, value_name = "PATH")]
    pub(crate) scb: PathBuf,
    /// Skip the nginx run.
    #[arg(long)]
    pub(crate) no_nginx: bool,
    /// Where the suite is installed. Default `target/cache-tests`.
    #[arg(long, value_name = "DIR")]
    pub(crate) suite_dir: Option<PathBuf>,
    /// Output directory. Default `bench/out/<UTC timestamp>-cache-tests`.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

/// Required tests scb does not pass, with why; any other required test that fails makes
/// the command fail (a regression). Explained at length in RELIABILITY.md.
const KNOWN: [(&str, &str); 13] = [
    (
        "freshness-max-age-s-maxage-private",
        "browser only: not run against a proxy",
    ),
    (
        "freshness-max-age-s-maxage-private-multiple",
        "browser only: not run against a proxy",
    ),
    (
        "cc-resp-immutable-stale",
        "browser only: not run against a proxy",
    ),
    (
        "age-parse-prefix",
        "`Age: 0,7200` is not one integer: read as 2^31, revalidated rather than trusted",
    ),
    (
        "stale-close-must-revalidate",
        "the origin closes; scb's 502 carries no origin marker, which the suite reads as cached",
    ),
    (
        "stale-close-proxy-revalidate",
        "the origin closes; scb's 502 carries no origin marker, which the suite reads as cached",
    ),
    (
        "stale-close-no-cache",
        "the origin closes; scb's 502 carries no origin marker, which the suite reads as cached",
    ),
    (
        "stale-close-s-maxage=2",
        "the origin closes; scb's 502 carries no origin marker, which the suite reads as cached",
    ),
    (
        "headers-store-Set-Cookie",
        "an answer that sets a cookie is not shared unless `public` (nginx does not store it)",
    ),
    (
        "headers-store-Transfer-Encoding",
        "the origin's framing is refused by the proxy (502): never guessed",
    ),
    (
        "304-etag-update-response-ETag",
        "a 304 with another strong ETag is about another representation (RFC 9111 4.3.4)",
    ),
    (
        "304-etag-update-response-Set-Cookie",
        "an answer that sets a cookie is not stored, so it is never revalidated",
    ),
    (
        "surrogate-fresh-cc-nostore",
        "a Surrogate-Control directive with a target is for that target, not for scb",
    ),
];

/// Counts a results file against the suite: `{all, pass, req, reqPass}` as JSON, then
/// one line per test that did not pass: `id<TAB>kind<TAB>result`.
const COUNT: &str = r#"
import tests from './node_modules/http-cache-tests/tests/index.mjs'
import surrogate from './node_modules/http-cache-tests/tests/surrogate-control.mjs'
import fs from 'fs'
tests.push(surrogate)
const results = JSON.parse(fs.readFileSync(process.argv[2]))
let all = 0, pass = 0, req = 0, reqPass = 0
const failed = []
for (const suite of tests) for (const t of suite.tests) {
  all++
  const required = t.kind === undefined || t.kind === 'required'
  if (required) req++
  const r = results[t.id]
  if (r === true) { pass++; if (required) reqPass++ } else {
    failed.push(`${t.id}\t${required ? 'required' : t.kind}\t${JSON.stringify(r === undefined ? 'not run' : r)}`)
  }
}
console.log(JSON.stringify({all, pass, req, reqPass}))
for (const line of failed) console.log(line)
"#;

/// One cache's run of the suite.
#[derive(Debug)]
struct Outcome {
    name: &'static str,
    summary: String,
    /// Test id -> (kind, result) for those that did not pass.
    failed: Vec<(String, String, String)>,
}

/// Runs the suite; `Ok(false)` when scb failed a required test outside [`KNOWN`].
pub(crate) fn run(args: &CacheTestsArgs) -> anyhow::Result<bool> {
    crate::harness::process::install_signal_cleanup()?;
    let (Some(node), Some(npm)) = (tools::find("node"), tools::find("npm")) else {
        let why = "node and npm not found (Debian: apt-get install nodejs npm)";
        if std::env::var_os("SCB_REQUIRE_TOOLS").is_some() {
            bail!("{why}, and SCB_REQUIRE_TOOLS says the suite must run");
        }
        progress(&format!("cache-tests: skipped: {why}"));
        return Ok(true);
    };
    let suite = args
        .suite_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/cache-tests"));
    install(&npm, &suite)?;
    let suite = suite.canonicalize()?;
    let package = suite.join("node_modules/http-cache-tests");
    fs::write(suite.join("count.mjs"), COUNT)?;

    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("bench/out").join(format!(
            "{}-cache-tests",
            scb_core::date::UtcTime::now().compact()
        ))
    });
    fs::create_dir_all(&out)?;
    let work = out.canonicalize()?;
    let cpus = CpuSet::online()?;
    let [origin_port, scb_port, nginx_port] = free_ports::<3>()?;

    let origin_launch = Launch {
        program: node.clone(),
        args: vec![package.join("server/server.mjs").into()],
        env: vec![
            ("npm_config_protocol".into(), "http".into()),
            ("npm_config_port".into(), origin_port.to_string().into()),
            ("npm_config_pidfile".into(), work.join("origin.pid").into()),
        ],
    };
    let mut origin =
        ServerProcess::start("origin", &cpus, &origin_launch, &work.join("origin.log"))?;
    wait_until_accepting(&mut origin, local(origin_port))?;

    let mut outcomes = Vec::new();
    let config = work.join("scb.toml");
    fs::write(
        &config,
        format!(
            "[server]\nworkers = 1\n\n[[listen]]\naddr = \"127.0.0.1:{scb_port}\"\n\n\
             [log]\naccess = false\n\n[[route]]\nprefix = \"/\"\n\
             proxy = {{ upstreams = [\"127.0.0.1:{origin_port}\"] }}\n\
             cache = {{ max_bytes = \"64MiB\" }}\n"
        ),
    )?;
    let launch = Launch {
        program: args.scb.clone(),
        args: vec!["run".into(), "--config".into(), config.into()],
        env: vec![],
    };
    let mut scb = ServerProcess::start("scb", &cpus, &launch, &work.join("scb.log"))?;
    wait_until_accepting(&mut scb, local(scb_port))?;
    outcomes.push(run_suite("scb", &node, &suite, scb_port, &work)?);
    scb.stop()?;

    if args.no_nginx {
        progress("cache-tests: nginx skipped (--no-nginx)");
    } else if tools::find("nginx").is_none() {
        if std::env::var_os("SCB_REQUIRE_TOOLS").is_some() {
            bail!("nginx not found, and SCB_REQUIRE_TOOLS says the comparison must run");
        }
        progress("cache-tests: nginx skipped: not found (apt-get install nginx-light)");
    } else {
        let config = write_nginx_config(&work, nginx_port, origin_port)?;
        let mut nginx = ServerProcess::start(
            "nginx",
            &cpus,
            &nginx_launch(&config),
            &work.join("nginx.log"),
        )?;
        wait_until_accepting(&mut nginx, local(nginx_port))?;
        outcomes.push(run_suite("nginx", &node, &suite, nginx_port, &work)?);
        nginx.stop()?;
    }
    origin.stop()?;

    let regressions: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.name == "scb")
        .flat_map(|o| &o.failed)
        .filter(|(id, kind, _)| kind == "required" && !KNOWN.iter().any(|(k, _)| k == id))
        .map(|(id, _, _)| id.as_str())
        .collect();
    let report = render(&outcomes);
    crate::harness::run::publish(&work, "cache-tests.md", &report)?;
    if !regressions.is_empty() {
        progress(&format!(
            "cache-tests: required tests scb fails outside the known list: {}",
            regressions.join(", ")
        ));
    }
    Ok(regressions.is_empty())
}

/// Installs the suite under `dir` with npm, unless it is there already.
fn install(npm: &Path, dir: &Path) -> anyhow::Result<()> {
    if dir
        .join("node_modules/http-cache-tests/package.json")
        .is_file()
    {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    progress(&format!("cache-tests: npm install {SUITE}"));
    let status = Command::new(npm)
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--legacy-bundling",
            "--prefix",
        ])
        .arg(dir)
        .arg(SUITE)
        .status()
        .context("running npm")?;
    if !status.success() {
        bail!("npm install {SUITE} failed ({status})");
    }
    Ok(())
}

/// The suite's client against the cache on `port`, its results counted.
fn run_suite(
    name: &'static str,
    node: &Path,
    suite: &Path,
    port: u16,
    work: &Path,
) -> anyhow::Result<Outcome> {
    progress(&format!("cache-tests: {name} on 127.0.0.1:{port}"));
    let package = suite.join("node_modules/http-cache-tests");
    let output = Command::new(node)
        .arg("--no-warnings")
        .arg(package.join("cli.mjs"))
        .current_dir(&package)
        .env("npm_config_base", format!("http://127.0.0.1:{port}"))
        .env("npm_config_id", "")
        .env("npm_package_config_id", "")
        .output()
        .context("running the suite's client")?;
    let results = work.join(format!("{name}-results.json"));
    fs::write(&results, &output.stdout)?;
    if !output.status.success() || output.stdout.is_empty() {
        bail!(
            "the suite's client failed against {name} ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let counted = Command::new(node)
        .arg(suite.join("count.mjs"))
        .arg(&results)
        .current_dir(suite)
        .output()
        .context("counting the results")?;
    if !counted.status.success() {
        bail!(
            "counting {name}'s results failed: {}",
            String::from_utf8_lossy(&counted.stderr)
        );
    }
    let text = String::from_utf8(counted.stdout).context("the count is not UTF-8")?;
    let mut lines = text.lines();
    let summary = lines.next().unwrap_or_default().to_owned();
    let failed = lines
        .filter_map(|line| {
            let mut fields = line.splitn(3, '\t');
            Some((
                fields.next()?.to_owned(),
                fields.next()?.to_owned(),
                fields.next()?.to_owned(),
            ))
        })
        .collect();
    progress(&format!("cache-tests: {name}: {summary}"));
    Ok(Outcome {
        name,
        summary,
        failed,
    })
}

/// nginx 1.22 as a caching proxy in front of the origin: `proxy_cache` with its keys
/// zone in memory and the cache on disk in the run's directory, and `proxy_cache_revalidate
/// on`, as the suite's own docker setup for nginx runs it.
fn write_nginx_config(work: &Path, port: u16, origin: u16) -> anyhow::Result<PathBuf> {
    let w = work.display();
    let config = work.join("nginx.conf");
    fs::write(
        &config,
        format!(
            "user root;\nworker_processes 1;\ndaemon off;\npid {w}/nginx.pid;\n\
             error_log {w}/nginx-error.log;\nevents {{}}\nhttp {{\n  access_log off;\n\
             client_body_temp_path {w}/nginx-client-body;\n  proxy_temp_path {w}/nginx-proxy;\n\
             fastcgi_temp_path {w}/nginx-fastcgi;\n  uwsgi_temp_path {w}/nginx-uwsgi;\n\
             scgi_temp_path {w}/nginx-scgi;\n\
             proxy_cache_path {w}/nginx-cache keys_zone=cache:10m;\n\
             server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
             proxy_pass http://127.0.0.1:{origin};\n      proxy_cache cache;\n      proxy_cache_revalidate on;\n    }}\n  }}\n}}\n"
        ),
    )?;
    Ok(config)
}

/// The report: the counts per cache, then every test scb did not pass with nginx's
/// result beside it.
fn render(outcomes: &[Outcome]) -> String {
    let mut out = format!("# {SUITE}: caches side by side\n\n| cache | counts |\n| --- | --- |\n");
    for o in outcomes {
        let _ = writeln!(out, "| {} | `{}` |", o.name, o.summary);
    }
    out.push_str(
        "\n`pass` of `all` tests; `reqPass` of the `req` tests the suite marks required.\n",
    );
    if let Some(scb) = outcomes.iter().find(|o| o.name == "scb") {
        let other = outcomes.iter().find(|o| o.name == "nginx");
        out.push_str(
            "\n## Not passed by scb\n\n| test | kind | scb | nginx | why (required ones) |\n| --- | --- | --- | --- | --- |\n",
        );
        for (id, kind, result) in &scb.failed {
            let theirs = other.map_or("-".to_owned(), |o| {
                o.failed
                    .iter()
                    .find(|(other_id, _, _)| other_id == id)
                    .map_or("pass".to_owned(), |(_, _, r)| r.clone())
            });
            let known = KNOWN
                .iter()
                .find(|(k, _)| k == id)
                .map_or("", |(_, why)| why);
            let _ = writeln!(out, "| {id} | {kind} | {result} | {theirs} | {known} |");
        }
    }
    out
}
