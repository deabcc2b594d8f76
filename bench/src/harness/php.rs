//! php-fpm for the FastCGI scenarios: the binary, the script every server runs through it,
//! a static pool of the harness's own on a Unix socket, and one FastCGI request straight to
//! the pool (checked before any server is, as the upstream nginx is).
//!
//! php-fpm runs pinned with the load generator (the load CPUs, like the upstream nginx) in
//! a process group of its own, started by the harness and not by a server: a server's CPU
//! time and memory ([`proctree`](crate::harness::proctree)) never include PHP's, so the
//! figure of a FastCGI row is what the server spends handing requests over and answers
//! back. Stopping it kills the whole group: php-fpm's children would otherwise go on
//! serving the socket after their master.
//!
//! Without php-fpm the FastCGI scenarios are skipped with a line saying so, unless
//! `SCB_REQUIRE_TOOLS` is set (CI installs Debian's `php8.2-fpm`).

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::harness::fixtures::Fixtures;
use crate::harness::ports::START_DEADLINE;
use crate::harness::process::{ServerProcess, display_command};
use crate::harness::run::Ctx;
use crate::harness::scenario::{FASTCGI_KEEPCONN_PATH, FASTCGI_PATH};
use crate::harness::server::Launch;
use crate::harness::settings::Settings;
use crate::harness::{tools, verify};

/// The script: the same 13 bytes as `/respond` and `small.txt`, and nothing around them
/// (no closing `?>`, whose newline would be output).
pub(crate) const SCRIPT: &str = "<?php echo \"Hello, world!\";";

/// The Debian package of php-fpm, named when it is missing.
pub(crate) const PACKAGE: &str = "php8.2-fpm";

/// The idle connections to php-fpm each worker keeps in `fastcgi-hello-keepconn`: scb's
/// `max_idle` and nginx's upstream `keepalive`, as many as the load has connections (as
/// the proxy scenarios keep 64), so that every request finds one. With scb's default of
/// 4, 74% of scb's requests and 51% of nginx's still opened a connection (64 in flight,
/// 4 kept): a mixture that differs between the servers, not a measure of kept connections.
pub(crate) const KEEP_IDLE: usize = 64;

/// php-fpm's settings: no php.ini (`-n`: nothing of the machine's own), with OPcache
/// loaded and on, as Debian's package ships it (without it every request compiles the
/// script again).
const SETTINGS: [&str; 5] = [
    "-n",
    "-d",
    "zend_extension=opcache",
    "-d",
    "opcache.enable=1",
];

/// Longest Unix socket path (`sun_path` is 108 bytes with its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Per-request timeout of the direct check.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The php-fpm binary: `SCB_PHP_FPM`, else Debian's (`php-fpm8.2`), else any `php-fpm*`
/// in the sbin directories.
pub(crate) fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SCB_PHP_FPM") {
        return Some(path.into());
    }
    tools::find("php-fpm8.2").or_else(|| {
        tools::EXTRA_DIRS
            .iter()
            .filter_map(|dir| fs::read_dir(dir).ok())
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.starts_with("php-fpm"))
            .find_map(|name| tools::find(&name))
    })
}

/// Why a FastCGI scenario cannot run here: php-fpm is missing.
pub(crate) fn missing() -> String {
    format!("php-fpm is not installed (Debian: {PACKAGE}; or name a binary with SCB_PHP_FPM)")
}

/// Whether a missing php-fpm fails the run rather than skipping its scenarios.
pub(crate) fn required() -> bool {
    std::env::var_os("SCB_REQUIRE_TOOLS").is_some()
}

/// The pool's children: one for every connection a server can hold to php-fpm at once (a
/// request in flight per load connection, plus the idle ones each worker keeps: a bound,
/// since a worker opens one only when it has none idle), so that no connection waits in
/// php-fpm's backlog behind children held by kept ones. With fewer,
/// `fastcgi-hello-keepconn` starves: a child serves one connection until it closes, a
/// kept connection is reused as soon as it is idle, and a request on a new connection
/// waits until one is let go (8 children, 64 load connections, 4 kept: p99 1.6 s, for
/// nginx and scb alike). Only as many children as requests in flight ever run, and on one
/// CPU a pool of 68 answered about as many requests a second as one of 8 (the most found
/// for 4 to 32 children, with OPcache), so `fastcgi-hello` gets the same pool and its rows
/// differ from the keep-conn rows only in the connections.
pub(crate) fn children(settings: &Settings) -> usize {
    settings.load.connections + KEEP_IDLE * settings.workers
}

/// The socket php-fpm listens on, the same for every scenario of a run (the servers'
/// FastCGI routes name it even when nothing listens).
pub(crate) fn socket(work: &Path) -> PathBuf {
    work.join("php-fpm.sock")
}

/// Writes the script at both scenarios' paths beneath `root`.
///
/// # Errors
///
/// On a file system error.
pub(crate) fn write_app(root: &Path) -> anyhow::Result<()> {
    for path in [FASTCGI_PATH, FASTCGI_KEEPCONN_PATH] {
        let file = root.join(path.trim_start_matches('/'));
        if let Some(dir) = file.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        fs::write(&file, SCRIPT).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}

/// The pool's configuration: a static pool of `children` on `socket`, its pid file and
/// log in `dir`, in the foreground.
fn config(dir: &Path, socket: &Path, children: usize) -> String {
    format!(
        "[global]\n\
         pid = {dir}/php-fpm.pid\n\
         error_log = {dir}/php-fpm.log\n\
         daemonize = no\n\
         [bench]\n\
         listen = {socket}\n\
         pm = static\n\
         pm.max_children = {children}\n",
        dir = dir.display(),
        socket = socket.display(),
    )
}

/// A running php-fpm; stopped (the whole group killed) on drop, or by
/// [`PhpFpm::stop`].
#[derive(Debug)]
pub(crate) struct PhpFpm {
    /// The master, leading the group its children are in.
    pub(crate) process: ServerProcess,
}

impl PhpFpm {
    /// Stops the master and every child.
    ///
    /// # Errors
    ///
    /// When processes of the group survive SIGKILL.
    pub(crate) fn stop(&mut self) -> anyhow::Result<()> {
        self.process.stop().map(drop)
    }
}

/// Starts php-fpm (`binary`) for a scenario whose directory is `dir`, waits until its
/// socket accepts and checks that the script answers the 13 bytes.
///
/// With [`SETTINGS`], in the foreground (`-F`); `-R` lets it run as root, as the harness
/// does in CI.
///
/// # Errors
///
/// When the socket path is too long for a Unix socket, php-fpm does not start or listen,
/// or the script does not answer the 13 bytes.
pub(crate) fn start(ctx: &Ctx<'_>, dir: &Path, binary: &Path) -> anyhow::Result<PhpFpm> {
    let socket = socket(ctx.work);
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        bail!(
            "the socket path {} is longer than a Unix socket's {MAX_SOCKET_PATH} bytes: \
             give a shorter --out",
            socket.display()
        );
    }
    let dir = dir.join("php-fpm");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let children = children(ctx.settings);
    let conf = dir.join("php-fpm.conf");
    fs::write(&conf, config(&dir, &socket, children))
        .with_context(|| format!("writing {}", conf.display()))?;
    // A socket left by a php-fpm that was killed: php-fpm would refuse to bind over it.
    let _ = fs::remove_file(&socket);
    let launch = Launch {
        program: binary.to_path_buf(),
        args: SETTINGS
            .iter()
            .chain(&["-F", "-R", "-y"])
            .map(Into::into)
            .chain([conf.into_os_string()])
            .collect(),
        env: vec![],
    };
    let cpus = &ctx.settings.load.cpus;
    fs::write(
        dir.join("command.txt"),
        format!("{}\n", display_command(cpus, &launch)),
    )?;
    let mut process = ServerProcess::start("php-fpm", cpus, &launch, &dir.join("stderr.log"))?;
    let start = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        process.ensure_running()?;
        if start.elapsed() > START_DEADLINE {
            bail!(
                "php-fpm did not listen on {} within {START_DEADLINE:?}; see {}",
                socket.display(),
                dir.join("php-fpm.log").display()
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
    let script = ctx
        .fixtures
        .php_root()
        .join(FASTCGI_PATH.trim_start_matches('/'));
    let (status, body) = fastcgi_get(&socket, &script, FASTCGI_PATH)
        .with_context(|| format!("a FastCGI request to {}", socket.display()))?;
    verify::compare(
        &format!("php-fpm itself: {FASTCGI_PATH}"),
        status,
        &body,
        Fixtures::SMALL_BODY,
    )?;
    crate::harness::run::progress(&format!(
        "php-fpm: {children} children on CPUs {}, listening on {} after {} ms",
        cpus.as_str(),
        socket.display(),
        start.elapsed().as_millis()
    ));
    Ok(PhpFpm { process })
}

/// php-fpm's version line (`PHP 8.2.x (fpm-fcgi) ...`) and the pool's shape, or why
/// there is none, for the environment block.
pub(crate) fn version(settings: &Settings) -> String {
    let Some(binary) = binary() else {
        return format!("- (not installed, Debian: {PACKAGE}; the FastCGI scenarios were skipped)");
    };
    let ask = |flag: &str| {
        let args: Vec<&str> = SETTINGS.iter().copied().chain([flag]).collect();
        crate::harness::process::capture(&binary.to_string_lossy(), &args)
            .map(|(_, text)| text)
            .unwrap_or_else(|e| format!("- ({e})"))
    };
    let version = ask("-v");
    let line = version.lines().next().unwrap_or("-").trim();
    // A missing opcache.so is only a warning to php-fpm: say whether it loaded.
    let opcache = if ask("-m").contains("Zend OPcache") {
        "OPcache on"
    } else {
        "OPcache NOT loaded"
    };
    format!(
        "{line}; pool: pm = static, {} children, {opcache}, CPUs {}",
        children(settings),
        settings.load.cpus.as_str()
    )
}

/// FastCGI record types (FastCGI 1.0, section 8).
const BEGIN_REQUEST: u8 = 1;
const END_REQUEST: u8 = 3;
const PARAMS: u8 = 4;
const STDIN: u8 = 5;
const STDOUT: u8 = 6;
/// The responder role.
const RESPONDER: u16 = 1;

/// Appends one record of `kind` for request 1 (no padding).
fn record(out: &mut Vec<u8>, kind: u8, content: &[u8]) {
    let len = u16::try_from(content.len()).expect("records here are short");
    out.extend_from_slice(&[1, kind, 0, 1]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(content);
}

/// Appends a name-value pair in FastCGI's encoding (a one-byte length under 128, else
/// four bytes with the top bit set).
fn pair(out: &mut Vec<u8>, name: &str, value: &str) {
    for len in [name.len(), value.len()] {
        match u8::try_from(len) {
            Ok(short) if short < 0x80 => out.push(short),
            _ => {
                let long = u32::try_from(len).expect("params here are short") | 0x8000_0000;
                out.extend_from_slice(&long.to_be_bytes());
            }
        }
    }
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(value.as_bytes());
}

/// One GET of `script` (named `uri` to it) on a new connection to `socket`: the status
/// (`Status:` of the answer's head, else 200) and the body.
fn fastcgi_get(socket: &Path, script: &Path, uri: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut stream = UnixStream::connect(socket).context("connecting")?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let mut params = Vec::new();
    for (name, value) in [
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_FILENAME", &script.display().to_string()),
        ("SCRIPT_NAME", uri),
        ("REQUEST_URI", uri),
        ("QUERY_STRING", ""),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
    ] {
        pair(&mut params, name, value);
    }
    let mut request = Vec::new();
    let mut begin = RESPONDER.to_be_bytes().to_vec();
    begin.extend_from_slice(&[0; 6]);
    record(&mut request, BEGIN_REQUEST, &begin);
    record(&mut request, PARAMS, &params);
    record(&mut request, PARAMS, &[]);
    record(&mut request, STDIN, &[]);
    stream.write_all(&request).context("sending the request")?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .context("reading the answer")?;
    let stdout = stdout_of(&answer)?;
    let split = stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of the answer's head")?;
    let head = String::from_utf8_lossy(&stdout[..split]);
    let status = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("status")
                .then(|| value.trim().get(..3)?.parse().ok())?
        })
        .unwrap_or(200);
    Ok((status, stdout[split + 4..].to_vec()))
}

/// The `FCGI_STDOUT` bytes of an answer that ends in `FCGI_END_REQUEST`.
fn stdout_of(mut answer: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut stdout = Vec::new();
    while answer.len() >= 8 {
        let kind = answer[1];
        let len = usize::from(u16::from_be_bytes([answer[4], answer[5]]));
        let padding = usize::from(answer[6]);
        let Some(content) = answer.get(8..8 + len) else {
            break;
        };
        match kind {
            STDOUT => stdout.extend_from_slice(content),
            END_REQUEST => return Ok(stdout),
            _ => {}
        }
        answer = answer.get(8 + len + padding..).unwrap_or_default();
    }
    bail!("the answer ended without FCGI_END_REQUEST")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_outputs_exactly_the_fixture() {
        let body = SCRIPT
            .strip_prefix("<?php echo \"")
            .and_then(|s| s.strip_suffix("\";"))
            .unwrap();
        assert_eq!(body.as_bytes(), Fixtures::SMALL_BODY);
    }

    #[test]
    fn pairs_use_one_byte_lengths_under_128_and_four_above() {
        let mut out = Vec::new();
        pair(&mut out, "A", "bc");
        assert_eq!(out, b"\x01\x02Abc");
        let long = "x".repeat(200);
        let mut out = Vec::new();
        pair(&mut out, "N", &long);
        assert_eq!(&out[..6], b"\x01\x80\x00\x00\xc8N");
        assert_eq!(out.len(), 6 + 200);
    }

    #[test]
    fn stdout_is_gathered_until_the_end_record() {
        let mut answer = Vec::new();
        record(&mut answer, STDOUT, b"Status: 404\r\n\r\n");
        record(&mut answer, 7, b"a warning");
        record(&mut answer, STDOUT, b"gone");
        record(&mut answer, END_REQUEST, &[0; 8]);
        assert_eq!(stdout_of(&answer).unwrap(), b"Status: 404\r\n\r\ngone");
        let mut cut = Vec::new();
        record(&mut cut, STDOUT, b"half");
        assert!(stdout_of(&cut).is_err());
    }

    #[test]
    fn the_pool_is_static_with_one_child_per_possible_connection() {
        use clap::Parser as _;
        let argv = [
            "bench",
            "--configs",
            ".",
            "--servers",
            "nginx",
            "--workers",
            "2",
        ];
        let args = crate::harness::cli::Cli::try_parse_from(argv)
            .unwrap()
            .into_args();
        let settings = Settings::from_args(args, &[]).unwrap();
        // 64 load connections in flight, and 64 kept idle by each of the 2 workers.
        assert_eq!(children(&settings), 64 + 2 * 64);
        let text = config(Path::new("/w"), Path::new("/w/php-fpm.sock"), 192);
        assert!(text.contains("listen = /w/php-fpm.sock\n"), "{text}");
        assert!(
            text.contains("pm = static\npm.max_children = 192\n"),
            "{text}"
        );
        assert!(text.contains("daemonize = no\n"), "{text}");
    }

    #[test]
    fn the_templates_keep_as_many_idle_connections_as_the_pool_allows_for() {
        let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let read = |name: &str| fs::read_to_string(configs.join(name)).unwrap();
        assert!(read("scb.toml").contains(&format!("keep_conn = true, max_idle = {KEEP_IDLE}")));
        assert!(read("nginx.conf").contains(&format!("keepalive {KEEP_IDLE};")));
    }
}
