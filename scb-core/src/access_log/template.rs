//! [`AccessLogTemplate`]: a line of the operator's own, `{variable}`s in text, parsed once
//! with [`crate::template::split`].

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use http::HeaderName;

/// An access-log line written as a template: text with `{variable}` placeholders, as
/// every template in scb (`{{` and `}}` are literal braces).
///
/// ```
/// use scb_core::access_log::AccessLogTemplate;
///
/// let combined_with_more: AccessLogTemplate =
///     r#"{client_ip} - "{method} {path}" {status} {bytes} {duration_ms} {trace_id} "{header.user-agent}""#
///         .parse()
///         .unwrap();
/// assert!(!combined_with_more.is_json());
/// let json = AccessLogTemplate::parse(
///     r#"{{"time":"{time_iso8601}","status":{status},"ua":{header.user-agent}}}"#,
/// )
/// .unwrap();
/// assert!(json.is_json());
/// let err = AccessLogTemplate::parse("{client_ip} {stauts}").unwrap_err();
/// assert_eq!(err.variable(), Some("stauts"));
/// ```
///
/// # Variables
///
/// | variable | value |
/// | --- | --- |
/// | `client_ip` | the client's address (through the layer's trusted proxies) |
/// | `time` | the combined format's time, `01/Dec/2026:21:49:32 +0000` |
/// | `time_iso8601` | `2026-12-01T21:49:32.645Z`, as the JSON format writes it |
/// | `method` | `GET` |
/// | `path` | the path as sent, without the query |
/// | `query` | the query as sent, without `?` |
/// | `target` | the path and query as sent (a `CONNECT`'s authority) |
/// | `protocol`, `version` | `HTTP/1.1`, `HTTP/2.0`, `HTTP/3.0` |
/// | `status` | the response's status |
/// | `bytes` | the body's size as the service produced it (0 when not known in advance) |
/// | `duration_ms`, `duration_us` | the time to the response head: `1.234` ms, `1234` µs |
/// | `request_id` | the request id |
/// | `host` | `Host`, or the target's authority |
/// | `route` | the route's name |
/// | `upstream` | the upstream that answered, or was tried last |
/// | `referer`, `user_agent` | the request's `Referer` and `User-Agent` |
/// | `header.NAME` | any request field, its values joined with `, ` |
/// | `resp_header.NAME` | any response field, its values joined with `, ` |
/// | `tls_version`, `tls_cipher` | `TLSv1.3`, `TLS13_AES_128_GCM_SHA256` (see [`TlsInfo`](crate::connection::TlsInfo)) |
/// | `upstream_status` | the status the upstream (proxy, FastCGI) answered with |
/// | `upstream_time_ms` | from the first try to the upstream's response head, in ms |
/// | `trace_id` | the request's [`TraceContext`](crate::trace_context::TraceContext) trace id |
///
/// A value the request does not have (no such field, a plain connection's TLS version, no
/// upstream answered, no trace) is written `-`.
///
/// # Escaping
///
/// Values come from clients, so each is escaped for the line's style, and a value cannot
/// end a line or its field:
///
/// - A template whose text starts (after spaces) with a brace, written `{{`, is a JSON
///   object, one per line. A value inside a JSON string (`"{header.x}"`) is escaped as
///   RFC 8259 says: `"` and `\` with a backslash, control characters as `\u00XX`, valid
///   UTF-8 as it is, bytes that are not UTF-8 as `\ufffd`; a missing one is `-`. A value
///   outside a string is a JSON value: numbers bare, texts as escaped strings, a missing
///   one `null`. So a JSON template writes valid JSON whatever the values.
/// - Any other template is written as the combined format writes its quoted fields: `"`
///   and `\` with a backslash, control characters and bytes past ASCII as `\xHH` (as
///   Apache and nginx do). Spaces are not escaped: put a value that comes from the client
///   inside double quotes, as the combined format does, so that a reader splitting on
///   spaces keeps it one field.
///
/// The text itself may hold no control character but tab, and no `\` right before a
/// variable (it would escape the value's first character).
#[derive(Clone)]
pub struct AccessLogTemplate(Arc<Parsed>);

struct Parsed {
    source: Box<str>,
    json: bool,
    pieces: Box<[Piece]>,
    request_headers: Box<[HeaderName]>,
    response_headers: Box<[HeaderName]>,
    tls: bool,
    trace: bool,
}

/// A piece of a template.
#[derive(Debug)]
pub(super) enum Piece {
    Text(Box<str>),
    /// A variable; `in_string` when a JSON template has it inside a string.
    Value {
        var: Var,
        in_string: bool,
    },
}

/// What a placeholder stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Var {
    ClientIp,
    Time,
    TimeIso8601,
    Method,
    Path,
    Query,
    Target,
    Protocol,
    Status,
    Bytes,
    DurationMs,
    DurationUs,
    RequestId,
    Host,
    Route,
    Upstream,
    Referer,
    UserAgent,
    /// The request field at this index of [`AccessLogTemplate::request_headers`].
    Header(usize),
    /// The response field at this index of [`AccessLogTemplate::response_headers`].
    ResponseHeader(usize),
    TlsVersion,
    TlsCipher,
    UpstreamStatus,
    UpstreamTimeMs,
    TraceId,
}

/// The variables by name, but for `header.NAME` and `resp_header.NAME`.
const VARIABLES: [(&str, Var); 24] = [
    ("client_ip", Var::ClientIp),
    ("time", Var::Time),
    ("time_iso8601", Var::TimeIso8601),
    ("method", Var::Method),
    ("path", Var::Path),
    ("query", Var::Query),
    ("target", Var::Target),
    ("protocol", Var::Protocol),
    ("version", Var::Protocol),
    ("status", Var::Status),
    ("bytes", Var::Bytes),
    ("duration_ms", Var::DurationMs),
    ("duration_us", Var::DurationUs),
    ("request_id", Var::RequestId),
    ("host", Var::Host),
    ("route", Var::Route),
    ("upstream", Var::Upstream),
    ("referer", Var::Referer),
    ("user_agent", Var::UserAgent),
    ("tls_version", Var::TlsVersion),
    ("tls_cipher", Var::TlsCipher),
    ("upstream_status", Var::UpstreamStatus),
    ("upstream_time_ms", Var::UpstreamTimeMs),
    ("trace_id", Var::TraceId),
];

/// The names an error lists.
const KNOWN: &str = "client_ip, time, time_iso8601, method, path, query, target, protocol, \
                     version, status, bytes, duration_ms, duration_us, request_id, host, route, \
                     upstream, referer, user_agent, header.NAME, resp_header.NAME, tls_version, \
                     tls_cipher, upstream_status, upstream_time_ms, trace_id";

/// Why a template was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessLogTemplateError {
    /// A placeholder names no variable.
    #[error("unknown variable `{{{variable}}}` (known: {known})", known = KNOWN)]
    UnknownVariable {
        /// The placeholder's name.
        variable: String,
    },
    /// `header.NAME` or `resp_header.NAME` with a `NAME` that is not a field name.
    #[error("`{{{variable}}}`: not a header name")]
    InvalidHeaderName {
        /// The placeholder's name.
        variable: String,
    },
    /// A `\` right before a placeholder would escape the value's first character (a `"`
    /// there would close the field).
    #[error("a `\\` right before `{{{variable}}}` would escape its value")]
    EscapedVariable {
        /// The placeholder's name.
        variable: String,
    },
    /// A `{` without its `}`.
    #[error("a `{{` without its `}}` (`{{{{` is a literal brace)")]
    Unclosed,
    /// The text has a control character other than tab: a line would not be one line.
    #[error("the text has a control character (only tab may be one)")]
    ControlCharacter,
}

impl AccessLogTemplateError {
    /// The placeholder the error is about, if it is about one.
    pub fn variable(&self) -> Option<&str> {
        match self {
            Self::UnknownVariable { variable }
            | Self::InvalidHeaderName { variable }
            | Self::EscapedVariable { variable } => Some(variable),
            Self::Unclosed | Self::ControlCharacter => None,
        }
    }
}

impl AccessLogTemplate {
    /// Parses `template`; see the [type's documentation](Self) for the variables and
    /// escaping.
    ///
    /// # Errors
    ///
    /// An unknown variable, a header name that is not one, a `{` without its `}`, a
    /// control character in the text, or a `\` right before a variable.
    pub fn parse(template: &str) -> Result<Self, AccessLogTemplateError> {
        if template.chars().any(|c| c.is_control() && c != '\t') {
            return Err(AccessLogTemplateError::ControlCharacter);
        }
        // Names are resolved here, so that each field is captured once however often the
        // template names it; the pieces carry indices.
        let request_headers = std::cell::RefCell::new(Vec::<HeaderName>::new());
        let response_headers = std::cell::RefCell::new(Vec::<HeaderName>::new());
        let index = |names: &std::cell::RefCell<Vec<HeaderName>>, name: HeaderName| {
            let mut names = names.borrow_mut();
            names.iter().position(|n| *n == name).unwrap_or_else(|| {
                names.push(name);
                names.len() - 1
            })
        };
        enum Raw {
            Text(Box<str>),
            Var(Var, String),
        }
        let raw = crate::template::split(
            template,
            Raw::Text,
            |name| {
                let header = |field: &str| {
                    HeaderName::from_bytes(field.as_bytes()).map_err(|_| {
                        AccessLogTemplateError::InvalidHeaderName {
                            variable: name.to_owned(),
                        }
                    })
                };
                let var = if let Some(field) = name.strip_prefix("header.") {
                    Var::Header(index(&request_headers, header(field)?))
                } else if let Some(field) = name.strip_prefix("resp_header.") {
                    Var::ResponseHeader(index(&response_headers, header(field)?))
                } else {
                    VARIABLES
                        .iter()
                        .find(|(known, _)| *known == name)
                        .map(|&(_, var)| var)
                        .ok_or_else(|| AccessLogTemplateError::UnknownVariable {
                            variable: name.to_owned(),
                        })?
                };
                Ok(Raw::Var(var, name.to_owned()))
            },
            || AccessLogTemplateError::Unclosed,
        )?;
        let json =
            matches!(raw.first(), Some(Raw::Text(text)) if text.trim_start().starts_with('{'));
        let mut pieces = Vec::with_capacity(raw.len());
        let mut strings = JsonStrings::default();
        let mut escaping = false;
        for piece in raw {
            match piece {
                Raw::Text(text) => {
                    strings.read(&text);
                    escaping = text.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1;
                    pieces.push(Piece::Text(text));
                }
                Raw::Var(var, name) => {
                    if escaping {
                        return Err(AccessLogTemplateError::EscapedVariable { variable: name });
                    }
                    pieces.push(Piece::Value {
                        var,
                        in_string: json && strings.inside,
                    });
                }
            }
        }
        let uses = |wanted: &[Var]| {
            pieces
                .iter()
                .any(|p| matches!(p, Piece::Value { var, .. } if wanted.contains(var)))
        };
        let tls = uses(&[Var::TlsVersion, Var::TlsCipher]);
        let trace = uses(&[Var::TraceId]);
        Ok(Self(Arc::new(Parsed {
            source: template.into(),
            json,
            tls,
            trace,
            pieces: pieces.into(),
            request_headers: request_headers.into_inner().into(),
            response_headers: response_headers.into_inner().into(),
        })))
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.0.source
    }

    /// Whether values are escaped for JSON: the text starts with a brace (`{{`).
    pub fn is_json(&self) -> bool {
        self.0.json
    }

    pub(super) fn pieces(&self) -> &[Piece] {
        &self.0.pieces
    }

    /// The request fields the template names, captured at request time.
    pub(super) fn request_headers(&self) -> &[HeaderName] {
        &self.0.request_headers
    }

    /// The response fields the template names, captured with the response head.
    pub(super) fn response_headers(&self) -> &[HeaderName] {
        &self.0.response_headers
    }

    /// Whether the template names the TLS version or cipher.
    pub(super) fn wants_tls(&self) -> bool {
        self.0.tls
    }

    /// Whether the template names the trace id.
    pub(super) fn wants_trace(&self) -> bool {
        self.0.trace
    }
}

/// Where a JSON text's strings start and end, read piece by piece.
#[derive(Default)]
struct JsonStrings {
    inside: bool,
    escaped: bool,
}

impl JsonStrings {
    fn read(&mut self, text: &str) {
        for b in text.bytes() {
            match (self.inside, self.escaped, b) {
                (true, true, _) => self.escaped = false,
                (true, false, b'\\') => self.escaped = true,
                (true, false, b'"') => self.inside = false,
                (false, _, b'"') => self.inside = true,
                _ => {}
            }
        }
    }
}

impl FromStr for AccessLogTemplate {
    type Err = AccessLogTemplateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Debug for AccessLogTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AccessLogTemplate")
            .field(&self.as_str())
            .finish()
    }
}

impl fmt::Display for AccessLogTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Templates are equal when written alike (what they parse to follows from the text).
impl PartialEq for AccessLogTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for AccessLogTemplate {}

impl Hash for AccessLogTemplate {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use http::{HeaderMap, HeaderValue, Method, StatusCode, Version};
    use proptest::prelude::*;

    use super::super::record::{AccessLogFormat, Dates, Record};
    use super::*;
    use crate::connection::TlsInfo;

    fn vars(t: &AccessLogTemplate) -> Vec<(Var, bool)> {
        t.pieces()
            .iter()
            .filter_map(|p| match p {
                Piece::Value { var, in_string } => Some((*var, *in_string)),
                Piece::Text(_) => None,
            })
            .collect()
    }

    #[test]
    fn every_variable_parses_and_headers_are_captured_once_each() {
        for (name, var) in VARIABLES {
            let t = AccessLogTemplate::parse(&format!("x {{{name}}}")).unwrap();
            assert_eq!(vars(&t), [(var, false)], "{name}");
            assert!(KNOWN.contains(name), "{name} missing from the error's list");
        }
        let t = AccessLogTemplate::parse(
            "{header.User-Agent} {header.x-a} {header.user-agent} {resp_header.content-type}",
        )
        .unwrap();
        assert_eq!(t.request_headers(), ["user-agent", "x-a"]);
        assert_eq!(t.response_headers(), ["content-type"]);
        assert_eq!(
            vars(&t),
            [
                (Var::Header(0), false),
                (Var::Header(1), false),
                (Var::Header(0), false),
                (Var::ResponseHeader(0), false)
            ]
        );
        assert!(!t.wants_tls() && !t.wants_trace());
        let t = AccessLogTemplate::parse("{tls_cipher} {trace_id}").unwrap();
        assert!(t.wants_tls() && t.wants_trace());
    }

    #[test]
    fn errors_name_the_variable() {
        let err = |t: &str| AccessLogTemplate::parse(t).unwrap_err();
        assert_eq!(
            err("{client_ip} {stauts}"),
            AccessLogTemplateError::UnknownVariable {
                variable: "stauts".into()
            }
        );
        assert!(
            err("{stauts}")
                .to_string()
                .starts_with("unknown variable `{stauts}` (known: client_ip, time,")
        );
        assert_eq!(
            err("{header.a b}"),
            AccessLogTemplateError::InvalidHeaderName {
                variable: "header.a b".into()
            }
        );
        assert_eq!(err("{header.}").variable(), Some("header."));
        assert_eq!(
            err("{resp_header.x(y)}").variable(),
            Some("resp_header.x(y)")
        );
        assert_eq!(err("{status"), AccessLogTemplateError::Unclosed);
        assert_eq!(
            err("{status}\n{bytes}"),
            AccessLogTemplateError::ControlCharacter
        );
        assert_eq!(
            err(r#""\{header.x}""#),
            AccessLogTemplateError::EscapedVariable {
                variable: "header.x".into()
            }
        );
        // An escaped backslash is fine.
        assert!(AccessLogTemplate::parse(r#""\\{header.x}"	{status}"#).is_ok());
    }

    #[test]
    fn a_leading_brace_makes_a_json_template_and_strings_are_followed() {
        let t = AccessLogTemplate::parse(
            r#"  {{"a":"{status}","b":{status},"c\"{{":"x{status}","d":[{status}]}}"#,
        )
        .unwrap();
        assert!(t.is_json());
        assert_eq!(
            vars(&t),
            [
                (Var::Status, true),
                (Var::Status, false),
                (Var::Status, true),
                (Var::Status, false)
            ]
        );
        // A placeholder first is not a brace of the text.
        let t = AccessLogTemplate::parse(r#"{status} "{status}""#).unwrap();
        assert!(!t.is_json());
        assert_eq!(vars(&t), [(Var::Status, false), (Var::Status, false)]);
    }

    /// A record with every field, as a request through a proxy over TLS leaves it.
    fn full() -> Record {
        full_with(b"curl/8.0", Some(b"https://r.example/"))
    }

    fn full_with(agent: &[u8], referer: Option<&[u8]>) -> Record {
        let mut r = Record::new(
            // 2026-12-01 21:49:32.645 UTC
            UNIX_EPOCH + Duration::from_millis(1_796_161_772_645),
            Some("203.0.113.9".parse().unwrap()),
            Method::GET,
            Version::HTTP_2,
            [
                Some(&b"req-1"[..]),
                Some(&b"example.com"[..]),
                Some(&b"/a/b?c=1&d"[..]),
                Some(agent),
                referer,
            ],
            0,
        );
        r.status = Some(StatusCode::OK);
        r.bytes = 12;
        r.duration = Duration::from_micros(1234);
        r.route = Some("site".into());
        r.upstream = Some("127.0.0.1:8081".parse().unwrap());
        r.upstream_status = Some(StatusCode::SERVICE_UNAVAILABLE);
        r.upstream_time = Some(Duration::from_micros(250));
        r.tls = Some(TlsInfo::new("TLSv1.3", Some("TLS13_AES_128_GCM_SHA256")));
        r.trace_id = Some([
            0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
            0x31, 0x9c,
        ]);
        r
    }

    /// A record with nothing the request may lack.
    fn bare() -> Record {
        Record::new(
            UNIX_EPOCH + Duration::from_millis(1_796_161_772_645),
            None,
            Method::POST,
            Version::HTTP_11,
            [None; 5],
            0,
        )
    }

    /// `record`'s line in `template`, with these request and response fields.
    fn line(
        template: &str,
        mut record: Record,
        request: &[(&str, &str)],
        response: &[(&str, &str)],
    ) -> String {
        let template = AccessLogTemplate::parse(template).unwrap();
        let map = |fields: &[(&str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in fields {
                map.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            map
        };
        record.push_fields(&map(request), template.request_headers());
        record.push_fields(&map(response), template.response_headers());
        let mut out = String::new();
        record.write(
            &AccessLogFormat::Template(template),
            &mut Dates::default(),
            &mut out,
        );
        out
    }

    const EVERY: &str = "{client_ip}|{time}|{time_iso8601}|{method}|{path}|{query}|{target}|\
                         {protocol}|{version}|{status}|{bytes}|{duration_ms}|{duration_us}|\
                         {request_id}|{host}|{route}|{upstream}|{referer}|{user_agent}|\
                         {header.x-a}|{resp_header.content-type}|{tls_version}|{tls_cipher}|\
                         {upstream_status}|{upstream_time_ms}|{trace_id}";

    #[test]
    fn every_variable_writes_its_value() {
        assert_eq!(
            line(
                EVERY,
                full(),
                &[("x-a", "1"), ("x-a", "2")],
                &[("content-type", "text/plain")]
            ),
            "203.0.113.9|01/Dec/2026:21:49:32 +0000|2026-12-01T21:49:32.645Z|GET|/a/b|c=1&d|\
             /a/b?c=1&d|HTTP/2.0|HTTP/2.0|200|12|1.234|1234|req-1|example.com|site|\
             127.0.0.1:8081|https://r.example/|curl/8.0|1, 2|text/plain|TLSv1.3|\
             TLS13_AES_128_GCM_SHA256|503|0.250|0af7651916cd43dd8448eb211c80319c\n"
        );
    }

    #[test]
    fn what_the_request_lacks_is_a_dash() {
        assert_eq!(
            line(EVERY, bare(), &[], &[]),
            "-|01/Dec/2026:21:49:32 +0000|2026-12-01T21:49:32.645Z|POST|-|-|-|HTTP/1.1|\
             HTTP/1.1|-|0|0.000|0|-|-|-|-|-|-|-|-|-|-|-|-|-\n"
        );
        // A query that is there but empty is empty.
        let r = Record::new(
            UNIX_EPOCH,
            None,
            Method::GET,
            Version::HTTP_11,
            [None, None, Some(&b"/x?"[..]), None, None],
            0,
        );
        assert_eq!(line("{path} [{query}]", r, &[], &[]), "/x []\n");
    }

    #[test]
    fn json_templates_write_json_values_outside_strings_and_escaped_text_inside() {
        let template = r#"{{"status":{status},"ms":{duration_ms},"ua":{user_agent},"id":"{request_id}","up":{upstream_status},"x":{header.x},"in":"{header.x}","client":{client_ip},"trace":{trace_id}}}"#;
        let written = line(template, full(), &[], &[]);
        assert_eq!(
            written,
            "{\"status\":200,\"ms\":1.234,\"ua\":\"curl/8.0\",\"id\":\"req-1\",\"up\":503,\"x\":null,\
             \"in\":\"-\",\"client\":\"203.0.113.9\",\"trace\":\"0af7651916cd43dd8448eb211c80319c\"}\n"
        );
        let missing = line(template, bare(), &[], &[]);
        let value: serde_json::Value = serde_json::from_str(&missing).unwrap();
        assert_eq!(value["status"], serde_json::Value::Null);
        assert_eq!(value["ua"], serde_json::Value::Null);
        assert_eq!(value["id"], "-");
        assert_eq!(value["trace"], serde_json::Value::Null);
    }

    #[test]
    fn the_combined_format_as_a_template_writes_the_same_line() {
        let combined = r#"{client_ip} - - [{time}] "{method} {target} {protocol}" {status} {bytes} "{referer}" "{user_agent}""#;
        for ua in [&b"curl/8.0"[..], b"evil\" \"x\\\xff\t\x1b\n"] {
            let record = || full_with(ua, None);
            let mut named = String::new();
            record().write(
                &AccessLogFormat::Combined,
                &mut Dates::default(),
                &mut named,
            );
            assert_eq!(line(combined, record(), &[], &[]), named);
        }
    }

    #[test]
    fn a_hostile_field_cannot_end_the_line_or_its_field_in_either_style() {
        let hostile = b"a\" \"forged\\\n\r\x1b[31m\xff\xc3\xa9";
        let mut r = bare();
        r.push_field([&hostile[..]]);
        let mut out = String::new();
        let t = AccessLogTemplate::parse(r#"{method} "{header.x}" {status}"#).unwrap();
        r.write(
            &AccessLogFormat::Template(t),
            &mut Dates::default(),
            &mut out,
        );
        assert_eq!(
            out,
            "POST \"a\\\" \\\"forged\\\\\\x0A\\x0D\\x1B[31m\\xFF\\xC3\\xA9\" -\n"
        );
        let mut r = bare();
        r.push_field([&hostile[..]]);
        let mut out = String::new();
        let t = AccessLogTemplate::parse(r#"{{"x":"{header.x}","y":{header.x}}}"#).unwrap();
        r.write(
            &AccessLogFormat::Template(t),
            &mut Dates::default(),
            &mut out,
        );
        assert_eq!(
            out,
            "{\"x\":\"a\\\" \\\"forged\\\\\\u000a\\u000d\\u001b[31m\\ufffd\u{e9}\",\
             \"y\":\"a\\\" \\\"forged\\\\\\u000a\\u000d\\u001b[31m\\ufffd\u{e9}\"}\n"
        );
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value.as_object().unwrap().len(), 2);
        assert_eq!(value["x"], *String::from_utf8_lossy(hostile));
    }

    /// Reads a combined-style quoted field back: `\"`, `\\` and `\xHH`; where it ends.
    fn unquote(line: &[u8]) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut at = 0;
        while line[at] != b'"' {
            if line[at] == b'\\' {
                match line[at + 1] {
                    b'x' => {
                        let hex = std::str::from_utf8(&line[at + 2..at + 4]).unwrap();
                        out.push(u8::from_str_radix(hex, 16).unwrap());
                        at += 4;
                    }
                    b => {
                        out.push(b);
                        at += 2;
                    }
                }
            } else {
                out.push(line[at]);
                at += 1;
            }
        }
        (out, at)
    }

    proptest! {
        /// Whatever bytes a field holds, a combined-style line is one line of printable
        /// ASCII, each quoted value ends at its own closing quote, and reads back as sent.
        #[test]
        fn combined_style_lines_stay_one_line_and_read_back(
            field in any::<Vec<u8>>(),
            agent in any::<Vec<u8>>(),
        ) {
            let mut r = Record::new(UNIX_EPOCH, None, Method::GET, Version::HTTP_11, [None, None, None, Some(&agent[..]), None], 0);
            r.push_field([&field[..]]);
            r.status = Some(StatusCode::OK);
            let t = AccessLogTemplate::parse(r#"{method} "{header.x}" "{user_agent}" {status}"#).unwrap();
            let mut out = String::new();
            r.write(&AccessLogFormat::Template(t), &mut Dates::default(), &mut out);
            let body = out.strip_suffix('\n').unwrap();
            prop_assert!(body.bytes().all(|b| (0x20..0x7f).contains(&b)), "{out:?}");
            let rest = body.strip_prefix("GET \"").unwrap().as_bytes();
            let (first, end) = unquote(rest);
            prop_assert_eq!(&first, &field);
            let rest = rest[end..].strip_prefix(b"\" \"").unwrap();
            let (second, end) = unquote(rest);
            prop_assert_eq!(&second, &agent);
            prop_assert_eq!(&rest[end..], b"\" 200");
        }

        /// Whatever bytes a field holds, a JSON-style line is one line that parses as one
        /// object with the template's keys, and the value is the field read as UTF-8.
        #[test]
        fn json_style_lines_parse_and_values_round_trip(
            field in any::<Vec<u8>>(),
            agent in any::<Vec<u8>>(),
        ) {
            let mut r = Record::new(UNIX_EPOCH, None, Method::GET, Version::HTTP_11, [None, None, None, Some(&agent[..]), None], 0);
            r.push_field([&field[..]]);
            let t = AccessLogTemplate::parse(r#"{{"in":"{header.x}","bare":{header.x},"ua":{user_agent},"s":{status}}}"#).unwrap();
            let mut out = String::new();
            r.write(&AccessLogFormat::Template(t), &mut Dates::default(), &mut out);
            prop_assert_eq!(out.matches('\n').count(), 1);
            prop_assert!(!out.contains('\r'));
            let value: serde_json::Value = serde_json::from_str(&out).unwrap();
            let object = value.as_object().unwrap();
            prop_assert_eq!(object.len(), 4);
            let sent = String::from_utf8_lossy(&field);
            prop_assert_eq!(object["in"].as_str(), Some(&*sent));
            prop_assert_eq!(object["bare"].as_str(), Some(&*sent));
            prop_assert_eq!(object["ua"].as_str(), Some(&*String::from_utf8_lossy(&agent)));
            prop_assert!(object["s"].is_null());
        }
    }
}
