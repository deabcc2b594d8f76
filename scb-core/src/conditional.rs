//! Conditional requests (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`, `If-None-Match`
//! and `If-Modified-Since`, evaluated in the order of §13.2.2, plus the validators they
//! compare against (a strong ETag from the file's metadata, Last-Modified in whole seconds).
//!
//! ```text
//! representation: ETag "a", Last-Modified Sun, 06 Nov 1994 08:49:37 GMT
//!
//! If-None-Match: "a"                                    -> NotModified (304)
//! If-None-Match: W/"a", "b"                             -> NotModified (weak comparison)
//! If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT      -> NotModified
//! If-Match: W/"a"                                       -> Failed (412: strong comparison)
//! If-Unmodified-Since: Sat, 05 Nov 1994 00:00:00 GMT    -> Failed
//! If-None-Match: "b" + If-Modified-Since: <any date>    -> Proceed (the date is ignored)
//! If-Modified-Since: yesterday                          -> Proceed (not a date: ignored)
//! ```
//!
//! Everything here is pure: the service passes in the request's method and headers and the
//! representation's validators, and gets back what to answer. `If-Range`, the fifth step
//! of §13.2.2, lives with the ranges it guards (`range::if_range_allows`).
//!
//! # Malformed fields
//!
//! - An entity-tag list that does not parse (an unterminated quote, a lower-case `w/`, two
//!   tags without a comma between them, `*` next to tags, an empty field) matches nothing,
//!   as a whole: a client that cannot write the field gets no partial reading of it. For
//!   `If-None-Match` that means the request proceeds (a 200 instead of a 304, never a stale
//!   304); for `If-Match` it means 412 (as nginx and Apache answer), the safe failure for a
//!   field whose purpose is to stop the request when in doubt.
//! - `If-Modified-Since` is not checked against the clock: a date in the future still
//!   compares as a date. RFC 2616 called such a date invalid; RFC 9110 does not. Clients
//!   send back the Last-Modified they were given, which [`last_modified`] never
//!   dates later than the response.
//! - A date that is not an HTTP-date, or a date field sent more than once, is ignored, as
//!   §13.1.3 and §13.1.4 require.

use std::time::SystemTime;

use crate::date::unix_secs;
use crate::http1::{has_any, trim_ows};
use http::Method;
use http::header::{self, GetAll, HeaderMap, HeaderValue};

/// What the preconditions of a request say to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No precondition stops the request: serve it (ranges may still apply).
    Proceed,
    /// `304 Not Modified`, with the headers a 200 would have carried among ETag,
    /// Last-Modified, Cache-Control, Content-Location, Date, Expires and Vary.
    NotModified,
    /// `412 Precondition Failed`.
    Failed,
}

/// Evaluates the preconditions of a request against the selected representation, in the
/// order of RFC 9110 §13.2.2.
///
/// 1. `If-Match` (strong comparison, `*` matches because a representation exists); only
///    when it is absent, `If-Unmodified-Since`. False: [`Precondition::Failed`].
/// 2. `If-None-Match` (weak comparison, `*` matches). True for a GET or HEAD:
///    [`Precondition::NotModified`]; for any other method, [`Precondition::Failed`].
/// 3. Only when `If-None-Match` is absent and the method is GET or HEAD,
///    `If-Modified-Since`: not modified since the date, [`Precondition::NotModified`].
///
/// `etag` is the representation's strong entity-tag with its quotes (as
/// [`strong_etag`] makes it); `last_modified` its modification time, compared in whole
/// seconds because that is all an HTTP-date carries.
pub fn evaluate(
    method: &Method,
    headers: &HeaderMap,
    etag: &str,
    last_modified: SystemTime,
) -> Precondition {
    evaluate_validators(
        method,
        headers,
        Validators {
            etag: Some(EntityTag {
                weak: false,
                opaque: etag.as_bytes(),
            }),
            last_modified: Some(unix_secs(last_modified)),
        },
    )
}

/// The validators of a representation, as a cache holds them: either may be absent, and
/// the entity-tag may be weak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Validators<'a> {
    /// Its `ETag`.
    pub etag: Option<EntityTag<'a>>,
    /// Its `Last-Modified`, in Unix seconds.
    pub last_modified: Option<i64>,
}

impl<'a> Validators<'a> {
    /// The validators of a response with these fields (an `ETag` that does not parse is
    /// no validator).
    pub fn of(headers: &'a HeaderMap) -> Self {
        Self {
            etag: headers
                .get(header::ETAG)
                .and_then(|v| parse_entity_tag(trim_ows(v.as_bytes())))
                .filter(|(_, rest)| rest.is_empty())
                .map(|(tag, _)| tag),
            last_modified: headers
                .get(header::LAST_MODIFIED)
                .and_then(|v| http_date_secs(v.as_bytes())),
        }
    }
}

/// The four fields [`evaluate_validators`] reads.
const PRECONDITIONS: [header::HeaderName; 4] = [
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
];

/// Whether `headers` carry any precondition field (`If-Match`, `If-Unmodified-Since`,
/// `If-None-Match`, `If-Modified-Since`): when none, every request proceeds. One pass
/// over the names ([`has_any`]) rather than four lookups: about 400 instructions a
/// request under callgrind.
pub fn has_preconditions(headers: &HeaderMap) -> bool {
    has_any(headers, &PRECONDITIONS)
}

/// [`evaluate`] against validators that may be absent or weak: a field that compares
/// against a validator the representation lacks does not hold (`If-Match` fails,
/// `If-None-Match` and `If-Modified-Since` let the request proceed), and a weak tag
/// never passes the strong comparison of `If-Match`.
pub fn evaluate_validators(
    method: &Method,
    headers: &HeaderMap,
    validators: Validators<'_>,
) -> Precondition {
    if !has_preconditions(headers) {
        return Precondition::Proceed;
    }
    let Validators {
        etag,
        last_modified: modified,
    } = validators;

    if headers.contains_key(header::IF_MATCH) {
        if !tag_list_matches(headers.get_all(header::IF_MATCH), etag, Comparison::Strong) {
            return Precondition::Failed;
        }
    } else if let Some(date) = single_date(&headers.get_all(header::IF_UNMODIFIED_SINCE))
        && modified.is_none_or(|modified| modified > date)
    {
        return Precondition::Failed;
    }

    let safe = method == Method::GET || method == Method::HEAD;
    if headers.contains_key(header::IF_NONE_MATCH) {
        if tag_list_matches(
            headers.get_all(header::IF_NONE_MATCH),
            etag,
            Comparison::Weak,
        ) {
            return if safe {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if safe
        && let Some(date) = single_date(&headers.get_all(header::IF_MODIFIED_SINCE))
        && modified.is_some_and(|modified| modified <= date)
    {
        return Precondition::NotModified;
    }

    Precondition::Proceed
}

/// A strong entity-tag, quotes included, for a file with this metadata: the length, the
/// modification time to the nanosecond and the inode number, in hex.
///
/// These fields change when the content does, without reading it: a write through the
/// file moves the mtime (and usually the length); a file replaced by rename (atomic
/// deploys, `rsync`, most editors) is a new inode even when the tool that wrote it kept
/// the old mtime and length (`cp -p`, `rsync -t`, `tar x` all preserve mtime). What no
/// stat-based tag can see is two same-length writes within one timestamp tick of the
/// file system; nginx (mtime and length) and Apache (mtime and size by default) share
/// that limit.
///
/// The inode makes the tag differ between two servers holding identical copies (why
/// Apache 2.4 dropped it from its default): behind a load balancer without affinity,
/// revalidations that cross servers get a 200 instead of a 304, and an `If-Range` a full
/// response instead of a range. That costs bandwidth, never correctness, and telling a
/// replaced file from its predecessor is worth it.
///
/// A sidecar (`.br`, `.gz`, ...) is a different file, so its metadata gives it a
/// different tag, as RFC 9110 §8.8.3 requires of each content coding.
///
/// Written by hand rather than with `format!`: the formatting machinery cost about a
/// thousand instructions per response (callgrind, static-small over HTTP/2), the same
/// `{:x}` text for a tenth of it.
pub fn strong_etag(len: u64, mtime_secs: i64, mtime_nanos: u32, ino: u64) -> String {
    let mut out = String::with_capacity(64);
    out.push('"');
    push_hex(&mut out, len);
    out.push('-');
    // `{:x}` of an i64 is its two's complement: the same bits as a u64.
    push_hex(&mut out, mtime_secs.cast_unsigned());
    out.push('.');
    push_hex(&mut out, u64::from(mtime_nanos));
    out.push('-');
    push_hex(&mut out, ino);
    out.push('"');
    out
}

fn push_hex(out: &mut String, value: u64) {
    out.push_str(crate::http1::lower_hex(value).as_str());
}

/// [`last_modified`] as a header value.
#[cfg(test)]
pub fn last_modified_header(mtime: SystemTime, now: SystemTime) -> Option<HeaderValue> {
    HeaderValue::from_bytes(&last_modified(mtime, now)?).ok()
}

/// The `Last-Modified` text for a file modified at `mtime`, answered at `now`: an
/// IMF-fixdate of the earlier of the two, as RFC 9110 §8.8.2.1 forbids a date later than
/// the response's own. `None` when there is no date to send: an mtime before 1970 or
/// after 9999, which an HTTP-date cannot express.
///
/// [`evaluate`] compares against the file's real mtime, not this clamped value; for a file
/// dated in the future that only means date-based revalidation keeps answering 200 until
/// the clock catches up.
pub fn last_modified(mtime: SystemTime, now: SystemTime) -> Option<[u8; 29]> {
    crate::date::imf_fixdate(mtime.min(now))
}

/// One entity-tag: `W/` or not, and the opaque-tag with its quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntityTag<'a> {
    /// Prefixed with `W/`.
    pub weak: bool,
    /// `"..."`, quotes included, so it compares directly with a tag made by
    /// [`strong_etag`].
    pub opaque: &'a [u8],
}

/// How two entity-tags are compared (RFC 9110 §8.8.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Comparison {
    /// Both strong and the opaque-tags equal (`If-Match`, `If-Range`).
    Strong,
    /// The opaque-tags equal, `W/` or not (`If-None-Match`).
    Weak,
}

impl EntityTag<'_> {
    /// Whether this tag (the request's) names the representation's `etag`.
    fn matches(self, etag: EntityTag<'_>, comparison: Comparison) -> bool {
        (comparison == Comparison::Weak || !(self.weak || etag.weak)) && self.opaque == etag.opaque
    }
}

/// Parses one entity-tag at the start of `input`; returns it and the rest of the input.
///
/// `entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE`, `etagc = %x21 / %x23-7E / obs-text`: any
/// visible byte but `"`, commas included, so a list cannot be split on commas first. The
/// `W/` is case-sensitive (RFC 9110 §8.8.3).
pub fn parse_entity_tag(input: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    let (weak, quoted) = match input.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, input),
    };
    if quoted.first() != Some(&b'"') {
        return None;
    }
    for (i, &b) in quoted.iter().enumerate().skip(1) {
        match b {
            b'"' => {
                let (opaque, rest) = quoted.split_at(i + 1);
                return Some((EntityTag { weak, opaque }, rest));
            }
            0x21 | 0x23..=0x7e | 0x80..=0xff => {}
            _ => return None,
        }
    }
    None
}

/// Whether `etag` is a member of an `If-Match` or `If-None-Match` field (`"*" / #entity-tag`),
/// taking all its field lines as one list. A malformed field matches nothing (module docs).
fn tag_list_matches(
    lines: GetAll<'_, HeaderValue>,
    etag: Option<EntityTag<'_>>,
    comparison: Comparison,
) -> bool {
    let mut members = 0_usize;
    let mut star = false;
    let mut matched = false;
    for line in lines {
        let mut rest = line.as_bytes();
        loop {
            // Empty list elements are allowed (RFC 9110 §5.6.1.2).
            rest = trim_start(rest, |b| matches!(b, b' ' | b'\t' | b','));
            if rest.is_empty() {
                break;
            }
            if let Some(after) = rest.strip_prefix(b"*") {
                star = true;
                rest = after;
            } else {
                let Some((tag, after)) = parse_entity_tag(rest) else {
                    return false;
                };
                matched |= etag.is_some_and(|etag| tag.matches(etag, comparison));
                rest = after;
            }
            members += 1;
            rest = trim_start(rest, |b| matches!(b, b' ' | b'\t'));
            if !rest.is_empty() && rest[0] != b',' {
                return false;
            }
        }
    }
    match (star, members) {
        (_, 0) => false,
        (true, 1) => true,
        (true, _) => false,
        (false, _) => matched,
    }
}

/// The date of a field that must hold exactly one HTTP-date, in Unix seconds; `None` (the
/// field is ignored) when it is absent, repeated, or not a date.
fn single_date(lines: &GetAll<'_, HeaderValue>) -> Option<i64> {
    let mut lines = lines.iter();
    match (lines.next(), lines.next()) {
        (Some(line), None) => http_date_secs(line.as_bytes()),
        _ => None,
    }
}

/// Parses an HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) into
/// Unix seconds. The weekday must agree with the date: `httpdate` checks it.
pub fn http_date_secs(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(trim_ows(value)).ok()?;
    httpdate::parse_http_date(text).ok().map(unix_secs)
}

fn trim_start(value: &[u8], skip: impl Fn(u8) -> bool) -> &[u8] {
    let start = value.iter().position(|&b| !skip(b)).unwrap_or(value.len());
    &value[start..]
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use proptest::prelude::*;

    /// A valid entity-tag, weak or not, its opaque-tag drawn from `chars`.
    fn entity_tag(chars: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
        let opaque = proptest::collection::vec(proptest::sample::select(chars), 0..3);
        (any::<bool>(), opaque).prop_map(|(weak, opaque)| {
            let mut tag = if weak {
                b"W/\"".to_vec()
            } else {
                b"\"".to_vec()
            };
            tag.extend(opaque);
            tag.push(b'"');
            tag
        })
    }

    #[test]
    fn strong_etag_of_zeros() {
        assert_eq!(strong_etag(0, 0, 0, 0), "\"0-0.0-0\"");
    }

    fn headers_from(fields: &[(header::HeaderName, Vec<u8>)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.append(name.clone(), value);
            }
        }
        headers
    }

    proptest! {
        /// The hand-written tag is `format!`'s `{:x}` text, negative seconds included.
        #[test]
        fn strong_etag_is_hex_formatting(len: u64, secs: i64, nanos: u32, ino: u64) {
            prop_assert_eq!(
                strong_etag(len, secs, nanos, ino),
                format!("\"{len:x}-{secs:x}.{nanos:x}-{ino:x}\"")
            );
        }

        /// Whatever the fields hold, evaluation answers without panicking.
        #[test]
        fn evaluate_never_panics(
            values in proptest::collection::vec(any::<Vec<u8>>(), 4),
            secs in any::<u32>(),
            get in any::<bool>(),
        ) {
            let names = [
                header::IF_MATCH,
                header::IF_UNMODIFIED_SINCE,
                header::IF_NONE_MATCH,
                header::IF_MODIFIED_SINCE,
            ];
            let fields: Vec<_> = names.into_iter().zip(values).collect();
            let method = if get { Method::GET } else { Method::PUT };
            let modified = UNIX_EPOCH + Duration::from_secs(u64::from(secs));
            evaluate(&method, &headers_from(&fields), "\"a\"", modified);
        }

        /// Arbitrary bytes either parse as a tag that is a prefix of the input, or do not.
        #[test]
        fn entity_tag_parsing_never_panics(input in any::<Vec<u8>>()) {
            if let Some((tag, rest)) = parse_entity_tag(&input) {
                prop_assert!(tag.opaque.len() >= 2);
                prop_assert!(input.ends_with(rest));
            }
        }

        /// A well-formed list, written with arbitrary whitespace, matches exactly when one of
        /// its members names our tag (weakly for If-None-Match, strongly for If-Match). The
        /// small alphabets make hits common; commas and obs-text exercise the tag scanner.
        #[test]
        fn tag_lists_match_like_the_model(
            tags in proptest::collection::vec(entity_tag(b"ab,\xe9"), 1..6),
            opaque in proptest::collection::vec(proptest::sample::select(&b"ab,"[..]), 0..3),
            separators in proptest::collection::vec("[ \t]{0,2},[ \t]{0,2}", 6),
        ) {
            let etag = format!("\"{}\"", String::from_utf8(opaque).unwrap());
            let mut list = Vec::new();
            for (tag, separator) in tags.iter().zip(&separators) {
                if !list.is_empty() {
                    list.extend_from_slice(separator.as_bytes());
                }
                list.extend_from_slice(tag);
            }
            let ours = etag.as_bytes();
            let weak_hit = tags.iter().any(|t| t.strip_prefix(b"W/").unwrap_or(t) == ours);
            let strong_hit = tags.iter().any(|t| t == ours);

            let inm = headers_from(&[(header::IF_NONE_MATCH, list.clone())]);
            let got = evaluate(&Method::GET, &inm, &etag, UNIX_EPOCH);
            prop_assert_eq!(got == Precondition::NotModified, weak_hit);

            let im = headers_from(&[(header::IF_MATCH, list)]);
            let got = evaluate(&Method::GET, &im, &etag, UNIX_EPOCH);
            prop_assert_eq!(got == Precondition::Proceed, strong_hit);
        }

        /// Every date `httpdate` writes is read back to the same second.
        #[test]
        fn http_dates_round_trip(secs in 0_u64..253_402_300_800) {
            let time = UNIX_EPOCH + Duration::from_secs(secs);
            let value = last_modified_header(time, time).unwrap();
            prop_assert_eq!(http_date_secs(value.as_bytes()), Some(secs as i64));
        }
    }
}
