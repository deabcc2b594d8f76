//! The disk tier: stored responses kept in files under a directory, so that they survive
//! a restart, and so that more of them can be kept than memory holds.
//!
//! Every response the memory tier stores is also written to disk, by one thread per
//! tier (`writer.rs`), never by a request: a request only queues the write (at most
//! [`MAX_QUEUED`] bytes wait; past that a response is kept in memory only). Each
//! response is one file (`record.rs`), named by its entry's id, written under `tmp/` and
//! renamed into place. The tier is bounded by the bytes of its files (its index,
//! `index.rs`, evicts by S3-FIFO as the memory tier does, and the writer removes the
//! evicted files).
//!
//! A request that finds nothing in memory looks in the index and, if the key is there,
//! reads its records' heads on a blocking thread and puts them back into memory. A
//! body of 64 KiB or more is not read: the entry holds the record's descriptor and a hit
//! answers with a [`FileRegion`](scb_core::FileRegion) of it, which scb's HTTP/1.1 server
//! sends with `sendfile`, as it sends a static file. Once a large body stored in memory
//! has been written, the memory tier's entry is given the record's body the same way
//! (its pages are then the page cache's, and count against the disk's bound, not
//! `max_bytes`).
//!
//! What the memory tier drops (an unsafe method's invalidation, a purge, a variant
//! replaced) the writer removes from disk, in the order it was asked; a read of the
//! disk that overlaps such a removal does not put anything back into memory. What the
//! memory tier evicts stays on disk.
//!
//! When the directory cannot be written (a full disk, no permission, removed), the tier
//! logs one line and the cache goes on from memory; it tries again every
//! [`RETRY`](writer::RETRY).

mod index;
mod record;
mod writer;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use index::Index;
pub(crate) use index::Refs;
pub(crate) use record::Meta;
use record::{Layout, PREFIX, Unreadable};
pub(crate) use writer::{Job, Rebody, Written};

use crate::cache::key::Key;
use crate::cache::stored::{SEALED_MIN, StoredBody};

/// Bytes of responses waiting to be written, at most; past this a response is kept in
/// memory only (the disk is slower than the responses come).
pub(crate) const MAX_QUEUED: u64 = 64 << 20;

/// Where a disk tier is and how large it may grow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DiskShape {
    pub(crate) path: PathBuf,
    pub(crate) max_bytes: u64,
}

/// What the writer and the requests share.
#[derive(Debug)]
pub(crate) struct Shared {
    index: Index,
    /// The last invalidation epoch the writer has applied.
    applied: AtomicU64,
    /// Bytes queued for writing.
    queued: AtomicU64,
    bytes: metrics::Gauge,
}

impl Shared {
    fn publish(&self) {
        self.bytes.set(self.index.bytes() as f64);
    }
}

/// A stored response read back from disk.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) id: u64,
    pub(crate) meta: Meta,
    pub(crate) body: StoredBody,
}

/// One store's disk tier.
#[derive(Debug)]
pub(crate) struct Disk {
    shape: DiskShape,
    shared: Arc<Shared>,
    jobs: OnceLock<Sender<Job>>,
    /// The store's count of open files (`stored.rs`).
    open: Arc<AtomicUsize>,
}

/// Why a record was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error(transparent)]
    Io(io::Error),
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    #[error("file of {found} bytes where the record says {expected}")]
    Length { found: u64, expected: u64 },
}

impl Disk {
    /// The tier of `shape`, for objects of up to `max_object` bytes; nothing happens
    /// on disk until it is [started](Self::start).
    pub(crate) fn new(
        shape: DiskShape,
        max_object: u64,
        open: Arc<AtomicUsize>,
        route: metrics::SharedString,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                index: Index::new(shape.max_bytes, max_object.saturating_add(64 << 10)),
                applied: AtomicU64::new(0),
                queued: AtomicU64::new(0),
                bytes: metrics::gauge!(crate::cache::metrics::CACHE_DISK_BYTES, "route" => route),
            }),
            shape,
            jobs: OnceLock::new(),
            open,
        }
    }

    /// Starts its thread (once): it scans the directory, then writes and removes what
    /// the store asks. `rebody` gives an entry its body on disk once written.
    pub(crate) fn start(&self, route: metrics::SharedString, rebody: Rebody) {
        self.jobs.get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            let writer = writer::Writer {
                dir: self.shape.path.clone(),
                shared: Arc::clone(&self.shared),
                rebody,
                open: Arc::clone(&self.open),
                route,
            };
            let spawned = std::thread::Builder::new()
                .name("scb-cache-disk".into())
                .spawn(move || writer.run(rx));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cache disk tier not started: storing in memory only");
            }
            tx
        });
    }

    /// Asks the writer for `job` (nothing, if it is not started).
    pub(crate) fn send(&self, job: Job) {
        if let Some(jobs) = self.jobs.get() {
            jobs.send(job).ok();
        }
    }

    /// Queues `written` for writing, unless the queue is full.
    pub(crate) fn write(&self, mut written: Written) {
        let bytes = written.body.held() + 1024;
        if self.shared.queued.fetch_add(bytes, Ordering::AcqRel) + bytes > MAX_QUEUED {
            self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
            tracing::debug!("cache: the disk is behind; a response is kept in memory only");
            return;
        }
        written.queued = bytes;
        self.send(Job::Write(Box::new(written)));
    }

    /// The records of `key`, if the tier holds any and has applied invalidation
    /// `epoch` (a read overlapping a removal finds nothing).
    pub(crate) fn refs(&self, key: &Key, epoch: u64) -> Option<Refs> {
        if self.shared.applied.load(Ordering::Acquire) != epoch {
            return None;
        }
        self.shared.index.get(key)
    }

    /// The ids of the records a purge of `host` and `target` drops now.
    pub(crate) fn purged_ids(&self, host: Option<&str>, target: &str, prefix: bool) -> Vec<u64> {
        self.shared
            .index
            .ids_where(|r| r.source.matches(host, target, prefix))
    }

    /// Reads `refs`' records (blocking: call it off the runtime's threads). A record
    /// that is gone or cannot be read is dropped from the index.
    pub(crate) fn load(&self, key: &Key, refs: &Refs, epoch: u64) -> Vec<Loaded> {
        let mut loaded = Vec::with_capacity(refs.len());
        for r in refs.iter() {
            match self.load_one(r.id) {
                Ok((meta, body)) if meta.key == *key => loaded.push(Loaded {
                    id: r.id,
                    meta,
                    body,
                }),
                Ok(_) => self.drop_unreadable(key, r.id, epoch),
                Err(e) => {
                    tracing::debug!(error = %e, "cache: a record on disk could not be read");
                    self.drop_unreadable(key, r.id, epoch);
                }
            }
        }
        loaded
    }

    fn drop_unreadable(&self, key: &Key, id: u64, epoch: u64) {
        self.send(Job::Drop {
            key: key.clone(),
            id,
            epoch,
        });
    }

    fn load_one(&self, id: u64) -> Result<(Meta, StoredBody), ReadError> {
        let file = File::open(self.shape.path.join(file_name(id))).map_err(ReadError::Io)?;
        let (layout, meta) = read_record(&file)?;
        let (offset, len) = (layout.body_offset(), layout.body_len);
        if len < SEALED_MIN as u64 {
            let mut body = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut body, offset)
                .map_err(ReadError::Io)?;
            return Ok((meta, StoredBody::Memory(Bytes::from(body))));
        }
        // No room for another descriptor: the body is read into memory.
        let file = match StoredBody::on_disk(file, offset, len, &self.open) {
            Ok(body) => return Ok((meta, body)),
            Err(file) => file,
        };
        let mut body = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut body, offset)
            .map_err(ReadError::Io)?;
        Ok((meta, StoredBody::Memory(Bytes::from(body))))
    }

    /// Bytes of records on disk.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.shared.index.bytes()
    }

    /// Waits until the writer has done every job asked before (and its start's scan).
    /// Blocking; for tests.
    #[cfg(test)]
    pub(crate) fn sync(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Job::Sync(tx));
        rx.recv().ok();
    }
}

/// The file name of record `id`.
fn file_name(id: u64) -> String {
    format!("{id:016x}")
}

/// The layout and head of the record in `file`, checked against its length.
fn read_record(file: &File) -> Result<(Layout, Meta), ReadError> {
    let mut prefix = [0; PREFIX];
    file.read_exact_at(&mut prefix, 0).map_err(ReadError::Io)?;
    let layout = record::layout(&prefix)?;
    let found = file.metadata().map_err(ReadError::Io)?.len();
    if found != layout.file_len() {
        return Err(ReadError::Length {
            found,
            expected: layout.file_len(),
        });
    }
    let mut head = vec![0; layout.head_len()];
    file.read_exact_at(&mut head, PREFIX as u64)
        .map_err(ReadError::Io)?;
    Ok((layout, record::decode(&layout, &head)?))
}
