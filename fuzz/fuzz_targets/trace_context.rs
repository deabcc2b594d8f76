//! scb-core's W3C trace context: `traceparent` on the input's first line, `tracestate`
//! on the rest, as hostile clients send them.
//!
//! Never panics; whatever is accepted prints back as a version-00 `traceparent` of 55
//! lower-case characters that parses to the same ids and flag, its header form says the
//! same, an accepted `tracestate` is at most 512 bytes, and a child keeps the trace.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scb_core::trace_context::TraceContext;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let (traceparent, tracestate) = match text.split_once('\n') {
        Some((parent, state)) => (parent, Some(state)),
        None => (text, None),
    };
    let Some(context) = TraceContext::parse(traceparent, tracestate) else {
        return;
    };
    let printed = context.traceparent();
    assert_eq!(printed.len(), 55, "{printed}");
    assert!(
        printed
            .bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{printed}"
    );
    assert_eq!(context.traceparent_header().to_str().unwrap(), printed);
    let again = TraceContext::parse(&printed, context.tracestate()).expect("reparses");
    assert_eq!(again.trace_id(), context.trace_id());
    assert_eq!(again.span_id(), context.span_id());
    assert_eq!(again.sampled(), context.sampled());
    if let Some(state) = context.tracestate() {
        assert!(
            state.len() <= 512,
            "{} bytes of tracestate kept",
            state.len()
        );
    }
    let child = context.child([1; 8]);
    assert_eq!(child.trace_id(), context.trace_id());
    assert_eq!(child.sampled(), context.sampled());
});
