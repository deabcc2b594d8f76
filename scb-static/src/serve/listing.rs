//! Directory listings, for [`list_directories`](super::ServeStaticBuilder::list_directories):
//! an HTML page of a directory's entries, names HTML-escaped and links percent-encoded.
//!
//! A listing reads the directory (`getdents`), which has no cache-only form, and may
//! format thousands of names: it is always done on the blocking pool. Listing is opt-in
//! and rare, so the lookup done twice costs nothing that matters.

use std::fmt::Write as _;
use std::fs::File;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};
use scb_core::Body;

use super::config::Config;
use super::entry::WouldBlock;
use crate::sys::{self, EntryKind, Kind, Mode};
use scb_core::respond::reason as status;

/// The most entries one listing shows. A directory with a million files would otherwise
/// cost one request a page of ~100 MB and the time to sort it; ten thousand names is
/// already more than a person reads, and the page says when some were left out.
pub(super) const MAX_LISTED: usize = 10_000;

/// One name on the page.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    name: String,
    dir: bool,
}

/// The listing of the directory at `rel` (`""` for the root), which a lookup found to be
/// a directory. It is opened here again, on the blocking pool; if it is no longer a
/// directory by then, the answer is 404.
pub(super) fn listing_response(
    config: &Config,
    method: &Method,
    rel: &str,
    mode: Mode,
) -> Result<Response<Body>, WouldBlock> {
    if mode == Mode::Cached {
        return Err(WouldBlock);
    }
    let dir = match config.root.lookup(rel, Mode::Blocking) {
        Ok(opened) if opened.meta.kind == Kind::Dir => opened.file,
        _ => return Ok(status(StatusCode::NOT_FOUND)),
    };
    let (entries, truncated) = match entries(config, rel, &dir) {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(path = rel, error = %e, "listing a directory failed");
            return Ok(status(StatusCode::INTERNAL_SERVER_ERROR));
        }
    };
    let page = render(rel, &entries, truncated);
    let mut h = HeaderMap::with_capacity(8);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(page.len()));
    // The entries change without the directory's own validators saying so in any way a
    // client could use: always revalidate.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if !config.precompressed.is_empty() {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(page)
    };
    let mut res = Response::new(body);
    *res.headers_mut() = h;
    Ok(res)
}

/// The entries to show, sorted, and whether some were left out for [`MAX_LISTED`].
fn entries(config: &Config, rel: &str, dir: &File) -> std::io::Result<(Vec<Entry>, bool)> {
    let mut out = Vec::new();
    for entry in sys::read_dir(dir)? {
        let entry = entry?;
        // Request paths must be UTF-8 without backslashes: a link to any other name would
        // be dead.
        let Ok(name) = entry.name.into_string() else {
            continue;
        };
        if name.contains('\\') || (name.starts_with('.') && !config.show_hidden) {
            continue;
        }
        let dir = match entry.kind {
            EntryKind::File => false,
            EntryKind::Dir => true,
            EntryKind::Other => continue,
            EntryKind::Link | EntryKind::Unknown => {
                // Shown as a request for it would find it: the lookup follows a link only
                // as the symlink policy allows and only beneath the root, so dangling,
                // escaping and refused links are left out.
                let path = if rel.is_empty() {
                    name.clone()
                } else {
                    format!("{rel}/{name}")
                };
                match config.root.lookup(&path, Mode::Blocking) {
                    Ok(opened) if opened.meta.kind == Kind::File => false,
                    Ok(opened) if opened.meta.kind == Kind::Dir => true,
                    _ => continue,
                }
            }
        };
        if out.len() == MAX_LISTED {
            return Ok((sorted(out), true));
        }
        out.push(Entry { name, dir });
    }
    Ok((sorted(out), false))
}

fn sorted(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_unstable();
    entries
}

/// The page. Links are relative (the request ended in `/`), so they are right however the
/// service is mounted.
fn render(rel: &str, entries: &[Entry], truncated: bool) -> String {
    let mut shown = String::from("/");
    if !rel.is_empty() {
        shown.push_str(rel);
        shown.push('/');
    }
    let title = escape_html(&shown);
    let mut page = String::with_capacity(256 + entries.len() * 64);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n\
         <title>Index of {title}</title>\n</head>\n<body>\n<h1>Index of {title}</h1>\n<ul>\n"
    );
    if !rel.is_empty() {
        page.push_str("<li><a href=\"../\">../</a></li>\n");
    }
    for entry in entries {
        let slash = if entry.dir { "/" } else { "" };
        let _ = writeln!(
            page,
            "<li><a href=\"{}{slash}\">{}{slash}</a></li>",
            encode_segment(&entry.name),
            escape_html(&entry.name)
        );
    }
    page.push_str("</ul>\n");
    if truncated {
        let _ = writeln!(
            page,
            "<p>This directory has more than {MAX_LISTED} entries; only {MAX_LISTED} are listed.</p>"
        );
    }
    page.push_str("</body>\n</html>\n");
    page
}

/// Text for HTML element content and quoted attribute values.
fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One path segment as a relative reference: everything but RFC 3986's unreserved
/// characters percent-encoded, so a name is never read as a scheme (`a:b`), a query, a
/// fragment or more than one segment, and needs no HTML escaping inside `href`.
fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_in_text_and_encoded_in_links() {
        assert_eq!(
            escape_html("<script>&\"'.txt"),
            "&lt;script&gt;&amp;&quot;&#39;.txt"
        );
        assert_eq!(encode_segment("a b/c:d?é"), "a%20b%2Fc%3Ad%3F%C3%A9");
        assert_eq!(encode_segment("plain-name_1.~"), "plain-name_1.~");
    }

    #[test]
    fn the_page_links_up_except_at_the_root_and_says_when_it_is_cut() {
        let entries = [Entry {
            name: "sub".into(),
            dir: true,
        }];
        let root = render("", &entries, false);
        assert!(!root.contains("href=\"../\""));
        assert!(root.contains("<a href=\"sub/\">sub/</a>"));
        assert!(!root.contains("only"));
        let nested = render("a&b", &entries, true);
        assert!(nested.contains("<title>Index of /a&amp;b/</title>"));
        assert!(nested.contains("<a href=\"../\">../</a>"));
        assert!(nested.contains(&format!("only {MAX_LISTED} are listed")));
    }
}
