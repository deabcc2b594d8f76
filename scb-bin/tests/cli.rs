//! The command line as scripts and service managers use it: `scb reload`'s exit status
//! says whether the reload took effect, and the config file may be given as an argument,
//! as `--config`, or not at all (`./scb.toml`, then `/etc/scb/scb.toml`).

mod support;

use std::path::PathBuf;
use std::process::Output;

use support::{Server, get, scb};

fn dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `scb reload CONFIG`, with the config as the positional argument.
fn reload(config: &std::path::Path) -> Output {
    scb().arg("reload").arg(config).output().unwrap()
}

fn config(pid_file: &std::path::Path, body: &str, extra_listener: Option<u16>) -> String {
    let extra = extra_listener
        .map(|port| format!("[[listen]]\naddr = \"127.0.0.1:{port}\"\n"))
        .unwrap_or_default();
    format!(
        "[server]\nworkers = 1\npid_file = {pid:?}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n{extra}\
         [[route]]\npath = \"/v\"\nrespond = {{ body = \"{body}\" }}\n",
        pid = pid_file.display().to_string(),
    )
}

#[test]
fn scb_reload_exits_1_with_the_servers_reason_for_each_failed_reload_and_0_once_it_works() {
    let dir = dir("reload");
    let pid_file = dir.join("scb.pid");
    let mut server = Server::start(&config(&pid_file, "one", None));
    let addr = server.addr();
    // The pid file comes after the addresses are logged.
    let deadline = std::time::Instant::now() + support::TIMEOUT;
    while !pid_file.exists() {
        assert!(std::time::Instant::now() < deadline, "no pid file");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    // A port another process holds: `scb check` accepts the file (it binds nothing),
    // the server cannot bind it. Twice in a row, each answered with its reason.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for _ in 0..2 {
        server.rewrite_config(&config(&pid_file, "two", Some(port)));
        let out = reload(server.config_path());
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("kept its running config")
                && err.contains(&format!("127.0.0.1:{port}"))
                && err.contains("in use"),
            "{err}"
        );
        server.wait_for_line(|l| l.contains("reload failed"));
        assert_eq!(get(addr, "/v").text(), "one");
    }

    // The port freed, the same file reloads: exit 0, and the new route answers at once.
    drop(taken);
    let out = reload(server.config_path());
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("reloaded"), "{out:?}");
    assert_eq!(get(addr, "/v").text(), "two");

    // A config `scb reload` itself refuses never reaches the server.
    server.rewrite_config("[server]\nworkers = \"many\"\n");
    let out = reload(server.config_path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("server.workers"), "{out:?}");

    // A process that takes the signal and never answers (not an scb): refused once the
    // wait is over, not waited on forever.
    server.rewrite_config(&config(&pid_file, "three", None));
    let mut deaf = std::process::Command::new("sh")
        .args(["-c", "trap '' HUP; sleep 30"])
        .spawn()
        .unwrap();
    std::fs::write(&pid_file, format!("{}\n", deaf.id())).unwrap();
    let out = scb()
        .args(["reload", "--timeout", "300ms"])
        .arg(server.config_path())
        .output()
        .unwrap();
    let _ = deaf.kill();
    let _ = deaf.wait();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("said nothing"), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_config_file_is_an_argument_a_flag_or_found_in_the_working_directory() {
    let dir = dir("positional");
    let file = dir.join("scb.toml");
    std::fs::write(
        &file,
        "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\npath = \"/\"\nrespond = {}\n",
    )
    .unwrap();

    let positional = scb().arg("check").arg(&file).output().unwrap();
    assert!(positional.status.success(), "{positional:?}");
    let flag = scb()
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(flag.status.success(), "{flag:?}");
    assert_eq!(positional.stdout, flag.stdout);

    // No argument: ./scb.toml.
    let found = scb().arg("check").current_dir(&dir).output().unwrap();
    assert!(found.status.success(), "{found:?}");
    assert_eq!(text(&found.stdout).trim(), "scb.toml: ok");

    // Both forms at once is a usage error.
    let both = scb()
        .arg("check")
        .arg(&file)
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!both.status.success());

    // Nowhere to be found (unless this machine has a system-wide one).
    if !std::path::Path::new("/etc/scb/scb.toml").exists() {
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        for command in ["check", "run", "reload"] {
            let out = scb().arg(command).current_dir(&empty).output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{command}: {out:?}");
            assert!(
                text(&out.stderr).contains("no config file given")
                    && text(&out.stderr).contains("/etc/scb/scb.toml"),
                "{command}: {out:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
