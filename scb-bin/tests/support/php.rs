//! Debian's php-fpm, started by a test with a pool of its own on a Unix socket, and the
//! small PHP front-controller application the FastCGI tests (and the side-by-side script
//! in `bench/scripts/`) run.
//!
//! Without php-fpm the caller skips, with a line saying so, unless SCB_REQUIRE_TOOLS says
//! the tests must run.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::TIMEOUT;

/// A running php-fpm master; stopped (and waited for) when dropped.
pub(crate) struct PhpFpm {
    child: Child,
    /// The pool's socket.
    pub(crate) socket: PathBuf,
    /// php-fpm's own log (the master's lines, and workers' output).
    pub(crate) log: PathBuf,
}

impl Drop for PhpFpm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The php-fpm binary: `SCB_PHP_FPM`, else Debian's (`/usr/sbin/php-fpm8.2`), else any
/// `php-fpm*` in `/usr/sbin`.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SCB_PHP_FPM") {
        return Some(path.into());
    }
    let debian = PathBuf::from("/usr/sbin/php-fpm8.2");
    if debian.exists() {
        return Some(debian);
    }
    std::fs::read_dir("/usr/sbin")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("php-fpm"))
        })
}

impl PhpFpm {
    /// php-fpm with a static pool of `children` serving on a socket in `dir`; `None`
    /// (with a line on stderr) where php-fpm is missing and tools may be.
    ///
    /// # Panics
    ///
    /// When php-fpm is missing and SCB_REQUIRE_TOOLS is set, or it does not start.
    pub(crate) fn start(dir: &Path, children: usize) -> Option<Self> {
        let Some(binary) = binary() else {
            assert!(
                std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                "php-fpm is not installed, and SCB_REQUIRE_TOOLS says the FastCGI tests must run"
            );
            #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
            {
                eprintln!("skipped: php-fpm is not installed (Debian: php8.2-fpm)");
            }
            return None;
        };
        std::fs::create_dir_all(dir).unwrap();
        let socket = dir.join("php-fpm.sock");
        let log = dir.join("php-fpm.log");
        let conf = dir.join("php-fpm.conf");
        // A pool for tests: as root (`-R`) when the tests run as root, errors to the web
        // server (no `error_log`: php-fpm then sends them as FCGI_STDERR), uploads of
        // 16 MiB, no error text in answers (a fatal error is a 500, as in production).
        std::fs::write(
            &conf,
            format!(
                "[global]\npid = {dir}/php-fpm.pid\nerror_log = {log}\ndaemonize = no\n\
                 [www]\nlisten = {socket}\npm = static\npm.max_children = {children}\n\
                 catch_workers_output = yes\n\
                 php_admin_flag[display_errors] = off\n\
                 php_admin_flag[log_errors] = on\n\
                 php_admin_value[upload_max_filesize] = 16M\n\
                 php_admin_value[post_max_size] = 32M\n\
                 php_admin_value[max_execution_time] = 30\n",
                dir = dir.display(),
                log = log.display(),
                socket = socket.display(),
            ),
        )
        .unwrap();
        let _ = std::fs::remove_file(&socket);
        // A process group of its own, so that the master and its children can be
        // stopped at once (the children would otherwise go on serving the socket).
        let child = Command::new(&binary)
            .process_group(0)
            .args(["-n", "-F", "-R", "-y"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let fpm = Self { child, socket, log };
        fpm.wait_ready();
        Some(fpm)
    }

    /// Waits until the pool's socket accepts a connection.
    fn wait_ready(&self) {
        let deadline = Instant::now() + TIMEOUT;
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "php-fpm did not listen on {} in time; its log:\n{}",
                self.socket.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Stops php-fpm now, master and children (a dead pool), leaving its directory as it
    /// is.
    pub(crate) fn kill(&mut self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.child.id().cast_signed()) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

/// The application's front controller: routes on `REQUEST_URI`, as Laravel's and
/// WordPress's do.
pub(crate) const INDEX_PHP: &str = r#"<?php
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
header('Content-Type: text/plain; charset=utf-8');
if ($path === '/') {
    echo "home\n";
} elseif (preg_match('#^/users/(\d+)$#', $path, $m)) {
    echo "user {$m[1]}\n";
} elseif ($path === '/form' && $_SERVER['REQUEST_METHOD'] === 'POST') {
    echo "hello {$_POST['name']} ({$_POST['lang']})\n";
} elseif ($path === '/upload' && $_SERVER['REQUEST_METHOD'] === 'POST') {
    $f = $_FILES['file'];
    echo "upload {$f['name']} {$f['size']} " . hash_file('sha256', $f['tmp_name']) . "\n";
} elseif ($path === '/redirect') {
    header('Location: /users/1');
} elseif ($path === '/created') {
    http_response_code(201);
    header('X-App: yes');
    echo "created\n";
} elseif ($path === '/error') {
    error_log('the application failed on purpose');
    trigger_error('boom', E_USER_ERROR);
} elseif ($path === '/sleep') {
    sleep(3);
    echo "slept\n";
} elseif ($path === '/env') {
    header('Content-Type: application/json');
    $keys = ['SCRIPT_FILENAME', 'SCRIPT_NAME', 'PATH_INFO', 'DOCUMENT_ROOT', 'REQUEST_URI',
             'QUERY_STRING', 'REQUEST_METHOD', 'REMOTE_ADDR', 'HTTPS', 'HTTP_PROXY',
             'HTTP_HOST', 'SERVER_PROTOCOL', 'CONTENT_LENGTH', 'HTTP_X_CUSTOM', 'HTTP_TRACEPARENT'];
    $out = [];
    foreach ($keys as $k) { $out[$k] = $_SERVER[$k] ?? null; }
    echo json_encode($out), "\n";
} else {
    http_response_code(404);
    echo "no route for $path\n";
}
"#;

/// Writes the application beneath `root`: `index.php`, a second script with path info, a
/// stylesheet, a blog directory with its own index, and an "uploaded image" that is PHP
/// source (which must never run).
pub(crate) fn write_app(root: &Path) {
    std::fs::create_dir_all(root.join("blog")).unwrap();
    std::fs::create_dir_all(root.join("uploads")).unwrap();
    std::fs::write(root.join("index.php"), INDEX_PHP).unwrap();
    std::fs::write(
        root.join("info.php"),
        "<?php header('Content-Type: text/plain'); \
         echo $_SERVER['SCRIPT_NAME'], '|', $_SERVER['PATH_INFO'] ?? '', \"\\n\";\n",
    )
    .unwrap();
    std::fs::write(
        root.join("blog/index.php"),
        "<?php echo \"blog index\\n\";\n",
    )
    .unwrap();
    std::fs::write(root.join("style.css"), "body { color: black }\n").unwrap();
    std::fs::write(root.join("uploads/evil.jpg"), "<?php echo 'PWNED'; ?>\n").unwrap();
}
