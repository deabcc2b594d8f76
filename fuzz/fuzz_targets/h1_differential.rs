//! scb's HTTP/1.1 driver against hyper's, on the same random and mutated request streams.
//!
//! The first input byte picks where the stream is split into two writes; the rest is the
//! stream. Required:
//! - scb answers the same bytes (Date aside) however the stream arrives, whole or split;
//! - scb never accepts a request hyper refuses (but for `Transfer-Encoding: chunked,`,
//!   whose empty element RFC 9110 5.6.1 has a recipient ignore and hyper takes for a
//!   coding), and a request both accept reaches the handler as the same method, target
//!   and body;
//! - where scb refuses what hyper accepts, the request carries one of the framing or Host
//!   faults scb refuses on purpose (RFC 9112 3.2 and 6.3; see `tests/differential.rs` in
//!   scb-core for why each): no Host in HTTP/1.1, more than one in any version, an invalid Host, a
//!   repeated Content-Length or Transfer-Encoding, or both together; or an expectation
//!   other than `100-continue` (417, as RFC 9110 10.1.1 allows: hyper ignores it); a
//!   transfer coding under `chunked` (501, RFC 9112 6.1: hyper passes it on); or a
//!   Content-Length over the server's body limit (413 before the body is read: hyper has
//!   no such limit);
//! - a body both hand to the handler reads the same, unless scb's chunked decoder refuses
//!   it (a control byte such as a stray CR in or before a chunk extension, a trailer line
//!   that is not a field: hyper skips extensions and is laxer there; a stray CR is how
//!   front ends are made to disagree).
//!
//! Neither may hang: each exchange runs in memory and panics after 10 s.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scb_core::fuzzing::{ChunkStep, ChunkedDecoder, Peer, exchange};
use scb_core::server::Limits;

fuzz_target!(|input: &[u8]| {
    let Some((&at, stream)) = input.split_first() else {
        return;
    };
    let at = if stream.is_empty() {
        0
    } else {
        usize::from(at) % stream.len()
    };
    let ours = normalize(&exchange(Peer::Scb, &[stream]));
    let split = normalize(&exchange(Peer::Scb, &[&stream[..at], &stream[at..]]));
    assert_eq!(
        String::from_utf8_lossy(&split),
        String::from_utf8_lossy(&ours),
        "scb answered differently when the stream was split at {at}"
    );
    let theirs = normalize(&exchange(Peer::Hyper, &[stream]));
    let (ours, theirs) = (verdict(&ours), verdict(&theirs));
    match (&ours, &theirs) {
        (Verdict::Handled(a), Verdict::Handled(b)) if a != b => assert!(
            a.ends_with(" [<body error>]") && chunks_refused_on_purpose(stream),
            "the handler saw different requests: scb {a:?}, hyper {b:?}"
        ),
        (Verdict::Handled(_), Verdict::Handled(_)) => {}
        (Verdict::Handled(_), _) => assert!(
            accepted_per_rfc(stream),
            "scb accepted what hyper refused: {theirs:?}"
        ),
        (_, Verdict::Handled(_)) => assert!(
            refused_on_purpose(stream),
            "scb refused ({ours:?}) what hyper accepted ({theirs:?}) without a stated reason"
        ),
        _ => {}
    }
});

/// What a server made of the stream's first request.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The handler's answer: its first line.
    Handled(String),
    /// The server's own answer, with this status.
    Refused(u16),
    /// No answer before the connection closed.
    Closed,
}

/// The output with Date values and scb's request ids masked and interim `100 Continue` answers dropped: when a
/// body arrives with its head, whether one is sent is a matter of timing.
fn normalize(out: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(out).replace("HTTP/1.1 100 Continue\r\n\r\n", "");
    text.split("\r\n")
        .map(|line| {
            if line.starts_with("date: ") {
                "date: <date>"
            } else if line.starts_with("x-request-id: ") {
                "x-request-id: <id>"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
        .into_bytes()
}

fn verdict(out: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(out);
    let Some(status) = text
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
    else {
        return Verdict::Closed;
    };
    match text.split_once("\r\n\r\n") {
        Some((_, body)) if status == 200 && body.starts_with("handled ") => {
            Verdict::Handled(body.lines().next().unwrap_or_default().to_owned())
        }
        _ => Verdict::Refused(status),
    }
}

/// Whether the stream's first request is one hyper refuses only by misreading RFC 9110
/// 5.6.1: a Transfer-Encoding list ending in an empty element (`chunked,`), which a
/// recipient must ignore, so the codings are `chunked`. hyper takes the empty element for
/// the last coding and answers 400, which is safe; scb reads the body as chunked.
fn accepted_per_rfc(stream: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut fields);
    if !matches!(req.parse(stream), Ok(httparse::Status::Complete(_))) {
        return false;
    }
    let codings: Vec<&[u8]> = req
        .headers
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("transfer-encoding"))
        .map(|f| f.value)
        .collect();
    matches!(codings[..], [value] if value.split(|&b| b == b',').next_back().is_some_and(|e| e.trim_ascii().is_empty())
        && scb_core::http1::transfer_coding(value) == scb_core::http1::TransferCoding::Chunked)
}

/// Whether the stream's first request head has a fault scb refuses and hyper does not.
fn refused_on_purpose(stream: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut fields);
    if !matches!(req.parse(stream), Ok(httparse::Status::Complete(_))) {
        return false;
    }
    let named = |name: &str| {
        req.headers
            .iter()
            .filter(|f| f.name.eq_ignore_ascii_case(name))
            .map(|f| f.value)
            .collect::<Vec<_>>()
    };
    let (hosts, lengths, codings, expects) = (
        named("host"),
        named("content-length"),
        named("transfer-encoding"),
        named("expect"),
    );
    (req.version == Some(1) && hosts.is_empty())
        || hosts.len() > 1
        || hosts.iter().any(|h| !scb_core::http1::is_valid_host(h))
        || lengths.len() > 1
        || codings.len() > 1
        || (!lengths.is_empty() && !codings.is_empty())
        || expects
            .iter()
            .any(|e| !e.trim_ascii().eq_ignore_ascii_case(b"100-continue"))
        || codings.iter().any(|c| {
            scb_core::http1::transfer_coding(c) == scb_core::http1::TransferCoding::Layered
        })
        || lengths.iter().any(|l| {
            std::str::from_utf8(l)
                .ok()
                .and_then(|l| l.trim().parse::<u64>().ok())
                .is_some_and(|n| n > Limits::default().max_body_bytes)
        })
}

/// Whether the stream's first request is chunked and scb's chunked decoder, with the
/// server's trailer budget, refuses what follows its head.
fn chunks_refused_on_purpose(stream: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut fields);
    let Ok(httparse::Status::Complete(head_len)) = req.parse(stream) else {
        return false;
    };
    let mut decoder = ChunkedDecoder::new(Limits::default().max_header_bytes);
    decoder.push(&stream[head_len..]);
    loop {
        match decoder.decode() {
            Ok(ChunkStep::Data(_)) => {}
            Ok(ChunkStep::Done | ChunkStep::NeedMore) => return false,
            Err(_) => return true,
        }
    }
}
