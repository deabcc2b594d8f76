//! Binary upgrade under load: `scb run --upgrade` takes the listeners over from the
//! running process, which drains and exits; twice in a row, with zero failed requests.

mod support;

use support::{Load, Server, get};

#[test]
fn two_upgrades_in_a_row_under_load_fail_no_request() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("scb.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\nupgrade_socket = \"upgrade.sock\"\npid_file = \"scb.pid\"\n\
             [[listen]]\naddr = \"127.0.0.1:{port}\"\n\
             [[route]]\npath = \"/who\"\nrespond = {{ body = \"scb\" }}\n"
        ),
    )
    .unwrap();
    let mut old = Server::start_file(&config, 1, |_| {});
    let addr = old.addr();
    let load = Load::start(addr, 3, &["/who"], true);
    load.wait_for(200);

    for round in 0..2 {
        let mut new = Server::upgrade(&config, 1);
        assert_eq!(new.addr(), addr, "round {round}");
        new.wait_for_line(|l| l.contains("upgrade: serving"));
        old.wait_for_line(|l| l.contains("upgrade: the new process serves; draining"));
        assert!(old.wait().success(), "round {round}: {:?}", old.log);
        // The pid file names the process that serves.
        let pid: u32 = std::fs::read_to_string(dir.join("scb.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(pid, new.pid());
        assert_eq!(get(addr, "/who").text(), "scb");
        load.wait_for(200);
        old = new;
    }

    let (done, failures) = load.stop();
    assert!(
        failures.is_empty(),
        "{} failed of {done}: {failures:?}",
        failures.len()
    );
    old.terminate();
    assert!(old.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_upgrade_that_cannot_start_leaves_the_old_process_serving() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("upgrade-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("scb.toml");
    let good = "[server]\nworkers = 1\nupgrade_socket = \"upgrade.sock\"\n\
                [[listen]]\naddr = \"127.0.0.1:0\"\n\
                [[route]]\npath = \"/who\"\nrespond = { body = \"old\" }\n";
    std::fs::write(&config, good).unwrap();
    let mut old = Server::start_file(&config, 1, |_| {});
    let addr = old.addr();
    // A new config holding an address another process has: the new process takes the
    // listeners, fails to bind, and exits; the old one hears nothing more and serves on.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(
        &config,
        format!(
            "{good}[[listen]]\naddr = \"{}\"\n",
            taken.local_addr().unwrap()
        ),
    )
    .unwrap();
    let out = support::scb()
        .args(["run", "--upgrade", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    old.wait_for_line(|l| l.contains("the new process went away; serving on"));
    assert_eq!(get(addr, "/who").text(), "old");
    // And a later upgrade still works.
    std::fs::write(
        &config,
        good.replace("\"old\"", "\"new\"")
            .replace("127.0.0.1:0", &addr.to_string()),
    )
    .unwrap();
    let mut new = Server::upgrade(&config, 1);
    old.wait_for_line(|l| l.contains("draining"));
    assert!(old.wait().success());
    assert_eq!(get(addr, "/who").text(), "new");
    new.terminate();
    assert!(new.wait().success());
    let _ = std::fs::remove_dir_all(&dir);
}
