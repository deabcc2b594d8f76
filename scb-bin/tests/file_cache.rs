//! The open-file cache of static routes over real sockets, through the `scb` binary: what
//! a client sees of files edited in place, renamed over, deleted, made unreadable, links
//! pointed elsewhere and directories turned into files, within the revalidation window
//! and after it.
//!
//! Waits are never guesses: within a window of an hour nothing can expire, and after a
//! change the test sleeps at least the whole (short) window, after which the next request
//! must look again, however slow the machine.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{Server, check, get};

/// The short window of the "after" tests, and how long they wait past a change.
const WINDOW: &str = "50ms";
const PAST_WINDOW: Duration = Duration::from_millis(120);

/// A world-readable tree (the server may run as `nobody`), removed on drop.
struct Site(PathBuf);

impl Site {
    fn new(name: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let base =
            std::env::temp_dir().join(format!("scb-bin-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("www/thing")).unwrap();
        for dir in [&base, &base.join("www"), &base.join("www/thing")] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(base.join("www/a.txt"), "version 1").unwrap();
        std::fs::write(base.join("www/b.txt"), "bee").unwrap();
        std::fs::write(base.join("www/big.bin"), vec![b'a'; 1 << 20]).unwrap();
        std::fs::write(base.join("outside.txt"), "OUTSIDE").unwrap();
        std::os::unix::fs::symlink("a.txt", base.join("www/current")).unwrap();
        Site(base)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join("www").join(rel)
    }

    fn config(&self, cache: &str) -> String {
        format!(
            "[server]\nworkers = 1\n\n[[listen]]\naddr = \"127.0.0.1:0\"\n\n[[route]]\n\
             prefix = \"/\"\nstatic = {{ root = \"{}\", cache = {cache} }}\n",
            self.0.join("www").display()
        )
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Rewrites `path` in place: same inode, new length and bytes.
fn rewrite_in_place(path: &Path, contents: &[u8]) {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(contents))
        .unwrap();
}

/// Replaces `path` the way deploys do: a new file renamed over it.
fn rename_over(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn retarget(link: &Path, target: &str) {
    let tmp = link.with_extension("tmp");
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

#[test]
fn within_the_window_changes_are_not_seen_and_every_response_is_whole() {
    let site = Site::new("within");
    let server = Server::start(&site.config("{ revalidate = \"1h\" }"));
    let addr = server.addr();
    assert_eq!(get(addr, "/a.txt").text(), "version 1");
    assert_eq!(get(addr, "/big.bin").body, vec![b'a'; 1 << 20]);
    assert_eq!(get(addr, "/current").text(), "version 1");
    assert_eq!(get(addr, "/new.txt").status, 404);

    rewrite_in_place(&site.path("a.txt"), b"VERSION 2, LONGER");
    rename_over(&site.path("big.bin"), &vec![b'b'; 1 << 19]);
    retarget(&site.path("current"), "b.txt");
    std::fs::write(site.path("new.txt"), "new").unwrap();

    // The old versions, whole: the support client checks every body against its
    // Content-Length.
    let res = get(addr, "/a.txt");
    assert_eq!((res.status, res.text()), (200, "version 1"));
    let res = get(addr, "/big.bin");
    assert_eq!(
        res.body,
        vec![b'a'; 1 << 20],
        "the cached descriptor's version"
    );
    assert_eq!(get(addr, "/current").text(), "version 1");
    assert_eq!(get(addr, "/new.txt").status, 404);
}

#[test]
fn after_the_window_every_change_is_seen() {
    let site = Site::new("after");
    let server = Server::start(&site.config(&format!("{{ revalidate = \"{WINDOW}\" }}")));
    let addr = server.addr();
    let settle = || std::thread::sleep(PAST_WINDOW);
    assert_eq!(get(addr, "/a.txt").text(), "version 1");
    assert_eq!(get(addr, "/big.bin").body.len(), 1 << 20);
    assert_eq!(get(addr, "/current").text(), "version 1");
    assert_eq!(get(addr, "/thing").status, 308);
    assert_eq!(get(addr, "/new.txt").status, 404);

    rewrite_in_place(&site.path("a.txt"), b"edited in place");
    settle();
    assert_eq!(get(addr, "/a.txt").text(), "edited in place");

    rename_over(&site.path("a.txt"), b"renamed over");
    rename_over(&site.path("big.bin"), &vec![b'b'; 1 << 19]);
    settle();
    assert_eq!(get(addr, "/a.txt").text(), "renamed over");
    assert_eq!(get(addr, "/big.bin").body, vec![b'b'; 1 << 19]);

    retarget(&site.path("current"), "b.txt");
    std::fs::write(site.path("new.txt"), "new").unwrap();
    settle();
    assert_eq!(get(addr, "/current").text(), "bee");
    assert_eq!(get(addr, "/new.txt").text(), "new");

    retarget(&site.path("current"), "../outside.txt");
    std::fs::remove_dir(site.path("thing")).unwrap();
    std::fs::write(site.path("thing"), "a file now").unwrap();
    std::fs::remove_file(site.path("a.txt")).unwrap();
    settle();
    let res = get(addr, "/current");
    assert_eq!(
        res.status, 404,
        "a link out of the root is refused at the new lookup"
    );
    assert!(!res.text().contains("OUTSIDE"));
    assert_eq!(get(addr, "/thing").text(), "a file now");
    assert_eq!(get(addr, "/a.txt").status, 404);
}

#[test]
fn a_file_made_unreadable_is_403_after_the_window() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let site = Site::new("chmod");
    // Root reads any file: as root, the server runs as `nobody` for the kernel to refuse.
    let server = Server::start_adjusted(
        &site.config(&format!("{{ revalidate = \"{WINDOW}\" }}")),
        |command| {
            if rustix::process::geteuid().is_root() {
                command.uid(65534).gid(65534);
            }
        },
    );
    let addr = server.addr();
    assert_eq!(get(addr, "/a.txt").text(), "version 1");
    std::fs::set_permissions(site.path("a.txt"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::thread::sleep(PAST_WINDOW);
    let res = get(addr, "/a.txt");
    assert_eq!(res.status, 403);
    assert!(!res.text().contains("version"));
}

#[test]
fn with_the_cache_off_the_next_request_sees_a_change() {
    let site = Site::new("off");
    let server = Server::start(&site.config("false"));
    let addr = server.addr();
    assert_eq!(get(addr, "/a.txt").text(), "version 1");
    rewrite_in_place(&site.path("a.txt"), b"version 2");
    assert_eq!(get(addr, "/a.txt").text(), "version 2");
}

#[test]
fn check_names_the_key_of_a_bad_cache_setting() {
    let site = Site::new("check");
    for (cache, key) in [
        ("{ entries = \"many\" }", "cache.entries"),
        ("{ revalidate = \"soon\" }", "cache.revalidate"),
        ("{ max_bytes = \"lots\" }", "cache.max_bytes"),
        ("{ size = 1 }", "size"),
        ("\"yes\"", "cache"),
    ] {
        let output = check(&site.config(cache));
        assert!(!output.status.success(), "{cache}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(key), "{cache}: {stderr}");
    }
    for cache in [
        "true",
        "false",
        "{ entries = 5, negative_entries = 0, max_bytes = \"1MiB\" }",
    ] {
        let output = check(&site.config(cache));
        assert!(
            output.status.success(),
            "{cache}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
