//! Civil dates in UTC and the date texts scb writes, without a date crate.
//!
//! One place for the calendar: the server's `Date`, a static file's `Last-Modified`, a
//! certificate's validity period and a report's timestamp all come from here. The
//! arithmetic is Howard Hinnant's `days_from_civil` and `civil_from_days` (proleptic
//! Gregorian calendar, day 0 = 1970-01-01;
//! <http://howardhinnant.github.io/date_algorithms.html>). The IMF-fixdate writer is
//! hand-made because it runs per response: `httpdate::fmt_http_date` goes through the
//! formatting machinery, about a thousand instructions where this takes a hundred (a test
//! holds the two equal).
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use scb_core::date::{UtcTime, imf_fixdate};
//!
//! let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
//! assert_eq!(&imf_fixdate(t).unwrap(), b"Sun, 06 Nov 1994 08:49:37 GMT");
//! assert_eq!(UtcTime::from(t).to_string(), "1994-11-06 08:49:37 UTC");
//! assert_eq!(UtcTime::from(t).rfc3339(), "1994-11-06T08:49:37Z");
//! ```

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 of a civil date (negative before it). `month` is 1-12.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(year, month 1-12, day 1-31)` of a day counted from 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097; // 0..=146_096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365
    let mp = (5 * doy + 2) / 153; // 0..=11
    let day = doy - (153 * mp + 2) / 5 + 1; // 1..=31
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // 1..=12
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both are in range by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// How many days `month` (1-12) of `year` has.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Whole seconds since the Unix epoch, rounded down (1.9 s is 1, -0.5 s is -1): what a
/// date text made from the same time says. Saturates far outside the calendar.
pub fn unix_secs(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let secs = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            if before.subsec_nanos() > 0 {
                -secs - 1
            } else {
                -secs
            }
        }
    }
}

/// The time `secs` seconds after the Unix epoch (before it when negative).
pub fn from_unix_secs(secs: i64) -> SystemTime {
    let magnitude = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// A time in UTC, split into its civil fields, to the second.
///
/// `Display` writes `2025-01-31 23:59:59 UTC`, for people (error messages, logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcTime {
    /// The year (proleptic Gregorian; may be before 1 or after 9999).
    pub year: i64,
    /// 1-12.
    pub month: u32,
    /// 1-31.
    pub day: u32,
    /// 0-23.
    pub hour: u32,
    /// 0-59.
    pub minute: u32,
    /// 0-59.
    pub second: u32,
}

impl UtcTime {
    /// The time `secs` seconds after the Unix epoch (before it when negative).
    pub fn from_unix(secs: i64) -> Self {
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        // In 0..86_400, so it fits.
        let in_day = u32::try_from(secs.rem_euclid(86_400)).unwrap_or(0);
        Self {
            year,
            month,
            day,
            hour: in_day / 3600,
            minute: in_day / 60 % 60,
            second: in_day % 60,
        }
    }

    /// Now.
    pub fn now() -> Self {
        Self::from(SystemTime::now())
    }

    /// `2026-11-30T12:04:05Z` (RFC 3339).
    pub fn rfc3339(self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `20261130T120405Z` (RFC 3339's basic form): sorts by time and is safe in a file
    /// name.
    pub fn compact(self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

impl From<SystemTime> for UtcTime {
    fn from(time: SystemTime) -> Self {
        Self::from_unix(unix_secs(time))
    }
}

impl fmt::Display for UtcTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// 10000-01-01T00:00:00Z: the first second an IMF-fixdate's four-digit year cannot write.
const YEAR_10000: u64 = 253_402_300_800;

/// The IMF-fixdate of `time` (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110 5.6.7), the form
/// HTTP dates are sent in. `None` before 1970 or from the year 10000 on, which the form
/// cannot express (`httpdate` panics there).
pub fn imf_fixdate(time: SystemTime) -> Option<[u8; 29]> {
    const DAYS: [&[u8; 3]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
    if secs >= YEAR_10000 {
        return None;
    }
    // Below YEAR_10000, so it fits an i64 and the fields are in range.
    let t = UtcTime::from_unix(i64::try_from(secs).ok()?);
    let days = secs / 86_400;
    // 1970-01-01 was a Thursday.
    let weekday = ((days + 4) % 7) as usize;
    let year = t.year.unsigned_abs();

    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    out[..3].copy_from_slice(DAYS[weekday]);
    two_digits(&mut out[5..7], u64::from(t.day));
    out[8..11].copy_from_slice(MONTHS[(t.month - 1) as usize]);
    two_digits(&mut out[12..14], year / 100);
    two_digits(&mut out[14..16], year % 100);
    two_digits(&mut out[17..19], u64::from(t.hour));
    two_digits(&mut out[20..22], u64::from(t.minute));
    two_digits(&mut out[23..25], u64::from(t.second));
    Some(out)
}

fn two_digits(out: &mut [u8], value: u64) {
    out[0] = b'0' + (value / 10 % 10) as u8;
    out[1] = b'0' + (value % 10) as u8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && (1..=days_in_month(y, m)).contains(&d));
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2025, 2), 28);
        assert_eq!(days_in_month(2025, 4), 30);
    }

    #[test]
    fn known_instants_format_in_every_form() {
        assert_eq!(UtcTime::from_unix(0).rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(
            UtcTime::from_unix(951_827_696).rfc3339(),
            "2000-02-29T12:34:56Z"
        );
        assert_eq!(
            UtcTime::from_unix(1_798_761_599).rfc3339(),
            "2026-12-31T23:59:59Z"
        );
        assert_eq!(
            UtcTime::from_unix(951_827_696).compact(),
            "20000229T123456Z"
        );
        assert_eq!(
            UtcTime::from_unix(-631_152_000).to_string(),
            "1950-01-01 00:00:00 UTC"
        );
    }

    #[test]
    fn unix_secs_rounds_down() {
        assert_eq!(unix_secs(UNIX_EPOCH + Duration::new(1, 999_999_999)), 1);
        assert_eq!(unix_secs(UNIX_EPOCH - Duration::new(0, 1)), -1);
        assert_eq!(unix_secs(UNIX_EPOCH - Duration::from_secs(2)), -2);
        for secs in [-86_401, -1, 0, 1, 1_798_761_599] {
            assert_eq!(unix_secs(from_unix_secs(secs)), secs);
        }
    }

    fn imf(secs: u64) -> [u8; 29] {
        imf_fixdate(UNIX_EPOCH + Duration::from_secs(secs)).unwrap()
    }

    #[test]
    fn imf_fixdate_edges_are_httpdates() {
        for secs in [
            0,
            59,
            86_399,
            86_400,
            951_782_400,
            4_107_542_400,
            253_402_300_799,
        ] {
            let ours = imf(secs);
            let theirs = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            assert_eq!(std::str::from_utf8(&ours).unwrap(), theirs, "{secs}");
        }
        let last = UNIX_EPOCH + Duration::from_secs(YEAR_10000 - 1);
        assert_eq!(imf_fixdate(last + Duration::from_secs(1)), None);
        assert_eq!(imf_fixdate(UNIX_EPOCH - Duration::from_secs(1)), None);
    }

    proptest::proptest! {
        /// The hand-written date is httpdate's, to the byte, over the whole range.
        #[test]
        fn imf_fixdate_is_httpdates(secs in 0u64..253_402_300_800) {
            let ours = imf(secs);
            let theirs = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            proptest::prop_assert_eq!(std::str::from_utf8(&ours).unwrap(), theirs);
        }
    }
}
