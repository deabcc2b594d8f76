//! scb-static's `Range` parser, against representations of many lengths.
//!
//! Input: `[LENGTH "\n"] VALUE`. A field value cannot hold a newline, so a first line, when
//! there is one, is a length to try besides the fixed ones: decimal, or any other bytes
//! folded into a `u64`, so that every input means some length.
//!
//! Never panics; satisfiable ranges are non-empty, lie within `[0, len)`, are at most the
//! cap in number, and are disjoint and not adjacent (coalesced); an empty representation
//! or a cap of zero means the whole representation; and whether the field is ignored does
//! not depend on the length, nor does unsatisfiability get lost as the length shrinks.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scb_static::fuzzing::{RangeOutcome, range};

/// Edges: empty, one byte, small, typical, and the ends of `u64`.
const LENGTHS: [u64; 8] = [0, 1, 2, 6, 100, 10_000, u64::MAX - 1, u64::MAX];

/// Off, one range, the server's default.
const MAX_RANGES: [usize; 3] = [0, 1, 16];

fuzz_target!(|input: &[u8]| {
    let (chosen, value) = match input.iter().position(|&b| b == b'\n') {
        Some(nl) => (Some(length(&input[..nl])), &input[nl + 1..]),
        None => (None, input),
    };
    let mut lengths: Vec<u64> = LENGTHS.into_iter().chain(chosen).collect();
    lengths.sort_unstable();
    lengths.dedup();
    for max_ranges in MAX_RANGES {
        // (length, outcome), shortest first.
        let mut outcomes = Vec::with_capacity(lengths.len());
        for &len in &lengths {
            let Some(outcome) = range(value, len, max_ranges) else {
                return; // not a field value: no request carries it
            };
            check(value, len, max_ranges, &outcome);
            outcomes.push((len, outcome));
        }
        let nonempty = || outcomes.iter().filter(|(len, _)| *len > 0);
        let full = nonempty().filter(|(_, o)| *o == RangeOutcome::Full).count();
        assert!(
            full == 0 || full == nonempty().count(),
            "{value:?}: ignored at some lengths only: {outcomes:?}"
        );
        let mut seen_satisfiable = false;
        for (len, outcome) in nonempty() {
            match outcome {
                RangeOutcome::Satisfiable(_) => seen_satisfiable = true,
                RangeOutcome::Unsatisfiable => assert!(
                    !seen_satisfiable,
                    "{value:?}: unsatisfiable at {len} but satisfiable at a shorter length"
                ),
                RangeOutcome::Full => {}
            }
        }
    }
});

fn check(value: &[u8], len: u64, max_ranges: usize, outcome: &RangeOutcome) {
    if len == 0 || max_ranges == 0 {
        assert_eq!(
            *outcome,
            RangeOutcome::Full,
            "{value:?} at {len}, cap {max_ranges}"
        );
    }
    let RangeOutcome::Satisfiable(ranges) = outcome else {
        return;
    };
    assert!(
        !ranges.is_empty() && ranges.len() <= max_ranges,
        "{value:?} at {len}, cap {max_ranges}: {} ranges",
        ranges.len()
    );
    for &(first, last) in ranges {
        assert!(
            first <= last && last < len,
            "{value:?} at {len}: {first}-{last} is not within the representation"
        );
    }
    let mut sorted = ranges.clone();
    sorted.sort_unstable();
    for pair in sorted.windows(2) {
        let ((_, last), (next, _)) = (pair[0], pair[1]);
        assert!(
            last.checked_add(1).is_some_and(|end| end < next),
            "{value:?} at {len}: {ranges:?} overlap or touch"
        );
    }
}

/// The first line as a length: decimal when it is one, else its bytes folded.
fn length(line: &[u8]) -> u64 {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            line.iter()
                .fold(0u64, |n, &b| n.rotate_left(8) ^ u64::from(b))
        })
}
