//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
//! `tracestate` fields a request carries from the client's trace into this server's, and
//! on to the upstream's.
//!
//! [`TraceContext`] is what a request is part of: the trace's id, the span it was made
//! in, and whether the trace is sampled. Parsing is strict, as the recommendation says:
//! a field that is not exactly right (a wrong length, upper-case hex, an all-zero id, the
//! version `ff`) is ignored, and the request starts a trace of its own; it is never an
//! error the client sees.
//!
//! ```
//! use scb_core::trace_context::TraceContext;
//!
//! let parent = TraceContext::parse(
//!     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
//!     Some("congo=t61rcWkgMzE"),
//! )
//! .unwrap();
//! assert!(parent.sampled());
//! assert_eq!(parent.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
//! // This server's span, in the same trace, as the upstream is told of it.
//! let child = parent.child([1, 2, 3, 4, 5, 6, 7, 8]);
//! assert_eq!(
//!     child.traceparent(),
//!     "00-0af7651916cd43dd8448eb211c80319c-0102030405060708-01"
//! );
//! assert_eq!(child.tracestate(), Some("congo=t61rcWkgMzE"));
//! assert!(TraceContext::parse("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", None).is_none());
//! ```

use std::fmt::Write as _;
use std::sync::Arc;

/// The trace a request is part of: see the [module documentation](self). Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    /// Vendors' own entries, passed on as received (at most 512 bytes, else dropped).
    tracestate: Option<Arc<str>>,
}

/// `traceparent` (W3C Trace Context).
pub const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
/// `tracestate` (W3C Trace Context).
pub const TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// `traceparent`'s sampled flag.
const SAMPLED: u8 = 0x01;
/// The longest `tracestate` passed on: the recommendation's 32 entries fit well under it.
const MAX_TRACESTATE: usize = 512;

impl TraceContext {
    /// A new trace: `trace_id` and `span_id` (this server's span), sampled or not.
    /// `None` when either id is all zeros (invalid in W3C Trace Context).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], sampled: bool) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self {
            trace_id,
            span_id,
            flags: if sampled { SAMPLED } else { 0 },
            tracestate: None,
        })
    }

    /// The context a request's `traceparent` (and `tracestate`, if any) names: the
    /// client's span, whose child this server's span is. `None` for anything that is not a
    /// valid version-00 field (or a later version's first four parts, as the
    /// recommendation allows).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let bytes = traceparent.as_bytes();
        // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
        if bytes.len() < 55 {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        if version == 0xff || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        // Version 00 is exactly 55 bytes; a later version may add `-...` after them.
        if (version == 0 && bytes.len() != 55) || (bytes.len() > 55 && bytes[55] != b'-') {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&bytes[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, b) in span_id.iter_mut().enumerate() {
            *b = hex_byte(&bytes[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&bytes[53..55])?;
        let mut context = Self::new(trace_id, span_id, flags & SAMPLED != 0)?;
        context.tracestate = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE && valid_tracestate(s))
            .map(Arc::from);
        Some(context)
    }

    /// The context of a span made in this one's trace: `span_id` is the new span, and the
    /// trace, its sampling and `tracestate` carry over.
    #[must_use]
    pub fn child(&self, span_id: [u8; 8]) -> Self {
        Self {
            span_id,
            ..self.clone()
        }
    }

    /// The trace's id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The span's id.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// Whether the trace is sampled (recorded).
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The trace's id as 32 lower-case hex digits (what logs and error pages show).
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span's id as 16 lower-case hex digits.
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }

    /// The `traceparent` value naming this span, ready for a header: what
    /// [`traceparent`](Self::traceparent) says, written without a `String` (this runs on
    /// every request a server propagates its trace for).
    pub fn traceparent_header(&self) -> http::HeaderValue {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 55];
        out[..3].copy_from_slice(b"00-");
        let mut at = 3;
        for byte in &self.trace_id {
            out[at] = DIGITS[usize::from(byte >> 4)];
            out[at + 1] = DIGITS[usize::from(byte & 0xf)];
            at += 2;
        }
        out[at] = b'-';
        at += 1;
        for byte in &self.span_id {
            out[at] = DIGITS[usize::from(byte >> 4)];
            out[at + 1] = DIGITS[usize::from(byte & 0xf)];
            at += 2;
        }
        out[at..].copy_from_slice(if self.sampled() { b"-01" } else { b"-00" });
        http::HeaderValue::from_bytes(&out).expect("hex digits and dashes are a valid field value")
    }

    /// Tells a request's recipient this span: `traceparent` names it, `tracestate` is
    /// the vendors' entries carried over (removed when there are none, so a client's
    /// `tracestate` never goes on without the `traceparent` it belonged to).
    pub fn write_fields(&self, headers: &mut http::HeaderMap) {
        headers.insert(TRACEPARENT, self.traceparent_header());
        match self
            .tracestate
            .as_deref()
            .and_then(|s| http::HeaderValue::from_str(s).ok())
        {
            Some(state) => {
                headers.insert(TRACESTATE, state);
            }
            None => {
                headers.remove(TRACESTATE);
            }
        }
    }

    /// The `traceparent` value naming this span: `00-TRACE-SPAN-FLAGS`.
    pub fn traceparent(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str("00-");
        out.push_str(&self.trace_id_hex());
        out.push('-');
        out.push_str(&self.span_id_hex());
        let _ = write!(out, "-{:02x}", self.flags & SAMPLED);
        out
    }

    /// The `tracestate` to pass on, as received.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Two lower-case hex digits (upper case is invalid in `traceparent`).
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// Whether `state` is a list of `key=value` members as the recommendation writes them
/// (keys of lower-case letters, digits and `_-*/@`; values of printable ASCII but `,`
/// and `=`), at most 32 of them.
fn valid_tracestate(state: &str) -> bool {
    let members: Vec<&str> = state
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    !members.is_empty()
        && members.len() <= 32
        && members.iter().all(|member| {
            let Some((key, value)) = member.split_once('=') else {
                return false;
            };
            !key.is_empty()
                && key.len() <= 256
                && key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b))
                && !value.is_empty()
                && value.len() <= 256
                && value
                    .bytes()
                    .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
                && !value.ends_with(' ')
        })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const GOOD: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_recommendations_examples_parse_and_print_back() {
        let c = TraceContext::parse(GOOD, None).unwrap();
        assert_eq!(c.traceparent(), GOOD);
        assert_eq!(c.span_id_hex(), "b7ad6b7169203331");
        let unsampled = TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            None,
        )
        .unwrap();
        assert!(!unsampled.sampled());
        // A later version's extra part is allowed, and the flags' other bits are kept out.
        let future = TraceContext::parse(
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09-what-comes-next",
            None,
        )
        .unwrap();
        assert!(future.sampled());
        assert!(future.traceparent().ends_with("-01"));
    }

    #[test]
    fn malformed_fields_start_a_trace_of_their_own() {
        let zeros_trace = "00-00000000000000000000000000000000-b7ad6b7169203331-01";
        let zeros_span = "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01";
        for bad in [
            "",
            "00",
            zeros_trace,
            zeros_span,
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319-cb7ad6b7169203331-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad:?}");
        }
    }

    #[test]
    fn tracestate_is_kept_only_when_well_formed() {
        let kept = |s: &str| {
            TraceContext::parse(GOOD, Some(s))
                .unwrap()
                .tracestate()
                .map(str::to_owned)
        };
        assert_eq!(
            kept("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(kept("a@b=c").as_deref(), Some("a@b=c"));
        for bad in [
            "",
            "novalue",
            "Upper=x",
            "k=a,b",
            "k=\u{7f}",
            &"k=v,".repeat(40),
        ] {
            assert_eq!(kept(bad), None, "{bad:?}");
        }
        assert_eq!(kept(&format!("k={}", "v".repeat(600))), None);
    }

    proptest! {
        /// Whatever a client sends, parsing answers without panicking, and whatever it
        /// accepts prints back as a valid version-00 field that parses to the same ids.
        #[test]
        fn any_input_is_parsed_or_ignored_and_what_is_kept_round_trips(
            raw in "\\PC{0,80}",
            state in proptest::option::of("\\PC{0,80}"),
        ) {
            if let Some(c) = TraceContext::parse(&raw, state.as_deref()) {
                let again = TraceContext::parse(&c.traceparent(), c.tracestate()).unwrap();
                prop_assert_eq!(again.trace_id(), c.trace_id());
                prop_assert_eq!(again.span_id(), c.span_id());
                prop_assert_eq!(again.sampled(), c.sampled());
            }
        }

        #[test]
        fn fields_of_the_right_shape_round_trip(
            trace in proptest::array::uniform16(any::<u8>()),
            span in proptest::array::uniform8(any::<u8>()),
            sampled in any::<bool>(),
        ) {
            if let Some(c) = TraceContext::new(trace, span, sampled) {
                // The header written without a String says the same.
                let header = c.traceparent_header();
                prop_assert_eq!(header.to_str().unwrap(), c.traceparent());
                prop_assert_eq!(TraceContext::parse(&c.traceparent(), None), Some(c));
            }
        }
    }
}
