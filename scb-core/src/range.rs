//! Byte ranges (RFC 9110 §14): the `Range` and `If-Range` request fields, `Content-Range`,
//! and the framing of `multipart/byteranges` bodies.
//!
//! ```text
//! against 1000 bytes:
//! Range: bytes=0-99              -> Satisfiable [0-99]      206, Content-Range: bytes 0-99/1000
//! Range: bytes=-100              -> Satisfiable [900-999]   the last 100 bytes
//! Range: bytes=900-              -> Satisfiable [900-999]
//! Range: bytes=900-5000          -> Satisfiable [900-999]   clamped to the end
//! Range: bytes=0-9, 20-29        -> Satisfiable [0-9, 20-29] multipart/byteranges
//! Range: bytes=0-49, 10-99       -> Satisfiable [0-99]      coalesced
//! Range: bytes=1000-             -> Unsatisfiable           416, Content-Range: bytes */1000
//! Range: items=0-1               -> Full                    unknown unit: 200
//! Range: bytes=9-1               -> Full                    invalid: ignored, 200
//! Range: bytes=0-0,2-2,...(17)   -> Full                    over the cap: 200
//! ```
//!
//! Everything here is pure: the service passes in the request and the representation's
//! length and validators, and gets back which bytes to send and the framing around them.
//!
//! # Policy
//!
//! - **Invalid means ignored.** A `Range` field that is not a valid `bytes` ranges-specifier
//!   (bad syntax, `last < first`, whitespace inside a range-spec, an empty set, a unit
//!   other than `bytes`, the field sent twice) is ignored and the whole representation is
//!   served: RFC 9110 §14.2 lets a server ignore or reject it, and a 200 is the answer every
//!   client understands. Optional whitespace around the commas of the list is accepted,
//!   and so are empty list elements (§5.6.1).
//! - **Only GET.** §14.2 defines range handling for GET alone and tells a server to ignore
//!   `Range` on other methods, HEAD included: a HEAD with `Range` gets the headers of the
//!   200.
//! - **An empty representation is served whole.** At length zero the RFC still counts a
//!   suffix range (`bytes=-5`) as satisfiable, yet no `Content-Range` can describe the
//!   nothing it selects; §14.2 lets a server ignore `Range` when the representation has no
//!   content, so every `Range` on an empty file gets a 200 (as in Apache; nginx does the
//!   same for the forms that start at byte 0 and answers 416 to the others).
//! - **Amplification.** A request over [`DEFAULT_MAX_RANGES`] (configurable) range-specs
//!   is answered with the whole representation. Ranges that overlap or touch are coalesced
//!   (§15.3.7.2 allows it "regardless of the order" of the specs), so the parts of a response
//!   are disjoint and its body never exceeds the representation plus one part header per
//!   range, whatever the client asks for. That covers what the CVE-2011-3192 mitigations
//!   check: Apache limits the count (`MaxRanges`, default 200) and, in 2.4, overlaps and
//!   reversals (`MaxRangeOverlaps`, `MaxRangeReversals`, 20 each), merges overlaps, and
//!   serves the whole file past a limit; nginx (`max_ranges`, unlimited by default) serves
//!   the whole file when the ranges add up to more than it. Disjoint ranges cannot add up
//!   to more, so no sum rule is needed here.
//! - **Order.** The parts follow the order of the request, as §15.3.7.2 asks: a coalesced
//!   part goes where the earliest of the specs it absorbed stood.

use std::cmp::Ordering;
use std::fmt;
use std::time::SystemTime;

use crate::date::unix_secs;
use crate::http1::trim_ows;
use http::Method;
use http::header::{self, HeaderMap, HeaderValue};

use crate::conditional::{EntityTag, Validators, http_date_secs, parse_entity_tag};

/// How many range-specs a request may carry before it gets the whole representation.
///
/// Browsers and media players ask for one range at a time; the clients that use several
/// (PDF byte-serving, some download tools) ask for a handful. Sixteen leaves them room
/// while keeping the work of one response (a part header and a positioned read per range)
/// small. A request over the cap still gets a correct answer, the whole file, so the cap
/// costs bandwidth, never correctness.
pub const DEFAULT_MAX_RANGES: usize = 16;

/// A satisfiable byte range of a representation: `start..=end_inclusive`, both below its
/// length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// The first byte.
    pub start: u64,
    /// The last byte, included (as in `Content-Range`).
    pub end_inclusive: u64,
}

impl ByteRange {
    /// How many bytes the range holds (at least one).
    pub fn len(self) -> u64 {
        self.end_inclusive - self.start + 1
    }

    /// Never: a satisfiable range holds at least its first byte.
    pub fn is_empty(self) -> bool {
        false
    }
}

/// What to send for a request, as far as ranges go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ranges {
    /// The whole representation, 200: no `Range` field, or one to ignore (module docs).
    Full,
    /// 206 with these ranges, at most the cap, disjoint: one range is sent with
    /// `Content-Range` ([`content_range`]), several as `multipart/byteranges`
    /// ([`multipart`]).
    Satisfiable(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */LEN` ([`unsatisfied_content_range`]): no range
    /// starts within the representation.
    Unsatisfiable,
}

/// The ranges to send for a request whose preconditions passed
/// (`conditional::evaluate` answered `Proceed`): RFC 9110 §13.2.2 step 5.
///
/// [`Ranges::Full`] unless the method is GET, there is exactly one `Range` field, and
/// `If-Range`, if present (once), holds ([`if_range_allows`]); otherwise [`parse`].
pub fn for_request(
    method: &Method,
    headers: &HeaderMap,
    len: u64,
    etag: &str,
    last_modified: SystemTime,
    max_ranges: usize,
) -> Ranges {
    for_request_validators(
        method,
        headers,
        len,
        Validators {
            etag: Some(EntityTag {
                weak: false,
                opaque: etag.as_bytes(),
            }),
            last_modified: Some(unix_secs(last_modified)),
        },
        max_ranges,
    )
}

/// [`for_request`] against validators that may be absent or weak (a cache's): an
/// `If-Range` naming a validator the representation lacks, or a weak one, gets the
/// whole representation.
pub fn for_request_validators(
    method: &Method,
    headers: &HeaderMap,
    len: u64,
    validators: Validators<'_>,
    max_ranges: usize,
) -> Ranges {
    if method != Method::GET {
        return Ranges::Full;
    }
    let mut range = headers.get_all(header::RANGE).iter();
    let (Some(range), None) = (range.next(), range.next()) else {
        return Ranges::Full;
    };
    let mut if_range = headers.get_all(header::IF_RANGE).iter();
    match (if_range.next(), if_range.next()) {
        (None, _) => {}
        (Some(validator), None) if if_range_holds(validator, validators) => {}
        _ => return Ranges::Full,
    }
    parse(range, len, max_ranges)
}

/// Parses a `Range` field against a representation of `len` bytes, allowing at most
/// `max_ranges` range-specs (0 turns ranges off). The policy for odd requests is in the
/// module docs.
pub fn parse(value: &HeaderValue, len: u64, max_ranges: usize) -> Ranges {
    if len == 0 {
        return Ranges::Full;
    }
    let Some(specs) = parse_specs(value.as_bytes(), max_ranges) else {
        return Ranges::Full;
    };
    let ranges: Vec<ByteRange> = specs.into_iter().filter_map(|s| s.resolve(len)).collect();
    if ranges.is_empty() {
        Ranges::Unsatisfiable
    } else {
        Ranges::Satisfiable(coalesce(ranges))
    }
}

/// Whether an `If-Range` field lets the ranges through (RFC 9110 §13.1.5): it holds a
/// strong entity-tag equal to `etag` (quotes included), or an HTTP-date equal to
/// `last_modified` in whole seconds.
///
/// A weak tag never matches (ranges need byte-identical content), nor does a list, a date
/// off by a second either way, or anything unparsable: the response is then the whole
/// representation, which is always safe. §13.1.5 also wants a date to be a strong
/// validator, which a Last-Modified is not if the file changed twice in the second it
/// names; exact equality is all this checks, as nginx does.
pub fn if_range_allows(value: &HeaderValue, etag: &str, last_modified: SystemTime) -> bool {
    if_range_holds(
        value,
        Validators {
            etag: Some(EntityTag {
                weak: false,
                opaque: etag.as_bytes(),
            }),
            last_modified: Some(unix_secs(last_modified)),
        },
    )
}

/// [`if_range_allows`] against validators that may be absent or weak.
pub fn if_range_holds(value: &HeaderValue, validators: Validators<'_>) -> bool {
    let value = trim_ows(value.as_bytes());
    // §13.1.5: an entity-tag is told from a date by a DQUOTE in the first three characters.
    if value.iter().take(3).any(|&b| b == b'"') {
        return match (parse_entity_tag(value), validators.etag) {
            (Some((tag, rest)), Some(etag)) => {
                rest.is_empty() && !tag.weak && !etag.weak && tag.opaque == etag.opaque
            }
            _ => false,
        };
    }
    validators.last_modified.is_some() && http_date_secs(value) == validators.last_modified
}

/// `Content-Range` of a 206 with one part: `bytes FIRST-LAST/LEN`.
pub fn content_range(range: ByteRange, complete_len: u64) -> HeaderValue {
    header_value(format!(
        "bytes {}-{}/{complete_len}",
        range.start, range.end_inclusive
    ))
}

/// `Content-Range` of a 416: `bytes */LEN`.
pub fn unsatisfied_content_range(complete_len: u64) -> HeaderValue {
    header_value(format!("bytes */{complete_len}"))
}

/// The separator of a `multipart/byteranges` body: 128 random bits in hex.
///
/// Drawn once per response from `fastrand`'s per-thread generator, which is seeded from
/// the clock and the thread id. A boundary only has to be absent from the parts; 128 bits
/// make an accidental match impossible in practice. The generator is not secret: someone
/// who could predict it and write the served file could plant the next boundary in the
/// file and misframe the parts of that one response, which shows the client nothing that
/// person could not already have put in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boundary(u128);

impl Boundary {
    /// A fresh boundary.
    pub fn random() -> Self {
        Self(fastrand::u128(..))
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The framing of a `multipart/byteranges` body (RFC 9110 §14.6): send each part's
/// `head`, then the bytes of its `range`, then `closing`. Exactly `content_length` bytes
/// in all, so the response can carry `Content-Length` without buffering anything.
#[derive(Clone, Debug)]
pub struct Multipart {
    /// `multipart/byteranges; boundary=...`, the response's `Content-Type`.
    pub content_type: HeaderValue,
    /// The parts, in the order given.
    pub parts: Vec<Part>,
    /// The close-delimiter: `\r\n--BOUNDARY--\r\n`.
    pub closing: Vec<u8>,
    /// The length of the whole body: heads, ranges and closing.
    pub content_length: u64,
}

/// One part of a [`Multipart`] body.
#[derive(Clone, Debug)]
pub struct Part {
    /// The delimiter and the part's header section, up to and including the empty line:
    /// `--BOUNDARY\r\nContent-Type: ...\r\nContent-Range: bytes a-b/LEN\r\n\r\n`, with a
    /// leading `\r\n` (the end of the previous part's line) on every part but the first.
    pub head: Vec<u8>,
    /// The bytes of the representation that follow the head.
    pub range: ByteRange,
}

/// Frames `ranges` of a representation of `complete_len` bytes as `multipart/byteranges`.
///
/// `content_type` is the representation's own, repeated in each part as §15.3.7.2 asks (the
/// line is left out when the representation has none). For one range, send
/// [`content_range`] instead: §15.3.7.2 forbids a multipart answer to a single-range
/// request, and a lone part is only overhead.
pub fn multipart(
    ranges: &[ByteRange],
    complete_len: u64,
    content_type: Option<&HeaderValue>,
    boundary: Boundary,
) -> Multipart {
    let mut content_length = 0_u64;
    let parts: Vec<Part> = ranges
        .iter()
        .enumerate()
        .map(|(i, &range)| {
            let mut head = Vec::with_capacity(128);
            if i > 0 {
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            if let Some(content_type) = content_type {
                head.extend_from_slice(b"Content-Type: ");
                head.extend_from_slice(content_type.as_bytes());
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(b"Content-Range: ");
            head.extend_from_slice(content_range(range, complete_len).as_bytes());
            head.extend_from_slice(b"\r\n\r\n");
            content_length += head.len() as u64 + range.len();
            Part { head, range }
        })
        .collect();
    let closing = if parts.is_empty() {
        format!("--{boundary}--\r\n")
    } else {
        format!("\r\n--{boundary}--\r\n")
    }
    .into_bytes();
    content_length += closing.len() as u64;
    Multipart {
        content_type: header_value(format!("multipart/byteranges; boundary={boundary}")),
        parts,
        closing,
        content_length,
    }
}

/// A value made of ASCII letters, digits, spaces and `-/*;=`, all valid in a field value.
fn header_value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).expect("ASCII letters, digits and punctuation form a field value")
}

/// One range-spec of a `bytes` range-set, before the length is known. Numbers too large
/// for `u64` saturate: such a position is past the end of any file anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spec {
    /// `first-last`, or `first-` (`last: None`).
    Int { first: u64, last: Option<u64> },
    /// `-length`: the last `length` bytes.
    Suffix(u64),
}

impl Spec {
    /// The bytes this spec selects from a representation of `len > 0` bytes, or `None`
    /// if it is unsatisfiable (RFC 9110 §14.1.2).
    fn resolve(self, len: u64) -> Option<ByteRange> {
        let last_byte = len - 1;
        match self {
            Spec::Int { first, last } => (first < len).then(|| ByteRange {
                start: first,
                end_inclusive: last.map_or(last_byte, |last| last.min(last_byte)),
            }),
            Spec::Suffix(0) => None,
            Spec::Suffix(length) => Some(ByteRange {
                start: len.saturating_sub(length),
                end_inclusive: last_byte,
            }),
        }
    }
}

/// `bytes=` followed by a range-set, or `None` when the field is to be ignored: another
/// unit, invalid syntax, no range-spec, or more than `max_ranges` of them (checked as
/// they are read, so the work is bounded by the cap, not by the field).
fn parse_specs(value: &[u8], max_ranges: usize) -> Option<Vec<Spec>> {
    let value = trim_ows(value);
    let equals = value.iter().position(|&b| b == b'=')?;
    let (unit, set) = (&value[..equals], &value[equals + 1..]);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let mut specs = Vec::new();
    for element in set.split(|&b| b == b',') {
        let element = trim_ows(element);
        if element.is_empty() {
            continue;
        }
        if specs.len() == max_ranges {
            return None;
        }
        specs.push(parse_spec(element)?);
    }
    (!specs.is_empty()).then_some(specs)
}

/// `int-range = first-pos "-" [ last-pos ]` or `suffix-range = "-" suffix-length`, with
/// nothing else around or between (RFC 9110 §14.1.2).
fn parse_spec(spec: &[u8]) -> Option<Spec> {
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    if first.is_empty() {
        return Some(Spec::Suffix(decimal(last)?));
    }
    let first_pos = decimal(first)?;
    if last.is_empty() {
        return Some(Spec::Int {
            first: first_pos,
            last: None,
        });
    }
    let last_pos = decimal(last)?;
    // Compared as written, so two saturated numbers are still told apart.
    if compare_decimal(last, first) == Ordering::Less {
        return None;
    }
    Some(Spec::Int {
        first: first_pos,
        last: Some(last_pos),
    })
}

/// `1*DIGIT` as a number, saturating at `u64::MAX`.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0_u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// Compares two `1*DIGIT` strings as the numbers they write, of any size.
fn compare_decimal(a: &[u8], b: &[u8]) -> Ordering {
    let significant = |d: &[u8]| {
        let start = d.iter().position(|&c| c != b'0').unwrap_or(d.len());
        d[start..].to_vec()
    };
    let (a, b) = (significant(a), significant(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(&b))
}

/// Merges ranges that overlap or touch. Each resulting part takes the place of the earliest
/// spec that fed it, so the parts follow the request's order (§15.3.7.2) and ranges that
/// need no merging come back exactly as asked.
fn coalesce(ranges: Vec<ByteRange>) -> Vec<ByteRange> {
    // (position in the request of the earliest spec merged in, range)
    let mut by_start: Vec<(usize, ByteRange)> = ranges.into_iter().enumerate().collect();
    by_start.sort_unstable_by_key(|&(_, range)| range.start);
    let mut merged: Vec<(usize, ByteRange)> = Vec::with_capacity(by_start.len());
    for (position, range) in by_start {
        match merged.last_mut() {
            Some((first, last)) if range.start <= last.end_inclusive.saturating_add(1) => {
                last.end_inclusive = last.end_inclusive.max(range.end_inclusive);
                *first = (*first).min(position);
            }
            _ => merged.push((position, range)),
        }
    }
    merged.sort_unstable_by_key(|&(position, _)| position);
    merged.into_iter().map(|(_, range)| range).collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// Range-ish text: mostly valid, sometimes not, to reach every branch of the parser.
    fn range_field() -> impl Strategy<Value = String> {
        let spec = prop_oneof![
            6 => (0_u64..300, 0_u64..300).prop_map(|(a, b)| format!("{a}-{}", a + b)),
            2 => (0_u64..300).prop_map(|a| format!("{a}-")),
            2 => (0_u64..300).prop_map(|n| format!("-{n}")),
            1 => "[0-9a-z -]{0,6}",
        ];
        (
            prop_oneof![8 => Just("bytes".to_owned()), 1 => "(?i:bytes)", 1 => Just("items".to_owned())],
            proptest::collection::vec((spec, "[ \t]{0,2},[ \t]{0,2}"), 0..12),
        )
            .prop_map(|(unit, specs)| {
                let set: String = specs.into_iter().map(|(s, sep)| s + &sep).collect();
                format!("{unit}={set}")
            })
    }

    /// One range-spec as `(first-pos, last-pos)`: mostly valid, sometimes `-`, sometimes
    /// `last < first`.
    fn spec() -> impl Strategy<Value = (Option<u64>, Option<u64>)> {
        use proptest::option::of;
        prop_oneof![
            6 => (0_u64..80, 0_u64..20).prop_map(|(a, d)| (Some(a), Some(a + d))),
            2 => (0_u64..80).prop_map(|a| (Some(a), None)),
            2 => (0_u64..80).prop_map(|n| (None, Some(n))),
            1 => (of(0_u64..80), of(0_u64..80)),
        ]
    }

    /// RFC 9110 §14.1.2 read literally, for a valid spec and `len > 0`: the inclusive byte
    /// positions it selects, if any.
    fn model_selection(first: Option<u64>, last: Option<u64>, len: u64) -> Option<(u64, u64)> {
        match (first, last) {
            (Some(first), _) if first >= len => None,
            (Some(first), None) => Some((first, len - 1)),
            (Some(first), Some(last)) => Some((first, last.min(len - 1))),
            (None, Some(0)) => None,
            (None, Some(suffix)) => Some((len.saturating_sub(suffix), len - 1)),
            (None, None) => unreachable!("invalid specs are filtered out"),
        }
    }

    /// Reads a multipart/byteranges body the way a client would, independently of how it
    /// was written: (Content-Range, payload) per part.
    fn read_multipart(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
        let delimiter = format!("--{boundary}");
        let close = format!("\r\n--{boundary}--\r\n");
        assert!(
            body.starts_with(delimiter.as_bytes()),
            "no opening delimiter"
        );
        assert!(body.ends_with(close.as_bytes()), "no close-delimiter");
        let inner = &body[delimiter.len()..body.len() - close.len()];
        let separator = format!("\r\n--{boundary}");
        let mut parts = Vec::new();
        let mut rest = inner;
        loop {
            let end = rest
                .windows(separator.len())
                .position(|w| w == separator.as_bytes())
                .unwrap_or(rest.len());
            let part = &rest[..end];
            let part = part
                .strip_prefix(b"\r\n")
                .expect("CRLF after the delimiter");
            let blank = part
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("end of part headers");
            let headers = std::str::from_utf8(&part[..blank]).unwrap();
            let range = headers
                .split("\r\n")
                .find_map(|h| h.strip_prefix("Content-Range: "))
                .expect("Content-Range in every part")
                .to_owned();
            parts.push((range, part[blank + 4..].to_vec()));
            if end == rest.len() {
                return parts;
            }
            rest = &rest[end + separator.len()..];
        }
    }

    /// The invariants of every `Satisfiable` answer.
    fn check_satisfiable(parts: &[ByteRange], len: u64, max: usize) -> Result<(), TestCaseError> {
        prop_assert!(!parts.is_empty() && parts.len() <= max);
        for r in parts {
            prop_assert!(
                r.start <= r.end_inclusive && r.end_inclusive < len,
                "{r:?} of {len}"
            );
        }
        let mut sorted = parts.to_vec();
        sorted.sort_unstable_by_key(|r| r.start);
        for w in sorted.windows(2) {
            prop_assert!(w[0].end_inclusive < w[1].start, "overlap in {parts:?}");
        }
        let total: u64 = parts.iter().map(|r| r.len()).sum();
        prop_assert!(total <= len);
        Ok(())
    }

    proptest! {
        /// Arbitrary field bytes never panic, and whatever comes back obeys the invariants.
        #[test]
        fn parsing_arbitrary_fields_never_panics(
            value in any::<Vec<u8>>(),
            len in any::<u64>(),
            max in 0_usize..32,
        ) {
            if let Ok(value) = HeaderValue::from_bytes(&value)
                && let Ranges::Satisfiable(parts) = parse(&value, len, max)
            {
                check_satisfiable(&parts, len, max)?;
            }
        }

        /// Satisfiable ranges always lie within [0, len), disjoint, within the cap.
        #[test]
        fn satisfiable_ranges_lie_within_the_representation(
            value in range_field(),
            len in prop_oneof![0_u64..400, any::<u64>()],
            max in 0_usize..24,
        ) {
            let value = HeaderValue::from_str(&value).unwrap();
            if let Ranges::Satisfiable(parts) = parse(&value, len, max) {
                check_satisfiable(&parts, len, max)?;
            }
        }

        /// Against a byte-set model: the parts cover exactly the union of the bytes the
        /// valid specs select, the verdict is the one the RFC and the policy give, and
        /// specs with nothing to merge come back as asked, in order.
        #[test]
        fn ranges_cover_exactly_the_requested_bytes(
            specs in proptest::collection::vec(spec(), 1..12),
            len in 0_u64..64,
            max in 1_usize..20,
        ) {
            let text: Vec<String> = specs.iter().map(|&(first, last)| {
                format!("{}-{}", first.map(|n| n.to_string()).unwrap_or_default(), last.map(|n| n.to_string()).unwrap_or_default())
            }).collect();
            let value = HeaderValue::from_str(&format!("bytes={}", text.join(","))).unwrap();
            let got = parse(&value, len, max);

            let invalid = specs.iter().any(|&(first, last)| match (first, last) {
                (None, None) => true,
                (Some(first), Some(last)) => last < first,
                _ => false,
            });
            if invalid || specs.len() > max || len == 0 {
                prop_assert_eq!(got, Ranges::Full);
                return Ok(());
            }
            let mut wanted = vec![false; len as usize];
            for &(first, last) in &specs {
                if let Some((start, end)) = model_selection(first, last, len) {
                    for byte in start..=end {
                        wanted[byte as usize] = true;
                    }
                }
            }
            let got_parts = match got {
                Ranges::Satisfiable(parts) => parts,
                Ranges::Unsatisfiable => {
                    prop_assert!(!wanted.contains(&true));
                    return Ok(());
                }
                Ranges::Full => return Err(TestCaseError::fail("valid ranges answered Full")),
            };
            check_satisfiable(&got_parts, len, max)?;
            let mut covered = vec![false; len as usize];
            for r in &got_parts {
                for byte in r.start..=r.end_inclusive {
                    covered[byte as usize] = true;
                }
            }
            prop_assert_eq!(covered, wanted);

            // Nothing to merge: the parts are the selections, in the request's order.
            let selected: Vec<ByteRange> = specs
                .iter()
                .filter_map(|&(first, last)| model_selection(first, last, len))
                .map(|(start, end_inclusive)| ByteRange { start, end_inclusive })
                .collect();
            let apart = selected.iter().enumerate().all(|(i, a)| {
                selected[i + 1..].iter().all(|b| a.end_inclusive + 1 < b.start || b.end_inclusive + 1 < a.start)
            });
            if apart {
                prop_assert_eq!(got_parts, selected);
            }
        }

        /// The computed Content-Length is the length of the body actually rendered, and a
        /// client reading that body finds every part, each with the bytes its
        /// Content-Range names.
        #[test]
        fn multipart_length_equals_the_rendered_body(
            value in range_field(),
            data in proptest::collection::vec(any::<u8>(), 1..400),
            content_type in proptest::option::of("[a-z]{1,8}/[a-z0-9.+-]{1,12}(; charset=utf-8)?"),
            boundary in any::<u128>(),
        ) {
            let len = data.len() as u64;
            let value = HeaderValue::from_str(&value).unwrap();
            let Ranges::Satisfiable(parts) = parse(&value, len, DEFAULT_MAX_RANGES) else {
                return Ok(());
            };
            let content_type = content_type.map(|t| HeaderValue::from_str(&t).unwrap());
            let mp = multipart(&parts, len, content_type.as_ref(), Boundary(boundary));
            let body = super::tests::render(&mp, &data);
            prop_assert_eq!(mp.content_length, body.len() as u64);
            let read = read_multipart(&body, &Boundary(boundary).to_string());
            prop_assert_eq!(read.len(), parts.len());
            for (part, (content_range, payload)) in parts.iter().zip(read) {
                let (start, end) = (part.start as usize, part.end_inclusive as usize);
                prop_assert_eq!(content_range, format!("bytes {start}-{end}/{len}"));
                prop_assert_eq!(payload.as_slice(), &data[start..=end]);
            }
        }
    }
}
