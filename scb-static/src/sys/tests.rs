//! The resolver against a real tree with in-tree and escaping links, on every backend.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::*;

struct Tree {
    base: PathBuf,
    root: PathBuf,
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn tree() -> Tree {
    let base = std::env::temp_dir().join(format!(
        "scb-static-sys-{}-{}",
        std::process::id(),
        std::thread::current()
            .name()
            .unwrap_or("t")
            .replace("::", "-")
    ));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::write(base.join("outside.txt"), "OUTSIDE").unwrap();
    std::fs::write(root.join("a.txt"), "A").unwrap();
    std::fs::write(root.join("dir/b.txt"), "B").unwrap();
    std::fs::write(root.join(".hidden"), "H").unwrap();
    let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, root.join(at)).unwrap();
    link("a.txt", "link_in");
    link("../a.txt", "dir/link_up");
    link("/etc/passwd", "link_out_abs");
    link("../outside.txt", "link_out_rel");
    link("..", "dirlink_out");
    link("dir", "dirlink_in");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    Tree { base, root }
}

fn read(opened: Opened) -> String {
    let mut s = String::new();
    let mut file = opened.file;
    file.read_to_string(&mut s).unwrap();
    s
}

/// The backends under test: openat2 (Linux) with each symlink policy, and the walk.
fn backends(root: &Path) -> Vec<(&'static str, RootDir)> {
    let beneath = RootDir::open(root, Symlinks::Beneath).unwrap();
    let none = RootDir::open(root, Symlinks::None).unwrap();
    let walk = RootDir::open(root, Symlinks::Beneath).unwrap();
    walk.force_walk();
    vec![("beneath", beneath), ("none", none), ("walk", walk)]
}

#[test]
fn plain_files_and_directories_resolve_on_every_backend() {
    let t = tree();
    for (name, root) in backends(&t.root) {
        let a = root.lookup("a.txt", Mode::Blocking).unwrap();
        assert_eq!(a.meta.kind, Kind::File, "{name}");
        assert_eq!(a.meta.len, 1, "{name}");
        assert_eq!(read(a), "A", "{name}");
        assert_eq!(read(root.lookup("dir/b.txt", Mode::Blocking).unwrap()), "B");
        assert_eq!(
            root.lookup("", Mode::Blocking).unwrap().meta.kind,
            Kind::Dir
        );
        assert_eq!(
            root.lookup("dir", Mode::Blocking).unwrap().meta.kind,
            Kind::Dir
        );
        assert_eq!(read(root.lookup(".hidden", Mode::Blocking).unwrap()), "H");
    }
}

#[test]
fn missing_paths_are_not_found() {
    let t = tree();
    for (name, root) in backends(&t.root) {
        for rel in ["missing", "dir/missing", "a.txt/x", "missing/x"] {
            assert!(
                matches!(root.lookup(rel, Mode::Blocking), Err(OpenError::NotFound)),
                "{name}: {rel}"
            );
        }
    }
}

#[test]
fn escaping_links_are_refused_by_every_backend() {
    let t = tree();
    for (name, root) in backends(&t.root) {
        for rel in [
            "link_out_abs",
            "link_out_rel",
            "dirlink_out/outside.txt",
            "dirlink_out/root/a.txt",
        ] {
            assert!(
                matches!(
                    root.lookup(rel, Mode::Blocking),
                    Err(OpenError::NotFound | OpenError::Refused)
                ),
                "{name}: {rel} must not resolve"
            );
        }
    }
}

#[test]
fn in_tree_links_follow_the_policy() {
    let t = tree();
    for (name, root) in backends(&t.root) {
        let follows = name == "beneath" && !root.uses_walk();
        for (rel, want) in [
            ("link_in", "A"),
            ("dir/link_up", "A"),
            ("dirlink_in/b.txt", "B"),
        ] {
            match root.lookup(rel, Mode::Blocking) {
                Ok(opened) => {
                    assert!(follows, "{name}: {rel} followed a link");
                    assert_eq!(read(opened), want, "{name}: {rel}");
                }
                Err(OpenError::NotFound | OpenError::Refused) => {
                    assert!(!follows, "{name}: {rel} refused");
                }
                Err(e) => panic!("{name}: {rel}: {e}"),
            }
        }
    }
}

#[test]
fn a_fifo_opens_without_hanging_and_is_not_a_file() {
    let t = tree();
    for (name, root) in backends(&t.root) {
        let opened = root.lookup("fifo", Mode::Blocking).unwrap();
        assert_eq!(opened.meta.kind, Kind::Other, "{name}");
    }
}

#[test]
fn cached_lookups_either_open_or_say_they_would_block() {
    let t = tree();
    let root = RootDir::open(&t.root, Symlinks::Beneath).unwrap();
    // Just created, so the dentries are cached; an older kernel without RESOLVE_CACHED
    // looks up inline. Either way a cached lookup never fails differently from a blocking
    // one.
    match root.lookup("dir/b.txt", Mode::Cached) {
        Ok(opened) => assert_eq!(read(opened), "B"),
        Err(OpenError::WouldBlock) => {
            assert_eq!(read(root.lookup("dir/b.txt", Mode::Blocking).unwrap()), "B");
        }
        Err(e) => panic!("{e}"),
    }
    assert!(matches!(
        root.lookup("missing", Mode::Cached),
        Err(OpenError::NotFound | OpenError::WouldBlock)
    ));
}

#[test]
fn nowait_reads_return_cached_bytes_or_nothing() {
    let t = tree();
    let root = RootDir::open(&t.root, Symlinks::Beneath).unwrap();
    let opened = root.lookup("dir/b.txt", Mode::Blocking).unwrap();
    let mut buf = [0u8; 16];
    // None: a filesystem without RWF_NOWAIT; the caller reads on the blocking pool.
    if let Some(n) = read_at_nowait(&opened.file, 0, &mut buf).unwrap() {
        assert_eq!(&buf[..n], b"B");
    }
}

#[test]
fn read_dir_lists_the_opened_directory_on_every_backend() {
    let t = tree();
    for (name, root) in backends(&t.root) {
        let dir = root.lookup("", Mode::Blocking).unwrap();
        let entries: Vec<(String, EntryKind)> = read_dir(&dir.file)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.name.into_string().unwrap(), e.kind)
            })
            .collect();
        let kind_of = |n: &str| entries.iter().find(|(e, _)| e == n).map(|(_, k)| *k);
        assert!(
            !entries.iter().any(|(n, _)| n == "." || n == ".."),
            "{name}"
        );
        // DT_UNKNOWN is allowed by POSIX; tmpfs and ext4 give the real type.
        for (n, want) in [
            ("a.txt", EntryKind::File),
            ("dir", EntryKind::Dir),
            ("link_in", EntryKind::Link),
            ("fifo", EntryKind::Other),
            (".hidden", EntryKind::File),
        ] {
            let got = kind_of(n);
            assert!(
                got == Some(want) || got == Some(EntryKind::Unknown),
                "{name}: {n}: {got:?}"
            );
        }
        let sub = root.lookup("dir", Mode::Blocking).unwrap();
        let names: Vec<_> = read_dir(&sub.file)
            .unwrap()
            .map(|e| e.unwrap().name)
            .collect();
        assert_eq!(names.len(), 2, "{name}: {names:?}");
    }
}
