//! UTC timestamps without a date crate: the run needs exactly two formats.

use std::time::{SystemTime, UNIX_EPOCH};

/// A UTC time split into its civil fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UtcTime {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl UtcTime {
    /// Now.
    pub(crate) fn now() -> UtcTime {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        UtcTime::from_unix(i64::try_from(secs).unwrap_or(i64::MAX))
    }

    /// From seconds since the Unix epoch.
    pub(crate) fn from_unix(secs: i64) -> UtcTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        // `rem` is in 0..86_400, so these fit.
        let rem = u32::try_from(rem).unwrap_or(0);
        UtcTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
        }
    }

    /// `2026-11-30T12:04:05Z` (RFC 3339), for reports.
    pub(crate) fn rfc3339(self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `20261130T120405Z`, for directory names.
    pub(crate) fn compact(self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = if m <= 2 { y + 1 } else { y };
    (
        year,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_format_as_rfc3339() {
        assert_eq!(UtcTime::from_unix(0).rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(
            UtcTime::from_unix(951_827_696).rfc3339(),
            "2000-02-29T12:34:56Z"
        );
        assert_eq!(
            UtcTime::from_unix(1_798_761_599).rfc3339(),
            "2026-12-31T23:59:59Z"
        );
    }

    #[test]
    fn compact_form_has_no_separators_but_the_t() {
        assert_eq!(
            UtcTime::from_unix(951_827_696).compact(),
            "20000229T123456Z"
        );
    }
}
