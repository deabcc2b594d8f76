//! The validity period of an X.509 certificate, read from its DER.
//!
//! rustls-webpki parses the whole certificate but keeps `validity` private (it checks it
//! only while verifying a chain against trust anchors, which a server never does for its
//! own certificate), and x509-parser would bring nom, asn1-rs, der-parser and their
//! proc-macros for two timestamps. The walk below reads exactly the path to them:
//! `Certificate -> tbsCertificate -> [version], serialNumber, signature, issuer, validity`.
//! It runs only on certificates webpki has already accepted.

use scb_core::date::{days_from_civil, days_in_month};

/// `notBefore` and `notAfter`, as seconds since the Unix epoch (negative before 1970).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0; // [0] EXPLICIT, constructed
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// Reads the validity period of a DER certificate; `None` if the DER is not shaped like one.
pub(crate) fn validity(cert: &[u8]) -> Option<Validity> {
    let mut input = cert;
    let mut certificate = expect(&mut input, SEQUENCE)?;
    let mut tbs = expect(&mut certificate, SEQUENCE)?;
    let (tag, _) = peek(tbs)?;
    if tag == VERSION {
        next(&mut tbs)?;
    }
    expect(&mut tbs, INTEGER)?; // serialNumber
    expect(&mut tbs, SEQUENCE)?; // signature
    expect(&mut tbs, SEQUENCE)?; // issuer
    let mut validity = expect(&mut tbs, SEQUENCE)?;
    let not_before = time(&mut validity)?;
    let not_after = time(&mut validity)?;
    validity.is_empty().then_some(Validity {
        not_before,
        not_after,
    })
}

fn time(input: &mut &[u8]) -> Option<i64> {
    let (tag, value) = next(input)?;
    // RFC 5280 4.1.2.5: UTCTime is YYMMDDHHMMSSZ (years 1950-2049), GeneralizedTime is
    // YYYYMMDDHHMMSSZ; both always in UTC ("Z") with seconds and without fractions.
    let (year, rest) = match (tag, value.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&value[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &value[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&value[..4])?, &value[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let month = u32::try_from(digits(&rest[0..2])?).ok()?;
    let day = u32::try_from(digits(&rest[2..4])?).ok()?;
    let hour = digits(&rest[4..6])?;
    let minute = digits(&rest[6..8])?;
    let second = digits(&rest[8..10])?;
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

fn digits(ascii: &[u8]) -> Option<i64> {
    ascii.iter().try_fold(0, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
    })
}

/// A distinguished name as RFC 4514 text (`CN=alice,O=Example`), from the contents of
/// its `RDNSequence` (what webpki's `Cert::subject` returns): the last RDN first, the
/// usual attribute names, any other type as its dotted OID, values escaped, and every
/// byte outside visible ASCII escaped as `\XX`, so the text can go into a header field.
/// `None` when the DER is not shaped like a name.
pub(crate) fn name(mut rdns: &[u8]) -> Option<String> {
    let mut parts = Vec::new();
    while !rdns.is_empty() {
        let mut set = expect(&mut rdns, SET)?;
        let mut attributes = Vec::new();
        while !set.is_empty() {
            let mut attribute = expect(&mut set, SEQUENCE)?;
            let oid = expect(&mut attribute, OID)?;
            let (tag, value) = next(&mut attribute)?;
            let text = match tag {
                UTF8_STRING | PRINTABLE_STRING | IA5_STRING => {
                    String::from_utf8_lossy(value).into_owned()
                }
                BMP_STRING => {
                    let units = value
                        .chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]]));
                    char::decode_utf16(units)
                        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
                        .collect()
                }
                _ => return None,
            };
            attributes.push(format!("{}={}", attribute_name(oid), escape(&text)));
        }
        parts.push(attributes.join("+"));
    }
    parts.reverse();
    Some(parts.join(","))
}

const SET: u8 = 0x31;
const OID: u8 = 0x06;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const IA5_STRING: u8 = 0x16;
const BMP_STRING: u8 = 0x1e;

fn attribute_name(oid: &[u8]) -> String {
    match oid {
        [0x55, 0x04, 0x03] => "CN".into(),
        [0x55, 0x04, 0x06] => "C".into(),
        [0x55, 0x04, 0x07] => "L".into(),
        [0x55, 0x04, 0x08] => "ST".into(),
        [0x55, 0x04, 0x09] => "STREET".into(),
        [0x55, 0x04, 0x0a] => "O".into(),
        [0x55, 0x04, 0x0b] => "OU".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID".into(),
        _ => dotted(oid),
    }
}

/// `2.5.4.5` for the OID's DER contents.
fn dotted(oid: &[u8]) -> String {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for &b in oid {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// RFC 4514's escaping, plus `\XX` for every byte that is not visible ASCII.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.len().saturating_sub(1);
    for (i, b) in value.bytes().enumerate() {
        match b {
            b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';' => {
                out.push('\\');
                out.push(char::from(b));
            }
            b'#' if i == 0 => out.push_str("\\#"),
            b' ' if i == 0 || i == last => out.push_str("\\ "),
            b' '..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:02X}")),
        }
    }
    out
}

fn expect<'a>(input: &mut &'a [u8], tag: u8) -> Option<&'a [u8]> {
    let (found, value) = next(input)?;
    (found == tag).then_some(value)
}

fn peek(input: &[u8]) -> Option<(u8, &[u8])> {
    let mut copy = input;
    next(&mut copy)
}

/// Splits one DER TLV (single-byte tag, definite length) off the front of `input`.
fn next<'a>(input: &mut &'a [u8]) -> Option<(u8, &'a [u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // Long form: the low bits count the length bytes. Four cover any certificate.
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (value, rest) = rest.split_at(len);
    *input = rest;
    Some((tag, value))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use scb_core::date::{UtcTime, from_unix_secs};

    use super::*;

    fn tlv(tag: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match value.len() {
            len @ 0..=0x7f => out.push(len as u8),
            len @ 0x80..=0xff => out.extend([0x81, len as u8]),
            len => out.extend([0x82, (len >> 8) as u8, len as u8]),
        }
        out.extend_from_slice(value);
        out
    }

    /// A certificate-shaped DER with the given validity times (tag, text).
    fn cert(version: bool, not_before: (u8, &str), not_after: (u8, &str)) -> Vec<u8> {
        let mut tbs = Vec::new();
        if version {
            tbs.extend(tlv(VERSION, &tlv(INTEGER, &[2])));
        }
        tbs.extend(tlv(INTEGER, &[0x01, 0x02, 0x03]));
        tbs.extend(tlv(SEQUENCE, &[0x06, 0x01, 0x2a]));
        tbs.extend(tlv(SEQUENCE, &[0u8; 200])); // a long issuer: the long length form
        let mut times = tlv(not_before.0, not_before.1.as_bytes());
        times.extend(tlv(not_after.0, not_after.1.as_bytes()));
        tbs.extend(tlv(SEQUENCE, &times));
        tbs.extend(tlv(SEQUENCE, &[])); // subject
        let mut certificate = tlv(SEQUENCE, &tbs);
        certificate.extend(tlv(SEQUENCE, &[]));
        certificate.extend(tlv(0x03, &[0]));
        tlv(SEQUENCE, &certificate)
    }

    #[test]
    fn reads_utc_time_and_generalized_time() {
        let der = cert(
            true,
            (UTC_TIME, "250131235959Z"),
            (GENERALIZED_TIME, "20991231000000Z"),
        );
        let validity = validity(&der).unwrap();
        assert_eq!(validity.not_before, 1_738_367_999);
        assert_eq!(
            UtcTime::from_unix(validity.not_before).to_string(),
            "2025-01-31 23:59:59 UTC"
        );
        assert_eq!(
            UtcTime::from_unix(validity.not_after).to_string(),
            "2099-12-31 00:00:00 UTC"
        );
    }

    #[test]
    fn utc_time_years_wrap_at_1950() {
        let der = cert(
            false,
            (UTC_TIME, "500101000000Z"),
            (UTC_TIME, "491231235959Z"),
        );
        let validity = validity(&der).unwrap();
        assert_eq!(
            UtcTime::from_unix(validity.not_before).to_string(),
            "1950-01-01 00:00:00 UTC"
        );
        assert_eq!(
            UtcTime::from_unix(validity.not_after).to_string(),
            "2049-12-31 23:59:59 UTC"
        );
        assert!(validity.not_before < 0);
        assert!(from_unix_secs(validity.not_before) < UNIX_EPOCH);
    }

    #[test]
    fn leap_days_are_checked() {
        let ok = cert(
            true,
            (GENERALIZED_TIME, "20240229000000Z"),
            (GENERALIZED_TIME, "20000229000000Z"),
        );
        assert!(validity(&ok).is_some());
        let bad = cert(
            true,
            (GENERALIZED_TIME, "21000229000000Z"),
            (GENERALIZED_TIME, "20300101000000Z"),
        );
        assert_eq!(validity(&bad), None);
    }

    #[test]
    fn malformed_times_are_refused() {
        for text in [
            "2501312359Z",    // no seconds
            "250131235959+0", // not UTC
            "251331235959Z",  // month 13
            "250132235959Z",  // January 32
            "250131245959Z",  // hour 24
            "25013123595aZ",  // not a digit
        ] {
            let der = cert(true, (UTC_TIME, text), (UTC_TIME, "300101000000Z"));
            assert_eq!(validity(&der), None, "{text}");
        }
        let wrong_tag = cert(true, (0x13, "250131235959Z"), (UTC_TIME, "300101000000Z"));
        assert_eq!(validity(&wrong_tag), None);
    }

    #[test]
    fn truncated_der_is_refused_at_every_length() {
        let der = cert(
            true,
            (UTC_TIME, "250131235959Z"),
            (UTC_TIME, "300101000000Z"),
        );
        assert!(validity(&der).is_some());
        for len in 0..der.len() {
            assert_eq!(validity(&der[..len]), None, "truncated to {len}");
        }
    }

    #[test]
    fn names_render_as_rfc_4514_text_safe_for_a_header() {
        let attribute = |oid: &[u8], tag: u8, value: &[u8]| {
            tlv(SEQUENCE, &[tlv(OID, oid), tlv(tag, value)].concat())
        };
        let rdns = [
            tlv(
                SET,
                &attribute(&[0x55, 0x04, 0x06], PRINTABLE_STRING, b"DE"),
            ),
            tlv(
                SET,
                &[
                    attribute(
                        &[0x55, 0x04, 0x0a],
                        UTF8_STRING,
                        "Müller; \"GmbH\"".as_bytes(),
                    ),
                    attribute(&[0x55, 0x04, 0x0b], UTF8_STRING, b" ops"),
                ]
                .concat(),
            ),
            // serialNumber (2.5.4.5) has no short name here; a BMPString value.
            tlv(
                SET,
                &attribute(&[0x55, 0x04, 0x05], BMP_STRING, &[0, b'4', 0, b'2']),
            ),
            tlv(
                SET,
                &attribute(&[0x55, 0x04, 0x03], UTF8_STRING, b"#a\r\nb"),
            ),
        ]
        .concat();
        assert_eq!(
            name(&rdns).unwrap(),
            "CN=\\#a\\0D\\0Ab,2.5.4.5=42,O=M\\C3\\BCller\\; \\\"GmbH\\\"+OU=\\ ops,C=DE"
        );
        // Not a name: a bare string, a truncated set, an integer value.
        assert_eq!(name(&tlv(UTF8_STRING, b"x")), None);
        assert_eq!(name(&rdns[..rdns.len() - 1]), None);
        let integer = tlv(SET, &attribute(&[0x55, 0x04, 0x03], INTEGER, &[1]));
        assert_eq!(name(&integer), None);
    }
}
