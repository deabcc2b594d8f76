//! HTTP/1.1 wire pieces shared by scb's server driver and scb-proxy's upstream client:
//! one strict reading of the framing rules on both sides of a proxy, so that the two
//! never disagree about where a message ends.

pub mod chunked;
mod fields;

pub use fields::{FieldError, FieldOffsets, has_any};

/// 1*DIGIT and nothing else (no sign, no whitespace, no list), without overflow.
pub fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Strips optional whitespace (`OWS = *( SP / HTAB )`, RFC 9110 5.6.3) from both ends of
/// a field value or list element; nothing else counts as whitespace here.
///
/// ```
/// assert_eq!(scb_core::http1::trim_ows(b" \t gzip;q=1\t "), b"gzip;q=1");
/// ```
pub fn trim_ows(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

/// `value` in lower-case hex without leading zeros, as `{:x}` writes it: chunk sizes and
/// entity-tags, written per message without the formatting machinery (about a thousand
/// instructions for a `format!`, a tenth of that here).
///
/// ```
/// let hex = scb_core::http1::lower_hex(0x1f40);
/// assert_eq!(hex.as_str(), "1f40");
/// assert_eq!(scb_core::http1::lower_hex(0).as_bytes(), b"0");
/// ```
pub fn lower_hex(value: u64) -> LowerHex {
    // Leading zeros dropped, one digit kept for 0.
    let start = (value.leading_zeros() / 4).min(15) as usize;
    LowerHex {
        digits: hex_digits(value),
        start,
    }
}

/// `n` as 16 lowercase hex digits, leading zeros kept, most significant first: request ids
/// and [`lower_hex`]. Without a loop: each nibble is spread into a byte of its own, then
/// `'0'` or `'a' - 10` is added to all of them at once (a digit loop over a `u128` was most
/// of the 240 instructions a request id took).
pub(crate) fn hex_digits(n: u64) -> [u8; 16] {
    // The eight nibbles of `half` into the eight bytes of a u64, nibble i in byte i.
    let spread = |half: u32| {
        let mut x = u64::from(half);
        x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
        x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
        (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f
    };
    // Per byte v (0..=15): v + 6 reaches 16 exactly when v is a letter; no byte carries
    // into the next, as every sum stays below 256.
    let ascii = |x: u64| {
        let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        (x + 0x3030_3030_3030_3030 + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
    };
    let mut out = [0u8; 16];
    #[expect(clippy::cast_possible_truncation, reason = "the two halves, by design")]
    let (high, low) = ((n >> 32) as u32, n as u32);
    out[..8].copy_from_slice(&ascii(spread(high)));
    out[8..].copy_from_slice(&ascii(spread(low)));
    out
}

/// The text [`lower_hex`] wrote.
#[derive(Clone, Copy, Debug)]
pub struct LowerHex {
    digits: [u8; 16],
    start: usize,
}

impl LowerHex {
    /// The digits, as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }

    /// The digits, as text.
    pub fn as_str(&self) -> &str {
        // Hex digits are ASCII.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

/// What a `Transfer-Encoding` field value makes of a message's body: the one reading of
/// the field for the server's requests and the proxy's upstream responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferCoding {
    /// `chunked` alone: the body is chunked.
    Chunked,
    /// Other codings under a final `chunked` (`gzip, chunked`): framed, but with a coding
    /// scb would have to undo; a server answers 501 (RFC 9112 6.1).
    Layered,
    /// The codings do not end in `chunked`: a request's length cannot be known (400,
    /// RFC 9112 6.3), a response would end only at close.
    NotChunked,
}

/// Reads a `Transfer-Encoding` field value. Empty list elements are ignored as RFC 9110
/// 5.6.1 requires (`, chunked` is `chunked`); coding names are case-insensitive.
///
/// ```
/// use scb_core::http1::{TransferCoding, transfer_coding};
///
/// assert_eq!(transfer_coding(b"chunked"), TransferCoding::Chunked);
/// assert_eq!(transfer_coding(b" ,Chunked, "), TransferCoding::Chunked);
/// assert_eq!(transfer_coding(b"gzip, chunked"), TransferCoding::Layered);
/// assert_eq!(transfer_coding(b"chunked, gzip"), TransferCoding::NotChunked);
/// ```
pub fn transfer_coding(value: &[u8]) -> TransferCoding {
    let mut codings = value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|c| !c.is_empty());
    let Some(last) = codings.next_back() else {
        return TransferCoding::NotChunked;
    };
    if !last.eq_ignore_ascii_case(b"chunked") {
        TransferCoding::NotChunked
    } else if codings.next().is_some() {
        TransferCoding::Layered
    } else {
        TransferCoding::Chunked
    }
}

/// Whether `value` is a valid `Host` field value or HTTP/2 `:authority` for a server:
/// RFC 3986's `host [ ":" port ]` (RFC 9112 §3.2, RFC 9110 §7.2), without userinfo.
///
/// `host` is an IP literal in brackets (IPv6, or `v1.x`-style IPvFuture), an IPv4 address
/// or a registered name (letters, digits, `-._~`, `!$&'()*+,;=` and `%XX`); `port` is at
/// most five digits up to 65535, and may be empty after the colon as the grammar allows.
/// An empty value is valid (RFC 9112 requires it when the target has no authority).
/// Anything else is refused: spaces, control characters, `/`, `?`, `#`, `@`, a second
/// colon outside brackets. A Host flows into redirects, forwarded headers, logs and
/// host-based routing, so a server must answer 400 rather than pass it on.
///
/// ```
/// use scb_core::http1::is_valid_host;
///
/// assert!(is_valid_host(b"example.com:8080"));
/// assert!(is_valid_host(b"[::1]:443"));
/// assert!(!is_valid_host(b"a b/c"));
/// assert!(!is_valid_host(b"user@example.com"));
/// assert!(!is_valid_host(b"example.com:99999"));
/// ```
pub fn is_valid_host(value: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        let Some(end) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..end];
        if !is_ip_literal(literal) {
            return false;
        }
        match &rest[end + 1..] {
            [] => return true,
            [b':', port @ ..] => (&[][..], port),
            _ => return false,
        }
    } else {
        match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon + 1..]),
            None => (value, &[][..]),
        }
    };
    is_reg_name(host) && is_port(port)
}

/// `*( unreserved / pct-encoded / sub-delims )`, which includes IPv4 addresses.
fn is_reg_name(name: &[u8]) -> bool {
    // Every request carries a Host: one table lookup per byte, `%` the only detour.
    if name.iter().all(|&b| REG_NAME[usize::from(b)]) {
        return true;
    }
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'%' => {
                let hex = |j: usize| name.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
            }
            b if REG_NAME[usize::from(b)] => i += 1,
            _ => return false,
        }
    }
    true
}

/// The bytes a registered name may hold as they are: unreserved and sub-delims.
const REG_NAME: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = is_unreserved(b as u8) || is_sub_delim(b as u8);
        b += 1;
    }
    table
};

/// What may stand between the brackets: an IPv6 address (hex digits, colons, and dots for
/// an embedded IPv4 address), or `v` HEXDIG `.` then unreserved, sub-delims and colons.
fn is_ip_literal(literal: &[u8]) -> bool {
    match literal {
        [] => false,
        [b'v' | b'V', rest @ ..] => {
            let Some(dot) = rest.iter().position(|&b| b == b'.') else {
                return false;
            };
            dot > 0
                && rest[..dot].iter().all(u8::is_ascii_hexdigit)
                && rest.len() > dot + 1
                && rest[dot + 1..]
                    .iter()
                    .all(|&b| is_unreserved(b) || is_sub_delim(b) || b == b':')
        }
        _ => {
            literal.contains(&b':')
                && literal
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
    }
}

fn is_port(port: &[u8]) -> bool {
    port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
        && port.iter().fold(0u32, |n, &b| n * 10 + u32::from(b - b'0')) <= 65_535
}

const fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

const fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

/// The options of one `Connection` field value (RFC 9110 §7.6.1): its comma-separated
/// tokens, trimmed, empty ones left out. The one reading of `Connection` for the server's
/// request heads and responses and for the proxy's upstream responses and forwarding.
///
/// ```
/// let tokens: Vec<&[u8]> = scb_core::http1::connection_tokens(b" keep-alive,, Upgrade ").collect();
/// assert_eq!(tokens, [&b"keep-alive"[..], b"Upgrade"]);
/// ```
pub fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty())
}

/// What the `Connection` fields of a message ask of the connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// `close`: no message after this one.
    pub close: bool,
    /// `keep-alive`: an HTTP/1.0 peer asks to keep the connection.
    pub keep_alive: bool,
    /// `upgrade`: the `Upgrade` field is meant for this hop.
    pub upgrade: bool,
}

impl ConnectionOptions {
    /// Adds what one `Connection` field value says (case-insensitively).
    pub fn add(&mut self, value: &[u8]) {
        for token in connection_tokens(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            }
        }
    }

    /// The options of every value given.
    pub fn of<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut options = Self::default();
        for value in values {
            options.add(value);
        }
        options
    }
}

/// The chunk-size line for a chunk of `len` bytes.
pub fn chunk_header(dst: &mut Vec<u8>, len: usize) {
    dst.extend_from_slice(lower_hex(len as u64).as_bytes());
    dst.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_ows_strips_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b" \t a b\t "), b"a b");
        assert_eq!(trim_ows(b"  "), b"");
        assert_eq!(trim_ows(b"\x0ba"), b"\x0ba");
    }

    #[test]
    fn transfer_codings_ignore_empty_elements_and_must_end_in_chunked() {
        use TransferCoding::{Chunked, Layered, NotChunked};
        for (value, coding) in [
            (&b"chunked"[..], Chunked),
            (b"CHUNKED", Chunked),
            (b",chunked", Chunked),
            (b"chunked , ,", Chunked),
            (b"\tchunked\t", Chunked),
            (b"gzip, chunked", Layered),
            (b"chunked, chunked", Layered),
            (b"gzip", NotChunked),
            (b"chunked, gzip", NotChunked),
            (b"chunked;x=1", NotChunked),
            (b"", NotChunked),
            (b" , ", NotChunked),
            (b"chunk ed", NotChunked),
        ] {
            assert_eq!(transfer_coding(value), coding, "{value:?}");
        }
    }

    #[test]
    fn hex_digits_writes_what_format_writes() {
        let mut rng = fastrand::Rng::with_seed(7);
        let samples = [
            0,
            1,
            9,
            10,
            15,
            16,
            0xdead_beef,
            u64::MAX,
            0x0123_4567_89ab_cdef,
        ];
        for n in samples.into_iter().chain((0..10_000).map(|_| rng.u64(..))) {
            assert_eq!(hex_digits(n), format!("{n:016x}").as_bytes(), "{n:#x}");
        }
    }

    #[test]
    fn lower_hex_is_hex_formatting() {
        for v in [0, 1, 15, 16, 0xdead_beef, u64::MAX, 1 << 63] {
            assert_eq!(lower_hex(v).as_str(), format!("{v:x}"));
        }
    }

    #[test]
    fn chunk_header_is_lower_hex() {
        let mut dst = Vec::new();
        chunk_header(&mut dst, 0x1a2f);
        assert_eq!(dst, b"1a2f\r\n");
        dst.clear();
        chunk_header(&mut dst, 0);
        assert_eq!(dst, b"0\r\n");
    }

    #[test]
    fn hosts_follow_rfc_3986_host_and_port() {
        for good in [
            &b""[..],
            b"example.com",
            b"Example.COM:80",
            b"a-b_c~d.e",
            b"127.0.0.1:8080",
            b"[::1]",
            b"[::1]:443",
            b"[2001:db8::192.0.2.1]:1",
            b"[v1.fe80::a+en1]",
            b"xn--bcher-kva.example",
            b"caf%C3%A9.example",
            b"example.com:",
            b"example.com:65535",
            b"!$&'()*+,;=",
        ] {
            assert!(is_valid_host(good), "{:?}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b"a b/c"[..],
            b"a b",
            b"a/b",
            b"user@example.com",
            b"example.com/",
            b"example.com?x",
            b"example.com#x",
            b"exa\tmple.com",
            b"example\x00.com",
            b"exam\x7fple",
            b"example.com:http",
            b"example.com:99999",
            b"example.com:123456",
            b"example.com:80:80",
            b"::1",
            b"[::1",
            b"[::1]x",
            b"[]",
            b"[example.com]",
            b"[v.x]",
            b"[vz.x]",
            b"%zz.example",
            b"%4",
            b"\xc3\xa9.example",
            b"\"quoted\"",
            b"a\\b",
        ] {
            assert!(!is_valid_host(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn connection_options_are_read_from_every_value() {
        let options = ConnectionOptions::of([&b"Keep-Alive, x-a"[..], b"UPGRADE", b" close "]);
        assert_eq!(
            options,
            ConnectionOptions {
                close: true,
                keep_alive: true,
                upgrade: true
            }
        );
        assert_eq!(
            ConnectionOptions::of([&b"closed, x"[..]]),
            ConnectionOptions::default()
        );
    }

    #[test]
    fn content_length_is_digits_only() {
        assert_eq!(parse_content_length(b"0"), Some(0));
        assert_eq!(parse_content_length(b"1234"), Some(1234));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b" 1",
            b"1 ",
            b"1,1",
            b"0x10",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_content_length(bad), None, "{bad:?}");
        }
    }
}
