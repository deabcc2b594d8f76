//! Linux: `openat2` beneath the root, `preadv2(RWF_NOWAIT)` for reads.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{Mode as FileMode, OFlags, ResolveFlags, openat2};
use rustix::io::{Errno, ReadWriteFlags};

use super::walk::{self, final_flags, finish};
use super::{Identity, Mode, OpenError, Opened, Symlinks, identity_at};

/// How often a lookup is retried when `RESOLVE_BENEATH` reports a concurrent rename
/// (EAGAIN without `RESOLVE_CACHED`): a benign race that settles at once, but must not
/// spin forever under a rename storm.
const RACE_RETRIES: usize = 8;

/// What this kernel has shown it supports; learned from the first failures, then kept.
const FULL: u8 = 0;
/// `RESOLVE_CACHED` refused (Linux < 5.12): look up without it, inline.
const NO_CACHED: u8 = 1;
/// No `openat2` (Linux < 5.6, or a seccomp filter): the portable walk.
const WALK: u8 = 2;

/// A directory every lookup is confined to.
#[derive(Debug)]
pub(crate) struct RootDir {
    fd: OwnedFd,
    symlinks: Symlinks,
    support: AtomicU8,
}

impl RootDir {
    /// Opens `path` as the root (an `O_PATH` descriptor: no read permission needed).
    pub(crate) fn open(path: &Path, symlinks: Symlinks) -> io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            FileMode::empty(),
        )?;
        Ok(Self {
            fd,
            symlinks,
            support: AtomicU8::new(FULL),
        })
    }

    /// Use the portable component walk from now on, as if `openat2` were missing.
    #[cfg(test)]
    pub(crate) fn force_walk(&self) {
        self.support.store(WALK, Ordering::Relaxed);
    }

    /// Whether lookups go through the portable walk (symlinks then never followed).
    #[cfg(test)]
    pub(crate) fn uses_walk(&self) -> bool {
        self.support.load(Ordering::Relaxed) == WALK
    }

    /// What `rel` looks like now (see [`Identity`]): one `fstatat`. There is no cache-only
    /// form of it; the open-file cache calls it only for names it resolved moments ago,
    /// whose directory entries the kernel still holds.
    pub(crate) fn identity(&self, rel: &str) -> Identity {
        identity_at(&self.fd, rel)
    }

    /// Opens `rel` (normalised, relative, `""` for the root itself) beneath the root.
    pub(crate) fn lookup(&self, rel: &str, mode: Mode) -> Result<Opened, OpenError> {
        let support = self.support.load(Ordering::Relaxed);
        if support == WALK {
            return walk::open(&self.fd, rel);
        }
        let mut resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        if self.symlinks == Symlinks::None {
            resolve |= ResolveFlags::NO_SYMLINKS;
        }
        let mut cached = mode == Mode::Cached && support == FULL;
        let path = if rel.is_empty() { "." } else { rel };
        for _ in 0..RACE_RETRIES {
            let flags = if cached {
                resolve | ResolveFlags::CACHED
            } else {
                resolve
            };
            match openat2(&self.fd, path, open_flags(), FileMode::empty(), flags) {
                Ok(fd) => return finish(Ok(fd)),
                Err(Errno::AGAIN) if cached => return Err(OpenError::WouldBlock),
                Err(Errno::AGAIN) => {}
                Err(Errno::INVAL | Errno::TOOBIG) if cached => {
                    // RESOLVE_CACHED is Linux 5.12+. Without it the kernel cannot tell us
                    // a lookup would block, so lookups run inline: the right trade for a
                    // local disk, whose metadata is almost always cached.
                    tracing::info!("openat2 lacks RESOLVE_CACHED; looking up without it");
                    self.support.store(NO_CACHED, Ordering::Relaxed);
                    cached = false;
                }
                Err(Errno::NOSYS) => {
                    tracing::warn!("openat2 unavailable; falling back to an O_NOFOLLOW walk");
                    self.support.store(WALK, Ordering::Relaxed);
                    return walk::open(&self.fd, rel);
                }
                Err(Errno::PERM) => {
                    // A seccomp filter that forbids openat2 answers EPERM; a real
                    // permission problem answers EACCES. Let the walk decide.
                    let walked = walk::open(&self.fd, rel);
                    if !matches!(walked, Err(OpenError::Forbidden)) {
                        tracing::warn!(
                            "openat2 refused (EPERM); falling back to an O_NOFOLLOW walk"
                        );
                        self.support.store(WALK, Ordering::Relaxed);
                    }
                    return walked;
                }
                Err(e) => return finish(Err(e)),
            }
        }
        Err(OpenError::Io(io::Error::other(
            "lookup kept racing with renames beneath the root",
        )))
    }
}

/// The walk's flags minus `O_NOFOLLOW`: with `openat2` the resolve flags decide about
/// links, including a link in the last component (followed beneath the root, or refused
/// by `RESOLVE_NO_SYMLINKS`).
fn open_flags() -> OFlags {
    final_flags() - OFlags::NOFOLLOW
}

/// Whether `preadv2(RWF_NOWAIT)` has been refused by the filesystem (EOPNOTSUPP).
static NOWAIT_UNSUPPORTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Reads into `buf` at `offset` only from the page cache: `Ok(None)` when that would need
/// disk I/O (or the filesystem cannot say), and the caller reads on the blocking pool.
/// A short read means only part was cached; a 0 before the end of the file is treated by
/// callers as "finish on the blocking path" (some 5.9/5.10 kernels return a spurious 0).
pub(crate) fn read_at_nowait(
    file: &File,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    if NOWAIT_UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(None);
    }
    loop {
        let mut slices = [io::IoSliceMut::new(buf)];
        return match rustix::io::preadv2(file, &mut slices, offset, ReadWriteFlags::NOWAIT) {
            Ok(n) => Ok(Some(n)),
            Err(Errno::AGAIN) => Ok(None),
            Err(Errno::INTR) => continue,
            Err(Errno::OPNOTSUPP) => {
                NOWAIT_UNSUPPORTED.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        };
    }
}
