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

use http::Method;
use http::header::{self, HeaderMap, HeaderValue};
use scb_core::date::unix_secs;
use scb_core::http1::trim_ows;

use crate::conditional::{http_date_secs, parse_entity_tag};

/// How many range-specs a request may carry before it gets the whole representation.
///
/// Browsers and media players ask for one range at a time; the clients that use several
/// (PDF byte-serving, some download tools) ask for a handful. Sixteen leaves them room
/// while keeping the work of one response (a part header and a positioned read per range)
/// small. A request over the cap still gets a correct answer, the whole file, so the cap
/// costs bandwidth, never correctness.
pub(crate) const DEFAULT_MAX_RANGES: usize = 16;

/// A satisfiable byte range of a representation: `start..=end_inclusive`, both below its
/// length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteRange {
    /// The first byte.
    pub(crate) start: u64,
    /// The last byte, included (as in `Content-Range`).
    pub(crate) end_inclusive: u64,
}

impl ByteRange {
    /// How many bytes the range holds (at least one).
    pub(crate) fn len(self) -> u64 {
        self.end_inclusive - self.start + 1
    }
}

/// What to send for a request, as far as ranges go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ranges {
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
pub(crate) fn for_request(
    method: &Method,
    headers: &HeaderMap,
    len: u64,
    etag: &str,
    last_modified: SystemTime,
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
        (Some(validator), None) if if_range_allows(validator, etag, last_modified) => {}
        _ => return Ranges::Full,
    }
    parse(range, len, max_ranges)
}

/// Parses a `Range` field against a representation of `len` bytes, allowing at most
/// `max_ranges` range-specs (0 turns ranges off). The policy for odd requests is in the
/// module docs.
pub(crate) fn parse(value: &HeaderValue, len: u64, max_ranges: usize) -> Ranges {
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
pub(crate) fn if_range_allows(value: &HeaderValue, etag: &str, last_modified: SystemTime) -> bool {
    let value = trim_ows(value.as_bytes());
    // §13.1.5: an entity-tag is told from a date by a DQUOTE in the first three characters.
    if value.iter().take(3).any(|&b| b == b'"') {
        return match parse_entity_tag(value) {
            Some((tag, rest)) => rest.is_empty() && !tag.weak && tag.opaque == etag.as_bytes(),
            None => false,
        };
    }
    http_date_secs(value) == Some(unix_secs(last_modified))
}

/// `Content-Range` of a 206 with one part: `bytes FIRST-LAST/LEN`.
pub(crate) fn content_range(range: ByteRange, complete_len: u64) -> HeaderValue {
    header_value(format!(
        "bytes {}-{}/{complete_len}",
        range.start, range.end_inclusive
    ))
}

/// `Content-Range` of a 416: `bytes */LEN`.
pub(crate) fn unsatisfied_content_range(complete_len: u64) -> HeaderValue {
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
pub(crate) struct Boundary(u128);

impl Boundary {
    /// A fresh boundary.
    pub(crate) fn random() -> Self {
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
pub(crate) struct Multipart {
    /// `multipart/byteranges; boundary=...`, the response's `Content-Type`.
    pub(crate) content_type: HeaderValue,
    /// The parts, in the order given.
    pub(crate) parts: Vec<Part>,
    /// The close-delimiter: `\r\n--BOUNDARY--\r\n`.
    pub(crate) closing: Vec<u8>,
    /// The length of the whole body: heads, ranges and closing.
    pub(crate) content_length: u64,
}

/// One part of a [`Multipart`] body.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    /// The delimiter and the part's header section, up to and including the empty line:
    /// `--BOUNDARY\r\nContent-Type: ...\r\nContent-Range: bytes a-b/LEN\r\n\r\n`, with a
    /// leading `\r\n` (the end of the previous part's line) on every part but the first.
    pub(crate) head: Vec<u8>,
    /// The bytes of the representation that follow the head.
    pub(crate) range: ByteRange,
}

/// Frames `ranges` of a representation of `complete_len` bytes as `multipart/byteranges`.
///
/// `content_type` is the representation's own, repeated in each part as §15.3.7.2 asks (the
/// line is left out when the representation has none). For one range, send
/// [`content_range`] instead: §15.3.7.2 forbids a multipart answer to a single-range
/// request, and a lone part is only overhead.
pub(crate) fn multipart(
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
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    const LEN: u64 = 10_000;

    fn ranges(value: &str) -> Ranges {
        parse(
            &HeaderValue::from_str(value).unwrap(),
            LEN,
            DEFAULT_MAX_RANGES,
        )
    }

    fn satisfiable(pairs: &[(u64, u64)]) -> Ranges {
        Ranges::Satisfiable(
            pairs
                .iter()
                .map(|&(start, end_inclusive)| ByteRange {
                    start,
                    end_inclusive,
                })
                .collect(),
        )
    }

    #[test]
    fn range_single_is_satisfiable() {
        // RFC 9110 §14.1.2's examples, against 10000 bytes.
        assert_eq!(ranges("bytes=0-499"), satisfiable(&[(0, 499)]));
        assert_eq!(ranges("bytes=500-999"), satisfiable(&[(500, 999)]));
        assert_eq!(ranges("bytes=0-0"), satisfiable(&[(0, 0)]));
        assert_eq!(ranges("bytes=9999-9999"), satisfiable(&[(9999, 9999)]));
        assert_eq!(ranges("bytes=000-007"), satisfiable(&[(0, 7)]));
    }

    #[test]
    fn range_suffix_is_the_last_bytes() {
        assert_eq!(ranges("bytes=-500"), satisfiable(&[(9500, 9999)]));
        assert_eq!(ranges("bytes=-1"), satisfiable(&[(9999, 9999)]));
    }

    #[test]
    fn range_suffix_longer_than_file_is_clamped() {
        assert_eq!(ranges("bytes=-10000"), satisfiable(&[(0, 9999)]));
        assert_eq!(ranges("bytes=-20000"), satisfiable(&[(0, 9999)]));
        let huge = "bytes=-99999999999999999999999";
        assert_eq!(ranges(huge), satisfiable(&[(0, 9999)]));
    }

    #[test]
    fn range_open_ended_runs_to_the_end() {
        assert_eq!(ranges("bytes=9500-"), satisfiable(&[(9500, 9999)]));
        assert_eq!(ranges("bytes=0-"), satisfiable(&[(0, 9999)]));
    }

    #[test]
    fn range_last_pos_past_the_end_is_clamped() {
        assert_eq!(ranges("bytes=9500-10000"), satisfiable(&[(9500, 9999)]));
        assert_eq!(
            ranges("bytes=0-18446744073709551615"),
            satisfiable(&[(0, 9999)])
        );
        let huge = "bytes=5-99999999999999999999999";
        assert_eq!(ranges(huge), satisfiable(&[(5, 9999)]));
    }

    #[test]
    fn range_unit_is_case_insensitive() {
        for value in ["BYTES=0-1", "Bytes=0-1", "bYtEs=0-1"] {
            assert_eq!(ranges(value), satisfiable(&[(0, 1)]), "{value}");
        }
    }

    #[test]
    fn range_unknown_units_are_ignored() {
        for value in [
            "items=0-1",
            "byte=0-1",
            "bytes2=0-1",
            "none",
            "=0-1",
            "bytes 0-1",
        ] {
            assert_eq!(ranges(value), Ranges::Full, "{value}");
        }
    }

    #[test]
    fn range_invalid_syntax_is_ignored() {
        for value in [
            "bytes=",
            "bytes=,",
            "bytes= , ,",
            "bytes=-",
            "bytes=a-b",
            "bytes=1",
            "bytes=1-2-3",
            "bytes=--1",
            "bytes=+1-2",
            "bytes=1-+2",
            "bytes=0x1-2",
            "bytes=1.5-2",
            "bytes=5-3",
            "bytes=99999999999999999999-99999999999999999998",
            "bytes=0-1,5-3",
            "bytes=0-1;2-3",
            "bytes =0-1",
            "bytes= 0 -1",
            "bytes=0- 1",
            "bytes=0-1 2-3",
            "bytes=0-1,x",
        ] {
            assert_eq!(ranges(value), Ranges::Full, "{value}");
        }
        let non_ascii = HeaderValue::from_bytes(b"bytes=0-1,\xb9").unwrap();
        assert_eq!(parse(&non_ascii, LEN, DEFAULT_MAX_RANGES), Ranges::Full);
    }

    #[test]
    fn range_whitespace_around_commas_and_empty_elements_are_accepted() {
        let expected = satisfiable(&[(0, 1), (5, 6), (9, 9)]);
        for value in [
            "bytes=0-1,5-6,9-9",
            "bytes=0-1 , 5-6,\t9-9",
            "bytes= 0-1,5-6,9-9 ",
            "  bytes=0-1,5-6,9-9\t",
            "bytes=0-1,,5-6, ,9-9,",
            "bytes=,0-1,5-6,9-9",
        ] {
            assert_eq!(ranges(value), expected, "{value:?}");
        }
    }

    #[test]
    fn range_starting_at_or_past_the_end_is_unsatisfiable() {
        for value in [
            "bytes=10000-",
            "bytes=10000-10001",
            "bytes=20000-30000",
            "bytes=99999999999999999999-",
            "bytes=-0",
            "bytes=10000-,-0",
        ] {
            assert_eq!(ranges(value), Ranges::Unsatisfiable, "{value}");
        }
    }

    #[test]
    fn range_unsatisfiable_specs_are_dropped_beside_satisfiable_ones() {
        assert_eq!(ranges("bytes=20000-,0-1"), satisfiable(&[(0, 1)]));
        assert_eq!(ranges("bytes=-0,5-"), satisfiable(&[(5, 9999)]));
    }

    #[test]
    fn range_on_an_empty_representation_is_ignored() {
        let value = |v| HeaderValue::from_static(v);
        for v in [
            "bytes=0-",
            "bytes=0-0",
            "bytes=-5",
            "bytes=-0",
            "bytes=1-2",
            "garbage",
        ] {
            assert_eq!(parse(&value(v), 0, DEFAULT_MAX_RANGES), Ranges::Full, "{v}");
        }
    }

    #[test]
    fn range_on_a_one_byte_representation() {
        let one = |v| parse(&HeaderValue::from_static(v), 1, DEFAULT_MAX_RANGES);
        assert_eq!(one("bytes=0-"), satisfiable(&[(0, 0)]));
        assert_eq!(one("bytes=-5"), satisfiable(&[(0, 0)]));
        assert_eq!(one("bytes=0-100"), satisfiable(&[(0, 0)]));
        assert_eq!(one("bytes=1-"), Ranges::Unsatisfiable);
    }

    #[test]
    fn range_several_disjoint_keep_the_request_order() {
        assert_eq!(
            ranges("bytes=500-599,0-99,9000-"),
            satisfiable(&[(500, 599), (0, 99), (9000, 9999)])
        );
        // RFC 9110 §14.1.2's first-and-last example.
        assert_eq!(ranges("bytes=0-0,-1"), satisfiable(&[(0, 0), (9999, 9999)]));
    }

    #[test]
    fn range_overlapping_ranges_are_coalesced() {
        assert_eq!(ranges("bytes=0-49,10-99"), satisfiable(&[(0, 99)]));
        assert_eq!(ranges("bytes=10-20,0-100"), satisfiable(&[(0, 100)]));
        // RFC 9110 §14.1.2: "bytes=500-600,601-999" and "bytes=500-700,601-999" both mean
        // 500-999.
        assert_eq!(ranges("bytes=500-600,601-999"), satisfiable(&[(500, 999)]));
        assert_eq!(ranges("bytes=500-700,601-999"), satisfiable(&[(500, 999)]));
    }

    #[test]
    fn range_coalesced_parts_keep_the_place_of_their_first_spec() {
        assert_eq!(
            ranges("bytes=9000-9100,50-60,0-55,100-110"),
            satisfiable(&[(9000, 9100), (0, 60), (100, 110)])
        );
        assert_eq!(
            ranges("bytes=500-599,0-9,550-700,5-20"),
            satisfiable(&[(500, 700), (0, 20)])
        );
    }

    #[test]
    fn range_repeated_whole_file_requests_collapse_to_one_part() {
        // The CVE-2011-3192 shape, within the cap: the body stays one copy of the file.
        let value = format!("bytes={}", ["0-"; 16].join(","));
        assert_eq!(ranges(&value), satisfiable(&[(0, 9999)]));
        assert_eq!(ranges("bytes=0-,-10000,5-,1-9"), satisfiable(&[(0, 9999)]));
    }

    #[test]
    fn range_over_the_cap_serves_the_whole_representation() {
        let specs: Vec<String> = (0..17).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
        let over = specs.join(",");
        assert_eq!(ranges(&format!("bytes={over}")), Ranges::Full);
        let at_cap = specs[..16].join(",");
        match ranges(&format!("bytes={at_cap}")) {
            Ranges::Satisfiable(parts) => assert_eq!(parts.len(), 16),
            other => panic!("{other:?}"),
        }
        // Unsatisfiable specs count too: the cap bounds the parsing, not only the parts.
        let value = format!("bytes={}", ["20000-"; 17].join(","));
        assert_eq!(ranges(&value), Ranges::Full);
        // And the classic attack: 1300 overlapping ranges.
        let attack: Vec<String> = (0..1300).map(|i| format!("5-{i}")).collect();
        assert_eq!(
            ranges(&format!("bytes=0-,{}", attack.join(","))),
            Ranges::Full
        );
    }

    #[test]
    fn range_cap_is_configurable_and_zero_turns_ranges_off() {
        let value = HeaderValue::from_static("bytes=0-0,2-2,4-4");
        assert_eq!(parse(&value, LEN, 2), Ranges::Full);
        assert_eq!(
            parse(&value, LEN, 3),
            satisfiable(&[(0, 0), (2, 2), (4, 4)])
        );
        let single = HeaderValue::from_static("bytes=0-0");
        assert_eq!(parse(&single, LEN, 0), Ranges::Full);
    }

    #[test]
    fn content_range_renders_both_forms() {
        let range = ByteRange {
            start: 0,
            end_inclusive: 499,
        };
        assert_eq!(content_range(range, 1234), "bytes 0-499/1234");
        assert_eq!(unsatisfied_content_range(1234), "bytes */1234");
        let max = ByteRange {
            start: u64::MAX - 1,
            end_inclusive: u64::MAX - 1,
        };
        assert_eq!(
            content_range(max, u64::MAX),
            "bytes 18446744073709551614-18446744073709551614/18446744073709551615"
        );
    }

    const ETAG: &str = "\"v1\"";
    /// Sun, 06 Nov 1994 08:49:37 GMT, plus a fraction Last-Modified does not carry.
    fn last_modified() -> SystemTime {
        UNIX_EPOCH + Duration::new(784_111_777, 123_456_789)
    }

    fn if_range(value: &[u8]) -> bool {
        if_range_allows(
            &HeaderValue::from_bytes(value).unwrap(),
            ETAG,
            last_modified(),
        )
    }

    #[test]
    fn if_range_with_the_current_strong_etag_allows_ranges() {
        assert!(if_range(b"\"v1\""));
        assert!(if_range(b" \"v1\"\t"));
    }

    #[test]
    fn if_range_with_another_etag_serves_the_whole_representation() {
        assert!(!if_range(b"\"v2\""));
        assert!(!if_range(b"\"v1 \""));
        assert!(!if_range(b"\"\""));
    }

    #[test]
    fn if_range_with_a_weak_etag_never_matches() {
        assert!(!if_range(b"W/\"v1\""));
    }

    #[test]
    fn if_range_with_an_etag_list_or_junk_never_matches() {
        for value in [
            &b"\"v1\", \"v2\""[..],
            b"\"v1\"x",
            b"\"v1",
            b"v1",
            b"*",
            b"",
            b"w/\"v1\"",
            b"\xff\"v1\"",
        ] {
            assert!(!if_range(value), "{value:?}");
        }
    }

    #[test]
    fn if_range_with_the_exact_last_modified_date_allows_ranges() {
        assert!(if_range(b"Sun, 06 Nov 1994 08:49:37 GMT"));
        assert!(if_range(b"Sunday, 06-Nov-94 08:49:37 GMT"));
        assert!(if_range(b"Sun Nov  6 08:49:37 1994"));
    }

    #[test]
    fn if_range_with_any_other_date_serves_the_whole_representation() {
        assert!(!if_range(b"Sun, 06 Nov 1994 08:49:36 GMT"));
        assert!(!if_range(b"Sun, 06 Nov 1994 08:49:38 GMT"));
        assert!(!if_range(b"Mon, 06 Nov 1994 08:49:37 GMT")); // wrong weekday: not a date
        assert!(!if_range(b"06 Nov 1994"));
    }

    fn request(method: &Method, fields: &[(header::HeaderName, &str)]) -> Ranges {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        for_request(
            method,
            &headers,
            LEN,
            ETAG,
            last_modified(),
            DEFAULT_MAX_RANGES,
        )
    }

    #[test]
    fn request_without_range_is_full() {
        assert_eq!(request(&Method::GET, &[]), Ranges::Full);
        // If-Range without Range is ignored.
        assert_eq!(
            request(&Method::GET, &[(header::IF_RANGE, ETAG)]),
            Ranges::Full
        );
    }

    #[test]
    fn request_range_applies_to_get_only() {
        let range = [(header::RANGE, "bytes=0-1")];
        assert_eq!(request(&Method::GET, &range), satisfiable(&[(0, 1)]));
        for method in [Method::HEAD, Method::POST, Method::PUT, Method::OPTIONS] {
            assert_eq!(request(&method, &range), Ranges::Full, "{method}");
        }
    }

    #[test]
    fn request_with_matching_if_range_gets_the_ranges() {
        let by_tag = [(header::RANGE, "bytes=0-1"), (header::IF_RANGE, ETAG)];
        assert_eq!(request(&Method::GET, &by_tag), satisfiable(&[(0, 1)]));
        let by_date = [
            (header::RANGE, "bytes=0-1"),
            (header::IF_RANGE, "Sun, 06 Nov 1994 08:49:37 GMT"),
        ];
        assert_eq!(request(&Method::GET, &by_date), satisfiable(&[(0, 1)]));
        // An unsatisfiable range still gets its 416 once If-Range holds.
        let past_end = [(header::RANGE, "bytes=20000-"), (header::IF_RANGE, ETAG)];
        assert_eq!(request(&Method::GET, &past_end), Ranges::Unsatisfiable);
    }

    #[test]
    fn request_with_failing_if_range_is_full() {
        for validator in ["\"v0\"", "W/\"v1\"", "Sun, 06 Nov 1994 08:49:36 GMT", "x"] {
            let fields = [(header::RANGE, "bytes=0-1"), (header::IF_RANGE, validator)];
            assert_eq!(request(&Method::GET, &fields), Ranges::Full, "{validator}");
        }
        // Full, not 416: a changed representation is sent whole.
        let fields = [
            (header::RANGE, "bytes=20000-"),
            (header::IF_RANGE, "\"v0\""),
        ];
        assert_eq!(request(&Method::GET, &fields), Ranges::Full);
        let twice = [
            (header::RANGE, "bytes=0-1"),
            (header::IF_RANGE, ETAG),
            (header::IF_RANGE, ETAG),
        ];
        assert_eq!(request(&Method::GET, &twice), Ranges::Full);
    }

    #[test]
    fn request_with_two_range_fields_is_full() {
        let fields = [(header::RANGE, "bytes=0-1"), (header::RANGE, "bytes=2-3")];
        assert_eq!(request(&Method::GET, &fields), Ranges::Full);
    }

    fn boundary() -> Boundary {
        Boundary(0x0123_4567_89ab_cdef_0011_2233_4455_6677)
    }

    /// The body a service writes for `mp`, taking range bytes from `data`.
    pub(super) fn render(mp: &Multipart, data: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for part in &mp.parts {
            body.extend_from_slice(&part.head);
            let start = usize::try_from(part.range.start).unwrap();
            let end = usize::try_from(part.range.end_inclusive).unwrap();
            body.extend_from_slice(&data[start..=end]);
        }
        body.extend_from_slice(&mp.closing);
        body
    }

    #[test]
    fn multipart_renders_delimiters_part_headers_and_the_closing() {
        let data = b"0123456789abcdefghij";
        let parts = [
            ByteRange {
                start: 0,
                end_inclusive: 2,
            },
            ByteRange {
                start: 17,
                end_inclusive: 19,
            },
        ];
        let content_type = HeaderValue::from_static("text/plain; charset=utf-8");
        let mp = multipart(&parts, 20, Some(&content_type), boundary());
        let b = "0123456789abcdef0011223344556677";
        assert_eq!(
            mp.content_type,
            format!("multipart/byteranges; boundary={b}").as_str()
        );
        let expected = format!(
            "--{b}\r\n\
             Content-Type: text/plain; charset=utf-8\r\n\
             Content-Range: bytes 0-2/20\r\n\
             \r\n\
             012\r\n\
             --{b}\r\n\
             Content-Type: text/plain; charset=utf-8\r\n\
             Content-Range: bytes 17-19/20\r\n\
             \r\n\
             hij\r\n\
             --{b}--\r\n"
        );
        let body = render(&mp, data);
        assert_eq!(String::from_utf8(body.clone()).unwrap(), expected);
        assert_eq!(mp.content_length, body.len() as u64);
    }

    #[test]
    fn multipart_without_a_content_type_omits_the_line() {
        let parts = [
            ByteRange {
                start: 0,
                end_inclusive: 0,
            },
            ByteRange {
                start: 2,
                end_inclusive: 2,
            },
        ];
        let mp = multipart(&parts, 3, None, boundary());
        let body = String::from_utf8(render(&mp, b"xyz")).unwrap();
        assert!(!body.contains("Content-Type"));
        assert!(body.starts_with(
            "--0123456789abcdef0011223344556677\r\nContent-Range: bytes 0-0/3\r\n\r\nx\r\n--"
        ));
        assert_eq!(mp.content_length, body.len() as u64);
    }

    #[test]
    fn multipart_of_no_ranges_is_the_close_delimiter_alone() {
        let mp = multipart(&[], 3, None, boundary());
        let body = render(&mp, b"xyz");
        assert_eq!(body, b"--0123456789abcdef0011223344556677--\r\n");
        assert_eq!(mp.content_length, body.len() as u64);
    }

    #[test]
    fn multipart_boundaries_are_32_hex_digits_and_fresh() {
        let a = Boundary::random().to_string();
        let b = Boundary::random().to_string();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}

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
