//! One request as the access log writes it, and the formats it is written in.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

use super::template::{AccessLogTemplate, Piece, Var};
use crate::connection::TlsInfo;
use crate::date::{UtcTime, unix_secs};

/// How access-log lines are written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AccessLogFormat {
    /// The combined log format of Apache and nginx, which log analysers read:
    /// `client - - [time] "request" status bytes "referer" "user agent"`.
    #[default]
    Combined,
    /// One JSON object per line, with every field (request id, host, duration, route,
    /// upstream beside the combined ones).
    Json,
    /// A line of the operator's own: see [`AccessLogTemplate`] for its variables and how
    /// values are escaped. Request and response fields are captured only when it names
    /// them.
    Template(AccessLogTemplate),
}

impl AccessLogFormat {
    /// The template, for a [`Template`](Self::Template) format.
    pub fn template(&self) -> Option<&AccessLogTemplate> {
        match self {
            Self::Template(template) => Some(template),
            Self::Combined | Self::Json => None,
        }
    }
}

impl From<AccessLogTemplate> for AccessLogFormat {
    fn from(template: AccessLogTemplate) -> Self {
        Self::Template(template)
    }
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
    /// The status the upstream answered with, and how long it took to.
    pub(crate) upstream_status: Option<StatusCode>,
    pub(crate) upstream_time: Option<Duration>,
    /// Filled only for a template that names them.
    pub(crate) tls: Option<TlsInfo>,
    pub(crate) trace_id: Option<[u8; 16]>,
    /// The [`Text`] fields back to back, then the header fields a template names (see
    /// [`push_fields`](Self::push_fields)), in one allocation.
    texts: Vec<u8>,
    /// Where each [`Text`] ends in `texts`, and whether it is there at all.
    ends: [(u16, bool); 5],
}

impl Record {
    /// A record of a request whose head is known; status, bytes, duration and upstream
    /// come with the response. Each text is cut at 64 KiB (request heads are smaller).
    /// `room` is reserved beyond the texts, for the header fields a template names
    /// ([`fields_len`]).
    pub(crate) fn new(
        time: SystemTime,
        client: Option<IpAddr>,
        method: Method,
        version: Version,
        texts: [Option<&[u8]>; 5],
        room: usize,
    ) -> Self {
        let len: usize = texts.iter().flatten().map(|t| t.len().min(0xffff)).sum();
        let mut buf = Vec::with_capacity(len + room);
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
            upstream_status: None,
            upstream_time: None,
            tls: None,
            trace_id: None,
            texts: buf,
            ends,
        }
    }

    /// Appends the values of the fields `names` in `headers` (several joined with `, `,
    /// each cut at [`MAX_FIELD`]), each behind its length: the request's at request
    /// time, the response's with its head. [`field`](Self::field) finds them by index.
    pub(crate) fn push_fields(&mut self, headers: &HeaderMap, names: &[HeaderName]) {
        for name in names {
            self.push_field(headers.get_all(name).iter().map(HeaderValue::as_bytes));
        }
    }

    /// Appends one field's `values` (none: the message lacks it) behind their length.
    pub(super) fn push_field<'v>(&mut self, values: impl IntoIterator<Item = &'v [u8]>) {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            self.texts.extend_from_slice(&ABSENT.to_le_bytes());
            return;
        };
        let at = self.texts.len();
        self.texts.extend_from_slice(&[0, 0]);
        let mut room = MAX_FIELD;
        let mut push = |bytes: &[u8]| {
            let taken = bytes.len().min(room);
            self.texts.extend_from_slice(&bytes[..taken]);
            room -= taken;
        };
        push(first);
        for value in values {
            push(b", ");
            push(value);
        }
        let len = u16::try_from(MAX_FIELD - room).unwrap_or(ABSENT - 1);
        self.texts[at..at + 2].copy_from_slice(&len.to_le_bytes());
    }

    /// The `index`th field value [`push_fields`](Self::push_fields) appended, if the
    /// message had the field.
    pub(crate) fn field(&self, index: usize) -> Option<&[u8]> {
        let mut rest = &self.texts[usize::from(self.ends[4].0)..];
        for at in 0..=index {
            let (len, tail) = rest.split_first_chunk::<2>()?;
            let len = u16::from_le_bytes(*len);
            let (value, tail) = if len == ABSENT {
                (None, tail)
            } else {
                let (value, tail) = tail.split_at_checked(usize::from(len))?;
                (Some(value), tail)
            };
            if at == index {
                return value;
            }
            rest = tail;
        }
        None
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
    pub(crate) fn write(&self, format: &AccessLogFormat, dates: &mut Dates, out: &mut String) {
        match format {
            AccessLogFormat::Combined => self.write_combined(dates, out),
            AccessLogFormat::Json => self.write_json(dates, out),
            AccessLogFormat::Template(template) => self.write_template(template, dates, out),
        }
    }

    fn write_template(&self, template: &AccessLogTemplate, dates: &mut Dates, out: &mut String) {
        let json = template.is_json();
        for piece in template.pieces() {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Value { var, in_string } => {
                    let requested = template.request_headers().len();
                    self.value(*var, requested, dates)
                        .write(out, json, *in_string);
                }
            }
        }
        out.push('\n');
    }

    /// What `var` is for this request; `requested` is how many request fields come
    /// before the response's.
    fn value<'a>(&'a self, var: Var, requested: usize, dates: &'a mut Dates) -> Value<'a> {
        let text = |t: Option<&'a [u8]>| t.map_or(Value::Missing, Value::Text);
        let target = self.text(Text::Target);
        let split = |t: &'a [u8]| {
            let at = t.iter().position(|&b| b == b'?');
            (&t[..at.unwrap_or(t.len())], at.map(|at| &t[at + 1..]))
        };
        match var {
            Var::ClientIp => self.client.map_or(Value::Missing, Value::Ip),
            Var::Time => Value::Plain(&dates.at(self.time).combined),
            Var::TimeIso8601 => {
                let millis = self
                    .time
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .subsec_millis();
                Value::Iso(&dates.at(self.time).iso, millis)
            }
            Var::Method => Value::Text(self.method.as_str().as_bytes()),
            Var::Path => text(target.map(|t| split(t).0)),
            Var::Query => text(target.and_then(|t| split(t).1)),
            Var::Target => text(target),
            Var::Protocol => Value::Plain(self.protocol()),
            Var::Status => self
                .status
                .map_or(Value::Missing, |s| Value::Number(u64::from(s.as_u16()))),
            Var::Bytes => Value::Number(self.bytes),
            Var::DurationMs => Value::Millis(self.duration),
            Var::DurationUs => {
                Value::Number(u64::try_from(self.duration.as_micros()).unwrap_or(u64::MAX))
            }
            Var::RequestId => text(self.text(Text::RequestId)),
            Var::Host => text(self.text(Text::Host)),
            Var::Route => text(self.route.as_deref().map(str::as_bytes)),
            Var::Upstream => text(self.upstream.as_ref().map(|a| a.as_str().as_bytes())),
            Var::Referer => text(self.text(Text::Referer)),
            Var::UserAgent => text(self.text(Text::UserAgent)),
            Var::Header(i) => text(self.field(i)),
            Var::ResponseHeader(i) => text(self.field(requested + i)),
            Var::TlsVersion => text(self.tls.map(|t| t.version.as_bytes())),
            Var::TlsCipher => text(self.tls.and_then(|t| t.cipher).map(str::as_bytes)),
            Var::UpstreamStatus => self
                .upstream_status
                .map_or(Value::Missing, |s| Value::Number(u64::from(s.as_u16()))),
            Var::UpstreamTimeMs => self.upstream_time.map_or(Value::Missing, Value::Millis),
            Var::TraceId => self.trace_id.as_ref().map_or(Value::Missing, Value::Hex),
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

/// How long a captured header value may be: its length is two bytes, and [`ABSENT`] is
/// taken.
const MAX_FIELD: usize = u16::MAX as usize - 1;

/// The length that marks a field the message did not have.
const ABSENT: u16 = u16::MAX;

/// The room [`Record::push_fields`] takes for `names` in `headers`: what the record
/// reserves so that the request's fields cost no allocation of their own.
pub(crate) fn fields_len(headers: &HeaderMap, names: &[HeaderName]) -> usize {
    names
        .iter()
        .map(|name| {
            let joined: usize = headers
                .get_all(name)
                .iter()
                .enumerate()
                .map(|(i, v)| v.len() + if i == 0 { 0 } else { 2 })
                .sum();
            2 + joined.min(MAX_FIELD)
        })
        .sum()
}

/// One variable's value in a template, written as the template's style says.
enum Value<'a> {
    Missing,
    Number(u64),
    /// Milliseconds, to the microsecond: `1.234`.
    Millis(Duration),
    /// Bytes that may come from the client: escaped.
    Text(&'a [u8]),
    /// Text of scb's own that needs no escaping (dates, protocol names).
    Plain(&'a str),
    Ip(IpAddr),
    /// The ISO 8601 date and time to the second, and the milliseconds.
    Iso(&'a str, u32),
    Hex(&'a [u8; 16]),
}

impl Value<'_> {
    /// Appends the value: in a JSON template, outside a string, as a JSON value (a text
    /// quoted, a missing one `null`); otherwise escaped for the style, `-` when missing.
    fn write(self, out: &mut String, json: bool, in_string: bool) {
        let bare = json && !in_string;
        let quote = bare && !matches!(self, Self::Missing | Self::Number(_) | Self::Millis(_));
        if quote {
            out.push('"');
        }
        match self {
            Self::Missing => out.push_str(if bare { "null" } else { "-" }),
            Self::Number(n) => number(out, n),
            Self::Millis(d) => {
                let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
                number(out, micros / 1000);
                let fraction = micros % 1000;
                out.push('.');
                for digit in [fraction / 100, fraction / 10 % 10, fraction % 10] {
                    out.push(char::from(b'0' + digit as u8));
                }
            }
            Self::Text(bytes) if json => json_text(out, bytes),
            Self::Text(bytes) => quoted(out, bytes),
            Self::Plain(text) => out.push_str(text),
            Self::Ip(ip) => address(out, ip),
            Self::Iso(date, millis) => {
                out.push_str(date);
                let _ = write!(out, ".{millis:03}Z");
            }
            Self::Hex(id) => {
                for b in id {
                    let _ = write!(out, "{b:02x}");
                }
            }
        }
        if quote {
            out.push('"');
        }
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

/// Inside a JSON string, as RFC 8259 says: `"` and `\` behind a backslash, control
/// characters (and DEL) as `\u00XX`, valid UTF-8 as it is, and each run of bytes that is
/// not UTF-8 as `\ufffd` (as `String::from_utf8_lossy` reads them).
fn json_text(out: &mut String, value: &[u8]) {
    for chunk in value.utf8_chunks() {
        let mut text = chunk.valid();
        while let Some(at) = text
            .bytes()
            .position(|b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f)
        {
            out.push_str(&text[..at]);
            match text.as_bytes()[at] {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b => {
                    let _ = write!(out, "\\u{:04x}", u32::from(b));
                }
            }
            text = &text[at + 1..];
        }
        out.push_str(text);
        if !chunk.invalid().is_empty() {
            out.push_str("\\ufffd");
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
            0,
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
        record().write(&AccessLogFormat::Combined, &mut Dates::default(), &mut line);
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
        r.write(&AccessLogFormat::Json, &mut Dates::default(), &mut line);
        assert_eq!(
            line,
            "{\"timestamp\":\"2026-12-01T21:49:32.645Z\",\"request_id\":\"req-1\",\"client\":\"203.0.113.9\",\
             \"host\":\"example.com\",\"method\":\"GET\",\"path\":\"/a?b=1\",\"protocol\":\"HTTP/1.1\",\
             \"status\":200,\"bytes\":12,\"duration_us\":345,\"user_agent\":\"curl/8.0\",\"referer\":null,\
             \"route\":\"site\",\"upstream\":\"127.0.0.1:8081\"}\n"
        );
    }

    #[test]
    fn fields_fill_the_room_reserved_for_them_and_are_found_by_index() {
        let mut headers = HeaderMap::new();
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        headers.append("x-b", HeaderValue::from_static(""));
        headers.append(
            "x-c",
            HeaderValue::from_bytes("\u{e9}t\u{e9}".as_bytes()).unwrap(),
        );
        let names: Vec<HeaderName> = ["x-a", "x-none", "x-b", "x-c"]
            .into_iter()
            .map(HeaderName::from_static)
            .collect();
        let room = fields_len(&headers, &names);
        let mut r = Record::new(
            UNIX_EPOCH,
            None,
            Method::GET,
            Version::HTTP_11,
            [None, Some(&b"host"[..]), Some(&b"/"[..]), None, None],
            room,
        );
        let capacity = r.texts.capacity();
        r.push_fields(&headers, &names);
        // One allocation: the fields took exactly the room reserved.
        assert_eq!((r.texts.capacity(), r.texts.len()), (capacity, capacity));
        assert_eq!(r.field(0), Some(&b"1, 2"[..]));
        assert_eq!(r.field(1), None);
        assert_eq!(r.field(2), Some(&b""[..]));
        assert_eq!(r.field(3), Some("\u{e9}t\u{e9}".as_bytes()));
        // Past the last (a response's fields, when the service failed): none.
        assert_eq!(r.field(4), None);
        assert_eq!(r.text(Text::Host), Some(&b"host"[..]));
    }

    #[test]
    fn a_field_longer_than_its_length_can_say_is_cut() {
        let mut r = Record::new(
            UNIX_EPOCH,
            None,
            Method::GET,
            Version::HTTP_11,
            [None; 5],
            0,
        );
        let long = vec![b'a'; MAX_FIELD - 1];
        r.push_field([&long[..], b"bcd"]);
        r.push_field([&b"next"[..]]);
        assert_eq!(r.field(0).unwrap().len(), MAX_FIELD);
        assert!(r.field(0).unwrap().ends_with(b"a,"));
        assert_eq!(r.field(1), Some(&b"next"[..]));
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
        r.write(&AccessLogFormat::Combined, &mut dates, &mut combined);
        assert!(
            combined.ends_with(" 0 12 \"-\" \"evil\\\" \\\"x\\\\\\xFF\\x09\"\n"),
            "{combined}"
        );
        let mut json = String::new();
        r.write(&AccessLogFormat::Json, &mut dates, &mut json);
        assert!(
            json.contains("\"status\":null")
                && json.contains("\"user_agent\":\"evil\\\" \\\"x\\\\\\u00ff\\u0009\""),
            "{json}"
        );
        assert_eq!(json.matches('\n').count(), 1);
    }
}
