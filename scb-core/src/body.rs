//! The body type of scb's services.
//!
//! [`Body`] is an [`http_body::Body`] with four shapes: empty, one in-memory buffer, a boxed
//! stream, and a [`FileRegion`] (an open file, an offset and a length).
//!
//! The file region is what lets the server send a file with `sendfile(2)` on plain TCP: the
//! connection driver downcasts the response body to [`Body`] and asks
//! [`Body::file_region`]. A layer that wraps the body (compression, a user's own) changes the
//! body's type, the downcast fails, and the driver polls the body like any other. Zero-copy
//! is therefore turned off by construction whenever something else needs to see the bytes,
//! never by a flag someone must remember to clear.
//!
//! # Example
//!
//! ```
//! use scb_core::Body;
//! use http_body::Body as _;
//!
//! let body = Body::from("Hello, world!");
//! assert_eq!(body.size_hint().exact(), Some(13));
//! assert!(body.file_region().is_none());
//! ```

use std::fmt;
use std::fs::File;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::BoxError;

/// Size of one positional read when a file region is polled instead of sent with
/// `sendfile`. 256 KiB: 64 KiB chunks are 30% slower for 1 MiB files (one blocking-pool
/// hop per chunk dominates), and larger chunks only add memory per in-flight response.
pub const FILE_CHUNK_SIZE: usize = 256 * 1024;

type BoxBody = Pin<Box<dyn http_body::Body<Data = Bytes, Error = BoxError> + Send + 'static>>;

/// The response (and request) body of scb's services.
///
/// See the [module documentation](self) for the shapes and why the file region is found by
/// downcasting.
pub struct Body {
    kind: Kind,
}

enum Kind {
    Empty,
    Full(Bytes),
    Stream(BoxBody),
    File(FileRead),
}

impl Body {
    /// An empty body.
    pub const fn empty() -> Self {
        Self { kind: Kind::Empty }
    }

    /// A body of one in-memory buffer.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Self::empty();
        }
        Self {
            kind: Kind::Full(bytes),
        }
    }

    /// A body that streams from any other [`http_body::Body`].
    ///
    /// If `body` already is a [`Body`] it is returned as is, so wrapping twice costs nothing
    /// and a file region stays visible to the driver.
    pub fn new<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let mut slot = Some(body);
        if let Some(body) = (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<Body>>() {
            return body.take().unwrap_or_default();
        }
        let Some(body) = slot else {
            return Self::empty();
        };
        Self {
            kind: Kind::Stream(Box::pin(http_body_util::BodyExt::map_err(body, Into::into))),
        }
    }

    /// A body that sends `region` of an open file.
    ///
    /// On plain-TCP HTTP/1.1 the server sends it with `sendfile(2)`; anywhere else it is
    /// read in [`FILE_CHUNK_SIZE`] positional reads on tokio's blocking pool, one chunk at a
    /// time, so no thread is held between chunks. If the file turns out shorter than the
    /// region, the body ends with an error (the connection is closed rather than a short or
    /// mixed response completed).
    pub fn file(region: FileRegion) -> Self {
        if region.len == 0 {
            return Self::empty();
        }
        Self {
            kind: Kind::File(FileRead {
                region,
                pending: None,
            }),
        }
    }

    /// Whether the body streams from another body, so that its end is only known when
    /// it is polled to it (an empty, in-memory or file body's length is known whole).
    pub(crate) fn streams(&self) -> bool {
        matches!(self.kind, Kind::Stream(_))
    }

    /// The file region this body sends, if it is one and has not started being polled.
    ///
    /// This is what a connection driver looks for after downcasting a response body to
    /// [`Body`]: when it returns `Some`, the driver may send the region with `sendfile`
    /// instead of polling.
    pub fn file_region(&self) -> Option<&FileRegion> {
        match &self.kind {
            Kind::File(read) if read.pending.is_none() => Some(&read.region),
            _ => None,
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Self::empty()
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Empty => f.write_str("Body::Empty"),
            Kind::Full(b) => f.debug_tuple("Body::Full").field(&b.len()).finish(),
            Kind::Stream(_) => f.write_str("Body::Stream"),
            Kind::File(r) => f.debug_tuple("Body::File").field(&r.region).finish(),
        }
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Self {
        Self::full(bytes)
    }
}

impl From<&'static str> for Body {
    fn from(s: &'static str) -> Self {
        Self::full(Bytes::from_static(s.as_bytes()))
    }
}

impl From<&'static [u8]> for Body {
    fn from(s: &'static [u8]) -> Self {
        Self::full(Bytes::from_static(s))
    }
}

impl From<String> for Body {
    fn from(s: String) -> Self {
        Self::full(s)
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Self::full(v)
    }
}

impl From<FileRegion> for Body {
    fn from(region: FileRegion) -> Self {
        Self::file(region)
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(_) => {
                let Kind::Full(bytes) = std::mem::replace(&mut self.kind, Kind::Empty) else {
                    unreachable!("matched Full above")
                };
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Kind::Stream(stream) => stream.as_mut().poll_frame(cx),
            Kind::File(read) => {
                let frame = ready!(read.poll_chunk(cx));
                if read.region.len == 0 {
                    self.kind = Kind::Empty;
                }
                Poll::Ready(frame.map(|r| r.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(_) | Kind::File(_) => false,
            Kind::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(b) => SizeHint::with_exact(b.len() as u64),
            Kind::Stream(s) => s.size_hint(),
            Kind::File(r) => SizeHint::with_exact(r.region.len),
        }
    }
}

/// A region of an open file: the file, where to start, and how many bytes to send.
///
/// The file is shared (`Arc`) so that an open-file cache can hand the same descriptor to
/// many responses at once; every read is positional, so sharing is safe.
#[derive(Clone)]
pub struct FileRegion {
    file: Arc<File>,
    offset: u64,
    len: u64,
    stamp: Option<FileStamp>,
}

impl FileRegion {
    /// A region of `len` bytes of `file` starting at `offset`.
    pub fn new(file: Arc<File>, offset: u64, len: u64) -> Self {
        Self {
            file,
            offset,
            len,
            stamp: None,
        }
    }

    /// Checks, before the region's last byte goes out, that the file still has `stamp`
    /// (the state its headers were computed from); if it changed, the body ends with
    /// [`FileChanged`] and the server closes the connection instead of completing a
    /// response that mixes two versions. Defaults to no check.
    ///
    /// A file replaced by rename (the usual deploy) never trips this: the open handle
    /// keeps the old version, which is sent whole. The check is for files rewritten in
    /// place while being sent. What remains is one byte's window: a write landing between
    /// the check and the sending of the final byte.
    #[must_use]
    pub fn with_stamp(mut self, stamp: FileStamp) -> Self {
        self.stamp = Some(stamp);
        self
    }

    /// The stamp checked before the last byte, if any.
    pub fn stamp(&self) -> Option<FileStamp> {
        self.stamp
    }

    /// Fails with [`FileChanged`] when the file no longer has the stamp given with
    /// [`with_stamp`](Self::with_stamp); succeeds when there is none.
    ///
    /// # Errors
    ///
    /// [`FileChanged`] (as an `io::Error`), or the error of `fstat` itself.
    pub fn verify(&self) -> io::Result<()> {
        match self.stamp {
            Some(stamp) if FileStamp::of(&self.file)? != stamp => {
                Err(io::Error::other(FileChanged))
            }
            _ => Ok(()),
        }
    }

    /// The open file.
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Where the region starts, in bytes from the start of the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many bytes the region holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for FileRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRegion")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("stamp", &self.stamp)
            .finish_non_exhaustive()
    }
}

/// What identifies one version of a file's content: its size and modification time
/// (to the nanosecond where the file system keeps it).
///
/// Not `ctime`: unlinking a file changes its `ctime` too, so the usual deploy (write a new
/// file, rename it over the old) would look like a change of the version still being
/// sent, which is in fact intact. A rewrite in place that also sets `mtime` back to the
/// old value is not seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    mtime: (i64, i64),
}

impl FileStamp {
    /// A stamp from values already read with `fstat`: the size, and the modification time
    /// as (seconds, nanoseconds) since the epoch.
    pub fn new(len: u64, mtime: (i64, i64)) -> Self {
        Self { len, mtime }
    }

    /// The stamp of a file's current state (one `fstat`).
    ///
    /// # Errors
    ///
    /// When `fstat` fails.
    pub fn of(file: &File) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = file.metadata()?;
        Ok(Self {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        })
    }
}

/// The error a file region's body ends with when the file changed while it was sent.
#[derive(Debug, thiserror::Error)]
#[error("file changed while it was being sent")]
pub struct FileChanged;

/// The error a file region's body ends with when the file is shorter than the region.
#[derive(Debug, thiserror::Error)]
#[error("file ended {missing} bytes before the end of the region being sent")]
pub struct FileShrunk {
    /// How many bytes of the region could not be read.
    pub missing: u64,
}

struct FileRead {
    region: FileRegion,
    pending: Option<tokio::task::JoinHandle<io::Result<Bytes>>>,
}

impl FileRead {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        if self.region.len == 0 {
            return Poll::Ready(None);
        }
        let pending = self.pending.get_or_insert_with(|| {
            let region = self.region.clone();
            // Never ask for more than the region: no read past the end, no EOF read.
            let want = region.len.min(FILE_CHUNK_SIZE as u64) as usize;
            let last = want as u64 == region.len;
            tokio::task::spawn_blocking(move || {
                let chunk = read_exact_at(&region.file, region.offset, want)?;
                // After the last read, every byte about to be sent has been read: a write
                // that landed during any of them changed the stamp.
                if last {
                    region.verify()?;
                }
                Ok(chunk)
            })
        });
        let result = ready!(Pin::new(pending).poll(cx));
        self.pending = None;
        let chunk = match result {
            Ok(Ok(chunk)) => chunk,
            Ok(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            Err(join) => return Poll::Ready(Some(Err(join.into()))),
        };
        if chunk.is_empty() {
            let missing = self.region.len;
            self.region.len = 0;
            return Poll::Ready(Some(Err(FileShrunk { missing }.into())));
        }
        self.region.offset += chunk.len() as u64;
        self.region.len -= chunk.len() as u64;
        Poll::Ready(Some(Ok(chunk)))
    }
}

use std::future::Future as _;

/// Reads up to `want` bytes at `offset`, retrying short reads; returns fewer only at EOF.
fn read_exact_at(file: &File, offset: u64, want: usize) -> io::Result<Bytes> {
    use std::os::unix::fs::FileExt as _;
    let mut buf = vec![0u8; want];
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt as _;
    use std::io::Write as _;

    fn temp_file(contents: &[u8]) -> Arc<File> {
        let path = std::env::temp_dir().join(format!(
            "scb-body-test-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let mut f = File::create(&path).unwrap();
        f.write_all(contents).unwrap();
        let f = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(f)
    }

    #[tokio::test]
    async fn full_body_yields_its_bytes_once_with_exact_size() {
        let body = Body::from("hello");
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(!body.is_end_stream());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello");
    }

    #[test]
    fn empty_bytes_become_an_empty_body() {
        let body = Body::full(Bytes::new());
        assert!(body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(0));
    }

    #[test]
    fn wrapping_a_body_in_new_keeps_the_file_region_visible() {
        let region = FileRegion::new(temp_file(b"abc"), 0, 3);
        let body = Body::new(Body::file(region));
        assert_eq!(body.file_region().map(FileRegion::len), Some(3));
    }

    #[tokio::test]
    async fn stream_body_is_polled_through() {
        let inner = http_body_util::Full::new(Bytes::from_static(b"streamed"));
        let body = Body::new(inner);
        assert!(body.file_region().is_none());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"streamed");
    }

    #[tokio::test]
    async fn file_region_polls_exactly_its_bytes() {
        let data: Vec<u8> = (0..(FILE_CHUNK_SIZE * 2 + 100))
            .map(|i| (i % 251) as u8)
            .collect();
        let file = temp_file(&data);
        let body = Body::file(FileRegion::new(file, 7, (FILE_CHUNK_SIZE + 50) as u64));
        assert_eq!(
            body.size_hint().exact(),
            Some((FILE_CHUNK_SIZE + 50) as u64)
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], &data[7..7 + FILE_CHUNK_SIZE + 50]);
    }

    #[tokio::test]
    async fn a_file_rewritten_in_place_ends_the_body_with_an_error() {
        let path = std::env::temp_dir().join(format!(
            "scb-body-stamp-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::write(&path, vec![b'a'; FILE_CHUNK_SIZE * 2]).unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        let stamp = FileStamp::of(&file).unwrap();
        let region =
            FileRegion::new(Arc::clone(&file), 0, (FILE_CHUNK_SIZE * 2) as u64).with_stamp(stamp);
        assert!(region.verify().is_ok());
        let mut body = Body::file(region);
        // The first chunk goes out; then the file is rewritten in place, same size.
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first.len(), FILE_CHUNK_SIZE);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&vec![b'b'; FILE_CHUNK_SIZE * 2]))
            .unwrap();
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.to_string().contains("changed"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn file_shorter_than_region_ends_with_an_error() {
        let file = temp_file(b"short");
        let body = Body::file(FileRegion::new(file, 0, 100));
        let err = body.collect().await.unwrap_err();
        assert!(err.downcast_ref::<FileShrunk>().is_some(), "{err}");
    }
}
