//! scb-core's chunked request-body decoder, fed the input in several splits: all at once,
//! a byte at a time, and two pseudo-random splits drawn from the input's hash.
//!
//! Never panics; never yields an empty piece of data (the read loop would spin) nor more
//! bytes than were fed; and however the bytes arrive, the decoded data agree (one run's
//! is a prefix of another's) and the outcome is the same: the body ends at the same byte
//! with the same data, or is refused, or needs more. A body whose end depended on how the
//! bytes were split would be a request-smuggling bug; a refusal that depended on it, a
//! request that fails or not by the luck of TCP segmentation.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scb_core::fuzzing::{ChunkStep, ChunkedDecoder};

/// Trailer budgets: what the server allows (it passes `max_header_bytes`, 16 KiB by
/// default), and one small enough for the fuzzer to run out of within its 4 KiB inputs.
const MAX_TRAILER_BYTES: [usize; 2] = [16 * 1024, 32];

#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The body ended after this many bytes of the input.
    Done(usize),
    /// The input ran out first.
    NeedMore,
    /// Refused, with the decoder's message (which may differ between splits).
    Refused(String),
}

fuzz_target!(|input: &[u8]| {
    for budget in MAX_TRAILER_BYTES {
        let whole = run(input, budget, std::iter::once(input.len()));
        let runs = [
            ("a byte at a time", run(input, budget, std::iter::repeat(1))),
            (
                "split A",
                run(input, budget, splits(input, 0x9e37_79b9_7f4a_7c15, 16)),
            ),
            (
                "split B",
                run(input, budget, splits(input, 0xc2b2_ae3d_27d4_eb4f, 600)),
            ),
        ];
        for (how, split) in &runs {
            let (short, long) = if split.0.len() <= whole.0.len() {
                (&split.0, &whole.0)
            } else {
                (&whole.0, &split.0)
            };
            assert!(long.starts_with(short), "the data differ fed {how}");
            match (&split.1, &whole.1) {
                (End::Done(a), End::Done(b)) => {
                    assert_eq!(a, b, "the body ends elsewhere fed {how}");
                    assert_eq!(split.0, whole.0, "the data differ fed {how}");
                }
                (End::Refused(_), End::Refused(_)) | (End::NeedMore, End::NeedMore) => {}
                (a, b) => panic!(
                    "trailer budget {budget}: fed {how}: {a:?}; fed whole: {b:?} ({} bytes out)",
                    whole.0.len()
                ),
            }
        }
    }
});

/// Feeds `input` in pieces of the given sizes, decoding after each, until the body ends,
/// is refused, or the input runs out.
fn run(
    input: &[u8],
    max_trailer_bytes: usize,
    sizes: impl Iterator<Item = usize>,
) -> (Vec<u8>, End) {
    let mut decoder = ChunkedDecoder::new(max_trailer_bytes);
    let mut data = Vec::new();
    let mut fed = 0;
    for size in sizes {
        if fed == input.len() {
            break;
        }
        let next = (fed + size.max(1)).min(input.len());
        decoder.push(&input[fed..next]);
        fed = next;
        loop {
            match decoder.decode() {
                Ok(ChunkStep::Data(piece)) => {
                    assert!(!piece.is_empty(), "empty data");
                    data.extend_from_slice(&piece);
                    assert!(data.len() <= fed, "{} bytes out of {fed} in", data.len());
                }
                Ok(ChunkStep::NeedMore) => break,
                Ok(ChunkStep::Done) => {
                    assert_eq!(decoder.decode(), Ok(ChunkStep::Done), "not done after done");
                    return (data, End::Done(fed - decoder.buffered()));
                }
                Err(e) => return (data, End::Refused(e)),
            }
        }
    }
    (data, End::NeedMore)
}

/// Piece sizes in `1..=max`, from a xorshift generator seeded by `salt` and the input.
fn splits(input: &[u8], salt: u64, max: u64) -> impl Iterator<Item = usize> {
    // FNV-1a: any change to the input changes the splits.
    let mut state = input.iter().fold(0xcbf2_9ce4_8422_2325 ^ salt, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) | 1;
    std::iter::from_fn(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Some(usize::try_from(state % max + 1).unwrap_or(1))
    })
}
