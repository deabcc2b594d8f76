//! scb-static's request-path normaliser.
//!
//! Never panics; what it accepts is a clean relative path (no leading `/`, no empty, `.`
//! or `..` segment, no NUL or backslash) whose `hidden` flag is right, and which was
//! decoded exactly once: escaping its `%` again and normalising gives it back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scb_static::fuzzing::normalize_path;

fuzz_target!(|input: &[u8]| {
    let path = String::from_utf8_lossy(input);
    check(&path);
    // Request paths start with `/`; without one the normaliser stops at its first check.
    check(&format!("/{path}"));
});

fn check(path: &str) {
    let Ok(normal) = normalize_path(path) else {
        return;
    };
    let rel = &normal.rel;
    assert!(!rel.starts_with('/'), "{path:?} -> {rel:?}: leading slash");
    assert!(
        !rel.contains(['\0', '\\']),
        "{path:?} -> {rel:?}: NUL or backslash"
    );
    if !rel.is_empty() {
        for segment in rel.split('/') {
            assert!(
                !matches!(segment, "" | "." | ".."),
                "{path:?} -> {rel:?}: segment {segment:?}"
            );
        }
    }
    assert_eq!(
        normal.hidden,
        rel.split('/').any(|s| s.starts_with('.')),
        "{path:?} -> {rel:?}: hidden flag"
    );
    let escaped = format!("/{}", rel.replace('%', "%25"));
    match normalize_path(&escaped) {
        Ok(again) => assert_eq!(&again.rel, rel, "{path:?} -> {rel:?}: not decoded once"),
        Err(e) => panic!("{path:?} -> {rel:?}: its own escaping {escaped:?} is refused: {e:?}"),
    }
}
