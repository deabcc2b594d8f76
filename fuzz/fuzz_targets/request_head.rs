//! scb-core's HTTP/1.1 request-head parser (the fast path every request takes).
//!
//! Never panics, whatever the bytes and limits; an incomplete head consumes nothing and
//! stays under the size limit; a parsed head consumed exactly its own bytes, obeys the
//! RFC 9112 framing rules the parser promises (one Host, one framing, a body length within
//! the limit) and parses the same from its own bytes alone; a head accepted under tight
//! limits is accepted the same way under loose ones.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scb_core::fuzzing::{BodyFraming, HeadOutcome, ParsedHead, request_head};

/// `(max_header_bytes, max_headers, max_body_bytes)`, loosest first: the server's
/// defaults; more fields than the parser's stack array holds, so that the heap path runs
/// too; and limits tight enough that the fuzzer crosses every one of them.
const LIMITS: [(usize, usize, u64); 3] = [
    (16 * 1024, 100, 16 * 1024 * 1024),
    (16 * 1024, 200, u64::MAX),
    (64, 2, 10),
];

fuzz_target!(|input: &[u8]| {
    let mut loose_len = None;
    for (i, (max_header_bytes, max_headers, max_body)) in LIMITS.into_iter().enumerate() {
        let (outcome, rest) = request_head(input, max_header_bytes, max_headers, max_body);
        match outcome {
            HeadOutcome::Incomplete => {
                assert_eq!(rest, input, "an incomplete head consumed bytes");
                assert!(
                    input.len() <= max_header_bytes,
                    "an incomplete head of {} bytes was not refused (limit {max_header_bytes})",
                    input.len()
                );
            }
            HeadOutcome::Refused(status) => {
                assert!((400..=505).contains(&status), "refused with {status}");
            }
            HeadOutcome::Parsed(head) => {
                check_parsed(&head, input, &rest, max_header_bytes, max_body);
                let (again, rest) =
                    request_head(&head.raw, max_header_bytes, max_headers, max_body);
                let HeadOutcome::Parsed(again) = again else {
                    panic!("the head alone did not parse: {again:?}");
                };
                assert!(rest.is_empty(), "the head alone left {rest:?}");
                assert_eq!(again.raw, head.raw);
                assert_eq!(again.body, head.body);
                assert_eq!(again.parts.uri, head.parts.uri);
                assert_eq!(again.parts.headers, head.parts.headers);
                if i == 0 {
                    loose_len = Some(head.raw.len());
                } else if max_header_bytes < LIMITS[0].0 {
                    assert_eq!(
                        loose_len,
                        Some(head.raw.len()),
                        "accepted under tight limits, not under the defaults"
                    );
                }
            }
        }
    }
});

fn check_parsed(
    head: &ParsedHead,
    input: &[u8],
    rest: &[u8],
    max_header_bytes: usize,
    max_body: u64,
) {
    let len = head.raw.len();
    assert!(
        len <= max_header_bytes,
        "a head of {len} bytes passed the limit"
    );
    assert_eq!(
        &head.raw[..],
        &input[..len],
        "the head is not the input's first bytes"
    );
    assert_eq!(
        rest,
        &input[len..],
        "the parser consumed more or less than the head"
    );
    assert!(
        head.raw.ends_with(b"\n"),
        "the head does not end with its empty line"
    );

    let parts = &head.parts;
    let is_11 = parts.version == http::Version::HTTP_11;
    assert!(is_11 || parts.version == http::Version::HTTP_10);
    let hosts = parts.headers.get_all(http::header::HOST).iter().count();
    assert!(hosts == 1 || (!is_11 && hosts == 0), "{hosts} Host fields");

    let te = parts
        .headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .count();
    let cl: Vec<_> = parts
        .headers
        .get_all(http::header::CONTENT_LENGTH)
        .iter()
        .collect();
    match head.body {
        BodyFraming::Chunked => {
            assert!(is_11, "chunked framing in HTTP/1.0");
            assert_eq!((te, cl.len()), (1, 0), "chunked with other framing fields");
        }
        BodyFraming::Length(n) => {
            assert!(n > 0 && n <= max_body, "body length {n} (limit {max_body})");
            assert_eq!((te, cl.len()), (0, 1));
            let digits = std::str::from_utf8(cl[0].as_bytes().trim_ascii()).unwrap();
            assert_eq!(
                digits.parse::<u64>().ok(),
                Some(n),
                "Content-Length {digits:?} read as {n}"
            );
        }
        BodyFraming::None => {
            assert_eq!(te, 0, "transfer-encoding without a body");
            assert!(
                cl.iter()
                    .all(|v| v.as_bytes().trim_ascii().iter().all(|&b| b == b'0')),
                "content-length {cl:?} without a body"
            );
        }
    }
    assert!(!head.expect_continue || head.body != BodyFraming::None);
}
