//! `Content-Type` by file extension, from `mime_guess`'s table, with `charset=utf-8` on text.
//!
//! ```text
//! index.html      -> text/html; charset=utf-8
//! app.mjs         -> text/javascript; charset=utf-8
//! logo.svg        -> image/svg+xml; charset=utf-8
//! photo.JPG       -> image/jpeg
//! LICENSE, a.xyz  -> application/octet-stream
//! ```
//!
//! The whole table (every extension `mime_guess` knows, about a thousand) is turned into
//! `HeaderValue`s once, on first use; a lookup then lower-cases the extension on the stack
//! and returns a clone of a value built from a `'static` string, which copies two pointers:
//! no allocation and no reference count per request.
//!
//! Text types get `charset=utf-8`: `text/*`, JavaScript, JSON and XML, including the
//! `+json` and `+xml` types (SVG, Atom, RSS, XHTML, web manifests). Browsers otherwise guess,
//! and guess windows-1252 for `text/plain`. The cost of the rule is that an XML document in
//! another encoding would have its own declaration overridden (a charset parameter wins over
//! `<?xml encoding=...?>`); static sites are UTF-8 in practice, and guessing is the worse
//! failure.

use std::collections::HashMap;
use std::sync::LazyLock;

use http::HeaderValue;

/// The `Content-Type` for a file, by the extension of its last path segment (ASCII case
/// ignored). Unknown or missing extensions, and names like `.bashrc` that only start with a
/// dot, are `application/octet-stream`.
///
/// Pass the path of the representation's original file, not of the sidecar that is
/// served for it: `app.js.br` is JavaScript with `Content-Encoding: br`.
pub(crate) fn content_type(path: &str) -> HeaderValue {
    let mut buf = [0; MAX_EXTENSION];
    extension(path)
        .and_then(|ext| lowercase(ext, &mut buf))
        .and_then(|ext| TABLE.get(ext))
        .unwrap_or(&OCTET_STREAM)
        .clone()
}

const OCTET_STREAM: HeaderValue = HeaderValue::from_static("application/octet-stream");

/// Longer extensions are unknown without a look. `mime_guess`'s longest is shorter (a test
/// checks), so none of its entries is unreachable.
const MAX_EXTENSION: usize = 32;

/// Where the server knows better than `mime_guess` 2.0.5:
const OVERRIDES: [(&str, &str); 6] = [
    // RFC 9239 makes text/javascript the one JavaScript type; mime_guess already says so
    // for `.js` but not for modules.
    ("mjs", "text/javascript; charset=utf-8"),
    ("cjs", "text/javascript; charset=utf-8"),
    // Source maps are JSON (mime_guess: text/plain).
    ("map", "application/json; charset=utf-8"),
    // RFC 8081's font/* types (mime_guess: application/font-woff, application/font-sfnt).
    ("woff", "font/woff"),
    ("otf", "font/otf"),
    // Gzip-compressed SVG: the bytes are not text, so no charset.
    ("svgz", "image/svg+xml"),
];

/// Lower-case extension -> `Content-Type`.
static TABLE: LazyLock<HashMap<Box<str>, HeaderValue>> = LazyLock::new(build_table);

fn build_table() -> HashMap<Box<str>, HeaderValue> {
    // Each distinct text type is formatted (and leaked, see below) once, however many
    // extensions share it.
    let mut with_charset: HashMap<&'static str, &'static str> = HashMap::new();
    let mut table = HashMap::new();
    for &ext in mime_guess::get_mime_extensions_str("*/*").unwrap_or_default() {
        // `dll.config` and the like: the extension is what follows the last dot, so these
        // could never be looked up (mime_guess's own `from_path` cannot reach them either).
        if ext.contains('.') {
            continue;
        }
        let Some(mime) = mime_guess::from_ext(ext).first_raw() else {
            continue;
        };
        let value = if is_text(mime) {
            with_charset.entry(mime).or_insert_with(|| {
                // Leaked so the value is `'static` and clones without a reference count;
                // bounded by the number of text types in mime_guess's table (under 100),
                // and kept for the life of the process like the table itself.
                String::leak(format!("{mime}; charset=utf-8"))
            })
        } else {
            mime
        };
        if let Some(value) = static_value(value) {
            table.insert(ext.to_ascii_lowercase().into_boxed_str(), value);
        }
    }
    for (ext, value) in OVERRIDES {
        table.insert(ext.into(), HeaderValue::from_static(value));
    }
    table
}

/// `HeaderValue::from_static` panics on bytes a header cannot carry; the table comes from
/// another crate, so check rather than trust.
fn static_value(s: &'static str) -> Option<HeaderValue> {
    s.bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        .then(|| HeaderValue::from_static(s))
}

/// Whether a type is text that should say its charset. Types that already carry
/// parameters are left alone.
fn is_text(mime: &str) -> bool {
    !mime.contains(';')
        && (mime.starts_with("text/")
            || mime.ends_with("+xml")
            || mime.ends_with("+json")
            || matches!(
                mime,
                "application/javascript"
                    | "application/x-javascript"
                    | "application/ecmascript"
                    | "application/json"
                    | "application/xml"
                    | "application/xml-dtd"
            ))
}

/// The extension of the last `/`-separated segment, as `Path::extension` would see it:
/// nothing for `.bashrc` or `name.`.
fn extension(path: &str) -> Option<&str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rfind('.') {
        Some(0) | None => None,
        Some(dot) => Some(&name[dot + 1..]).filter(|ext| !ext.is_empty()),
    }
}

/// `ext` in ASCII lower case, in `buf`; `None` when it does not fit.
fn lowercase<'b>(ext: &str, buf: &'b mut [u8; MAX_EXTENSION]) -> Option<&'b str> {
    let out = buf.get_mut(..ext.len())?;
    out.copy_from_slice(ext.as_bytes());
    out.make_ascii_lowercase();
    // ASCII lower-casing leaves every non-ASCII byte alone, so this is still UTF-8.
    std::str::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(path: &str) -> HeaderValue {
        content_type(path)
    }

    #[test]
    fn web_text_types_carry_utf8_charset() {
        for (path, want) in [
            ("index.html", "text/html; charset=utf-8"),
            ("page.htm", "text/html; charset=utf-8"),
            ("style.css", "text/css; charset=utf-8"),
            ("app.js", "text/javascript; charset=utf-8"),
            ("module.mjs", "text/javascript; charset=utf-8"),
            ("legacy.cjs", "text/javascript; charset=utf-8"),
            ("data.json", "application/json; charset=utf-8"),
            ("app.js.map", "application/json; charset=utf-8"),
            (
                "site.webmanifest",
                "application/manifest+json; charset=utf-8",
            ),
            ("logo.svg", "image/svg+xml; charset=utf-8"),
            ("feed.xml", "text/xml; charset=utf-8"),
            ("feed.atom", "application/atom+xml; charset=utf-8"),
            ("feed.rss", "application/rss+xml; charset=utf-8"),
            ("robots.txt", "text/plain; charset=utf-8"),
            ("README.md", "text/markdown; charset=utf-8"),
            ("table.csv", "text/csv; charset=utf-8"),
        ] {
            assert_eq!(ct(path), want, "{path}");
        }
    }

    #[test]
    fn binary_types_have_no_charset() {
        for (path, want) in [
            ("a.png", "image/png"),
            ("a.jpg", "image/jpeg"),
            ("a.jpeg", "image/jpeg"),
            ("a.gif", "image/gif"),
            ("a.webp", "image/webp"),
            ("a.avif", "image/avif"),
            ("favicon.ico", "image/x-icon"),
            ("drawing.svgz", "image/svg+xml"),
            ("font.woff2", "font/woff2"),
            ("font.woff", "font/woff"),
            ("font.ttf", "font/ttf"),
            ("font.otf", "font/otf"),
            ("app.wasm", "application/wasm"),
            ("doc.pdf", "application/pdf"),
            ("clip.mp4", "video/mp4"),
            ("clip.webm", "video/webm"),
            ("song.mp3", "audio/mpeg"),
            ("bundle.zip", "application/zip"),
            ("archive.tar.gz", "application/gzip"),
        ] {
            assert_eq!(ct(path), want, "{path}");
        }
    }

    #[test]
    fn unknown_or_missing_extension_is_octet_stream() {
        for path in [
            "file.unknownext",
            "LICENSE",
            "dir/Makefile",
            "",
            "trailing.",
            "a.b/noext",
            ".bashrc",
            "dir/.env",
            "x.caf\u{e9}",
            "x.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        ] {
            assert_eq!(ct(path), "application/octet-stream", "{path:?}");
        }
    }

    #[test]
    fn extensions_match_in_any_case() {
        assert_eq!(ct("INDEX.HTML"), "text/html; charset=utf-8");
        assert_eq!(ct("Photo.JpG"), "image/jpeg");
        assert_eq!(ct("app.MJS"), "text/javascript; charset=utf-8");
    }

    #[test]
    fn only_the_last_segment_and_last_dot_count() {
        assert_eq!(ct("v1.2/app"), "application/octet-stream");
        assert_eq!(
            ct("assets/app.3f9a1c2b.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            ct("docs/.well-known/security.txt"),
            "text/plain; charset=utf-8"
        );
        // A dot-file with an extension of its own still has it.
        assert_eq!(ct(".config.json"), "application/json; charset=utf-8");
    }

    /// Every extension mime_guess knows is reachable and agrees with it, apart from the
    /// documented overrides and the charset parameter.
    #[test]
    fn table_agrees_with_mime_guess() {
        let exts = mime_guess::get_mime_extensions_str("*/*").unwrap();
        assert!(
            exts.len() > 500,
            "mime_guess's table shrank to {}",
            exts.len()
        );
        for &ext in exts {
            assert!(
                ext.len() <= MAX_EXTENSION,
                "{ext} is longer than MAX_EXTENSION"
            );
            if ext.contains('.') || OVERRIDES.iter().any(|(o, _)| o.eq_ignore_ascii_case(ext)) {
                continue;
            }
            let want = mime_guess::from_ext(ext).first_raw().unwrap();
            let got = ct(&format!("x.{ext}"));
            let got = got.to_str().unwrap();
            let essence = got.strip_suffix("; charset=utf-8").unwrap_or(got);
            assert_eq!(essence, want, "{ext}");
            assert_eq!(essence != got, is_text(want), "{ext}: {got}");
        }
    }

    #[test]
    fn text_rule_covers_structured_syntax_suffixes() {
        assert!(is_text("text/anything"));
        assert!(is_text("application/ld+json"));
        assert!(is_text("application/xhtml+xml"));
        assert!(is_text("application/javascript"));
        assert!(!is_text("application/octet-stream"));
        assert!(!is_text("image/png"));
        assert!(!is_text("text/plain; charset=us-ascii"));
    }

    #[test]
    fn lookups_share_one_static_buffer() {
        // Same bytes in memory each time: the clone shares the static string.
        let a = ct("a.html");
        let b = ct("b.html");
        assert_eq!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
    }

    #[test]
    fn extension_follows_path_extension_rules() {
        for (path, want) in [
            ("a.txt", Some("txt")),
            ("a.tar.gz", Some("gz")),
            ("dir.d/a", None),
            (".hidden", None),
            (".hidden.txt", Some("txt")),
            ("a.", None),
            ("..", None),
            ("", None),
        ] {
            assert_eq!(extension(path), want, "{path:?}");
        }
    }
}
