//! Config conveniences of the real binary: `${VAR}` from the environment, `include`d
//! files (named in errors, read again on reload), and `scb check --print`.

mod support;

use std::path::PathBuf;

use rustix::process::Signal;
use support::{Server, get, scb};

fn site(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    dir
}

const MAIN: &str = "include = [\"conf.d/*.toml\"]\n\
                    [server]\nworkers = 1\n\
                    [[listen]]\naddr = \"127.0.0.1:${PORT:-0}\"\n\
                    [[route]]\npath = \"/hello\"\nrespond = { body = \"${GREETING}\" }\n";

#[test]
fn variables_and_included_files_make_one_config_that_reloads() {
    let dir = site("run");
    let main = dir.join("scb.toml");
    std::fs::write(&main, MAIN).unwrap();
    std::fs::write(
        dir.join("conf.d/10-api.toml"),
        "[[route]]\nprefix = \"/api/\"\nrespond = { status = 202, body = \"api\" }\n",
    )
    .unwrap();
    let mut server = Server::start_file(&main, 1, |command| {
        command.env("GREETING", "hello from env");
    });
    let addr = server.addr();
    assert_eq!(get(addr, "/hello").text(), "hello from env");
    assert_eq!(get(addr, "/api/x").status, 202);

    // A new file in conf.d, then SIGHUP: the pattern is read again.
    std::fs::write(
        dir.join("conf.d/20-more.toml"),
        "[[route]]\npath = \"/more\"\nrespond = { body = \"more\" }\n",
    )
    .unwrap();
    server.signal(Signal::HUP);
    server.wait_for_line(|l| l.contains("reloaded "));
    assert_eq!(get(addr, "/more").text(), "more");
    // A broken included file: the error names it and its line, nothing changes.
    std::fs::write(
        dir.join("conf.d/30-bad.toml"),
        "[[route]]\npath = \"/bad\"\nrespond = { statuss = 200 }\n",
    )
    .unwrap();
    server.signal(Signal::HUP);
    let line = server.wait_for_line(|l| l.contains("reload failed"));
    assert!(
        line.contains("30-bad.toml:3:13: route[3].respond.statuss"),
        "{line}"
    );
    assert_eq!(get(addr, "/more").text(), "more");
    server.terminate();
    assert!(server.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unset_variable_is_an_error_naming_its_line() {
    let dir = site("unset");
    let main = dir.join("scb.toml");
    std::fs::write(&main, MAIN).unwrap();
    let out = scb()
        .env_remove("GREETING")
        .args(["check", "--config"])
        .arg(&main)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("scb.toml:8:21: ${GREETING} is not set and has no default"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_print_shows_the_effective_plan_in_match_order() {
    let dir = site("print");
    let main = dir.join("scb.toml");
    std::fs::write(&main, MAIN).unwrap();
    std::fs::write(
        dir.join("conf.d/10-routes.toml"),
        "[[route]]\nprefix = \"/\"\nstatic = { root = \"/\" }\n\
         [[route]]\nname = \"api\"\nprefix = \"/api/\"\n\
         proxy = { upstreams = [\"127.0.0.1:9001\", \"127.0.0.1:9002\"], balance = \"least_conn\" }\n",
    )
    .unwrap();
    let out = scb()
        .env("GREETING", "hi")
        .env("PORT", "8123")
        .args(["check", "--print", "--config"])
        .arg(&main)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("10-routes.toml"), "{stdout}");
    assert!(stdout.contains("127.0.0.1:8123  plain"), "{stdout}");
    let order: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            l.trim_start()
                .strip_prefix("= ")
                .or_else(|| l.trim_start().strip_prefix("^ "))
        })
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(order, ["/hello", "/api/", "/"], "{stdout}");
    assert!(
        stdout.contains("proxy 127.0.0.1:9001, 127.0.0.1:9002 (least_conn)"),
        "{stdout}"
    );
    assert!(stdout.ends_with("scb.toml: ok\n"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
