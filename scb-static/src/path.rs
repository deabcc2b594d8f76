//! Request paths to relative file paths: percent-decoded once, normalised, refused when
//! they try anything a file server should never see.
//!
//! The kernel keeps every lookup beneath the root anyway (`openat2(RESOLVE_BENEATH)`); this
//! step exists so that the path the kernel sees is the one the client meant, decoded
//! exactly once (no double-decoding bypass), and so that malformed input gets a 400 rather
//! than whatever a lookup of garbage would answer.

use std::borrow::Cow;

/// A request path made safe to look up beneath a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NormalPath<'a> {
    /// `/`-separated, no leading `/`, no empty, `.` or `..` segment; `""` is the root.
    /// Borrowed from the request when it already is all that (most paths are).
    pub(crate) rel: Cow<'a, str>,
    /// The request path ended in `/` (a directory was asked for).
    pub(crate) trailing_slash: bool,
    /// Some segment starts with `.` (a dotfile or dot-directory).
    pub(crate) hidden: bool,
}

/// Why a request path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// Not a path a client should send: no leading `/`, a bad `%` escape, invalid UTF-8
    /// after decoding (overlong forms included), NUL, or a backslash. Answered 400.
    #[error("malformed request path")]
    Malformed,
    /// `..` segments that climb above the root. Answered 404, like any missing file.
    #[error("path climbs above the root")]
    Escapes,
}

/// Decodes and normalises the path of a request URI.
pub(crate) fn normalize(path: &str) -> Result<NormalPath<'_>, PathError> {
    if let Some(plain) = already_normal(path) {
        return Ok(plain);
    }
    decode_and_normalize(path)
}

/// The path as it is, when decoding and normalising would not change it: it starts with
/// `/`, and no segment (a trailing `/` aside) is empty, `.` or `..`, or holds `%`, `\` or
/// NUL. No allocation; [`decode_and_normalize`] gives the same answer (a property test
/// holds them equal).
fn already_normal(path: &str) -> Option<NormalPath<'_>> {
    let body = path.strip_prefix('/')?;
    let (rel, trailing_slash) = match body.strip_suffix('/') {
        Some(rel) => (rel, true),
        None => (body, body.is_empty()),
    };
    let mut hidden = false;
    if !rel.is_empty() {
        for segment in rel.split('/') {
            if segment.is_empty()
                || segment == "."
                || segment == ".."
                || segment.contains(['%', '\\', '\0'])
            {
                return None;
            }
            hidden |= segment.starts_with('.');
        }
    }
    Some(NormalPath {
        rel: Cow::Borrowed(rel),
        trailing_slash,
        hidden,
    })
}

/// The general case of [`normalize`]: percent-decoding, then dot segments resolved.
fn decode_and_normalize(path: &str) -> Result<NormalPath<'static>, PathError> {
    let raw = path.as_bytes();
    if raw.first() != Some(&b'/') {
        return Err(PathError::Malformed);
    }
    let decoded = percent_decode(raw)?;
    let decoded = String::from_utf8(decoded).map_err(|_| PathError::Malformed)?;
    if decoded.contains(['\0', '\\']) {
        return Err(PathError::Malformed);
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::Escapes);
                }
            }
            s => segments.push(s),
        }
    }
    let last = decoded.rsplit('/').next().unwrap_or_default();
    // "/" itself ends in a slash: the root directory asked for as a directory.
    let trailing_slash = matches!(last, "" | "." | "..");
    Ok(NormalPath {
        hidden: segments.iter().any(|s| s.starts_with('.')),
        rel: Cow::Owned(segments.join("/")),
        trailing_slash,
    })
}

/// `%XX` to the byte it names; anything else is kept. A `%` without two hex digits after it
/// is malformed.
fn percent_decode(raw: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hi = raw.get(i + 1).and_then(|&b| hex(b));
            let lo = raw.get(i + 2).and_then(|&b| hex(b));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(PathError::Malformed);
            };
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(path: &str) -> String {
        normalize(path).unwrap().rel.into_owned()
    }

    #[test]
    fn plain_paths_are_kept() {
        assert_eq!(rel("/"), "");
        assert_eq!(rel("/a/b.txt"), "a/b.txt");
        assert_eq!(rel("/a%20b/c%2Bd"), "a b/c+d");
        assert_eq!(rel("/caf%C3%A9"), "café");
        assert!(normalize("/dir/").unwrap().trailing_slash);
        assert!(!normalize("/dir").unwrap().trailing_slash);
        assert!(normalize("/").unwrap().trailing_slash);
    }

    #[test]
    fn dot_segments_and_empty_segments_are_removed() {
        assert_eq!(rel("/a/./b//c"), "a/b/c");
        assert_eq!(rel("/a/b/../c"), "a/c");
        assert_eq!(rel("/a/%2e%2e/c"), "c");
        assert!(normalize("/a/..").unwrap().trailing_slash);
    }

    /// The traversal corpus: every form is refused or stays beneath the root.
    #[test]
    fn traversal_attempts_are_refused() {
        for escape in [
            "/..",
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/x",
            "/%2E%2E%2fetc",
            "/./../x",
        ] {
            assert_eq!(normalize(escape), Err(PathError::Escapes), "{escape}");
        }
        for malformed in [
            "relative",
            "/a%",
            "/a%2",
            "/a%zz",
            "/a%00b",
            "/a\\..\\b",
            "/a%5c..%5cb",
            "/%c0%ae%c0%ae/etc", // overlong UTF-8 for '.'
            "/%ff",
        ] {
            assert_eq!(
                normalize(malformed),
                Err(PathError::Malformed),
                "{malformed}"
            );
        }
        // Decoded exactly once: %252e is the three characters "%2e", a name, not "..".
        assert_eq!(rel("/%252e%252e/x"), "%2e%2e/x");
        // Not special on a Unix file system: ordinary names.
        assert_eq!(rel("/..;/x"), "..;/x");
        assert_eq!(rel("/C:/x"), "C:/x");
    }

    #[test]
    fn plain_paths_are_borrowed_and_the_rest_decoded() {
        for plain in ["/", "/a", "/a/b.txt", "/dir/", "/.env"] {
            assert!(
                matches!(normalize(plain).unwrap().rel, Cow::Borrowed(_)),
                "{plain}"
            );
        }
        for decoded in ["/a%20b", "/a//b", "/a/./b", "/a/../b"] {
            assert!(
                matches!(normalize(decoded).unwrap().rel, Cow::Owned(_)),
                "{decoded}"
            );
        }
    }

    #[test]
    fn hidden_segments_are_flagged() {
        assert!(normalize("/.env").unwrap().hidden);
        assert!(normalize("/a/.git/config").unwrap().hidden);
        assert!(!normalize("/a/b.c").unwrap().hidden);
        assert!(normalize("/%2egit/x").unwrap().hidden);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the input, the output is a clean relative path or a refusal.
        #[test]
        fn output_is_always_clean(path in "/[a-zA-Z0-9%./\\\\_-]{0,40}") {
            if let Ok(p) = normalize(&path) {
                prop_assert!(!p.rel.starts_with('/'));
                prop_assert!(!p.rel.contains("//"));
                prop_assert!(p.rel.split('/').all(|s| s != ".." && s != "."));
                prop_assert!(!p.rel.contains(['\0', '\\']));
            }
        }

        /// The allocation-free path agrees with the general one wherever it answers.
        #[test]
        fn the_fast_path_agrees_with_decoding(path in "/[a-z./%2e\\\\]{0,30}") {
            if let Some(fast) = already_normal(&path) {
                prop_assert_eq!(Ok(fast), decode_and_normalize(&path));
            }
        }

        /// Percent-encoding every byte of a clean path decodes back to it.
        #[test]
        fn encoded_paths_decode_to_themselves(segs in proptest::collection::vec("[a-zA-Z0-9_-][a-zA-Z0-9._ -]{0,10}", 1..5)) {
            let plain = segs.join("/");
            let encoded: String = plain.bytes().map(|b| if b == b'/' { "/".to_owned() } else { format!("%{b:02X}") }).collect();
            let path = format!("/{encoded}");
            prop_assert_eq!(normalize(&path).unwrap().rel, plain);
        }
    }
}
