//! HTTP/1.1 wire pieces shared by scb's server driver and scb-proxy's upstream client:
//! one strict reading of the framing rules on both sides of a proxy, so that the two
//! never disagree about where a message ends.

pub mod chunked;
mod fields;

pub use fields::{FieldError, FieldOffsets};

/// 1*DIGIT and nothing else (no sign, no whitespace, no list), without overflow.
pub fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// The chunk-size line for a chunk of `len` bytes.
pub fn chunk_header(dst: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    dst.extend_from_slice(&digits[i..]);
    dst.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

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
