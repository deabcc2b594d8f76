//! What the lookup of one name beneath the root found: the unit the open-file cache keeps.
//!
//! An [`Entry`] is the name itself ([`Probe`]: a file, a directory, nothing, ...) and, for
//! a file, its precompressed sidecars, each probed with the same inline `openat2`. A file
//! found is a [`Variant`]: its bytes when small (read once, shared by every response that
//! sends them) or its open descriptor, and the header values every response of it carries,
//! rendered once. Everything a response says comes from the handle that was opened, never
//! from a second look at the path.

use std::fs::File;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderValue;
use scb_core::{Body, FileRegion, FileStamp};

use super::config::Config;
use crate::encoding::Coding;
use crate::sys::{Identity, Kind, Meta, Mode, OpenError, Opened, RootDir, read_at_nowait};
use scb_core::conditional;

/// Files up to this size are read whole while the name is looked up, in one
/// `preadv2(RWF_NOWAIT)`: the response is then plain bytes, the file is closed at once, and
/// the body needs no further I/O. 128 KiB covers the HTML, CSS, JS and icons that make up
/// most requests of a site; larger files go out as a file region (`sendfile` on plain TCP).
pub(crate) const INLINE_READ_MAX: u64 = 128 * 1024;

/// What an entry is counted as in the cache's byte bound besides the bytes of its files:
/// the structure, its header values and its name. A round figure a little above the
/// measured size of an entry with one variant.
const ENTRY_OVERHEAD: usize = 512;

/// A lookup needs the blocking pool: it, or a read, would wait for the disk.
#[derive(Debug)]
pub(crate) struct WouldBlock;

/// What looking up one name found.
#[derive(Debug)]
pub(crate) enum Probe {
    /// A regular file.
    File(Variant),
    /// A directory.
    Dir,
    /// There, but the server may not read it (`EACCES`/`EPERM`).
    Forbidden,
    /// Something is there that is never served: a link the policy or the kernel refuses,
    /// a FIFO or device, or a name whose lookup failed. The client gets 404; the server
    /// knows the name is taken (an SPA fallback is not served for it).
    Taken,
    /// Nothing is there.
    NotFound,
    /// The lookup failed for want of a resource (descriptors, memory): 503, and not
    /// cached.
    Unavailable,
}

/// The errno values of resource exhaustion, from rustix rather than libc.
mod libc_code {
    pub(super) const EMFILE: i32 = rustix::io::Errno::MFILE.raw_os_error();
    pub(super) const ENFILE: i32 = rustix::io::Errno::NFILE.raw_os_error();
    pub(super) const ENOMEM: i32 = rustix::io::Errno::NOMEM.raw_os_error();
}

/// A regular file as it was opened: its content and the header values of its responses.
///
/// The bytes of a small file and the text of its header values share one allocation
/// (the values are slices of it), so that an entry costs a few allocations, not one per
/// value.
#[derive(Debug)]
pub(crate) struct Variant {
    pub(crate) len: u64,
    pub(crate) modified: SystemTime,
    pub(crate) stamp: FileStamp,
    /// The strong entity-tag, quotes included.
    pub(crate) etag: HeaderValue,
    /// `None` for an mtime an HTTP-date cannot carry.
    pub(crate) last_modified: Option<HeaderValue>,
    pub(crate) content_length: HeaderValue,
    content: Content,
}

/// Room for the header texts after a small file's bytes: an entity-tag (at most 63
/// bytes), an HTTP-date (29) and a length (at most 20).
const HEADER_TEXT_MAX: usize = 112;

#[derive(Debug)]
enum Content {
    /// The whole file, read at lookup.
    Bytes(Bytes),
    /// The open file: large, or it could not be read whole at lookup (it shrank, changed
    /// or failed; the response then checks it again as it goes out).
    Open(Arc<File>),
}

impl Variant {
    /// The `len` bytes at `start` as a body: a slice of the bytes held (no copy), or a
    /// region of the open file, checked against the state the headers came from before
    /// its last byte goes out.
    pub(crate) fn body(&self, start: u64, len: u64) -> Body {
        if len == 0 {
            return Body::empty();
        }
        match &self.content {
            Content::Bytes(bytes) => {
                let start = usize::try_from(start).unwrap_or(usize::MAX);
                let end = start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
                Body::full(bytes.slice(start.min(bytes.len())..end.min(bytes.len())))
            }
            Content::Open(file) => {
                Body::file(FileRegion::new(Arc::clone(file), start, len).with_stamp(self.stamp))
            }
        }
    }

    fn held_bytes(&self) -> usize {
        match &self.content {
            Content::Bytes(bytes) => bytes.len(),
            Content::Open(_) => 0,
        }
    }
}

/// What the lookup of one name found: the name, and, for a file, its sidecars.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The name itself.
    pub(crate) found: Probe,
    /// What the name looked like, to tell later whether anything changed; `None` when
    /// the entry is not to be cached.
    seen: Option<Identity>,
    /// The sidecars that were probed, in the configuration's order. Empty for anything
    /// but a file or a missing name.
    sidecars: Vec<Sidecar>,
    /// The representation's type, from the name (a sidecar is the same type, encoded).
    pub(crate) content_type: HeaderValue,
    /// The Cache-Control rule's value for the name, if one matches.
    pub(crate) cache_control: Option<HeaderValue>,
    /// Whether the entry may be kept: no lookup failed for a reason that may pass (an
    /// I/O error, a full descriptor table), every small file was read whole.
    cacheable: bool,
}

/// One probed sidecar of an entry.
#[derive(Debug)]
struct Sidecar {
    coding: Coding,
    probe: Probe,
    seen: Option<Identity>,
}

impl Entry {
    /// Looks up `rel` and the sidecars of `codings` beneath the root. With `track`, also
    /// records what each name looked like, for [`unchanged`](Self::unchanged) (a `stat`
    /// more for names that could not be opened).
    ///
    /// # Errors
    ///
    /// [`WouldBlock`] in [`Mode::Cached`] when a lookup or a read would wait for the disk.
    pub(crate) fn resolve(
        config: &Config,
        rel: &str,
        codings: &[Coding],
        mode: Mode,
        track: bool,
    ) -> Result<Self, WouldBlock> {
        let mut entry = Entry {
            found: Probe::NotFound,
            seen: None,
            sidecars: Vec::new(),
            content_type: HeaderValue::from_static(""),
            cache_control: None,
            cacheable: track,
        };
        (entry.found, entry.seen) = entry.probe(&config.root, rel, mode)?;
        // A directory is a directory whatever sidecar names exist beside it; the root has
        // no name to add a suffix to.
        if !rel.is_empty() && !matches!(entry.found, Probe::Dir) && !codings.is_empty() {
            entry.sidecars.reserve_exact(codings.len());
            for &coding in codings {
                let name = format!("{rel}{}", coding.suffix());
                let (probe, seen) = entry.probe(&config.root, &name, mode)?;
                entry.sidecars.push(Sidecar {
                    coding,
                    probe,
                    seen,
                });
            }
        }
        let has_file = matches!(entry.found, Probe::File(_))
            || entry
                .sidecars
                .iter()
                .any(|s| matches!(s.probe, Probe::File(_)));
        if has_file {
            entry.content_type = crate::mime::content_type(rel);
            if !config.cache_control.is_empty() {
                entry.cache_control = config.cache_control.for_path(rel).cloned();
            }
        }
        Ok(entry)
    }

    /// Looks up one name; while the entry may still be cached, also says what the name
    /// looked like (a `stat` more for a name that could not be opened).
    fn probe(
        &mut self,
        root: &RootDir,
        name: &str,
        mode: Mode,
    ) -> Result<(Probe, Option<Identity>), WouldBlock> {
        let (probe, identity) = match root.lookup(name, mode) {
            Ok(Opened { file, meta }) => {
                let probe = match meta.kind {
                    Kind::File => Probe::File(self.variant(file, meta, mode)?),
                    Kind::Dir => Probe::Dir,
                    Kind::Other => Probe::Taken,
                };
                (probe, Some(Identity::Found(meta)))
            }
            Err(OpenError::NotFound) => (Probe::NotFound, Some(Identity::Missing)),
            Err(OpenError::Refused) => (Probe::Taken, None),
            Err(OpenError::Forbidden) => (Probe::Forbidden, None),
            Err(OpenError::WouldBlock) => return Err(WouldBlock),
            Err(OpenError::Io(e)) => {
                tracing::warn!(path = name, error = %e, "static file lookup failed");
                self.cacheable = false;
                // Out of descriptors or memory: the file may well be there, and the
                // next request may get it. Anything else is the name's own trouble.
                let exhausted = matches!(
                    e.raw_os_error(),
                    Some(code) if [libc_code::EMFILE, libc_code::ENFILE, libc_code::ENOMEM]
                        .contains(&code)
                );
                (
                    if exhausted {
                        Probe::Unavailable
                    } else {
                        Probe::Taken
                    },
                    None,
                )
            }
        };
        // A name that could not be opened is remembered by what `stat` says of it.
        let seen = self
            .cacheable
            .then(|| identity.unwrap_or_else(|| root.identity(name)));
        Ok((probe, seen))
    }

    /// The variant of a regular file that was opened: read whole when small.
    fn variant(&mut self, file: File, meta: Meta, mode: Mode) -> Result<Variant, WouldBlock> {
        let stamp = meta.stamp();
        let small = meta.len <= INLINE_READ_MAX;
        let mut block = match small {
            true => read_whole(&file, meta.len, stamp, mode)?,
            false => None,
        };
        if small && block.is_none() {
            // Could not be read whole as it was opened: sent from the descriptor, checked
            // as it goes, and not kept.
            self.cacheable = false;
        }
        let held = block.is_some();
        let mut text = block
            .take()
            .unwrap_or_else(|| Vec::with_capacity(HEADER_TEXT_MAX));
        let content_end = text.len();
        let modified = mtime(&meta);
        let etag =
            conditional::strong_etag(meta.len, meta.modified_secs, meta.modified_nanos, meta.ino);
        text.extend_from_slice(etag.as_bytes());
        let etag_end = text.len();
        let last_modified = conditional::last_modified(modified, SystemTime::now());
        if let Some(date) = &last_modified {
            text.extend_from_slice(date);
        }
        let date_end = text.len();
        let _ = write!(text, "{}", meta.len);
        let block = Bytes::from(text);
        let value = |range: std::ops::Range<usize>| {
            HeaderValue::from_maybe_shared(block.slice(range))
                .unwrap_or_else(|_| HeaderValue::from_static(""))
        };
        Ok(Variant {
            len: meta.len,
            modified,
            stamp,
            etag: value(content_end..etag_end),
            last_modified: last_modified.map(|_| value(etag_end..date_end)),
            content_length: value(date_end..block.len()),
            content: if held {
                Content::Bytes(block.slice(..content_end))
            } else {
                Content::Open(Arc::new(file))
            },
        })
    }

    /// What was probed for `coding`'s sidecar, if it was.
    pub(crate) fn sidecar(&self, coding: Coding) -> Option<&Probe> {
        self.sidecars
            .iter()
            .find(|s| s.coding == coding)
            .map(|s| &s.probe)
    }

    /// Whether the name names nothing at all: neither the file nor a sidecar of it in any
    /// probed coding (a client that cannot take `app.js.br` must get 404 or 406, not an
    /// SPA's HTML as `app.js`), nor anything the server may not read. Only then does an
    /// SPA fallback answer.
    pub(crate) fn names_nothing(&self) -> bool {
        matches!(self.found, Probe::NotFound)
            && self
                .sidecars
                .iter()
                .all(|s| matches!(s.probe, Probe::NotFound))
    }

    /// Whether the entry found nothing to serve: no file and no directory. The cache keeps
    /// these apart, so that a scan of random paths cannot evict the site.
    pub(crate) fn is_negative(&self) -> bool {
        !matches!(self.found, Probe::File(_) | Probe::Dir)
            && !self
                .sidecars
                .iter()
                .any(|s| matches!(s.probe, Probe::File(_)))
    }

    /// Whether the entry may be cached (see the field).
    pub(crate) fn is_cacheable(&self) -> bool {
        self.cacheable
    }

    /// What the entry counts for in the cache's byte bound.
    pub(crate) fn weight(&self, rel: &str) -> usize {
        let mut bytes = ENTRY_OVERHEAD + rel.len();
        if let Probe::File(v) = &self.found {
            bytes += v.held_bytes();
        }
        for sidecar in &self.sidecars {
            if let Probe::File(v) = &sidecar.probe {
                bytes += v.held_bytes();
            }
        }
        bytes
    }

    /// Whether every name the entry probed looks as it did (one `stat` each): same
    /// inode, size, modification and change time, or the same absence. Anything else
    /// (an edit, a rename over it, a deletion, a `chmod`, a link pointed elsewhere, a
    /// directory where a file was) means the name must be looked up again.
    pub(crate) fn unchanged(&self, root: &RootDir, rel: &str) -> bool {
        self.seen.is_some_and(|seen| root.identity(rel) == seen)
            && self.sidecars.iter().all(|s| {
                s.seen.is_some_and(|seen| {
                    root.identity(&format!("{rel}{}", s.coding.suffix())) == seen
                })
            })
    }
}

/// Reads the whole of a small file, into a buffer with room for [`HEADER_TEXT_MAX`]
/// more bytes. `Ok(None)` when it cannot be read whole as the state
/// `stamp` (it shrank, changed or failed) on the blocking path; in [`Mode::Cached`] any of
/// these, and a read that would wait for the disk, is [`WouldBlock`]: the whole lookup
/// runs again off the worker, where the new version's headers and bytes are read together.
fn read_whole(
    file: &File,
    len: u64,
    stamp: FileStamp,
    mode: Mode,
) -> Result<Option<Vec<u8>>, WouldBlock> {
    let len = usize::try_from(len).unwrap_or(0);
    let mut buf = Vec::with_capacity(len + HEADER_TEXT_MAX);
    buf.resize(len, 0);
    let mut filled = 0;
    while filled < buf.len() {
        let offset = filled as u64;
        let n = match mode {
            Mode::Cached => match read_at_nowait(file, offset, &mut buf[filled..]) {
                Ok(Some(n)) => n,
                // Not cached, or a spurious 0 before the known end: finish off the worker.
                Ok(None) => return Err(WouldBlock),
                Err(e) => {
                    tracing::warn!(error = %e, "reading a static file failed");
                    return Ok(None);
                }
            },
            Mode::Blocking => {
                use std::os::unix::fs::FileExt as _;
                match file.read_at(&mut buf[filled..], offset) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading a static file failed");
                        return Ok(None);
                    }
                }
            }
        };
        if n == 0 {
            // The file shrank after it was opened (or a spurious 0 from RWF_NOWAIT).
            return match mode {
                Mode::Cached => Err(WouldBlock),
                Mode::Blocking => Ok(None),
            };
        }
        filled += n;
    }
    match FileStamp::of(file) {
        Ok(now) if now == stamp => Ok(Some(buf)),
        Ok(_) if mode == Mode::Cached => Err(WouldBlock),
        Ok(_) => Ok(None),
        Err(e) => {
            tracing::warn!(error = %e, "reading a static file failed");
            Ok(None)
        }
    }
}

fn mtime(meta: &Meta) -> SystemTime {
    let secs = meta.modified_secs;
    let nanos = Duration::from_nanos(u64::from(meta.modified_nanos));
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs()) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}
