//! scb-static's `Accept-Encoding` negotiation, over several field lines (the input's
//! lines) and several server preferences.
//!
//! Never panics; offers only codings from the preference, each once; never offers a coding
//! the client refused: one named with `q=0` in any well-formed element, or one never named
//! while `*;q=0` is; and never sends the file unencoded when `identity;q=0` (or `*;q=0`
//! with no identity element) says not to.

#![no_main]

use http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use scb_static::fuzzing::accept_encoding;

/// Server preferences: the default, a subset in another order, a duplicate, none.
const PREFERENCES: [&[&str]; 4] = [
    &["br", "zstd", "gzip"],
    &["gzip", "br"],
    &["zstd", "zstd", "gz"],
    &[],
];

/// Each coding's token and the names a client may give it (case-insensitively).
const CODINGS: [(&str, &[&str]); 3] = [
    ("br", &["br"]),
    ("zstd", &["zstd"]),
    ("gzip", &["gzip", "x-gzip"]),
];

fuzz_target!(|input: &[u8]| {
    let lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    // The elements of the lines a request could carry, as the negotiation sees them.
    let elements: Vec<&[u8]> = lines
        .iter()
        .filter(|line| HeaderValue::from_bytes(line).is_ok())
        .flat_map(|line| line.split(|&b| b == b','))
        .collect();
    let refused = |names: &[&str]| elements.iter().any(|e| is_q_zero(e, names));
    // Loosely, in any line: when unsure, a coding counts as named and is not checked.
    let named = |names: &[&str]| {
        lines
            .iter()
            .flat_map(|line| line.split(|&b| b == b','))
            .any(|e| names_one_of(e.split(|&b| b == b';').next().unwrap_or_default(), names))
    };
    let any_refused = refused(&["*"]);

    for preferred in PREFERENCES {
        let offer = accept_encoding(&lines, preferred);
        for (i, coding) in offer.codings.iter().enumerate() {
            assert!(
                preferred.iter().any(|p| token_of(p) == *coding),
                "{coding} offered, not preferred ({preferred:?})"
            );
            assert!(
                !offer.codings[..i].contains(coding),
                "{coding} offered twice"
            );
        }
        for (token, names) in CODINGS {
            if !offer.codings.contains(&token) {
                continue;
            }
            assert!(
                !refused(names),
                "{token} offered though q=0: {:?}",
                String::from_utf8_lossy(input)
            );
            assert!(
                !any_refused || named(names),
                "{token} offered though only *;q=0 covers it: {:?}",
                String::from_utf8_lossy(input)
            );
        }
        if refused(&["identity"]) || (any_refused && !named(&["identity"])) {
            assert!(
                !offer.identity_acceptable,
                "identity acceptable though refused: {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
});

/// `NAME OWS ";" OWS ("q" / "Q") "=0" ["." 0*3"0"]`, surrounded by OWS: the one element
/// that certainly gives NAME a weight of zero.
fn is_q_zero(element: &[u8], names: &[&str]) -> bool {
    let mut parts = element.split(|&b| b == b';');
    let (Some(name), Some(param), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    if !names_one_of(name, names) {
        return false;
    }
    let param = trim_ows(param);
    let Some(value) = param
        .strip_prefix(b"q=")
        .or_else(|| param.strip_prefix(b"Q="))
    else {
        return false;
    };
    match value {
        [b'0'] => true,
        [b'0', b'.', zeros @ ..] => zeros.len() <= 3 && zeros.iter().all(|&b| b == b'0'),
        _ => false,
    }
}

/// The token of a coding as the configuration names it.
fn token_of(config_name: &str) -> &str {
    match config_name {
        "gz" => "gzip",
        "zst" => "zstd",
        name => name,
    }
}

fn names_one_of(token: &[u8], names: &[&str]) -> bool {
    let token = trim_ows(token);
    names
        .iter()
        .any(|n| token.eq_ignore_ascii_case(n.as_bytes()))
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
