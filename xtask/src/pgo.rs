//! `cargo xtask pgo`: a release build of `scb` tuned by a profile of its own hot paths.
//!
//! Three steps: a build with `-Cprofile-generate`, a training run under load
//! (`bench/scripts/pgo-train.sh`: the shapes the bench measures), and a build with
//! `-Cprofile-use` of the merged profile. Each build has a target directory of its own
//! (`target/pgo-generate`, `target/pgo-use`), so that the flags never mix with the plain
//! release build's artefacts.
//!
//! Why: under callgrind the profiled build runs a quarter fewer instructions a request
//! (a fixed response 10,763 -> 8,018, a proxied request 25,742 -> 19,597) and misses the
//! instruction cache about half as often (bench/RESULTS.md, 2026-12-07): the per-request
//! path crosses hyper, tower and scb's crates, and the profile tells LLVM which of that
//! code is hot, what to inline and how to lay it out.
//!
//! The merge needs an `llvm-profdata` of rustc's own LLVM version: `$LLVM_PROFDATA`, else
//! `llvm-profdata-MAJOR` on the `PATH` (Debian's `llvm-MAJOR` package), else the one in
//! rustup's `llvm-tools` component.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::say;

/// Builds `target/pgo-use/release/scb`, profile-guided.
pub(crate) fn build(root: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let profdata = llvm_profdata()?;
    let raw = target.join("pgo-profiles");
    let merged = target.join("pgo.profdata");
    // Profiles of an earlier run would be merged in with this one's.
    if raw.exists() {
        std::fs::remove_dir_all(&raw).with_context(|| format!("removing {}", raw.display()))?;
    }
    std::fs::create_dir_all(&raw).with_context(|| format!("creating {}", raw.display()))?;

    say("==> [1/4] cargo build --release -p scb-bin, instrumented (-Cprofile-generate)");
    let generate = target.join("pgo-generate");
    release_build(
        &cargo,
        root,
        &generate,
        &format!("-Cprofile-generate={}", raw.display()),
    )?;

    say("==> [2/4] bench/scripts/pgo-train.sh: the bench's shapes under load");
    let status = Command::new(root.join("bench/scripts/pgo-train.sh"))
        .arg(generate.join("release/scb"))
        .arg(&raw)
        .current_dir(root)
        .status()
        .context("running bench/scripts/pgo-train.sh")?;
    if !status.success() {
        bail!("the training run failed ({status})");
    }

    say(&format!("==> [3/4] {} merge", profdata.display()));
    let status = Command::new(&profdata)
        .arg("merge")
        .arg("-o")
        .arg(&merged)
        .arg(&raw)
        .status()
        .with_context(|| format!("running {}", profdata.display()))?;
    if !status.success() {
        bail!("llvm-profdata merge failed ({status})");
    }

    say("==> [4/4] cargo build --release -p scb-bin, profile-guided (-Cprofile-use)");
    let tuned = target.join("pgo-use");
    // A function the training run never called has no profile: expected, not a warning.
    let flags = format!(
        "-Cprofile-use={} -Cllvm-args=-pgo-warn-missing-function=false",
        merged.display()
    );
    release_build(&cargo, root, &tuned, &flags)?;
    say(&format!("==> pgo: {}", tuned.join("release/scb").display()));
    Ok(())
}

/// `cargo build --release -p scb-bin` into `target_dir` with `rustflags`.
fn release_build(
    cargo: &OsString,
    root: &Path,
    target_dir: &Path,
    rustflags: &str,
) -> anyhow::Result<()> {
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "scb-bin", "--target-dir"])
        .arg(target_dir)
        .env("RUSTFLAGS", rustflags)
        .current_dir(root)
        .status()
        .context("running cargo build --release")?;
    if !status.success() {
        bail!("cargo build --release ({rustflags}) failed ({status})");
    }
    Ok(())
}

/// An `llvm-profdata` that reads the profiles this rustc's LLVM writes.
fn llvm_profdata() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("LLVM_PROFDATA") {
        return Ok(PathBuf::from(path));
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let version = Command::new(&rustc)
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    let version = String::from_utf8_lossy(&version.stdout);
    let major = llvm_major(&version).context("rustc -vV names no LLVM version")?;
    let versioned = format!("llvm-profdata-{major}");
    if Command::new(&versioned)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(PathBuf::from(versioned));
    }
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .context("running rustc --print sysroot")?;
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .context("rustc -vV names no host")?;
    let tools = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin/llvm-profdata");
    if tools.exists() {
        return Ok(tools);
    }
    bail!(
        "no llvm-profdata for LLVM {major}: install Debian's llvm-{major} package, or \
         `rustup component add llvm-tools`, or set LLVM_PROFDATA"
    )
}

/// The major version in `rustc -vV`'s `LLVM version: 22.1.2` line.
fn llvm_major(version: &str) -> Option<&str> {
    let line = version
        .lines()
        .find_map(|line| line.strip_prefix("LLVM version: "))?;
    let major = line.split('.').next()?.trim();
    (!major.is_empty() && major.bytes().all(|b| b.is_ascii_digit())).then_some(major)
}

#[cfg(test)]
mod tests {
    use super::llvm_major;

    #[test]
    fn the_llvm_major_version_is_read_from_rustc_vv() {
        let version = "rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\nhost: \
                       x86_64-unknown-linux-gnu\nrelease: 1.95.0\nLLVM version: 22.1.2\n";
        assert_eq!(llvm_major(version), Some("22"));
        assert_eq!(llvm_major("rustc 1.95.0\nhost: x"), None);
        assert_eq!(llvm_major("LLVM version: \n"), None);
        assert_eq!(llvm_major("LLVM version: x.1\n"), None);
    }
}
