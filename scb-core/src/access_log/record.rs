//! One request as the access log writes it, and the two formats it is written in.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::uri::Authority;
use http::{HeaderValue, Method, StatusCode, Uri, Version};

use crate::date::UtcTime;
use crate::request_id::Id;

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

/// What the access log records of one request.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) time: SystemTime,
    pub(crate) request_id: Option<Id>,
    pub(crate) client: Option<IpAddr>,
    pub(crate) host: Option<HeaderValue>,
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) version: Version,
    pub(crate) status: Option<StatusCode>,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
    pub(crate) user_agent: Option<HeaderValue>,
    pub(crate) referer: Option<HeaderValue>,
    pub(crate) route: Option<Arc<str>>,
    pub(crate) upstream: Option<Authority>,
}

impl Record {
    /// The path and query as received (for a `CONNECT` request, its authority).
    pub(crate) fn target(&self) -> &str {
        self.uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .or_else(|| self.uri.authority().map(Authority::as_str))
            .unwrap_or("-")
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

    /// The host the request named: its Host field, else the target's authority.
    pub(crate) fn host(&self) -> Option<&[u8]> {
        self.host
            .as_ref()
            .map(HeaderValue::as_bytes)
            .or_else(|| self.uri.authority().map(|a| a.as_str().as_bytes()))
    }

    /// Appends the line, newline included, in `format`.
    pub(crate) fn write(&self, format: AccessLogFormat, out: &mut String) {
        match format {
            AccessLogFormat::Combined => self.write_combined(out),
            AccessLogFormat::Json => self.write_json(out),
        }
    }

    fn write_combined(&self, out: &mut String) {
        let t = UtcTime::from(self.time);
        let _ = write!(
            out,
            "{} - - [{:02}/{}/{}:{:02}:{:02}:{:02} +0000] \"",
            self.client
                .map_or_else(|| "-".to_owned(), |ip| ip.to_string()),
            t.day,
            MONTHS[(t.month as usize).saturating_sub(1) % 12],
            t.year,
            t.hour,
            t.minute,
            t.second,
        );
        quoted(out, self.method.as_str().as_bytes());
        out.push(' ');
        quoted(out, self.target().as_bytes());
        out.push(' ');
        out.push_str(self.protocol());
        let _ = write!(
            out,
            "\" {} {} \"",
            self.status.map_or(0, |s| s.as_u16()),
            self.bytes
        );
        quoted(
            out,
            self.referer.as_ref().map_or(b"-", HeaderValue::as_bytes),
        );
        out.push_str("\" \"");
        quoted(
            out,
            self.user_agent.as_ref().map_or(b"-", HeaderValue::as_bytes),
        );
        out.push_str("\"\n");
    }

    fn write_json(&self, out: &mut String) {
        let since = self.time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let t = UtcTime::from(self.time);
        let _ = write!(
            out,
            "{{\"time\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\"",
            t.year,
            t.month,
            t.day,
            t.hour,
            t.minute,
            t.second,
            since.subsec_millis()
        );
        let field = |out: &mut String, name: &str, value: Option<&[u8]>| {
            let _ = write!(out, ",\"{name}\":");
            match value {
                Some(value) => {
                    out.push('"');
                    json_escaped(out, value);
                    out.push('"');
                }
                None => out.push_str("null"),
            }
        };
        field(
            out,
            "request_id",
            self.request_id.as_ref().map(|id| id.as_str().as_bytes()),
        );
        let client = self.client.map(|ip| ip.to_string());
        field(out, "client", client.as_deref().map(str::as_bytes));
        field(out, "host", self.host());
        field(out, "method", Some(self.method.as_str().as_bytes()));
        field(out, "path", Some(self.target().as_bytes()));
        field(out, "protocol", Some(self.protocol().as_bytes()));
        match self.status {
            Some(status) => {
                let _ = write!(out, ",\"status\":{}", status.as_u16());
            }
            None => out.push_str(",\"status\":null"),
        }
        let _ = write!(
            out,
            ",\"bytes\":{},\"duration_us\":{}",
            self.bytes,
            self.duration.as_micros()
        );
        field(
            out,
            "user_agent",
            self.user_agent.as_ref().map(HeaderValue::as_bytes),
        );
        field(
            out,
            "referer",
            self.referer.as_ref().map(HeaderValue::as_bytes),
        );
        field(out, "route", self.route.as_deref().map(str::as_bytes));
        field(
            out,
            "upstream",
            self.upstream.as_ref().map(|a| a.as_str().as_bytes()),
        );
        out.push_str("}\n");
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

    fn record() -> Record {
        Record {
            // 2026-12-01 21:49:32.645 UTC
            time: UNIX_EPOCH + Duration::from_millis(1_796_161_772_645),
            request_id: Id::new(HeaderValue::from_static("req-1")),
            client: Some("203.0.113.9".parse().unwrap()),
            host: Some(HeaderValue::from_static("example.com")),
            method: Method::GET,
            uri: "/a?b=1".parse().unwrap(),
            version: Version::HTTP_11,
            status: Some(StatusCode::OK),
            bytes: 12,
            duration: Duration::from_micros(345),
            user_agent: Some(HeaderValue::from_static("curl/8.0")),
            referer: None,
            route: Some("site".into()),
            upstream: None,
        }
    }

    #[test]
    fn combined_is_the_format_log_analysers_read() {
        let mut line = String::new();
        record().write(AccessLogFormat::Combined, &mut line);
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
        r.write(AccessLogFormat::Json, &mut line);
        assert_eq!(
            line,
            "{\"time\":\"2026-12-01T21:49:32.645Z\",\"request_id\":\"req-1\",\"client\":\"203.0.113.9\",\
             \"host\":\"example.com\",\"method\":\"GET\",\"path\":\"/a?b=1\",\"protocol\":\"HTTP/1.1\",\
             \"status\":200,\"bytes\":12,\"duration_us\":345,\"user_agent\":\"curl/8.0\",\"referer\":null,\
             \"route\":\"site\",\"upstream\":\"127.0.0.1:8081\"}\n"
        );
    }

    #[test]
    fn what_a_client_sends_cannot_forge_a_line_in_either_format() {
        let mut r = record();
        r.user_agent = Some(HeaderValue::from_bytes(b"evil\" \"x\\\xff\t").unwrap());
        r.status = None;
        let mut combined = String::new();
        r.write(AccessLogFormat::Combined, &mut combined);
        assert!(
            combined.ends_with(" 0 12 \"-\" \"evil\\\" \\\"x\\\\\\xFF\\x09\"\n"),
            "{combined}"
        );
        let mut json = String::new();
        r.write(AccessLogFormat::Json, &mut json);
        assert!(
            json.contains("\"status\":null")
                && json.contains("\"user_agent\":\"evil\\\" \\\"x\\\\\\u00ff\\u0009\""),
            "{json}"
        );
        assert_eq!(json.matches('\n').count(), 1);
    }
}
