//! Precompressed sidecars chosen by `Accept-Encoding` (RFC 9110 §12.5.3).
//!
//! ```text
//! server preference (config `precompressed`): br, zstd, gzip
//!
//! Accept-Encoding: gzip, br;q=0.8, *;q=0.1
//!   -> open x.gz, else x.br, else x.zst, else x itself (identity is acceptable)
//! Accept-Encoding: br, identity;q=0
//!   -> open x.br, else 406 (zstd and gzip are not listed and there is no `*`)
//! no Accept-Encoding
//!   -> x itself
//! ```
//!
//! `negotiate` only ranks; it never touches the file system. The caller opens the sidecars
//! in the order given, keeps the first handle that opens (no stat-then-open window: the
//! bytes served come from the handle whose metadata went into the headers), and falls back
//! to the file itself when identity is acceptable, or answers 406 when it is not.
//!
//! Choices where the RFC leaves room:
//!
//! - **No `Accept-Encoding` header means identity only.** The RFC reads a missing header as
//!   "any coding is acceptable", but clients that can decode say so, and a compressed body
//!   sent to one that did not ask (a script, a health check, a cache keyed without `Vary`)
//!   is a broken response, while an uncompressed one only costs bytes. An empty header value
//!   means the same (the RFC agrees: no coding wanted).
//! - **A coding listed more than once takes its lowest q-value.** A client that ever said
//!   `q=0` for a coding may not be able to decode it; serving it anyway is the one outcome
//!   that breaks the page.
//! - **Malformed elements are skipped, not the whole header**: a bad q-value (`q=2`,
//!   `q=0.1234`, `q=.5`), a parameter other than `q`, a token with characters a token cannot
//!   have. Every other element still counts.
//! - **Identity outranking a coding drops the coding.** With `gzip;q=0.5, identity` the
//!   client prefers the file as it is, so the gzip sidecar is not offered. When identity
//!   is not listed (the usual `gzip, deflate, br`), it ranks below every acceptable coding.

use std::fmt;
use std::str::FromStr;

use http::HeaderValue;
use scb_core::http1::trim_ows;

/// A content coding the server can have a precompressed sidecar for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Coding {
    /// Brotli: `x.br`, `Content-Encoding: br`.
    Br,
    /// Zstandard: `x.zst`, `Content-Encoding: zstd`.
    Zstd,
    /// Gzip: `x.gz`, `Content-Encoding: gzip`.
    Gzip,
}

impl Coding {
    /// The server preference when the configuration does not give one: brotli compresses
    /// web text smallest, zstd decodes fastest, gzip is what every client has.
    pub(crate) const DEFAULT_ORDER: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// What is appended to a file's name to find this coding's sidecar (`.br`, `.zst`, `.gz`).
    pub(crate) const fn suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }

    /// The registered content-coding token (`br`, `zstd`, `gzip`).
    pub(crate) const fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The `Content-Encoding` value for a response served from this coding's sidecar. Built
    /// from a static string: no allocation.
    pub(crate) const fn content_encoding(self) -> HeaderValue {
        HeaderValue::from_static(self.token())
    }

    const fn index(self) -> usize {
        match self {
            Coding::Br => 0,
            Coding::Zstd => 1,
            Coding::Gzip => 2,
        }
    }
}

impl fmt::Display for Coding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token())
    }
}

/// A configuration name that is not a coding the server has sidecars for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown precompressed coding `{0}` (expected br, zstd or gzip)")]
pub struct UnknownCoding(pub(crate) String);

impl UnknownCoding {
    /// The name as configured.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl FromStr for Coding {
    type Err = UnknownCoding;

    /// Parses a configuration name: `br`, `zstd` or `zst`, `gzip` or `gz`, in any case.
    ///
    /// # Errors
    ///
    /// [`UnknownCoding`] for any other name.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        const NAMES: [(&str, Coding); 5] = [
            ("br", Coding::Br),
            ("zstd", Coding::Zstd),
            ("zst", Coding::Zstd),
            ("gzip", Coding::Gzip),
            ("gz", Coding::Gzip),
        ];
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, coding)| coding)
            .ok_or_else(|| UnknownCoding(name.to_owned()))
    }
}

/// The outcome of negotiation: which sidecars to try, in order, and whether the file itself
/// may be sent when none of them exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidates {
    codings: [Coding; 3],
    len: usize,
    identity_acceptable: bool,
}

impl Candidates {
    /// No sidecar; the file as it is.
    pub(crate) const IDENTITY_ONLY: Candidates = Candidates {
        codings: Coding::DEFAULT_ORDER,
        len: 0,
        identity_acceptable: true,
    };

    /// The sidecar codings to try, best first. Each appears at most once, and only codings
    /// from the server's preference list appear.
    pub(crate) fn codings(&self) -> &[Coding] {
        &self.codings[..self.len]
    }

    /// Whether the file itself (no content coding) may be sent when no sidecar in
    /// [`codings`](Self::codings) exists. When false and none exists, the answer is 406.
    pub(crate) fn identity_acceptable(&self) -> bool {
        self.identity_acceptable
    }
}

/// Ranks the sidecars in `preferred` for a request's `Accept-Encoding` value.
///
/// `None` (no header) gives [`Candidates::IDENTITY_ONLY`]. Otherwise codings with q > 0 come
/// highest q first, ties in the order of `preferred` (duplicates there are ignored).
/// A request may carry the header in several field lines; [`negotiate_all`] takes them all.
#[cfg(test)]
pub(crate) fn negotiate(accept: Option<&HeaderValue>, preferred: &[Coding]) -> Candidates {
    negotiate_all(accept, preferred)
}

/// `negotiate` over every `Accept-Encoding` field line of a request (e.g.
/// `headers.get_all(ACCEPT_ENCODING)`), which together mean their comma-joined values.
/// No line at all means no header.
pub(crate) fn negotiate_all<'a>(
    values: impl IntoIterator<Item = &'a HeaderValue>,
    preferred: &[Coding],
) -> Candidates {
    let mut weights = Weights::default();
    let mut present = false;
    for value in values {
        present = true;
        for (listed, q) in elements(value.as_bytes()) {
            weights.add(listed, q);
        }
    }
    if !present {
        return Candidates::IDENTITY_ONLY;
    }
    weights.rank(preferred)
}

/// A q-value in thousandths: `0..=1000`.
type Q = u16;

const Q_MAX: Q = 1000;

/// What an `Accept-Encoding` element names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Listed {
    Coding(Coding),
    Identity,
    Any,
    /// A coding the server has no sidecars for (`deflate`, `compress`, ...).
    Other,
}

impl Listed {
    fn from_token(token: &[u8]) -> Listed {
        const TOKENS: [(&[u8], Listed); 6] = [
            (b"br", Listed::Coding(Coding::Br)),
            (b"zstd", Listed::Coding(Coding::Zstd)),
            (b"gzip", Listed::Coding(Coding::Gzip)),
            // RFC 9110 §8.4.1.3: recipients should treat x-gzip as gzip.
            (b"x-gzip", Listed::Coding(Coding::Gzip)),
            (b"identity", Listed::Identity),
            (b"*", Listed::Any),
        ];
        TOKENS
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(token))
            .map_or(Listed::Other, |&(_, listed)| listed)
    }
}

/// The q-values a header gave, each the lowest seen for its name.
#[derive(Debug, Default)]
struct Weights {
    codings: [Option<Q>; 3],
    identity: Option<Q>,
    any: Option<Q>,
}

impl Weights {
    fn add(&mut self, listed: Listed, q: Q) {
        let slot = match listed {
            Listed::Coding(c) => &mut self.codings[c.index()],
            Listed::Identity => &mut self.identity,
            Listed::Any => &mut self.any,
            Listed::Other => return,
        };
        *slot = Some(slot.map_or(q, |old| old.min(q)));
    }

    /// A coding's weight: its own entry, else `*`'s, else not acceptable.
    fn coding(&self, coding: Coding) -> Q {
        self.codings[coding.index()].or(self.any).unwrap_or(0)
    }

    fn rank(&self, preferred: &[Coding]) -> Candidates {
        // Identity is acceptable unless `identity;q=0`, or `*;q=0` with no identity entry.
        // Its weight, when the header gives one, is a floor: a coding the client likes less
        // than the unencoded file is not worth offering.
        let identity = self.identity.or(self.any);
        let identity_acceptable = identity != Some(0);
        let floor = identity.filter(|&q| q > 0).unwrap_or(1);

        let mut ranked = [(Coding::Br, 0); 3];
        let mut len = 0;
        for &coding in preferred {
            let q = self.coding(coding);
            if q >= floor && !ranked[..len].iter().any(|&(c, _)| c == coding) {
                ranked[len] = (coding, q);
                len += 1;
            }
        }
        // Stable, so equal weights keep the server's order; at most three elements, so the
        // standard library sorts them in place without allocating.
        ranked[..len].sort_by_key(|&(_, q)| std::cmp::Reverse(q));

        let mut codings = Coding::DEFAULT_ORDER;
        for (slot, &(coding, _)) in codings.iter_mut().zip(&ranked[..len]) {
            *slot = coding;
        }
        Candidates {
            codings,
            len,
            identity_acceptable,
        }
    }
}

/// The well-formed elements of an `Accept-Encoding` value, in order; empty and malformed
/// elements are skipped.
fn elements(value: &[u8]) -> impl Iterator<Item = (Listed, Q)> + '_ {
    value.split(|&b| b == b',').filter_map(element)
}

/// `codings [ OWS ";" OWS "q=" qvalue ]`, surrounded by OWS.
fn element(raw: &[u8]) -> Option<(Listed, Q)> {
    let mut parts = raw.split(|&b| b == b';');
    let token = trim_ows(parts.next()?);
    if token.is_empty() || !token.iter().all(|&b| is_tchar(b)) {
        return None;
    }
    let q = match parts.next() {
        None => Q_MAX,
        Some(param) => {
            // Parameter names are case-insensitive (RFC 9110 §5.6.6); no space around `=`.
            let param = trim_ows(param);
            let value = param
                .strip_prefix(b"q=")
                .or_else(|| param.strip_prefix(b"Q="))?;
            qvalue(value)?
        }
    };
    if parts.next().is_some() {
        return None;
    }
    Some((Listed::from_token(token), q))
}

/// `( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn qvalue(raw: &[u8]) -> Option<Q> {
    let (&int, rest) = raw.split_first()?;
    let frac = match rest {
        [] => &[][..],
        [b'.', frac @ ..] if frac.len() <= 3 => frac,
        _ => return None,
    };
    let mut thousandths: Q = 0;
    for (&digit, scale) in frac.iter().zip([100, 10, 1]) {
        if !digit.is_ascii_digit() {
            return None;
        }
        thousandths += Q::from(digit - b'0') * scale;
    }
    match int {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(Q_MAX),
        _ => None,
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::Coding::{Br, Gzip, Zstd};
    use super::*;

    const ALL: &[Coding] = &Coding::DEFAULT_ORDER;
    const NONE: [Coding; 0] = [];

    fn negotiate_str(accept: &str, preferred: &[Coding]) -> Candidates {
        negotiate(Some(&HeaderValue::from_str(accept).unwrap()), preferred)
    }

    fn order(accept: &str) -> Vec<Coding> {
        negotiate_str(accept, ALL).codings().to_vec()
    }

    fn identity_ok(accept: &str) -> bool {
        negotiate_str(accept, ALL).identity_acceptable()
    }

    #[test]
    fn coding_names_suffixes_and_tokens() {
        assert_eq!([Br, Zstd, Gzip].map(Coding::suffix), [".br", ".zst", ".gz"]);
        assert_eq!([Br, Zstd, Gzip].map(Coding::token), ["br", "zstd", "gzip"]);
        assert_eq!(Gzip.content_encoding(), "gzip");
        assert_eq!(Zstd.to_string(), "zstd");
    }

    #[test]
    fn config_names_parse_with_aliases_in_any_case() {
        for (name, coding) in [
            ("br", Br),
            ("BR", Br),
            ("zstd", Zstd),
            ("zst", Zstd),
            ("gzip", Gzip),
            ("gz", Gzip),
            ("GZip", Gzip),
        ] {
            assert_eq!(name.parse::<Coding>(), Ok(coding), "{name}");
        }
    }

    #[test]
    fn unknown_config_name_is_an_error_naming_it() {
        let err = "deflate".parse::<Coding>().unwrap_err();
        assert_eq!(err, UnknownCoding("deflate".to_owned()));
        assert_eq!(
            err.to_string(),
            "unknown precompressed coding `deflate` (expected br, zstd or gzip)"
        );
        assert!("".parse::<Coding>().is_err());
        assert!("x-gzip".parse::<Coding>().is_err());
    }

    #[test]
    fn no_header_means_identity_only() {
        assert_eq!(negotiate(None, ALL), Candidates::IDENTITY_ONLY);
        assert!(Candidates::IDENTITY_ONLY.codings().is_empty());
        assert!(Candidates::IDENTITY_ONLY.identity_acceptable());
        assert_eq!(
            negotiate_all(std::iter::empty(), ALL),
            Candidates::IDENTITY_ONLY
        );
    }

    #[test]
    fn empty_header_means_identity_only() {
        for accept in ["", " ", ",", " , ,\t"] {
            assert_eq!(
                negotiate_str(accept, ALL),
                Candidates::IDENTITY_ONLY,
                "{accept:?}"
            );
        }
    }

    #[test]
    fn equal_weights_follow_the_server_preference() {
        assert_eq!(order("gzip, deflate, br, zstd"), [Br, Zstd, Gzip]);
        assert_eq!(
            negotiate_str("gzip, br, zstd", &[Gzip, Zstd, Br]).codings(),
            [Gzip, Zstd, Br]
        );
        assert!(identity_ok("gzip, deflate, br, zstd"));
    }

    #[test]
    fn higher_q_comes_first() {
        assert_eq!(order("br;q=0.5, gzip;q=0.9, zstd;q=0.7"), [Gzip, Zstd, Br]);
        assert_eq!(order("br;q=0.001, gzip"), [Gzip, Br]);
        assert_eq!(order("br;q=0.999, gzip;q=1"), [Gzip, Br]);
    }

    #[test]
    fn only_configured_codings_are_offered() {
        assert_eq!(negotiate_str("br, zstd, gzip", &[Gzip]).codings(), [Gzip]);
        assert!(negotiate_str("br, zstd, gzip", &[]).codings().is_empty());
    }

    #[test]
    fn duplicate_preferences_are_ignored() {
        assert_eq!(
            negotiate_str("br, gzip", &[Gzip, Br, Gzip, Br]).codings(),
            [Gzip, Br]
        );
    }

    #[test]
    fn unlisted_codings_are_not_acceptable() {
        assert_eq!(order("gzip"), [Gzip]);
        assert_eq!(order("deflate"), NONE);
        assert!(identity_ok("deflate"));
    }

    #[test]
    fn q_zero_excludes_a_coding() {
        assert_eq!(order("br;q=0, gzip"), [Gzip]);
        assert_eq!(order("br;q=0.000, gzip;q=0.0, zstd;q=0."), NONE);
        assert_eq!(order("*, br;q=0"), [Zstd, Gzip]);
    }

    #[test]
    fn a_coding_listed_twice_takes_its_lowest_q() {
        assert_eq!(order("gzip, gzip;q=0"), NONE);
        assert_eq!(order("gzip;q=0, gzip"), NONE);
        assert_eq!(order("x-gzip;q=0, gzip"), NONE);
        assert_eq!(order("br;q=0.2, gzip;q=0.5, br"), [Gzip, Br]);
        assert_eq!(order("*, *;q=0"), NONE);
    }

    #[test]
    fn star_matches_codings_not_listed() {
        assert_eq!(order("*"), [Br, Zstd, Gzip]);
        assert_eq!(order("gzip, *;q=0.5"), [Gzip, Br, Zstd]);
        assert_eq!(order("*;q=0.5, zstd;q=0.8"), [Zstd, Br, Gzip]);
        assert!(identity_ok("*"));
    }

    #[test]
    fn star_q_zero_refuses_everything_not_listed_including_identity() {
        let c = negotiate_str("*;q=0", ALL);
        assert_eq!(c.codings(), NONE);
        assert!(!c.identity_acceptable());

        let c = negotiate_str("gzip, *;q=0", ALL);
        assert_eq!(c.codings(), [Gzip]);
        assert!(!c.identity_acceptable());
    }

    #[test]
    fn an_explicit_identity_entry_overrides_star() {
        let c = negotiate_str("*;q=0, identity", ALL);
        assert_eq!(c.codings(), NONE);
        assert!(c.identity_acceptable());

        let c = negotiate_str("br, *;q=0, identity;q=0.5", ALL);
        assert_eq!(c.codings(), [Br]);
        assert!(c.identity_acceptable());
    }

    #[test]
    fn identity_q_zero_makes_identity_unacceptable() {
        let c = negotiate_str("identity;q=0", ALL);
        assert_eq!(c.codings(), NONE);
        assert!(!c.identity_acceptable());

        let c = negotiate_str("gzip, br;q=0.5, identity;q=0", ALL);
        assert_eq!(c.codings(), [Gzip, Br]);
        assert!(!c.identity_acceptable());
    }

    #[test]
    fn codings_the_client_likes_less_than_identity_are_dropped() {
        let c = negotiate_str("gzip;q=0.5, br, identity;q=0.8", ALL);
        assert_eq!(c.codings(), [Br]);
        assert!(c.identity_acceptable());
        // A tie with identity keeps the coding: smaller is better for the same preference.
        assert_eq!(order("gzip;q=0.5, identity;q=0.5"), [Gzip]);
        // Through `*`: identity weighs what `*` says, and so do the unlisted codings.
        assert_eq!(order("*;q=0.5, gzip;q=0.1"), [Br, Zstd]);
    }

    #[test]
    fn tokens_are_case_insensitive() {
        assert_eq!(order("GZIP, Br, ZsTd"), [Br, Zstd, Gzip]);
        assert_eq!(order("X-GZip"), [Gzip]);
        assert!(!identity_ok("IDENTITY;Q=0"));
    }

    #[test]
    fn x_gzip_is_gzip() {
        assert_eq!(order("x-gzip"), [Gzip]);
        assert_eq!(order("x-gzip;q=0.5, br"), [Br, Gzip]);
    }

    #[test]
    fn optional_whitespace_is_allowed_around_elements_and_semicolons() {
        assert_eq!(
            order(" gzip ;  q=0.5 ,\tbr\t;\tQ=1 ,, zstd;q=0.1 "),
            [Br, Gzip, Zstd]
        );
    }

    #[test]
    fn q_values_have_at_most_three_decimals_and_stay_in_range() {
        for (q, want) in [
            ("0", Some(0)),
            ("0.", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.123", Some(123)),
            ("0.999", Some(999)),
            ("1", Some(1000)),
            ("1.", Some(1000)),
            ("1.000", Some(1000)),
            ("1.001", None),
            ("0.1234", None),
            ("2", None),
            (".5", None),
            ("", None),
            ("0.5x", None),
            ("-0", None),
            ("1.0000", None),
            ("00.5", None),
            (" 0.5", None),
        ] {
            assert_eq!(qvalue(q.as_bytes()), want, "{q:?}");
        }
    }

    #[test]
    fn malformed_elements_are_skipped_and_the_rest_still_count() {
        for junk in [
            "gzip;q=2",
            "gzip;q=0.1234",
            "gzip;q=.5",
            "gzip;q=",
            "gzip;q",
            "gzip;",
            "gzip;q=0.5;q=0.5",
            "gzip;level=9",
            "gzip;q = 0.5",
            "gzip q=0",
            "\"gzip\"",
            "gz(ip",
            ";q=0.5",
        ] {
            let accept = format!("{junk}, br;q=0.5");
            assert_eq!(order(&accept), [Br], "{junk:?}");
        }
    }

    #[test]
    fn a_malformed_q_zero_does_not_exclude() {
        // Skipped elements say nothing: gzip here is unlisted, so `*` decides.
        assert_eq!(order("gzip;q=0.0000, *"), [Br, Zstd, Gzip]);
    }

    #[test]
    fn non_ascii_bytes_are_skipped() {
        let value = HeaderValue::from_bytes(b"gz\xe9ip, br").unwrap();
        assert_eq!(negotiate(Some(&value), ALL).codings(), [Br]);
    }

    #[test]
    fn several_field_lines_combine() {
        let lines = [
            HeaderValue::from_static("gzip;q=0.5"),
            HeaderValue::from_static("br, identity;q=0"),
        ];
        let c = negotiate_all(&lines, ALL);
        assert_eq!(c.codings(), [Br, Gzip]);
        assert!(!c.identity_acceptable());
        // A q=0 in a later line still excludes.
        let lines = [
            HeaderValue::from_static("gzip"),
            HeaderValue::from_static("gzip;q=0"),
        ];
        assert_eq!(negotiate_all(&lines, ALL).codings(), NONE);
    }

    #[test]
    fn typical_browser_headers() {
        assert_eq!(order("gzip, deflate, br, zstd"), [Br, Zstd, Gzip]);
        assert_eq!(order("gzip, deflate, br"), [Br, Gzip]);
        assert_eq!(order("gzip, deflate"), [Gzip]);
        assert_eq!(order("identity"), NONE);
        assert!(identity_ok("identity"));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// Names an element can carry, with their meaning in the reference model.
    const NAMES: [(&str, Listed); 9] = [
        ("br", Listed::Coding(Coding::Br)),
        ("zstd", Listed::Coding(Coding::Zstd)),
        ("gzip", Listed::Coding(Coding::Gzip)),
        ("x-gzip", Listed::Coding(Coding::Gzip)),
        ("identity", Listed::Identity),
        ("*", Listed::Any),
        ("deflate", Listed::Other),
        ("compress", Listed::Other),
        ("zst", Listed::Other),
    ];

    /// Elements that are malformed whatever they name, so they must count for nothing.
    const JUNK: [&str; 8] = [
        "gzip;q=2",
        "br;q=0.1234",
        "zstd;q=",
        "identity;q=.5",
        "*;q=0;x=1",
        "g zip",
        ";q=0",
        "br;level=0",
    ];

    #[derive(Clone, Debug)]
    enum Element {
        Valid {
            name: usize,
            upper: bool,
            q: Option<Q>,
            long_q: bool,
        },
        Junk(usize),
    }

    impl Element {
        fn render(&self, ows: &str) -> String {
            match *self {
                Element::Junk(i) => format!("{ows}{}{ows}", JUNK[i]),
                Element::Valid {
                    name,
                    upper,
                    q,
                    long_q,
                } => {
                    let name = NAMES[name].0;
                    let name = if upper {
                        name.to_ascii_uppercase()
                    } else {
                        name.to_owned()
                    };
                    let q = match q {
                        None => String::new(),
                        Some(Q_MAX) if long_q => ";q=1.000".to_owned(),
                        Some(Q_MAX) => ";q=1".to_owned(),
                        Some(0) if !long_q => ";q=0".to_owned(),
                        Some(q) => format!("{ows};{ows}q=0.{q:03}"),
                    };
                    format!("{ows}{name}{q}{ows}")
                }
            }
        }
    }

    fn element() -> impl Strategy<Value = Element> {
        prop_oneof![
            4 => (0..NAMES.len(), any::<bool>(), proptest::option::of(prop_oneof![Just(0), Just(Q_MAX), 0..=Q_MAX]), any::<bool>())
                .prop_map(|(name, upper, q, long_q)| Element::Valid { name, upper, q, long_q }),
            1 => (0..JUNK.len()).prop_map(Element::Junk),
        ]
    }

    fn preferred() -> impl Strategy<Value = Vec<Coding>> {
        proptest::sample::subsequence(Coding::DEFAULT_ORDER.to_vec(), 0..=3).prop_shuffle()
    }

    /// The reference: each name's lowest q among the well-formed elements.
    fn model(elements: &[Element]) -> Weights {
        let mut w = Weights::default();
        for e in elements {
            if let Element::Valid { name, q, .. } = *e {
                w.add(NAMES[name].1, q.unwrap_or(Q_MAX));
            }
        }
        w
    }

    fn header(elements: &[Element], ows: &str) -> HeaderValue {
        let text: Vec<String> = elements.iter().map(|e| e.render(ows)).collect();
        HeaderValue::from_str(&text.join(",")).unwrap()
    }

    proptest! {
        /// Whatever bytes arrive, parsing and ranking return, and the result is well-formed.
        #[test]
        fn never_panics_on_arbitrary_bytes(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = elements(&raw).count();
            if let Ok(value) = HeaderValue::from_bytes(&raw) {
                let c = negotiate(Some(&value), &Coding::DEFAULT_ORDER);
                prop_assert!(c.codings().len() <= 3);
            }
        }

        /// Near-miss text (the characters the grammar uses) never panics either.
        #[test]
        fn never_panics_on_grammar_like_text(text in "[a-zA-Z*;=., \t0-9-]{0,40}") {
            let value = HeaderValue::from_str(&text).unwrap();
            let c = negotiate(Some(&value), &Coding::DEFAULT_ORDER);
            prop_assert!(c.codings().len() <= 3);
        }

        /// No coding with q=0 (its own, or `*`'s when it is not listed) is ever offered,
        /// and identity is refused exactly when the RFC says so.
        #[test]
        fn q_zero_codings_never_appear(
            elements in proptest::collection::vec(element(), 0..8),
            preferred in preferred(),
            ows in prop_oneof![Just(""), Just(" "), Just("\t ")],
        ) {
            let model = model(&elements);
            let c = negotiate(Some(&header(&elements, ows)), &preferred);
            for &coding in c.codings() {
                prop_assert!(model.coding(coding) > 0, "{coding} offered with q=0");
                prop_assert!(preferred.contains(&coding));
            }
            let identity = model.identity.or(model.any);
            prop_assert_eq!(c.identity_acceptable(), identity != Some(0));
        }

        /// Offered codings come highest q first, ties in the server's order, none twice,
        /// none below an explicitly weighted identity, and none acceptable left out.
        #[test]
        fn order_respects_q_then_preference(
            elements in proptest::collection::vec(element(), 0..8),
            preferred in preferred(),
        ) {
            let model = model(&elements);
            let c = negotiate(Some(&header(&elements, "")), &preferred);
            let rank = |coding: Coding| preferred.iter().position(|&p| p == coding).unwrap();
            for pair in c.codings().windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let (qa, qb) = (model.coding(a), model.coding(b));
                prop_assert!(qa > qb || (qa == qb && rank(a) < rank(b)), "{a}={qa} before {b}={qb}");
            }
            let floor = model.identity.or(model.any).filter(|&q| q > 0).unwrap_or(1);
            for &coding in &preferred {
                let offered = c.codings().contains(&coding);
                prop_assert_eq!(offered, model.coding(coding) >= floor, "{}", coding);
            }
        }

        /// Splitting a header into several field lines changes nothing.
        #[test]
        fn field_lines_split_anywhere_mean_the_same(
            elements in proptest::collection::vec(element(), 1..8),
            split in any::<proptest::sample::Index>(),
        ) {
            let at = split.index(elements.len());
            let whole = negotiate(Some(&header(&elements, " ")), &Coding::DEFAULT_ORDER);
            let lines = [header(&elements[..at], " "), header(&elements[at..], " ")];
            prop_assert_eq!(negotiate_all(&lines, &Coding::DEFAULT_ORDER), whole);
        }
    }
}
