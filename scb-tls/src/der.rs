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
}
