//! A stored body: in memory, or, when large, in a sealed memory file that a hit sends
//! with `sendfile` on plain TCP, as static files are sent.
//!
//! A body of [`SEALED_MIN`] bytes or more is moved, once, into an anonymous memory file
//! (`memfd_create`) and sealed against every change (`F_SEAL_WRITE`, `F_SEAL_GROW`,
//! `F_SEAL_SHRINK`, then `F_SEAL_SEAL`): the kernel itself guarantees that what a hit
//! sends is what was stored, so no stamp is checked. A hit then answers with a
//! [`FileRegion`] of it: on a plain HTTP/1.1 connection the server sends it with
//! `sendfile` (the pages go to the socket without a copy through user space); over TLS
//! or HTTP/2 it is read in chunks, like a static file. The pages are the kernel's
//! (shared memory), not the heap's, and count against `max_bytes` all the same.
//!
//! Each such file is a descriptor; at most [`MAX_SEALED`] are open at once per store, so
//! that a cache of many large objects cannot take the descriptors connections need.
//! Past that, or when the file cannot be made, the body stays in memory.
//!
//! With a disk tier, a large body moves once more, to its record's file on disk, and is
//! sent from there (`disk/`): the same [`FileRegion`], at the body's offset in the
//! record. Such a file is written once to a temporary name and renamed; nothing opens it
//! for writing again, so a descriptor held here reads what was stored.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use rustix::fs::{MemfdFlags, SealFlags};
use scb_core::{Body, FileRegion};

/// Bodies this large or larger go into a sealed memory file: past this, a copy through
/// user space costs more than the descriptor and the `sendfile`.
pub(crate) const SEALED_MIN: usize = 64 << 10;

/// Sealed files one store keeps open at most.
pub(crate) const MAX_SEALED: usize = 1024;

/// A stored body.
#[derive(Clone, Debug)]
pub(crate) enum StoredBody {
    Memory(Bytes),
    File(Arc<FileBody>),
}

/// A body held in a file: a sealed memory file, or a record of the disk tier (the body
/// from `offset`). Dropping the last handle closes it and gives its place back to the
/// store's count of open files.
#[derive(Debug)]
pub(crate) struct FileBody {
    file: Arc<File>,
    offset: u64,
    len: u64,
    /// In a file on disk (its pages are the page cache's, not this process's).
    on_disk: bool,
    open: Arc<AtomicUsize>,
}

impl Drop for FileBody {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl StoredBody {
    /// No bytes.
    pub(crate) fn empty() -> Self {
        Self::Memory(Bytes::new())
    }

    /// `bytes` as stored: sealed in a memory file when large and `open` (the store's count
    /// of sealed files) has room, in memory otherwise.
    pub(crate) fn store(bytes: BytesMut, open: &Arc<AtomicUsize>) -> Self {
        if bytes.len() < SEALED_MIN {
            return Self::Memory(bytes.freeze());
        }
        if open.fetch_add(1, Ordering::AcqRel) >= MAX_SEALED {
            open.fetch_sub(1, Ordering::AcqRel);
            return Self::Memory(bytes.freeze());
        }
        match seal(&bytes) {
            Ok(file) => Self::File(Arc::new(FileBody {
                file: Arc::new(file),
                offset: 0,
                len: bytes.len() as u64,
                on_disk: false,
                open: Arc::clone(open),
            })),
            Err(e) => {
                open.fetch_sub(1, Ordering::AcqRel);
                tracing::debug!(error = %e, "cache: a large body stays in memory");
                Self::Memory(bytes.freeze())
            }
        }
    }

    /// `len` bytes of the file on disk `file` from `offset`, if `open` (the store's count
    /// of open files) has room for one more; the file back otherwise.
    pub(crate) fn on_disk(
        file: File,
        offset: u64,
        len: u64,
        open: &Arc<AtomicUsize>,
    ) -> Result<Self, File> {
        if open.fetch_add(1, Ordering::AcqRel) >= MAX_SEALED {
            open.fetch_sub(1, Ordering::AcqRel);
            return Err(file);
        }
        Ok(Self::File(Arc::new(FileBody {
            file: Arc::new(file),
            offset,
            len,
            on_disk: true,
            open: Arc::clone(open),
        })))
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Memory(bytes) => bytes.len() as u64,
            Self::File(file) => file.len,
        }
    }

    /// The bytes of it this process holds: all of them, unless they are in a file on
    /// disk.
    pub(crate) fn held(&self) -> u64 {
        match self {
            Self::File(file) if file.on_disk => 0,
            _ => self.len(),
        }
    }

    /// Whether it is in a file, sealed in memory or on disk (for tests).
    #[cfg(test)]
    pub(crate) fn is_sealed(&self) -> bool {
        matches!(self, Self::File(_))
    }

    /// Writes `head` and then it to `out` (a new file), from memory or from its file
    /// with `sendfile` (the kernel copies between the files: no buffer here).
    pub(crate) fn write_after(&self, head: &[u8], out: &File) -> io::Result<()> {
        match self {
            Self::Memory(bytes) => write_both(out, head, bytes),
            Self::File(file) => {
                write_both(out, head, &[])?;
                let mut offset = file.offset;
                let end = file.offset + file.len;
                while offset < end {
                    let want = usize::try_from(end - offset).unwrap_or(usize::MAX);
                    if rustix::fs::sendfile(out, &*file.file, Some(&mut offset), want)? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Ok(())
            }
        }
    }

    /// The whole body, to send.
    pub(crate) fn whole(&self) -> Body {
        self.part(0, self.len())
    }

    /// `len` bytes from `offset` (within the body), to send.
    pub(crate) fn part(&self, offset: u64, len: u64) -> Body {
        match self {
            Self::Memory(bytes) => Body::full(slice(bytes, offset, len)),
            Self::File(file) => Body::file(FileRegion::new(
                Arc::clone(&file.file),
                file.offset + offset,
                len,
            )),
        }
    }

    /// `len` bytes from `offset`, read into memory (the parts of a multipart answer).
    /// From a sealed file it is a copy out of memory, not a disk read.
    pub(crate) fn read(&self, offset: u64, len: u64) -> io::Result<Bytes> {
        match self {
            Self::Memory(bytes) => Ok(slice(bytes, offset, len)),
            Self::File(file) => {
                let mut buf = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
                file.file.read_exact_at(&mut buf, file.offset + offset)?;
                Ok(buf.into())
            }
        }
    }
}

/// Writes `a` then `b` to `out`, in one system call when it takes them whole.
fn write_both(mut out: &File, a: &[u8], b: &[u8]) -> io::Result<()> {
    let mut done = 0;
    let total = a.len() + b.len();
    while done < total {
        let n = if done < a.len() {
            out.write_vectored(&[io::IoSlice::new(&a[done..]), io::IoSlice::new(b)])?
        } else {
            out.write(&b[done - a.len()..])?
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}

fn slice(bytes: &Bytes, offset: u64, len: u64) -> Bytes {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = usize::try_from(offset.saturating_add(len))
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    bytes.slice(start..end)
}

/// A memory file holding `bytes`, sealed against any change.
fn seal(bytes: &[u8]) -> io::Result<File> {
    let fd =
        rustix::fs::memfd_create("scb-cache", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    fn bytes(len: usize) -> BytesMut {
        (0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>()[..].into()
    }

    #[tokio::test]
    async fn a_large_body_is_sealed_and_sent_as_a_file_region_of_its_bytes() {
        let open = Arc::new(AtomicUsize::new(0));
        let body = StoredBody::store(bytes(SEALED_MIN + 5), &open);
        assert!(body.is_sealed());
        assert_eq!(open.load(Ordering::SeqCst), 1);
        let whole = body.whole();
        let region = whole.file_region().expect("a file region, for sendfile");
        assert_eq!((region.offset(), region.len()), (0, SEALED_MIN as u64 + 5));
        // Nothing can change it: the seals refuse writes.
        assert!(region.file().write_at(b"x", 0).is_err());
        let sent = whole.collect().await.unwrap().to_bytes();
        assert_eq!(sent, bytes(SEALED_MIN + 5).freeze());
        let part = body.part(10, 20).collect().await.unwrap().to_bytes();
        assert_eq!(part, bytes(SEALED_MIN + 5).freeze().slice(10..30));
        assert_eq!(body.read(10, 20).unwrap(), part);
        drop(body);
        assert_eq!(
            open.load(Ordering::SeqCst),
            0,
            "closed with its last handle"
        );
    }

    #[test]
    fn small_bodies_and_bodies_past_the_descriptor_bound_stay_in_memory() {
        let open = Arc::new(AtomicUsize::new(0));
        assert!(!StoredBody::store(bytes(SEALED_MIN - 1), &open).is_sealed());
        open.store(MAX_SEALED, Ordering::SeqCst);
        let body = StoredBody::store(bytes(SEALED_MIN), &open);
        assert!(!body.is_sealed());
        assert_eq!(open.load(Ordering::SeqCst), MAX_SEALED);
        assert!(body.whole().file_region().is_none());
    }
}
