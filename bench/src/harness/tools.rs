//! The external tools (nginx, Caddy, wrk, h2load, curl, taskset): found on `PATH` or in
//! the sbin directories, installed from Debian's packages when missing and running as
//! root, otherwise named with the exact command that installs them.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use crate::harness::run::progress;
use crate::harness::server::Server;
use crate::harness::settings::Settings;

/// Directories searched after `PATH`: nginx lives in /usr/sbin, which a non-root `PATH`
/// often lacks.
pub(crate) const EXTRA_DIRS: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// A tool and the Debian package that provides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tool {
    /// The executable's name.
    pub(crate) program: &'static str,
    /// The package (`apt-get install -y <package>`).
    pub(crate) package: &'static str,
}

const TASKSET: Tool = Tool {
    program: "taskset",
    package: "util-linux",
};
const NGINX: Tool = Tool {
    program: "nginx",
    package: "nginx",
};
const HAPROXY: Tool = Tool {
    program: "haproxy",
    package: "haproxy",
};
const CADDY: Tool = Tool {
    program: "caddy",
    package: "caddy",
};
pub(crate) const WRK: Tool = Tool {
    program: "wrk",
    package: "wrk",
};
pub(crate) const H2LOAD: Tool = Tool {
    program: "h2load",
    package: "nghttp2-client",
};
const CURL: Tool = Tool {
    program: "curl",
    package: "curl",
};
/// For `bench profile`: syscall counts.
pub(crate) const STRACE: Tool = Tool {
    program: "strace",
    package: "strace",
};
/// For `bench profile`: instruction counts.
pub(crate) const VALGRIND: Tool = Tool {
    program: "valgrind",
    package: "valgrind",
};
/// For `bench profile`: switching instruction counting on and off.
pub(crate) const CALLGRIND_CONTROL: Tool = Tool {
    program: "callgrind_control",
    package: "valgrind",
};

/// Where `name` is: the first executable match on `PATH`, then in [`EXTRA_DIRS`].
pub(crate) fn find(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// The harness's HTTP/3 load generator: built beside the harness itself (a binary of this
/// package), else found on PATH.
pub(crate) fn h3load() -> PathBuf {
    own("h3load")
}

/// The harness's load generator of TLS handshakes (`src/bin/tlsload.rs`), found as
/// [`h3load`] is.
pub(crate) fn tlsload() -> PathBuf {
    own("tlsload")
}

/// A binary of this package: beside the harness's own executable, else on PATH.
fn own(name: &str) -> PathBuf {
    env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(name))
        .filter(|candidate| is_executable(candidate))
        .unwrap_or_else(|| program(name))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The path to run `name` by: found, or the bare name (the error then comes from running
/// it, after [`ensure`] has already said what is missing).
pub(crate) fn program(name: &str) -> PathBuf {
    find(name).unwrap_or_else(|| PathBuf::from(name))
}

/// The tools this run needs.
pub(crate) fn needed(settings: &Settings) -> Vec<Tool> {
    let mut tools = vec![TASKSET];
    if settings.needs_nginx() {
        tools.push(NGINX);
    }
    if settings.servers.contains(&Server::Caddy) {
        tools.push(CADDY);
    }
    if settings.servers.contains(&Server::Haproxy) {
        tools.push(HAPROXY);
    }
    if settings.needs_wrk() {
        tools.push(WRK);
    }
    if settings.needs_tls() {
        tools.extend([H2LOAD, CURL]);
    }
    tools
}

/// The command that installs `missing`.
pub(crate) fn install_command(missing: &[Tool]) -> String {
    let mut packages: Vec<&str> = missing.iter().map(|t| t.package).collect();
    packages.dedup();
    format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y {}",
        packages.join(" ")
    )
}

/// Makes sure every needed tool is there, installing the missing ones with apt-get when
/// running as root.
///
/// # Errors
///
/// When tools are missing and this is not root (the message has the command to run), or
/// the installation fails or leaves something missing.
pub(crate) fn ensure(settings: &Settings) -> anyhow::Result<()> {
    ensure_tools(needed(settings))
}

/// Makes sure `tools` are there, installing the missing ones with apt-get when root.
///
/// # Errors
///
/// As [`ensure`].
pub(crate) fn ensure_tools(tools: Vec<Tool>) -> anyhow::Result<()> {
    let missing: Vec<Tool> = tools
        .into_iter()
        .filter(|t| find(t.program).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|t| t.program).collect();
    if !rustix::process::geteuid().is_root() {
        bail!(
            "missing tools: {}. Install them as root with:\n  {}",
            names.join(", "),
            install_command(&missing)
        );
    }
    progress(&format!(
        "missing tools: {}; installing with apt-get",
        names.join(", ")
    ));
    apt_get(&["update"])?;
    let mut args = vec!["install", "-y"];
    let mut packages: Vec<&str> = missing.iter().map(|t| t.package).collect();
    packages.dedup();
    args.extend(packages);
    apt_get(&args)?;
    let still: Vec<&str> = missing
        .iter()
        .filter(|t| find(t.program).is_none())
        .map(|t| t.program)
        .collect();
    if !still.is_empty() {
        bail!("still missing after apt-get install: {}", still.join(", "));
    }
    Ok(())
}

/// Runs apt-get non-interactively, its output on our stderr (stdout is for the table).
fn apt_get(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .with_context(|| format!("running apt-get {}", args.join(" ")))?;
    if !status.success() {
        bail!("apt-get {} failed ({status})", args.join(" "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_is_found_and_nonsense_is_not() {
        assert!(find("sh").is_some());
        assert!(find("surely-not-a-tool-scb").is_none());
        assert_eq!(
            program("surely-not-a-tool-scb"),
            PathBuf::from("surely-not-a-tool-scb")
        );
    }

    #[test]
    fn install_command_names_packages_not_programs() {
        assert_eq!(
            install_command(&[H2LOAD, CURL]),
            "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nghttp2-client curl"
        );
    }
}
