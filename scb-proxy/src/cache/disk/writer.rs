//! The disk tier's thread: it writes records, removes them, and keeps the index, in the
//! order the store asked, so that a record dropped after it was written is never found
//! again and no request waits for the disk.
//!
//! A record is written to `tmp/` under its final name and renamed into the tier's
//! directory: a crash leaves a whole record or none (a partial one stays in `tmp/` and
//! is removed at the next start). Written records are never opened for writing again.
//!
//! When a write fails (a full disk, a directory made read-only or removed), the tier
//! says so in one log line and stops writing for [`RETRY`]; requests go on from memory.
//! The next write after that tries again, and a success is logged once too.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime};

use http::response::Parts;

use super::index::Ref;
use super::record;
use super::{Shared, file_name, read_record};
use crate::cache::key::{ByDigest, Key, Source};
use crate::cache::policy::Policy;
use crate::cache::sizing::MAX_VARIANTS;
use crate::cache::stored::{SEALED_MIN, StoredBody};

/// How long a tier that failed a write stays unused before it is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(30);

/// A temporary file older than this at start was left by a crash (a live writer's are
/// renamed within moments), and is removed.
const STALE_TMP: Duration = Duration::from_secs(600);

/// A response to write to disk.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) key: Key,
    pub(crate) id: u64,
    pub(crate) source: Source,
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
    pub(crate) body: StoredBody,
    /// The ids of the key's variants the store keeps besides this one: the records of
    /// the others are removed.
    pub(crate) keep: Vec<u64>,
    /// Bytes it counts for in the queue's bound.
    pub(crate) queued: u64,
}

/// What the store asks of the tier, in order.
#[derive(Debug)]
pub(crate) enum Job {
    Write(Box<Written>),
    /// Every record of `key` goes (an unsafe method invalidated it).
    Forget {
        key: Key,
        epoch: u64,
    },
    /// One record of `key` goes.
    Drop {
        key: Key,
        id: u64,
        epoch: u64,
    },
    /// The records of keys with a variant fetched for `host` and `target` go.
    Purge {
        host: Option<Box<str>>,
        target: Box<str>,
        prefix: bool,
        epoch: u64,
    },
    /// Answered once every job before it is done (and the start's scan).
    #[cfg(test)]
    Sync(std::sync::mpsc::SyncSender<()>),
}

/// Gives a stored entry the body of its record on disk, once written, so that a large
/// body is sent from the disk's file (and the page cache) rather than held in memory.
pub(crate) type Rebody = Box<dyn Fn(&Key, u64, StoredBody) + Send>;

/// Whether writes are being made.
enum Health {
    Usable,
    Failed { retry_at: Instant },
}

pub(crate) struct Writer {
    pub(crate) dir: PathBuf,
    pub(crate) shared: Arc<Shared>,
    pub(crate) rebody: Rebody,
    pub(crate) open: Arc<AtomicUsize>,
    pub(crate) route: metrics::SharedString,
}

impl Writer {
    /// Scans what the directory holds, then does the jobs until the store is dropped.
    pub(crate) fn run(self, jobs: Receiver<Job>) {
        let mut health = match self.prepare() {
            Ok(()) => Health::Usable,
            Err(e) => {
                self.unusable(&e);
                Health::Failed {
                    retry_at: Instant::now() + RETRY,
                }
            }
        };
        if matches!(health, Health::Usable) {
            self.scan();
        }
        for job in jobs {
            match job {
                Job::Write(written) => {
                    self.shared
                        .queued
                        .fetch_sub(written.queued, Ordering::AcqRel);
                    self.write(&written, &mut health);
                }
                Job::Forget { key, epoch } => {
                    if let Some(refs) = self.shared.index.remove(&key) {
                        self.unlink(refs.iter().map(|r| r.id));
                    }
                    self.applied(epoch);
                }
                Job::Drop { key, id, epoch } => {
                    if let Some(refs) = self.shared.index.get(&key)
                        && refs.iter().any(|r| r.id == id)
                    {
                        let rest = refs.iter().filter(|r| r.id != id).cloned().collect();
                        let evicted = self.shared.index.set(key, rest);
                        self.unlink(std::iter::once(id).chain(evicted));
                    }
                    self.applied(epoch);
                }
                Job::Purge {
                    host,
                    target,
                    prefix,
                    epoch,
                } => {
                    let removed = self
                        .shared
                        .index
                        .remove_where(|r| r.source.matches(host.as_deref(), &target, prefix));
                    self.unlink(removed);
                    self.applied(epoch);
                }
                #[cfg(test)]
                Job::Sync(done) => {
                    done.send(()).ok();
                }
            }
            self.shared.publish();
        }
    }

    fn applied(&self, epoch: u64) {
        self.shared.applied.fetch_max(epoch, Ordering::AcqRel);
    }

    fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// Makes the directories and removes what a crash left in `tmp/`.
    fn prepare(&self) -> io::Result<()> {
        fs::create_dir_all(self.tmp())?;
        let now = SystemTime::now();
        for entry in fs::read_dir(self.tmp())?.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TMP);
            if old {
                fs::remove_file(entry.path()).ok();
            }
        }
        Ok(())
    }

    /// Indexes the records in the directory; those that cannot be read are removed.
    fn scan(&self) {
        let mut by_key: HashMap<Key, Vec<(SystemTime, Ref)>, ByDigest> = HashMap::default();
        let mut removed = 0usize;
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .filter(|n| n.len() == 16)
                .and_then(|n| u64::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            let read = File::open(entry.path())
                .map_err(super::ReadError::Io)
                .and_then(|file| read_record(&file));
            match read {
                Ok((layout, meta)) => {
                    let r = Ref {
                        id,
                        size: layout.file_len(),
                        source: meta.source,
                    };
                    by_key
                        .entry(meta.key)
                        .or_default()
                        .push((meta.policy.response_time, r));
                }
                Err(e) => {
                    tracing::debug!(file = %entry.path().display(), error = %e, "cache: an unreadable record is removed");
                    fs::remove_file(entry.path()).ok();
                    removed += 1;
                }
            }
        }
        let mut records = 0usize;
        for (key, mut refs) in by_key {
            // The newest first, as the memory tier keeps them; past the bound, the oldest go.
            refs.sort_by_key(|r| std::cmp::Reverse(r.0));
            let dropped: Vec<u64> = refs.iter().skip(MAX_VARIANTS).map(|r| r.1.id).collect();
            refs.truncate(MAX_VARIANTS);
            records += refs.len();
            let evicted = self
                .shared
                .index
                .set(key, refs.into_iter().map(|(_, r)| r).collect());
            self.unlink(dropped.into_iter().chain(evicted));
        }
        tracing::info!(
            route = %self.route,
            path = %self.dir.display(),
            records,
            bytes = self.shared.index.bytes(),
            removed,
            "cache disk tier ready"
        );
    }

    fn write(&self, w: &Written, health: &mut Health) {
        if let Health::Failed { retry_at } = *health {
            if Instant::now() < retry_at {
                return;
            }
            if let Err(e) = fs::create_dir_all(self.tmp()) {
                *health = Health::Failed {
                    retry_at: Instant::now() + RETRY,
                };
                tracing::debug!(error = %e, "cache disk tier still unusable");
                return;
            }
        }
        match self.write_record(w) {
            Ok(size) => {
                if let Health::Failed { .. } = health {
                    tracing::info!(route = %self.route, path = %self.dir.display(), "cache disk tier usable again");
                    *health = Health::Usable;
                }
                self.index(w, size);
            }
            Err(e) => {
                if let Health::Usable = health {
                    self.unusable(&e);
                }
                *health = Health::Failed {
                    retry_at: Instant::now() + RETRY,
                };
            }
        }
    }

    fn unusable(&self, e: &io::Error) {
        tracing::warn!(
            route = %self.route,
            path = %self.dir.display(),
            error = %e,
            retry_secs = RETRY.as_secs(),
            "cache disk tier unusable: storing in memory only"
        );
    }

    /// Writes `w`'s record; returns its length. A large body then comes from the file.
    fn write_record(&self, w: &Written) -> io::Result<u64> {
        let name = file_name(w.id);
        let tmp = self.tmp().join(&name);
        // A body sent with sendfile starts on a page: the kernel then hands whole pages to
        // the socket (measured: a tenth less system time for 100 KiB).
        let aligned = w.body.len() >= SEALED_MIN as u64;
        let head = record::encode(&w.key, &w.source, &w.policy, &w.head, w.body.len(), aligned);
        let written =
            write_new(&tmp, &head, &w.body).and_then(|()| fs::rename(&tmp, self.dir.join(&name)));
        if let Err(e) = written {
            fs::remove_file(&tmp).ok();
            return Err(e);
        }
        if aligned
            && let Ok(file) = File::open(self.dir.join(&name))
            && let Ok(body) = StoredBody::on_disk(file, head.len() as u64, w.body.len(), &self.open)
        {
            (self.rebody)(&w.key, w.id, body);
        }
        Ok(head.len() as u64 + w.body.len())
    }

    /// Puts `w`'s record in the index beside the variants the store keeps.
    fn index(&self, w: &Written, size: u64) {
        let old = self.shared.index.get(&w.key);
        let mut refs = vec![Ref {
            id: w.id,
            size,
            source: w.source.clone(),
        }];
        let mut gone = Vec::new();
        for r in old.iter().flat_map(|refs| refs.iter()) {
            if r.id != w.id && w.keep.contains(&r.id) {
                refs.push(r.clone());
            } else if r.id != w.id {
                gone.push(r.id);
            }
        }
        let evicted = self.shared.index.set(w.key.clone(), refs);
        self.unlink(gone.into_iter().chain(evicted));
    }

    fn unlink(&self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            match fs::remove_file(self.dir.join(file_name(id))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    tracing::debug!(error = %e, "cache: a record could not be removed");
                }
                _ => {}
            }
        }
    }
}

/// Creates `path` (which must not exist) holding `head` and `body`.
fn write_new(path: &Path, head: &[u8], body: &StoredBody) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    body.write_after(head, &file)
}
