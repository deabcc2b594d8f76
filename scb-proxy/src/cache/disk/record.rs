//! The file a stored response is kept in on disk: a fixed prefix, a head and the body.
//!
//! ```text
//! "SCBC" version(1) 0 0 0 | head_len u32 | head_crc u32 | body_len u64 | head | body
//! ```
//!
//! The head may end in zeros, so that a body sent with `sendfile` starts on a page.
//!
//! All integers are little-endian. The head holds the key, the URL the response was
//! fetched for, its [`Policy`] and its status, version and fields; its CRC-32 is checked
//! before anything of it is believed. The file's length must be the prefix's sum: a
//! record cut short (a crash before its pages reached the disk leaves a shorter file, or
//! an empty one) is not read. Records are written whole to a temporary name and renamed
//! (`writer.rs`), so a reader never sees one being written.
//!
//! A format of our own rather than a serde encoding: the record is read before a disk hit
//! is answered, and this is the few fields it needs, in one pass, without a dependency
//! for it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::response::Parts;
use http::{Response, StatusCode, Version};

use crate::cache::key::{Key, Source};
use crate::cache::policy::Policy;

/// The record's first bytes.
const MAGIC: &[u8; 4] = b"SCBC";
/// This layout; a record of another version is not read (and is removed).
const VERSION: u8 = 1;
/// Bytes before the head.
pub(crate) const PREFIX: usize = 24;
/// A head larger than this is not read: no stored head comes near it, and a corrupt
/// length must not make a reader allocate gigabytes.
const MAX_HEAD: usize = 1 << 20;

/// What a record holds besides its body.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) key: Key,
    pub(crate) source: Source,
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
}

/// A record's lengths, from its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    head_len: usize,
    head_crc: u32,
    pub(crate) body_len: u64,
}

impl Layout {
    /// Where the body starts.
    pub(crate) fn body_offset(&self) -> u64 {
        (PREFIX + self.head_len) as u64
    }

    /// The whole record's length.
    pub(crate) fn file_len(&self) -> u64 {
        self.body_offset() + self.body_len
    }

    /// The head's length.
    pub(crate) fn head_len(&self) -> usize {
        self.head_len
    }
}

/// Why a record is not read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unreadable {
    #[error("not a cache record of this version")]
    Version,
    #[error("head of {0} bytes")]
    HeadTooLarge(usize),
    #[error("head checksum does not match")]
    Checksum,
    #[error("head is malformed")]
    Malformed,
}

/// What a body is aligned to when asked.
const PAGE: usize = 4096;

/// The prefix and head of a record for `meta` with a body of `body_len` bytes; with
/// `align_body`, padded so that the body starts on a page.
pub(crate) fn encode(
    key: &Key,
    source: &Source,
    policy: &Policy,
    head: &Parts,
    body_len: u64,
    align_body: bool,
) -> Vec<u8> {
    let mut out = vec![0; PREFIX];
    let mut w = Writer(&mut out);
    w.flag(key.secure);
    w.str(&key.host);
    w.str(&key.target);
    w.str(&source.host);
    w.str(&source.target);
    w.time(policy.response_time);
    w.duration(policy.initial_age);
    w.duration(policy.lifetime);
    w.flag(policy.no_cache);
    w.flag(policy.must_revalidate);
    w.duration(policy.while_revalidate);
    w.duration(policy.if_error);
    w.u32(policy.vary.len() as u32);
    for (name, value) in &policy.vary {
        w.str(name.as_str());
        w.flag(value.is_some());
        w.str(value.as_deref().unwrap_or(""));
    }
    w.u16(head.status.as_u16());
    w.0.push(version_byte(head.version));
    w.u32(head.headers.len() as u32);
    for (name, value) in &head.headers {
        w.str(name.as_str());
        w.bytes(value.as_bytes());
    }
    if align_body {
        out.resize(out.len().next_multiple_of(PAGE), 0);
    }
    let head_len = out.len() - PREFIX;
    let crc = crc32fast::hash(&out[PREFIX..]);
    out[..4].copy_from_slice(MAGIC);
    out[4] = VERSION;
    out[8..12].copy_from_slice(&(head_len as u32).to_le_bytes());
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out[16..24].copy_from_slice(&body_len.to_le_bytes());
    out
}

/// The lengths a record's first [`PREFIX`] bytes give.
pub(crate) fn layout(prefix: &[u8; PREFIX]) -> Result<Layout, Unreadable> {
    if &prefix[..4] != MAGIC || prefix[4] != VERSION {
        return Err(Unreadable::Version);
    }
    let u32_at = |i: usize| u32::from_le_bytes(prefix[i..i + 4].try_into().expect("4 bytes"));
    let head_len = u32_at(8) as usize;
    if head_len > MAX_HEAD {
        return Err(Unreadable::HeadTooLarge(head_len));
    }
    Ok(Layout {
        head_len,
        head_crc: u32_at(12),
        body_len: u64::from_le_bytes(prefix[16..24].try_into().expect("8 bytes")),
    })
}

/// The head of a record laid out as `layout`.
pub(crate) fn decode(layout: &Layout, head: &[u8]) -> Result<Meta, Unreadable> {
    if head.len() != layout.head_len || crc32fast::hash(head) != layout.head_crc {
        return Err(Unreadable::Checksum);
    }
    read(&mut Reader(head)).ok_or(Unreadable::Malformed)
}

fn read(r: &mut Reader<'_>) -> Option<Meta> {
    let key = Key::new(r.flag()?, r.str()?.into(), r.str()?.into());
    let source = Source {
        host: r.str()?.into(),
        target: r.str()?.into(),
    };
    let response_time = r.time()?;
    let initial_age = r.duration()?;
    let lifetime = r.duration()?;
    let no_cache = r.flag()?;
    let must_revalidate = r.flag()?;
    let while_revalidate = r.duration()?;
    let if_error = r.duration()?;
    let vary_len = r.u32()?;
    let mut vary = Vec::new();
    for _ in 0..vary_len {
        let name = HeaderName::from_bytes(r.str()?.as_bytes()).ok()?;
        let present = r.flag()?;
        let value = r.str()?;
        vary.push((name, present.then(|| value.to_owned())));
    }
    let policy = Policy {
        response_time,
        initial_age,
        lifetime,
        no_cache,
        must_revalidate,
        while_revalidate,
        if_error,
        vary,
    };
    let (mut head, ()) = Response::new(()).into_parts();
    head.status = StatusCode::from_u16(r.u16()?).ok()?;
    head.version = version_of(r.byte()?)?;
    let fields = r.u32()? as usize;
    let mut headers = HeaderMap::with_capacity(fields.min(256));
    for _ in 0..fields {
        let name = HeaderName::from_bytes(r.str()?.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(r.bytes()?).ok()?;
        headers.append(name, value);
    }
    head.headers = headers;
    r.0.iter().all(|&b| b == 0).then_some(Meta {
        key,
        source,
        policy,
        head,
    })
}

fn version_byte(version: Version) -> u8 {
    match version {
        Version::HTTP_09 => 0,
        Version::HTTP_10 => 1,
        Version::HTTP_2 => 3,
        Version::HTTP_3 => 4,
        _ => 2,
    }
}

fn version_of(byte: u8) -> Option<Version> {
    Some(match byte {
        0 => Version::HTTP_09,
        1 => Version::HTTP_10,
        2 => Version::HTTP_11,
        3 => Version::HTTP_2,
        4 => Version::HTTP_3,
        _ => return None,
    })
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn flag(&mut self, b: bool) {
        self.0.push(u8::from(b));
    }
    fn u16(&mut self, n: u16) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn u32(&mut self, n: u32) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn duration(&mut self, d: Duration) {
        self.u64(d.as_secs());
        self.u32(d.subsec_nanos());
    }
    fn time(&mut self, t: SystemTime) {
        // A response time before 1970 is a clock that was wrong; it is stored as 1970.
        self.duration(t.duration_since(UNIX_EPOCH).unwrap_or_default());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(taken)
    }
    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn flag(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }
    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    fn duration(&mut self) -> Option<Duration> {
        let secs = self.u64()?;
        let nanos = self.u32()?;
        (nanos < 1_000_000_000).then(|| Duration::new(secs, nanos))
    }
    fn time(&mut self) -> Option<SystemTime> {
        UNIX_EPOCH.checked_add(self.duration()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> (Key, Source, Policy, Parts) {
        let key = Key::new(true, "example.com".into(), "/a?b=c".into());
        let source = Source {
            host: "example.com".into(),
            target: "/a?b=c".into(),
        };
        let policy = Policy {
            response_time: UNIX_EPOCH + Duration::new(1_700_000_000, 123),
            initial_age: Duration::from_secs(3),
            lifetime: Duration::from_secs(60),
            no_cache: false,
            must_revalidate: true,
            while_revalidate: Duration::from_secs(5),
            if_error: Duration::ZERO,
            vary: vec![
                (http::header::ACCEPT_ENCODING, Some("gzip".into())),
                (HeaderName::from_static("x-absent"), None),
            ],
        };
        let (mut head, ()) = Response::new(()).into_parts();
        head.status = StatusCode::NOT_FOUND;
        head.headers
            .append("x-twice", HeaderValue::from_static("1"));
        head.headers
            .append("x-twice", HeaderValue::from_static("2"));
        head.headers
            .append("etag", HeaderValue::from_bytes(b"\"\xe9\"").unwrap());
        (key, source, policy, head)
    }

    fn split(record: &[u8]) -> (Layout, &[u8]) {
        let layout = layout(record[..PREFIX].try_into().unwrap()).unwrap();
        (layout, &record[PREFIX..])
    }

    #[test]
    fn a_record_reads_back_as_it_was_written() {
        let (key, source, policy, head) = meta();
        let record = encode(&key, &source, &policy, &head, 7, false);
        let (layout, rest) = split(&record);
        assert_eq!(layout.body_len, 7);
        assert_eq!(layout.body_offset(), record.len() as u64);
        let read = decode(&layout, rest).unwrap();
        assert_eq!(read.key, key);
        assert_eq!(read.source, source);
        assert_eq!(read.head.status, StatusCode::NOT_FOUND);
        assert_eq!(read.head.headers, head.headers);
        assert_eq!(read.policy.response_time, policy.response_time);
        assert_eq!(read.policy.vary, policy.vary);
        assert_eq!(
            (read.policy.lifetime, read.policy.must_revalidate),
            (policy.lifetime, true)
        );
    }

    #[test]
    fn an_aligned_record_s_body_starts_on_a_page() {
        let (key, source, policy, head) = meta();
        let record = encode(&key, &source, &policy, &head, 1 << 20, true);
        let (layout, rest) = split(&record);
        assert_eq!(layout.body_offset() % PAGE as u64, 0);
        assert_eq!(layout.body_offset(), record.len() as u64);
        assert_eq!(decode(&layout, rest).unwrap().key, key);
    }

    #[test]
    fn a_record_cut_short_or_altered_is_not_read() {
        let (key, source, policy, head) = meta();
        let record = encode(&key, &source, &policy, &head, 0, false);
        let (layout, rest) = split(&record);
        assert_eq!(
            decode(&layout, &rest[..rest.len() - 1]).unwrap_err(),
            Unreadable::Checksum
        );
        let mut altered = rest.to_vec();
        altered[3] ^= 1;
        assert_eq!(decode(&layout, &altered).unwrap_err(), Unreadable::Checksum);
        let mut other = record.clone();
        other[4] = VERSION + 1;
        assert_eq!(
            super::layout(other[..PREFIX].try_into().unwrap()).unwrap_err(),
            Unreadable::Version
        );
        let mut huge = record;
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            super::layout(huge[..PREFIX].try_into().unwrap()),
            Err(Unreadable::HeadTooLarge(_))
        ));
    }
}
