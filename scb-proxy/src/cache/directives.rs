//! `Cache-Control` (RFC 9111 §5.2) as a cache reads it, request and response side.
//!
//! Directive names are case-insensitive; a value is a token or a quoted-string (commas
//! inside quotes do not split). `max-age`-like values take their leading digits (`5.0`
//! is 5, `100a` is 100) and a value without any is invalid: the directive then makes the
//! response stale rather than fresh, the safe reading. A name followed by a space before
//! `=` is not that directive. The first occurrence of a directive counts (§4.2.1 allows
//! the first, or treating the response as stale).

use std::borrow::Cow;

use http::HeaderMap;
use http::header::{self, HeaderValue};
use scb_core::http1::has_any;

/// A delta-seconds value: valid (capped at 2^31, §1.2.2) or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delta {
    /// Seconds.
    Secs(u64),
    /// Not a number: read as zero, which errs towards revalidating.
    Invalid,
}

impl Delta {
    /// The greatest value a cache has to represent (RFC 9111 §1.2.2).
    pub(crate) const MAX: u64 = 1 << 31;

    fn parse(value: Option<&str>) -> Self {
        let Some(value) = value else {
            return Self::Invalid;
        };
        let digits = value.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Self::Invalid;
        }
        Self::Secs(
            value[..digits]
                .parse::<u64>()
                .map_or(Self::MAX, |n| n.min(Self::MAX)),
        )
    }

    /// The seconds, zero when invalid.
    pub(crate) fn secs(self) -> u64 {
        match self {
            Self::Secs(n) => n,
            Self::Invalid => 0,
        }
    }
}

/// `Surrogate-Control` (W3C Edge Architecture).
pub(crate) const SURROGATE_CONTROL: header::HeaderName =
    header::HeaderName::from_static("surrogate-control");

/// The directives of a response that a shared cache acts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResponseDirectives {
    pub(crate) no_store: bool,
    /// `no-cache` without field names: every reuse is validated.
    pub(crate) no_cache: bool,
    /// `no-cache="a, b"`: these fields are not reused without validation.
    pub(crate) no_cache_fields: Vec<String>,
    /// `private` without field names: not for a shared cache.
    pub(crate) private: bool,
    /// `private="a, b"`: these fields are not stored by a shared cache.
    pub(crate) private_fields: Vec<String>,
    pub(crate) public: bool,
    pub(crate) max_age: Option<Delta>,
    pub(crate) s_maxage: Option<Delta>,
    pub(crate) must_revalidate: bool,
    pub(crate) proxy_revalidate: bool,
    pub(crate) stale_while_revalidate: Option<Delta>,
    pub(crate) stale_if_error: Option<Delta>,
    /// `must-understand`: stored only if the status code is one this cache knows.
    pub(crate) must_understand: bool,
    /// `Surrogate-Control: max-age=N` (W3C Edge Architecture), which a reverse proxy
    /// obeys before Cache-Control's freshness.
    pub(crate) surrogate_max_age: Option<Delta>,
    /// `Surrogate-Control: no-store`.
    pub(crate) surrogate_no_store: bool,
}

/// The directives of a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RequestDirectives {
    /// `no-cache`, or `Pragma: no-cache` without any Cache-Control (RFC 9111 §5.4).
    pub(crate) no_cache: bool,
    pub(crate) no_store: bool,
    pub(crate) max_age: Option<Delta>,
    /// `max-stale` (`Some(None)`: any staleness) or `max-stale=N`.
    pub(crate) max_stale: Option<Option<Delta>>,
    pub(crate) min_fresh: Option<Delta>,
    pub(crate) only_if_cached: bool,
    pub(crate) stale_if_error: Option<Delta>,
}

impl ResponseDirectives {
    pub(crate) fn parse(headers: &HeaderMap) -> Self {
        let mut d = Self::default();
        directives_of(headers, &header::CACHE_CONTROL, |(name, value)| {
            let first = |slot: &mut Option<Delta>| first_delta(slot, value.as_deref());
            match &*name {
                "no-store" => d.no_store = true,
                "no-cache" => match value.as_deref() {
                    Some(fields) => d.no_cache_fields.extend(field_names(fields)),
                    None => d.no_cache = true,
                },
                "private" => match value.as_deref() {
                    Some(fields) => d.private_fields.extend(field_names(fields)),
                    None => d.private = true,
                },
                "public" => d.public = true,
                "max-age" => first(&mut d.max_age),
                "s-maxage" => first(&mut d.s_maxage),
                "must-revalidate" => d.must_revalidate = true,
                "proxy-revalidate" => d.proxy_revalidate = true,
                "stale-while-revalidate" => first(&mut d.stale_while_revalidate),
                "stale-if-error" => first(&mut d.stale_if_error),
                "must-understand" => d.must_understand = true,
                _ => {}
            }
        });
        // Seldom sent: one pass over the names is cheaper than hashing this one.
        if !has_any(headers, &[SURROGATE_CONTROL]) {
            return d;
        }
        // A directive with a `;target` is for the surrogate it names, not for one
        // without a name.
        directives_of(headers, &SURROGATE_CONTROL, |(name, value)| {
            if value.as_deref().is_some_and(|v| v.contains(';')) || name.contains(';') {
                return;
            }
            match &*name {
                "max-age" if d.surrogate_max_age.is_none() => {
                    d.surrogate_max_age = Some(Delta::parse(value.as_deref()));
                }
                "no-store" => d.surrogate_no_store = true,
                _ => {}
            }
        });
        d
    }
}

impl RequestDirectives {
    pub(crate) fn parse(headers: &HeaderMap) -> Self {
        let mut d = Self::default();
        // Most requests carry neither field: one pass over the names says so for less
        // than the three lookups below (callgrind: 430 -> about 60 instructions).
        if !has_any(headers, &[header::CACHE_CONTROL, header::PRAGMA]) {
            return d;
        }
        directives_of(headers, &header::CACHE_CONTROL, |(name, value)| {
            let first = |slot: &mut Option<Delta>| first_delta(slot, value.as_deref());
            match &*name {
                "no-cache" => d.no_cache = true,
                "no-store" => d.no_store = true,
                "max-age" => first(&mut d.max_age),
                "min-fresh" => first(&mut d.min_fresh),
                "max-stale" if d.max_stale.is_none() => {
                    d.max_stale = Some(value.as_deref().map(|v| Delta::parse(Some(v))));
                }
                "only-if-cached" => d.only_if_cached = true,
                "stale-if-error" => first(&mut d.stale_if_error),
                _ => {}
            }
        });
        if !headers.contains_key(header::CACHE_CONTROL) {
            d.no_cache = headers
                .get_all(header::PRAGMA)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| {
                    v.split(',')
                        .any(|p| p.trim().eq_ignore_ascii_case("no-cache"))
                });
        }
        d
    }

    /// Whether the request lets a stale response be served to it when the cache would
    /// (`stale-while-revalidate`, `stale-if-error`): not when it asks for a validated or
    /// a young enough one.
    pub(crate) fn accepts_stale(&self) -> bool {
        !self.no_cache && self.max_age.is_none() && self.min_fresh.is_none()
    }
}

/// Sets `slot` from `value` unless an earlier occurrence of the directive set it.
fn first_delta(slot: &mut Option<Delta>, value: Option<&str>) {
    if slot.is_none() {
        *slot = Some(Delta::parse(value));
    }
}

/// The field names of a `no-cache="..."` or `private="..."` value, lower-cased.
fn field_names(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_ascii_lowercase)
}

/// A directive's name and value, borrowed from the field where they are written as they
/// are read (lower case, no quotes): most are, and a miss then allocates nothing here.
type Directive<'a> = (Cow<'a, str>, Option<Cow<'a, str>>);

/// Every directive of the `name` fields, in order, to `each`: lower-cased names,
/// unquoted values. Handed over one by one rather than collected (a `Vec` a head).
fn directives_of<'a>(
    headers: &'a HeaderMap,
    name: &header::HeaderName,
    mut each: impl FnMut(Directive<'a>),
) {
    for field in headers.get_all(name) {
        parse_field(field, &mut each);
    }
}

/// `bytes` as text, lower-cased; borrowed when it already is.
fn lowered(bytes: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(bytes) {
        Cow::Borrowed(text) if !text.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Borrowed(text),
        text => Cow::Owned(text.to_ascii_lowercase()),
    }
}

/// `bytes` without the spaces and tabs at its end.
fn trim_end(bytes: &[u8]) -> &[u8] {
    let spaces = bytes
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    &bytes[..bytes.len() - spaces]
}

fn parse_field<'a>(field: &'a HeaderValue, each: &mut impl FnMut(Directive<'a>)) {
    let bytes = field.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        // Skip separators and whitespace before a name.
        while at < bytes.len() && matches!(bytes[at], b',' | b' ' | b'\t') {
            at += 1;
        }
        let start = at;
        while at < bytes.len() && !matches!(bytes[at], b',' | b'=') {
            at += 1;
        }
        let name = lowered(
            &bytes[start
                ..start
                    + bytes[start..at]
                        .iter()
                        .rposition(|b| !matches!(b, b' ' | b'\t'))
                        .map_or(0, |last| last + 1)],
        );
        // `max-age =5`: a space before `=` makes it no directive this cache knows.
        let spaced = bytes[start..at]
            .last()
            .is_some_and(|b| matches!(b, b' ' | b'\t'));
        let mut value = None;
        if at < bytes.len() && bytes[at] == b'=' {
            at += 1;
            if at < bytes.len() && bytes[at] == b'"' {
                at += 1;
                let mut text = Vec::new();
                while at < bytes.len() && bytes[at] != b'"' {
                    if bytes[at] == b'\\' && at + 1 < bytes.len() {
                        at += 1;
                    }
                    text.push(bytes[at]);
                    at += 1;
                }
                at += 1;
                value = Some(Cow::Owned(String::from_utf8_lossy(&text).into_owned()));
                while at < bytes.len() && bytes[at] != b',' {
                    at += 1;
                }
            } else {
                let start = at;
                while at < bytes.len() && bytes[at] != b',' {
                    at += 1;
                }
                value = Some(String::from_utf8_lossy(trim_end(&bytes[start..at])));
            }
        }
        if !name.is_empty() && !spaced {
            each((name, value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(fields: &[&str]) -> ResponseDirectives {
        let mut h = HeaderMap::new();
        for f in fields {
            h.append(header::CACHE_CONTROL, HeaderValue::from_str(f).unwrap());
        }
        ResponseDirectives::parse(&h)
    }

    #[test]
    fn names_are_case_insensitive_and_values_take_their_leading_digits() {
        let d = response(&["Max-Age=5.0, NO-CACHE, s-maxage=100a"]);
        assert_eq!(d.max_age, Some(Delta::Secs(5)));
        assert_eq!(d.s_maxage, Some(Delta::Secs(100)));
        assert!(d.no_cache);
        assert_eq!(response(&["max-age=a100"]).max_age, Some(Delta::Invalid));
        assert_eq!(response(&["max-age= 100"]).max_age, Some(Delta::Invalid));
        assert_eq!(response(&["max-age =100"]).max_age, None);
        assert_eq!(response(&["max-age=\"60\""]).max_age, Some(Delta::Secs(60)));
        assert_eq!(
            response(&["max-age=99999999999999999999"]).max_age,
            Some(Delta::Secs(Delta::MAX))
        );
    }

    #[test]
    fn the_first_of_two_values_counts_across_field_lines() {
        assert_eq!(
            response(&["max-age=1", "max-age=3600"]).max_age,
            Some(Delta::Secs(1))
        );
    }

    #[test]
    fn quoted_field_lists_are_not_split_at_their_commas() {
        let d = response(&["no-cache=\"set-cookie, X-Foo\", private=\"a\", max-age=3"]);
        assert!(!d.no_cache);
        assert_eq!(d.no_cache_fields, ["set-cookie", "x-foo"]);
        assert_eq!(d.private_fields, ["a"]);
        assert!(!d.private);
        assert_eq!(d.max_age, Some(Delta::Secs(3)));
    }

    #[test]
    fn pragma_no_cache_counts_only_without_cache_control() {
        let mut h = HeaderMap::new();
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        assert!(RequestDirectives::parse(&h).no_cache);
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=10"),
        );
        let d = RequestDirectives::parse(&h);
        assert!(!d.no_cache);
        assert!(!d.accepts_stale());
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("max-stale"));
        let d = RequestDirectives::parse(&h);
        assert_eq!(d.max_stale, Some(None));
        assert!(d.accepts_stale());
    }
}
