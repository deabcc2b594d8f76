//! One request as the access log writes it, and the two formats it is written in.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::uri::Authority;
use http::{Method, StatusCode, Version};

use crate::date::{UtcTime, unix_secs};

/// How access-log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AccessLogFormat {
    /// The combined log format of Apache and nginx, which log analysers read:
    /// `client - - [time] "request" status bytes "referer" "user agent"`.
    #[default]
    Combined,
    /// One JSON object per line, with every field (request id, host, duration, route,
    /// upstream beside the combined ones).
    Json,
}

/// The fields a client sent, copied out of the request: a `HeaderValue` or `Uri` kept
/// until the writer's next round would keep the whole read buffer it points into, which
/// the connection would then have to allocate again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Text {
    RequestId = 0,
    Host = 1,
    Target = 2,
    UserAgent = 3,
    Referer = 4,
}

/// What the access log records of one request.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) time: SystemTime,
    pub(crate) client: Option<IpAddr>,
    pub(crate) method: Method,
    pub(crate) version: Version,
    pub(crate) status: Option<StatusCode>,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
    pub(crate) route: Option<Arc<str>>,
    pub(crate) upstream: Option<Authority>,
    /// The [`Text`] fields back to back, in one allocation.
    texts: Vec<u8>,
    /// Where each [`Text`] ends in `texts`, and whether it is there at all.
    ends: [(u16, bool); 5],
}

impl Record {
    /// A record of a request whose head is known; status, bytes, duration and upstream
    /// come with the response. Each text is cut at 64 KiB (request heads are smaller).
    pub(crate) fn new(
        time: SystemTime,
        client: Option<IpAddr>,
        method: Method,
        version: Version,
        texts: [Option<&[u8]>; 5],
    ) -> Self {
        let len = texts.iter().flatten().map(|t| t.len().min(0xffff)).sum();
        let mut buf = Vec::with_capacity(len);
        let mut ends = [(0, false); 5];
        for (end, text) in ends.iter_mut().zip(texts) {
            if let Some(text) = text {
                let room = usize::from(u16::MAX) - buf.len();
                buf.extend_from_slice(&text[..text.len().min(room)]);
            }
            *end = (u16::try_from(buf.len()).unwrap_or(u16::MAX), text.is_some());
        }
        Self {
            time,
            client,
            method,
            version,
            status: None,
            bytes: 0,
            duration: Duration::ZERO,
            route: None,
            upstream: None,
            texts: buf,
            ends,
        }
    }

    /// One of the texts, if the request had it.
    pub(crate) fn text(&self, which: Text) -> Option<&[u8]> {
        let i = which as usize;
        let (end, present) = self.ends[i];
        let start = if i == 0 { 0 } else { self.ends[i - 1].0 };
        present.then(|| &self.texts[usize::from(start)..usize::from(end)])
    }

    /// The path and query as received (for a `CONNECT` request, its authority).
    pub(crate) fn target(&self) -> &[u8] {
        self.text(Text::Target).unwrap_or(b"-")
    }

    pub(crate) fn protocol(&self) -> &'static str {
        match self.version {
            Version::HTTP_09 => "HTTP/0.9",
            Version::HTTP_10 => "HTTP/1.0",
            Version::HTTP_2 => "HTTP/2.0",
            Version::HTTP_3 => "HTTP/3.0",
            _ => "HTTP/1.1",
        }
    }

    /// Appends the line, newline included, in `format`.
    pub(crate) fn write(&self, format: AccessLogFormat, dates: &mut Dates, out: &mut String) {
        match format {
            AccessLogFormat::Combined => self.write_combined(dates, out),
            AccessLogFormat::Json => self.write_json(dates, out),
        }
    }

    fn write_combined(&self, dates: &mut Dates, out: &mut String) {
        match self.client {
            Some(ip) => address(out, ip),
            None => out.push('-'),
        }
        out.push_str(" - - [");
        out.push_str(&dates.at(self.time).combined);
        out.push_str("] \"");
        quoted(out, self.method.as_str().as_bytes());
        out.push(' ');
        quoted(out, self.target());
        out.push(' ');
        out.push_str(self.protocol());
        out.push_str("\" ");
        number(out, self.status.map_or(0, |s| u64::from(s.as_u16())));
        out.push(' ');
        number(out, self.bytes);
        out.push_str(" \"");
        quoted(out, self.text(Text::Referer).unwrap_or(b"-"));
        out.push_str("\" \"");
        quoted(out, self.text(Text::UserAgent).unwrap_or(b"-"));
        out.push_str("\"\n");
    }

    fn write_json(&self, dates: &mut Dates, out: &mut String) {
        let millis = self
            .time
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_millis();
        out.push_str("{\"timestamp\":\"");
        out.push_str(&dates.at(self.time).iso);
        let _ = write!(out, ".{millis:03}Z\"");
        let field = |out: &mut String, name: &str, value: Option<&[u8]>| {
            out.push_str(",\"");
            out.push_str(name);
            out.push_str("\":");
            match value {
                Some(value) => {
                    out.push('"');
                    json_escaped(out, value);
                    out.push('"');
                }
                None => out.push_str("null"),
            }
        };
        field(out, "request_id", self.text(Text::RequestId));
        match self.client {
            // An address needs no escaping.
            Some(ip) => {
                out.push_str(",\"client\":\"");
                address(out, ip);
                out.push('"');
            }
            None => out.push_str(",\"client\":null"),
        }
        field(out, "host", self.text(Text::Host));
        field(out, "method", Some(self.method.as_str().as_bytes()));
        field(out, "path", Some(self.target()));
        field(out, "protocol", Some(self.protocol().as_bytes()));
        out.push_str(",\"status\":");
        match self.status {
            Some(status) => number(out, u64::from(status.as_u16())),
            None => out.push_str("null"),
        }
        out.push_str(",\"bytes\":");
        number(out, self.bytes);
        out.push_str(",\"duration_us\":");
        number(
            out,
            u64::try_from(self.duration.as_micros()).unwrap_or(u64::MAX),
        );
        field(out, "user_agent", self.text(Text::UserAgent));
        field(out, "referer", self.text(Text::Referer));
        field(out, "route", self.route.as_deref().map(str::as_bytes));
        field(
            out,
            "upstream",
            self.upstream.as_ref().map(|a| a.as_str().as_bytes()),
        );
        out.push_str("}\n");
    }
}

/// The date texts of the last second a line was written for: formatting a date is most
/// of a line's cost, and a busy log writes many lines per second.
#[derive(Debug, Default)]
pub(crate) struct Dates {
    secs: Option<i64>,
    /// `01/Dec/2026:21:49:32 +0000`
    combined: String,
    /// `2026-12-01T21:49:32`
    iso: String,
}

impl Dates {
    fn at(&mut self, time: SystemTime) -> &Self {
        let secs = unix_secs(time);
        if self.secs != Some(secs) {
            let t = UtcTime::from_unix(secs);
            self.combined.clear();
            let _ = write!(
                self.combined,
                "{:02}/{}/{}:{:02}:{:02}:{:02} +0000",
                t.day,
                MONTHS[(t.month as usize).saturating_sub(1) % 12],
                t.year,
                t.hour,
                t.minute,
                t.second,
            );
            self.iso.clear();
            let _ = write!(
                self.iso,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                t.year, t.month, t.day, t.hour, t.minute, t.second
            );
            self.secs = Some(secs);
        }
        self
    }
}

/// An address; IPv4 by hand (`Display` measured ~900 instructions, most of a line).
fn address(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                number(out, u64::from(octet));
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// A decimal number, without `fmt`'s padding machinery.
fn number(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Inside double quotes of the combined format: `"` and `\` escaped, and bytes that are
/// not printable ASCII as `\xHH` (as nginx does), so that a client cannot forge a line.
fn quoted(out: &mut String, value: &[u8]) {
    for &b in value {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02X}");
            }
        }
    }
}

/// Inside a JSON string. Field values are bytes: those past ASCII (obs-text) are written
/// as the Latin-1 characters they are, escaped, so the line is valid UTF-8 JSON whatever
/// the client sent.
fn json_escaped(out: &mut String, value: &[u8]) {
    for &b in value {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\u{:04x}", u32::from(b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_with(user_agent: &[u8]) -> Record {
        let mut r = Record::new(
            // 2026-12-01 21:49:32.645 UTC
            UNIX_EPOCH + Duration::from_millis(1_796_161_772_645),
            Some("203.0.113.9".parse().unwrap()),
            Method::GET,
            Version::HTTP_11,
            [
                Some(&b"req-1"[..]),
                Some(&b"example.com"[..]),
                Some(&b"/a?b=1"[..]),
                Some(user_agent),
                None,
            ],
        );
        r.status = Some(StatusCode::OK);
        r.bytes = 12;
        r.duration = Duration::from_micros(345);
        r.route = Some("site".into());
        r
    }

    fn record() -> Record {
        record_with(b"curl/8.0")
    }

    #[test]
    fn combined_is_the_format_log_analysers_read() {
        let mut line = String::new();
        record().write(AccessLogFormat::Combined, &mut Dates::default(), &mut line);
        assert_eq!(
            line,
            "203.0.113.9 - - [01/Dec/2026:21:49:32 +0000] \"GET /a?b=1 HTTP/1.1\" 200 12 \"-\" \"curl/8.0\"\n"
        );
    }

    #[test]
    fn json_has_every_field() {
        let mut line = String::new();
        let mut r = record();
        r.upstream = Some("127.0.0.1:8081".parse().unwrap());
        r.write(AccessLogFormat::Json, &mut Dates::default(), &mut line);
        assert_eq!(
            line,
            "{\"timestamp\":\"2026-12-01T21:49:32.645Z\",\"request_id\":\"req-1\",\"client\":\"203.0.113.9\",\
             \"host\":\"example.com\",\"method\":\"GET\",\"path\":\"/a?b=1\",\"protocol\":\"HTTP/1.1\",\
             \"status\":200,\"bytes\":12,\"duration_us\":345,\"user_agent\":\"curl/8.0\",\"referer\":null,\
             \"route\":\"site\",\"upstream\":\"127.0.0.1:8081\"}\n"
        );
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "10.20.255.7",
            "255.255.255.255",
            "::1",
            "2001:db8::8",
        ] {
            let mut out = String::new();
            address(&mut out, ip.parse().unwrap());
            assert_eq!(out, ip);
        }
    }

    #[test]
    fn what_a_client_sends_cannot_forge_a_line_in_either_format() {
        let mut r = record_with(b"evil\" \"x\\\xff\t");
        r.status = None;
        let mut dates = Dates::default();
        let mut combined = String::new();
        r.write(AccessLogFormat::Combined, &mut dates, &mut combined);
        assert!(
            combined.ends_with(" 0 12 \"-\" \"evil\\\" \\\"x\\\\\\xFF\\x09\"\n"),
            "{combined}"
        );
        let mut json = String::new();
        r.write(AccessLogFormat::Json, &mut dates, &mut json);
        assert!(
            json.contains("\"status\":null")
                && json.contains("\"user_agent\":\"evil\\\" \\\"x\\\\\\u00ff\\u0009\""),
            "{json}"
        );
        assert_eq!(json.matches('\n').count(), 1);
    }
}
