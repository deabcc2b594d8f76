//! Range parsing, If-Range, Content-Range and multipart framing against fixed examples:
//! the RFC 9110 §14 cases, the limits on range count, and the edges of a file.

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
