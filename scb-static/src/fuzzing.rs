//! Entry points for the fuzz targets in `fuzz/`, built only with the `fuzzing` feature.
//!
//! Thin wrappers over crate-private parsers, taking bytes, strings and numbers and
//! answering in plain types, so the targets can drive the parsers without any of their
//! types becoming public API. Not for use outside `fuzz/`: nothing here is stable.
//!
//! ```
//! use scb_static::fuzzing::{RangeOutcome, range};
//!
//! let ranges = range(b"bytes=0-0,5-", 10, 16);
//! assert_eq!(ranges, Some(RangeOutcome::Satisfiable(vec![(0, 0), (5, 9)])));
//! ```

use http::HeaderValue;

use crate::encoding::{self, Coding};
use crate::path;
use scb_core::range::{self, Ranges};

/// A request path [`normalize_path`] accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalPath {
    /// `/`-separated, no leading `/`; `""` is the root.
    pub rel: String,
    /// The request path ended in `/`.
    pub trailing_slash: bool,
    /// Some segment starts with `.`.
    pub hidden: bool,
}

/// Why [`normalize_path`] refused a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathRefusal {
    /// Malformed (answered 400).
    Malformed,
    /// Climbs above the root (answered 404).
    Escapes,
}

/// Decodes and normalises a request path, as the static service does.
///
/// # Errors
///
/// Why the path was refused.
pub fn normalize_path(request_path: &str) -> Result<NormalPath, PathRefusal> {
    match path::normalize(request_path) {
        Ok(p) => Ok(NormalPath {
            rel: p.rel.into_owned(),
            trailing_slash: p.trailing_slash,
            hidden: p.hidden,
        }),
        Err(path::PathError::Malformed) => Err(PathRefusal::Malformed),
        Err(path::PathError::Escapes) => Err(PathRefusal::Escapes),
    }
}

/// What [`range`] made of a `Range` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Serve the whole representation (200).
    Full,
    /// Serve these inclusive `(first, last)` byte ranges (206).
    Satisfiable(Vec<(u64, u64)>),
    /// 416.
    Unsatisfiable,
}

/// Parses a `Range` field value against a representation of `len` bytes, allowing at most
/// `max_ranges` range-specs; `None` when `value` cannot be a field value at all.
pub fn range(value: &[u8], len: u64, max_ranges: usize) -> Option<RangeOutcome> {
    let value = HeaderValue::from_bytes(value).ok()?;
    Some(match range::parse(&value, len, max_ranges) {
        Ranges::Full => RangeOutcome::Full,
        Ranges::Unsatisfiable => RangeOutcome::Unsatisfiable,
        Ranges::Satisfiable(ranges) => {
            RangeOutcome::Satisfiable(ranges.iter().map(|r| (r.start, r.end_inclusive)).collect())
        }
    })
}

/// What [`accept_encoding`] offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The sidecar codings to try, best first (`br`, `zstd`, `gzip`).
    pub codings: Vec<&'static str>,
    /// Whether the file itself may be sent when no sidecar exists.
    pub identity_acceptable: bool,
}

/// Negotiates the `Accept-Encoding` field lines `lines` against the server preference
/// `preferred` (names as in the configuration: `br`, `zstd`, `gzip`, ...).
///
/// Lines that cannot be field values are left out, as no request could carry them, and so
/// are preference names that are not codings.
pub fn accept_encoding(lines: &[&[u8]], preferred: &[&str]) -> Offer {
    let values: Vec<HeaderValue> = lines
        .iter()
        .filter_map(|line| HeaderValue::from_bytes(line).ok())
        .collect();
    let preferred: Vec<Coding> = preferred
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    let candidates = encoding::negotiate_all(&values, &preferred);
    Offer {
        codings: candidates.codings().iter().map(|c| c.token()).collect(),
        identity_acceptable: candidates.identity_acceptable(),
    }
}
