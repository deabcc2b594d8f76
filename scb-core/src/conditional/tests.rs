//! Precondition evaluation against one fixed representation (ETag `"a"`, Last-Modified
//! Sun, 06 Nov 1994 08:49:37 GMT): each field alone, their order of precedence (RFC 9110
//! §13.2.2), malformed fields, and the validators the server sends.

use std::time::{Duration, UNIX_EPOCH};

use super::*;

/// The representation every test evaluates against.
const ETAG: &str = "\"a\"";
/// Sun, 06 Nov 1994 08:49:37 GMT.
const MODIFIED: u64 = 784_111_777;
const AT_MODIFIED: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
const AFTER: &str = "Sun, 06 Nov 1994 08:49:38 GMT";

/// The mtime has a fraction of a second that Last-Modified cannot carry.
fn last_modified() -> SystemTime {
    UNIX_EPOCH + Duration::new(MODIFIED, 750_000_000)
}

fn eval_method(method: &Method, fields: &[(&str, &str)]) -> Precondition {
    let mut headers = HeaderMap::new();
    for &(name, value) in fields {
        headers.append(
            header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    evaluate(method, &headers, ETAG, last_modified())
}

fn eval(fields: &[(&str, &str)]) -> Precondition {
    eval_method(&Method::GET, fields)
}

use Precondition::{Failed, NotModified, Proceed};

#[test]
fn no_conditional_fields_proceed() {
    assert_eq!(eval(&[]), Proceed);
    assert_eq!(eval(&[("if-range", ETAG)]), Proceed);
}

#[test]
fn each_precondition_field_is_seen_among_others_and_none_without_them() {
    let with = |name: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("a"));
        headers.insert(header::RANGE, HeaderValue::from_static("bytes=0-1"));
        if !name.is_empty() {
            headers.insert(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("x"),
            );
        }
        has_preconditions(&headers)
    };
    assert!(!with(""));
    assert!(!with("if-range"));
    for name in [
        "if-match",
        "If-Unmodified-Since",
        "if-none-match",
        "if-modified-since",
    ] {
        assert!(with(name), "{name}");
    }
}

#[test]
fn if_match_with_the_current_strong_tag_proceeds() {
    assert_eq!(eval(&[("if-match", "\"a\"")]), Proceed);
    assert_eq!(eval(&[("if-match", "\"x\", \"a\"")]), Proceed);
    assert_eq!(
        eval(&[("if-match", "\"x\""), ("if-match", "\"a\"")]),
        Proceed
    );
}

#[test]
fn if_match_star_proceeds_because_the_representation_exists() {
    assert_eq!(eval(&[("if-match", "*")]), Proceed);
    assert_eq!(eval(&[("if-match", " * ")]), Proceed);
}

#[test]
fn if_match_with_another_tag_fails() {
    assert_eq!(eval(&[("if-match", "\"b\"")]), Failed);
    assert_eq!(eval(&[("if-match", "\"b\", \"c\"")]), Failed);
}

#[test]
fn if_match_uses_strong_comparison_so_a_weak_tag_fails() {
    assert_eq!(eval(&[("if-match", "W/\"a\"")]), Failed);
}

#[test]
fn if_match_malformed_fails() {
    for bad in [
        "a",
        "\"a",
        "\"a\" \"b\"",
        "w/\"a\"",
        "*, \"a\"",
        "",
        "\"a\"x",
    ] {
        assert_eq!(eval(&[("if-match", bad)]), Failed, "{bad:?}");
    }
    // `*` on one line and a tag on another is the same malformed list.
    assert_eq!(eval(&[("if-match", "*"), ("if-match", "\"a\"")]), Failed);
}

#[test]
fn if_unmodified_since_at_or_after_last_modified_proceeds() {
    assert_eq!(eval(&[("if-unmodified-since", AT_MODIFIED)]), Proceed);
    assert_eq!(eval(&[("if-unmodified-since", AFTER)]), Proceed);
}

#[test]
fn if_unmodified_since_before_last_modified_fails() {
    assert_eq!(eval(&[("if-unmodified-since", BEFORE)]), Failed);
}

#[test]
fn if_unmodified_since_is_ignored_when_if_match_is_present() {
    let fields = [("if-match", "\"a\""), ("if-unmodified-since", BEFORE)];
    assert_eq!(eval(&fields), Proceed);
}

#[test]
fn if_unmodified_since_that_is_not_one_date_is_ignored() {
    for bad in [
        "yesterday",
        "0",
        "Sun, 06 Nov 1994 08:49:36 GMT, Sun, 06 Nov 1994",
    ] {
        assert_eq!(eval(&[("if-unmodified-since", bad)]), Proceed, "{bad:?}");
    }
    let twice = [
        ("if-unmodified-since", BEFORE),
        ("if-unmodified-since", BEFORE),
    ];
    assert_eq!(eval(&twice), Proceed);
}

#[test]
fn if_none_match_with_the_current_tag_is_not_modified_for_get_and_head() {
    for method in [Method::GET, Method::HEAD] {
        assert_eq!(
            eval_method(&method, &[("if-none-match", "\"a\"")]),
            NotModified
        );
    }
}

#[test]
fn if_none_match_uses_weak_comparison() {
    assert_eq!(eval(&[("if-none-match", "W/\"a\"")]), NotModified);
    assert_eq!(eval(&[("if-none-match", "\"x\", W/\"a\"")]), NotModified);
}

#[test]
fn if_none_match_star_is_not_modified() {
    assert_eq!(eval(&[("if-none-match", "*")]), NotModified);
}

#[test]
fn if_none_match_with_other_tags_proceeds() {
    assert_eq!(eval(&[("if-none-match", "\"b\"")]), Proceed);
    assert_eq!(eval(&[("if-none-match", "\"b\", W/\"c\"")]), Proceed);
    // The quotes are part of the opaque-tag: a bare a is not "a".
    assert_eq!(eval(&[("if-none-match", "\"\"a\"\"")]), Proceed);
}

#[test]
fn if_none_match_malformed_proceeds() {
    for bad in [
        "a",
        "\"a",
        "\"a\" \"a\"",
        "w/\"a\"",
        "*, \"a\"",
        "",
        "W/ \"a\"",
    ] {
        assert_eq!(eval(&[("if-none-match", bad)]), Proceed, "{bad:?}");
    }
}

#[test]
fn if_none_match_true_for_an_unsafe_method_fails() {
    assert_eq!(
        eval_method(&Method::POST, &[("if-none-match", "*")]),
        Failed
    );
    assert_eq!(
        eval_method(&Method::PUT, &[("if-none-match", "\"a\"")]),
        Failed
    );
}

#[test]
fn if_modified_since_at_or_after_last_modified_is_not_modified() {
    assert_eq!(eval(&[("if-modified-since", AT_MODIFIED)]), NotModified);
    assert_eq!(eval(&[("if-modified-since", AFTER)]), NotModified);
    let head = eval_method(&Method::HEAD, &[("if-modified-since", AT_MODIFIED)]);
    assert_eq!(head, NotModified);
}

#[test]
fn if_modified_since_before_last_modified_proceeds() {
    assert_eq!(eval(&[("if-modified-since", BEFORE)]), Proceed);
}

#[test]
fn if_modified_since_compares_whole_seconds() {
    // The mtime is .75 s past AT_MODIFIED; Last-Modified said AT_MODIFIED.
    assert_eq!(unix_secs(last_modified()), MODIFIED as i64);
    assert_eq!(eval(&[("if-modified-since", AT_MODIFIED)]), NotModified);
}

#[test]
fn if_modified_since_accepts_the_obsolete_date_forms() {
    for date in [
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "  Sun, 06 Nov 1994 08:49:37 GMT\t",
    ] {
        assert_eq!(
            eval(&[("if-modified-since", date)]),
            NotModified,
            "{date:?}"
        );
    }
}

#[test]
fn if_modified_since_that_is_not_one_date_is_ignored() {
    for bad in [
        "yesterday",
        "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday
        "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT",
    ] {
        assert_eq!(eval(&[("if-modified-since", bad)]), Proceed, "{bad:?}");
    }
    let twice = [("if-modified-since", AFTER), ("if-modified-since", AFTER)];
    assert_eq!(eval(&twice), Proceed);
}

#[test]
fn if_modified_since_is_ignored_when_if_none_match_is_present() {
    // Tag differs, date says unchanged: the tag wins, 200.
    let fields = [("if-none-match", "\"b\""), ("if-modified-since", AFTER)];
    assert_eq!(eval(&fields), Proceed);
    // Even a malformed If-None-Match displaces it.
    let fields = [("if-none-match", "b"), ("if-modified-since", AFTER)];
    assert_eq!(eval(&fields), Proceed);
}

#[test]
fn if_modified_since_is_ignored_for_other_methods() {
    let post = eval_method(&Method::POST, &[("if-modified-since", AFTER)]);
    assert_eq!(post, Proceed);
}

#[test]
fn if_match_is_evaluated_before_if_none_match() {
    let fields = [("if-match", "\"b\""), ("if-none-match", "\"a\"")];
    assert_eq!(eval(&fields), Failed);
    let fields = [("if-match", "\"a\""), ("if-none-match", "\"a\"")];
    assert_eq!(eval(&fields), NotModified);
}

#[test]
fn if_unmodified_since_is_evaluated_before_if_none_match() {
    let fields = [("if-unmodified-since", BEFORE), ("if-none-match", "\"a\"")];
    assert_eq!(eval(&fields), Failed);
}

#[test]
fn if_match_is_evaluated_before_if_modified_since() {
    let fields = [("if-match", "\"b\""), ("if-modified-since", AFTER)];
    assert_eq!(eval(&fields), Failed);
    let fields = [("if-match", "\"a\""), ("if-modified-since", AFTER)];
    assert_eq!(eval(&fields), NotModified);
}

#[test]
fn if_unmodified_since_is_evaluated_before_if_modified_since() {
    let fields = [
        ("if-unmodified-since", BEFORE),
        ("if-modified-since", AFTER),
    ];
    assert_eq!(eval(&fields), Failed);
    let fields = [("if-unmodified-since", AFTER), ("if-modified-since", AFTER)];
    assert_eq!(eval(&fields), NotModified);
}

#[test]
fn all_four_fields_passing_proceeds_only_when_the_tag_changed() {
    let mut fields = vec![
        ("if-match", "\"a\""),
        ("if-unmodified-since", BEFORE),
        ("if-none-match", "\"old\""),
        ("if-modified-since", AFTER),
    ];
    assert_eq!(eval(&fields), Proceed);
    fields[2] = ("if-none-match", "\"a\"");
    assert_eq!(eval(&fields), NotModified);
}

#[test]
fn entity_tags_may_contain_commas_and_obs_text() {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::IF_NONE_MATCH,
        HeaderValue::from_bytes(b"\"x,y\", \"\xe9\"").unwrap(),
    );
    let precondition = |etag| evaluate(&Method::GET, &headers, etag, last_modified());
    assert_eq!(precondition("\"x,y\""), NotModified);
    assert_eq!(precondition("\"\u{e9}\""), Proceed); // UTF-8 is two bytes, not 0xE9
    assert_eq!(precondition("\"x\""), Proceed);
    assert_eq!(precondition("\"y\""), Proceed);
}

#[test]
fn entity_tag_lists_tolerate_whitespace_and_empty_elements() {
    for list in [
        "\"a\"",
        "  \"a\"  ",
        "\"b\",\"a\"",
        "\"b\" ,\t\"a\"",
        ",\"a\",",
        "\"b\", , ,\"a\"",
    ] {
        assert_eq!(eval(&[("if-none-match", list)]), NotModified, "{list:?}");
    }
}

#[test]
fn entity_tag_parsing_stops_at_the_closing_quote() {
    let (tag, rest) = parse_entity_tag(b"W/\"a,b\" , \"c\"").unwrap();
    assert_eq!(
        tag,
        EntityTag {
            weak: true,
            opaque: b"\"a,b\""
        }
    );
    assert_eq!(rest, b" , \"c\"");
    assert_eq!(parse_entity_tag(b"\"\"").unwrap().0.opaque, b"\"\"");
    for bad in [&b"a"[..], b"\"a", b"W\"a\"", b"\"a b\"", b"\"a\x7f\"", b""] {
        assert_eq!(parse_entity_tag(bad), None, "{bad:?}");
    }
}

#[test]
fn strong_etag_is_a_quoted_hex_tag_of_every_field() {
    assert_eq!(strong_etag(0x10, 0x20, 0x30, 0x40), "\"10-20.30-40\"");
    let base = strong_etag(1000, 1_700_000_000, 5, 77);
    assert_ne!(strong_etag(1001, 1_700_000_000, 5, 77), base);
    assert_ne!(strong_etag(1000, 1_700_000_001, 5, 77), base);
    assert_ne!(strong_etag(1000, 1_700_000_000, 6, 77), base);
    assert_ne!(strong_etag(1000, 1_700_000_000, 5, 78), base);
    // Before 1970 still makes a valid tag.
    let old = strong_etag(1, -1, 0, 1);
    let (tag, rest) = parse_entity_tag(old.as_bytes()).unwrap();
    assert!(!tag.weak && rest.is_empty());
}

#[test]
fn strong_etag_matches_itself_through_if_none_match() {
    let etag = strong_etag(12345, 1_700_000_000, 999_999_999, u64::MAX);
    let mut headers = HeaderMap::new();
    headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&etag).unwrap());
    headers.insert(header::IF_MATCH, HeaderValue::from_str(&etag).unwrap());
    let got = evaluate(&Method::GET, &headers, &etag, last_modified());
    assert_eq!(got, NotModified);
}

#[test]
fn last_modified_header_is_whole_seconds_and_never_in_the_future() {
    let now = UNIX_EPOCH + Duration::from_secs(MODIFIED + 100);
    let value = last_modified_header(last_modified(), now).unwrap();
    assert_eq!(value, AT_MODIFIED);
    let future = now + Duration::from_secs(3600);
    let clamped = last_modified_header(future, now).unwrap();
    assert_eq!(clamped, "Sun, 06 Nov 1994 08:51:17 GMT");
    // What it renders parses back to the seconds the comparisons use.
    assert_eq!(http_date_secs(value.as_bytes()), Some(MODIFIED as i64));
}

#[test]
fn last_modified_header_is_absent_for_dates_http_cannot_express() {
    let before_1970 = UNIX_EPOCH - Duration::from_secs(1);
    assert_eq!(last_modified_header(before_1970, SystemTime::now()), None);
    let year_10000 = UNIX_EPOCH + Duration::from_secs(253_402_300_800);
    assert_eq!(last_modified_header(year_10000, year_10000), None);
    let last_second = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    let value = last_modified_header(last_second, last_second).unwrap();
    assert_eq!(value, "Fri, 31 Dec 9999 23:59:59 GMT");
}
