//! Project automation for scb, run as `cargo xtask <command>` (the alias is in
//! `.cargo/config.toml`).
//!
//! - `ci`: everything CI checks, in order, stopping at the first failure: formatting,
//!   clippy with warnings denied, every test (doctests included), the docs with warnings
//!   denied, clippy over the fuzz targets and the `fuzzing` features (so that they cannot
//!   rot; that much builds on stable), and a quick run of the benchmark harness as a
//!   smoke test of every server configuration, two h2spec runs, and mnot's HTTP cache
//!   tests against scb's cache (failing on a required test outside the known list);
//!   between the docs and the bench, a check that every published crate's package holds
//!   its README and both licences. `.ci/run` runs exactly this. It runs no fuzzing: that needs `-Z` flags, which CI has no business
//!   relying on.
//! - `circles`: fails on any import circle between the modules of a crate (see
//!   `circles.rs`); `ci` runs it first.
//! - `bench [ARGS]`: builds the release binaries and runs the load harness (`bench/`):
//!   scb against nginx, Caddy and axum + ServeDir; ARGS go to the harness
//!   (`--quick`, `--servers`, `--scenarios`, `--duration`, `--workers`, ...).
//! - `profile SCENARIO [ARGS]`: syscalls, context switches and instructions per request
//!   for scb in one scenario (strace, /proc, callgrind), through the harness.
//! - `pgo`: a profile-guided release build of scb (`pgo.rs`), in
//!   `target/pgo-use/release/scb`.
//! - `h2spec [RUNS]`: the HTTP/2 conformance suite (`--h2spec PATH`, `H2SPEC`, or
//!   `../shared/tools/h2spec/h2spec`; skipped with a line saying so when none exists,
//!   unless `SCB_REQUIRE_TOOLS` is set) against scb's h2c and TLS listeners RUNS times each (default 5), through the harness;
//!   fails on any case outside its documented list of known deviations.
//! - `soak [--time S] [--chunk S]`: scb under mixed load (every route kind, keep-alive
//!   and new connections, HTTP/2 over TLS, misbehaving clients, an upstream that drops
//!   requests) for a bounded time, with RSS, descriptors and errors by kind.
//! - `cache-tests [--no-nginx]`: mnot's HTTP cache test suite (npm `http-cache-tests`
//!   0.4.5, installed under `target/cache-tests/`; skipped with a line saying so without
//!   node and npm, unless `SCB_REQUIRE_TOOLS` is set) against scb's response cache and
//!   nginx's `proxy_cache`, with the counts side by side.
//! - `fuzz TARGET [SECONDS]`: runs one cargo-fuzz target of `fuzz/` for SECONDS (default
//!   60) and fails if it finds a crash, a hang or a leak; the input is left in
//!   `fuzz/artifacts/TARGET/`.
//!
//! # Fuzzing on a stable toolchain
//!
//! cargo-fuzz builds with `-Zsanitizer=address` and other `-Z` flags, which rustc takes
//! only on nightly, and only a stable toolchain is guaranteed here. `RUSTC_BOOTSTRAP=1`
//! lets stable rustc take them (the sanitizer runtimes ship with stable), so `fuzz` runs
//!
//! ```text
//! RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz --debug-assertions TARGET \
//!     fuzz/target/corpus/TARGET fuzz/corpus/TARGET -- -max_total_time=SECONDS -timeout=10
//! ```
//!
//! installing cargo-fuzz from crates.io first if `cargo fuzz` is missing. The same
//! environment variable reproduces a crash: `RUSTC_BOOTSTRAP=1 cargo fuzz run
//! --fuzz-dir fuzz -a TARGET fuzz/artifacts/TARGET/crash-...`. The committed seeds in
//! `fuzz/corpus/TARGET/` are only read; what a run discovers goes to
//! `fuzz/target/corpus/TARGET/`, which is not committed and carries over between runs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context as _, bail};

mod circles;
mod pgo;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  ci [--h2spec PATH]  cargo fmt --check, clippy -D warnings, all tests, docs -D warnings,
                      clippy over fuzz/ (no fuzzing), packaging, then `bench --quick`
                      (every server and scenario, bytes verified) and h2spec (skipped
                      when it is not found, unless SCB_REQUIRE_TOOLS is set)
  circles             no import circle between the modules of a crate
  bench [ARGS]        build release binaries, run the load harness; ARGS go to it
                      (--quick --servers a,b --scenarios a,b --duration S --workers N ...)
  profile SCENARIO    syscalls, context switches and instructions per request for scb
  pgo                 a profile-guided release build of scb: instrumented build, a
                      training run of the bench's shapes (needs nginx, wrk, h2load,
                      openssl and an llvm-profdata of rustc's LLVM), tuned build in
                      target/pgo-use/release/scb
  h2spec [RUNS]       the HTTP/2 conformance suite against scb's h2c and TLS listeners,
                      RUNS times each (default 5); fails on a case outside the known list
  soak [--time S]     mixed and misbehaving load for S seconds (default 600); fails on
                      an unexpected error, RSS growth or a descriptor leak
  cache-tests         mnot's HTTP cache tests against scb's cache and nginx proxy_cache
  fuzz TARGET [SECONDS]
                      run a fuzz target for SECONDS (default 60) on stable, through
                      RUSTC_BOOTSTRAP=1 cargo fuzz; fails on a crash, kept in
                      fuzz/artifacts/TARGET/. Targets: request_head, chunked,
                      static_path, range, accept_encoding, h1_differential";

fn main() -> ExitCode {
    let command = std::env::args().nth(1);
    let result = match command.as_deref() {
        Some("ci") => match std::env::args().skip(2).collect::<Vec<_>>().as_slice() {
            [] => ci(None),
            [flag, path] if flag == "--h2spec" => ci(Some(path.as_str())),
            _ => {
                say(USAGE);
                return ExitCode::from(2);
            }
        },
        Some("circles") if std::env::args().len() == 2 => circles::check(&workspace_root()),
        Some("pgo") if std::env::args().len() == 2 => pgo::build(&workspace_root()),
        Some("bench") => bench(&std::env::args().skip(2).collect::<Vec<_>>(), "run"),
        Some("profile") if std::env::args().len() >= 3 => {
            bench(&std::env::args().skip(2).collect::<Vec<_>>(), "profile")
        }
        Some("h2spec") if (2..=3).contains(&std::env::args().len()) => {
            let runs = std::env::args().nth(2).unwrap_or_else(|| "5".to_owned());
            bench(&["--runs".to_owned(), runs], "h2spec")
        }
        Some("soak") => bench(&std::env::args().skip(2).collect::<Vec<_>>(), "soak"),
        Some("cache-tests") => bench(&std::env::args().skip(2).collect::<Vec<_>>(), "cache-tests"),
        Some("fuzz") if (3..=4).contains(&std::env::args().len()) => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            fuzz(&args[0], args.get(1).map(String::as_str))
        }
        Some("help" | "--help" | "-h") => {
            say(USAGE);
            return ExitCode::SUCCESS;
        }
        _ => {
            say(USAGE);
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}`, not `{:?}`: the cause chain, without a backtrace of xtask itself.
            say(&format!("error: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// One CI step: a cargo invocation and its extra environment.
struct Step {
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    /// Whether the step's stdout carries libtest's `test result:` lines to add up.
    counts_tests: bool,
}

/// The CI steps, cheapest first so that a formatting slip fails in seconds.
const CI: [Step; 8] = [
    Step {
        args: &["fmt", "--all", "--check"],
        env: &[],
        counts_tests: false,
    },
    // The fuzz crate is a workspace of its own (`fuzz/`), outside `--all`.
    Step {
        args: &["fmt", "--manifest-path", "fuzz/Cargo.toml", "--check"],
        env: &[],
        counts_tests: false,
    },
    Step {
        args: &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
        counts_tests: false,
    },
    // ServeStatic without on-the-fly compression, and scb-core without basic auth and
    // regex rewrites, as a user who turns the default features off builds them.
    Step {
        args: &[
            "clippy",
            "-p",
            "scb-core",
            "-p",
            "scb-static",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
        counts_tests: false,
    },
    Step {
        args: &["test", "--workspace"],
        // Tests that drive an outside tool (openssl, curl, pebble, ...) skip themselves,
        // with a line saying so, when it is missing; with SCB_REQUIRE_TOOLS in the
        // environment (`.ci/run` sets it) a missing tool is a failure.
        env: &[],
        counts_tests: true,
    },
    Step {
        args: &["doc", "--workspace", "--no-deps"],
        env: &[("RUSTDOCFLAGS", "-D warnings")],
        counts_tests: false,
    },
    // The fuzz targets and the `fuzzing` feature they enable, type-checked and linted so
    // that neither rots between fuzzing runs. Plain stable: libfuzzer-sys and the targets
    // build without `-Z` flags; only the instrumented build of `fuzz` needs them. The
    // feature's modules are linted from here: to the fuzz crate they are dependencies,
    // whose warnings do not fail its build.
    Step {
        args: &[
            "clippy",
            "-p",
            "scb-core",
            "-p",
            "scb-static",
            "--features",
            "scb-core/fuzzing,scb-static/fuzzing",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
        counts_tests: false,
    },
    Step {
        args: &[
            "clippy",
            "--manifest-path",
            "fuzz/Cargo.toml",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
        counts_tests: false,
    },
];

/// Runs [`CI`], then the packaging check, the bench smoke test, h2spec and the cache
/// tests (`h2spec`, when given, is its binary; see `bench h2spec --help` for where it is
/// looked for otherwise).
fn ci(h2spec: Option<&str>) -> anyhow::Result<()> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut totals = TestTotals::default();
    say(&format!("==> [1/{}] cargo xtask circles", CI.len() + 5));
    circles::check(&root).context("import circles")?;
    for (i, step) in CI.iter().enumerate() {
        let shown: String = step
            .env
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\" "))
            .chain(std::iter::once(format!("cargo {}", step.args.join(" "))))
            .collect();
        say(&format!("==> [{}/{}] {shown}", i + 2, CI.len() + 5));
        let mut command = Command::new(&cargo);
        command
            .args(step.args)
            .envs(step.env.iter().copied())
            .current_dir(&root);
        let status = if step.counts_tests {
            run_counting_tests(&mut command, &mut totals)
        } else {
            command.status()
        }
        .with_context(|| format!("running {shown}"))?;
        if !status.success() {
            bail!("{shown} failed ({status})");
        }
    }
    say(&format!(
        "==> [{}/{}] cargo package --list, each library crate",
        CI.len() + 2,
        CI.len() + 5
    ));
    packaging(&cargo).context("packaging")?;
    say(&format!(
        "==> [{}/{}] cargo xtask bench --quick",
        CI.len() + 3,
        CI.len() + 5
    ));
    bench(&["--quick".to_owned()], "run").context("the benchmark smoke test")?;
    say(&format!(
        "==> [{}/{}] cargo xtask h2spec 2",
        CI.len() + 4,
        CI.len() + 5
    ));
    let mut h2spec_args = vec!["--runs".to_owned(), "2".to_owned()];
    if let Some(path) = h2spec {
        h2spec_args.extend(["--h2spec".to_owned(), path.to_owned()]);
    }
    bench(&h2spec_args, "h2spec").context("HTTP/2 conformance")?;
    say(&format!(
        "==> [{}/{}] cargo xtask cache-tests --no-nginx",
        CI.len() + 5,
        CI.len() + 5
    ));
    bench(&["--no-nginx".to_owned()], "cache-tests").context("HTTP cache conformance")?;
    say("==> ci passed");
    // One closing line for the whole run: cargo prints a `test result` per test binary,
    // and the last of them (an empty crate's doctests) says 0 passed.
    out(&format!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    ));
    Ok(())
}

/// The crates a library user (or the binary's packager) downloads, and the files each
/// must ship: what it is and the terms it is under.
const PACKAGED: [&str; 5] = ["scb-core", "scb-static", "scb-proxy", "scb-tls", "scb-bin"];
const PACKAGE_FILES: [&str; 3] = ["README.md", "LICENSE-MIT", "LICENSE-APACHE"];

/// Fails unless `cargo package` puts [`PACKAGE_FILES`] into every crate of [`PACKAGED`]
/// (the licences are symlinks to the root's, which cargo packages as files).
fn packaging(cargo: &OsString) -> anyhow::Result<()> {
    let root = workspace_root();
    for krate in PACKAGED {
        let output = Command::new(cargo)
            .args(["package", "--list", "--allow-dirty", "-p", krate])
            .current_dir(&root)
            .output()
            .context("running cargo package --list")?;
        if !output.status.success() {
            bail!(
                "cargo package --list -p {krate} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let listed = String::from_utf8_lossy(&output.stdout);
        let missing: Vec<&str> = PACKAGE_FILES
            .into_iter()
            .filter(|file| !listed.lines().any(|line| line == *file))
            .collect();
        if !missing.is_empty() {
            bail!("the {krate} package lacks {}", missing.join(", "));
        }
    }
    say(&format!(
        "packaging: {} in each of {}",
        PACKAGE_FILES.join(", "),
        PACKAGED.join(", ")
    ));
    Ok(())
}

/// Test counts summed over every `test result:` line of a `cargo test` run.
#[derive(Debug, Default)]
struct TestTotals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestTotals {
    /// Adds `test result: ok. 12 passed; 0 failed; 1 ignored; ...` to the totals.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(kind), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match kind {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// Runs `command`, echoing its stdout line by line while adding up the test counts.
fn run_counting_tests(
    command: &mut Command,
    totals: &mut TestTotals,
) -> std::io::Result<std::process::ExitStatus> {
    use std::io::BufRead as _;
    let mut child = command.stdout(std::process::Stdio::piped()).spawn()?;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line?;
            totals.add_line(&line);
            out(&line);
        }
    }
    child.wait()
}

/// Builds the release binaries the harness drives and runs the harness's `mode`
/// (`run`, `profile`, `h2spec`, `soak` or `cache-tests`) with `args`.
fn bench(args: &[String], mode: &str) -> anyhow::Result<()> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let status = Command::new(&cargo)
        .args(["build", "--release", "-p", "scb-bin", "-p", "bench"])
        .current_dir(&root)
        .status()
        .context("running cargo build --release")?;
    if !status.success() {
        bail!("cargo build --release failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("release");
    let mut command = Command::new(target.join("bench"));
    command.arg(mode).arg("--scb").arg(target.join("scb"));
    if !matches!(mode, "h2spec" | "soak" | "cache-tests") {
        command
            .arg("--axum-servedir")
            .arg(target.join("axum-servedir"));
    }
    let status = command
        .args(args)
        .current_dir(&root)
        .status()
        .context("running the bench harness")?;
    if !status.success() {
        bail!("bench {mode} {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The targets in `fuzz/fuzz_targets/`.
const FUZZ_TARGETS: [&str; 7] = [
    "request_head",
    "chunked",
    "static_path",
    "range",
    "accept_encoding",
    "h1_differential",
    "trace_context",
];

/// How long `fuzz` runs a target when not told: long enough to get well past the seeds
/// into the parser's corners, short enough to run every target before a commit.
const FUZZ_SECONDS: u64 = 60;

/// libFuzzer's limit for one input, in seconds. Its default, 20 minutes, would let one
/// slow input outlast the whole run; the inputs here take microseconds, so ten seconds
/// (on a loaded machine, with AddressSanitizer) is a hang, reported as a failure.
const FUZZ_INPUT_TIMEOUT: u64 = 10;

/// Runs fuzz target `target` for `seconds` (default [`FUZZ_SECONDS`]) through cargo-fuzz on
/// the stable toolchain (module docs), failing if libFuzzer reports anything.
fn fuzz(target: &str, seconds: Option<&str>) -> anyhow::Result<()> {
    if !FUZZ_TARGETS.contains(&target) {
        bail!(
            "unknown fuzz target `{target}` (one of: {})",
            FUZZ_TARGETS.join(", ")
        );
    }
    let seconds = match seconds {
        None => FUZZ_SECONDS,
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("SECONDS must be a positive number, not `{s}`"))?,
    };
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));

    let has_cargo_fuzz = Command::new(&cargo)
        .args(["fuzz", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_cargo_fuzz {
        say("==> cargo fuzz is missing: cargo install cargo-fuzz --locked");
        let status = Command::new(&cargo)
            .args(["install", "cargo-fuzz", "--locked"])
            .status()
            .context("running cargo install cargo-fuzz")?;
        if !status.success() {
            bail!("cargo install cargo-fuzz failed ({status})");
        }
    }

    // libFuzzer writes what it discovers to the first corpus directory and only reads the
    // others: the committed seeds stay as they are.
    let grown = root.join("fuzz/target/corpus").join(target);
    std::fs::create_dir_all(&grown).with_context(|| format!("creating {}", grown.display()))?;
    let seeds = root.join("fuzz/corpus").join(target);
    say(&format!(
        "==> RUSTC_BOOTSTRAP=1 cargo fuzz run --debug-assertions {target} for {seconds} s"
    ));
    let status = Command::new(&cargo)
        .args([
            "fuzz",
            "run",
            "--fuzz-dir",
            "fuzz",
            "--debug-assertions",
            target,
        ])
        .arg(&grown)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-timeout={FUZZ_INPUT_TIMEOUT}"))
        // The `-Z` flags cargo-fuzz passes on a stable toolchain (module docs).
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(&root)
        .status()
        .context("running cargo fuzz")?;
    if !status.success() {
        bail!(
            "fuzz target {target} failed ({status}): the input is in fuzz/artifacts/{target}/, \
             the panic above; reproduce with `RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz \
             -a {target} fuzz/artifacts/{target}/<file>`"
        );
    }
    say(&format!("==> fuzz {target}: nothing found in {seconds} s"));
    Ok(())
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map_or(manifest_dir.clone(), PathBuf::from)
}

/// Test output and the closing count go to stdout, where cargo test writes them.
fn out(line: &str) {
    #[allow(
        clippy::print_stdout,
        reason = "echoing the test run is what this function is for"
    )]
    {
        println!("{line}");
    }
}

/// Progress goes to stderr, like cargo's own, so that it interleaves with cargo's output
/// in order.
fn say(message: &str) {
    #[allow(
        clippy::print_stderr,
        reason = "progress output is what a task runner is for"
    )]
    {
        eprintln!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::TestTotals;

    #[test]
    fn test_result_lines_are_summed() {
        let mut t = TestTotals::default();
        t.add_line("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 0.1s");
        t.add_line(
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        t.add_line("running 3 tests");
        assert_eq!((t.passed, t.failed, t.ignored), (14, 1, 1));
    }
}
