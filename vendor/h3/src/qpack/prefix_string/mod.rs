mod bitwin;
mod decode;
mod encode;
mod fast_decode;
mod table;

use std::convert::TryInto;
use std::fmt;
use std::num::TryFromIntError;

use bytes::{Buf, BufMut};

pub use self::bitwin::BitWindow;

pub use self::{
    decode::{Error as HuffmanDecodingError, HpackStringDecode},
    encode::{Error as HuffmanEncodingError, HpackStringEncode},
};

use crate::proto::coding::BufMutExt;
use crate::qpack::prefix_int::{self, Error as IntegerError};

#[derive(Debug, PartialEq)]
pub enum Error {
    UnexpectedEnd,
    Integer(IntegerError),
    HuffmanDecoding(HuffmanDecodingError),
    HuffmanEncoding(HuffmanEncodingError),
    BufSize(TryFromIntError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnexpectedEnd => write!(f, "unexpected end"),
            Error::Integer(e) => write!(f, "could not parse integer: {}", e),
            Error::HuffmanDecoding(e) => write!(f, "Huffman decode failed: {:?}", e),
            Error::HuffmanEncoding(e) => write!(f, "Huffman encode failed: {:?}", e),
            Error::BufSize(_) => write!(f, "number in buffer wrong size"),
        }
    }
}

pub fn decode<B: Buf>(size: u8, buf: &mut B) -> Result<Vec<u8>, Error> {
    let (flags, len) = prefix_int::decode(size - 1, buf)?;
    let len: usize = len.try_into()?;
    if buf.remaining() < len {
        return Err(Error::UnexpectedEnd);
    }

    // scb's patch (see `vendor/h3/SCB-PATCH.md`): the bytes copied once, and Huffman codes
    // read by h2's table-driven decoder; 0.0.8 collected the payload byte by byte and
    // decoded it a bit at a time.
    let payload = buf.copy_to_bytes(len);
    if flags & 1 == 0 {
        return Ok(payload.to_vec());
    }
    fast_decode::decode(&payload).map_err(|fast_decode::InvalidHuffmanCode| {
        Error::HuffmanDecoding(HuffmanDecodingError::Unhandled(BitWindow::new(), len))
    })
}

/// scb's patch of h3 0.0.8 (see `vendor/h3/SCB-PATCH.md`): the string is Huffman-coded
/// from a table of codes through a 64-bit accumulator, written straight into `buf`, and
/// only when that is shorter than the string itself, else it goes as a literal (the H bit
/// clear, RFC 9204 4.1.2). h3 0.0.8 copied every value into a `Vec`, coded it bit by bit
/// and wrote the result byte by byte: 11% of the CPU of an HTTP/3 request for a small
/// file.
pub fn encode<B: BufMut>(size: u8, flags: u8, value: &[u8], buf: &mut B) -> Result<(), Error> {
    let bits: u64 = value
        .iter()
        .map(|&b| u64::from(table::ENCODE_CODE_LENGTHS[b as usize]))
        .sum();
    let coded_len = bits.div_ceil(8);
    if coded_len >= value.len() as u64 {
        prefix_int::encode(size - 1, flags << 1, value.len().try_into()?, buf);
        buf.put_slice(value);
        return Ok(());
    }
    prefix_int::encode(size - 1, flags << 1 | 1, coded_len, buf);
    // Codes are at most 30 bits, and fewer than 32 bits are held between writes of four
    // bytes, so the accumulator's low 62 bits are all that matter; older bits shift out
    // unread.
    let mut held: u64 = 0;
    let mut count: u32 = 0;
    for &b in value {
        let len = u32::from(table::ENCODE_CODE_LENGTHS[b as usize]);
        held = (held << len) | u64::from(table::ENCODE_CODES[b as usize]);
        count += len;
        if count >= 32 {
            count -= 32;
            buf.put_u32((held >> count) as u32);
        }
    }
    while count >= 8 {
        count -= 8;
        buf.put_u8((held >> count) as u8);
    }
    if count > 0 {
        // Padding: the most significant bits of EOS, all ones (RFC 7541 5.2).
        buf.put_u8(((held << (8 - count)) as u8) | (0xff >> count));
    }
    Ok(())
}

impl From<HuffmanEncodingError> for Error {
    fn from(error: HuffmanEncodingError) -> Self {
        Error::HuffmanEncoding(error)
    }
}

impl From<IntegerError> for Error {
    fn from(error: IntegerError) -> Self {
        match error {
            IntegerError::UnexpectedEnd => Error::UnexpectedEnd,
            e => Error::Integer(e),
        }
    }
}

impl From<HuffmanDecodingError> for Error {
    fn from(error: HuffmanDecodingError) -> Self {
        Error::HuffmanDecoding(error)
    }
}

impl From<TryFromIntError> for Error {
    fn from(error: TryFromIntError) -> Self {
        Error::BufSize(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use assert_matches::assert_matches;
    use std::io::Cursor;

    /// scb's patch: whatever is written, Huffman-coded or literal, reads back the same,
    /// for every octet and for strings that code shorter, the same or longer.
    #[test]
    fn scb_patch_round_trips_and_codes_only_when_shorter() {
        let all: Vec<u8> = (0..=u8::MAX).collect();
        let request_id = b"4bf92f3577b34da6a3ce929d0e0e4736".to_vec();
        let date = b"Sun, 06 Dec 2026 04:48:01 GMT".to_vec();
        for value in [all, request_id, date, Vec::new(), b"\xff\xfe\x00".to_vec()] {
            for size in [4, 6, 8] {
                let mut buf = Vec::new();
                encode(size, 0b01, &value, &mut buf).unwrap();
                let coded = buf[0] & (1 << (size - 1)) != 0;
                let literal_len = buf.len();
                assert_eq!(decode(size, &mut Cursor::new(&buf)).unwrap(), value);
                let bits: usize = value
                    .iter()
                    .map(|&b| table::ENCODE_CODE_LENGTHS[b as usize] as usize)
                    .sum();
                assert_eq!(coded, bits.div_ceil(8) < value.len(), "{value:?}");
                assert!(literal_len <= value.len() + 6);
            }
        }
    }

    /// The simplest decoder there is, to check the real one (h2's test does the same):
    /// the input as a string of '0' and '1', and the one code it starts with stripped
    /// off until none does; what is left must be padding, under 8 bits, all ones.
    fn reference_decode(src: &[u8]) -> Option<Vec<u8>> {
        let codes: Vec<String> = table::ENCODE_CODES
            .iter()
            .zip(table::ENCODE_CODE_LENGTHS.iter())
            .map(|(&code, &len)| format!("{code:0len$b}", len = len as usize))
            .collect();
        let bits: String = src.iter().map(|byte| format!("{byte:08b}")).collect();
        let mut decoded = Vec::new();
        let mut rest: &str = &bits;
        while let Some(sym) = (0..256).find(|&sym| rest.starts_with(&codes[sym])) {
            decoded.push(sym as u8);
            rest = &rest[codes[sym].len()..];
        }
        (rest.len() < 8 && !rest.contains('0')).then_some(decoded)
    }

    /// scb's patch: h2's decoder reads exactly what RFC 7541 5.2 allows, as the reference
    /// decoder does, for random bytes and for random strings coded by the new encoder;
    /// and wherever h3 0.0.8's decoder gave an answer the two agree (0.0.8 also took
    /// padding with zero bits, which the RFC says to treat as an error).
    #[test]
    fn scb_patch_decoder_reads_what_the_rfc_allows() {
        let mut rng = fastrand::Rng::with_seed(9204);
        let mut refused_by_the_rfc_only = 0;
        for round in 0..20_000 {
            let input: Vec<u8> = if round % 2 == 0 {
                (0..rng.usize(0..24)).map(|_| rng.u8(..)).collect()
            } else {
                let text: Vec<u8> = (0..rng.usize(1..40)).map(|_| rng.u8(..)).collect();
                let mut buf = Vec::new();
                encode(8, 0, &text, &mut buf).unwrap();
                if buf[0] & 0x80 == 0 {
                    continue;
                }
                let mut read = Cursor::new(&buf);
                assert_eq!(decode(8, &mut read).unwrap(), text);
                buf[1..].to_vec()
            };
            let new = fast_decode::decode(&input).ok();
            assert_eq!(new, reference_decode(&input), "{input:?}");
            let old: Option<Vec<u8>> = input.clone().hpack_decode().collect::<Result<_, _>>().ok();
            match (&old, &new) {
                (Some(old), Some(new)) => assert_eq!(old, new, "{input:?}"),
                (Some(_), None) => refused_by_the_rfc_only += 1,
                _ => {}
            }
        }
        assert!(refused_by_the_rfc_only < 2_000, "{refused_by_the_rfc_only}");
    }

    #[test]
    fn codec_6() {
        let mut buf = Vec::new();
        encode(6, 0b01, b"name without ref", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        assert_eq!(
            &buf,
            &[
                0b0110_1100,
                168,
                116,
                149,
                79,
                6,
                76,
                231,
                181,
                42,
                88,
                89,
                127
            ]
        );
        assert_eq!(decode(6, &mut read).unwrap(), b"name without ref");
    }

    #[test]
    fn codec_8() {
        let mut buf = Vec::new();
        encode(8, 0b01, b"name with ref", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        assert_eq!(
            &buf,
            &[0b1000_1010, 168, 116, 149, 79, 6, 76, 234, 88, 89, 127]
        );
        assert_eq!(decode(8, &mut read).unwrap(), b"name with ref");
    }

    #[test]
    fn codec_8_empty() {
        let mut buf = Vec::new();
        encode(8, 0b01, b"", &mut buf).unwrap();
        let mut read = Cursor::new(&buf);
        // scb's patch: an empty string is no shorter coded, so it goes as a literal (H clear).
        assert_eq!(&buf, &[0b0000_0000]);
        assert_eq!(decode(8, &mut read).unwrap(), b"");
    }

    #[test]
    fn decode_non_huffman() {
        let buf = vec![0b0100_0011, b'b', b'a', b'r'];
        let mut read = Cursor::new(&buf);
        assert_eq!(decode(6, &mut read).unwrap(), b"bar");
    }

    #[test]
    fn decode_too_short() {
        let buf = vec![0b0100_0011, b'b', b'a'];
        let mut read = Cursor::new(&buf);
        assert_matches!(decode(6, &mut read), Err(Error::UnexpectedEnd));
    }
}
