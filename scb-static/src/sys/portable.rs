//! Other Unix systems: the component walk for lookups, plain positional reads.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode as FileMode, OFlags};

use super::walk;
use super::{Identity, Mode, OpenError, Opened, Symlinks, identity_at};

/// A directory every lookup is confined to.
#[derive(Debug)]
pub(crate) struct RootDir {
    fd: OwnedFd,
}

impl RootDir {
    /// Opens `path` as the root. Symbolic links are never followed here (`Beneath` acts as
    /// `None`): without `openat2` there is no race-free way to follow them safely.
    pub(crate) fn open(path: &Path, _symlinks: Symlinks) -> io::Result<Self> {
        let fd = rustix::fs::open(path, OFlags::DIRECTORY | OFlags::CLOEXEC, FileMode::empty())?;
        Ok(Self { fd })
    }

    /// Lookups always use the walk here.
    #[cfg(test)]
    pub(crate) fn force_walk(&self) {}

    /// Lookups always use the walk here.
    #[cfg(test)]
    pub(crate) fn uses_walk(&self) -> bool {
        true
    }

    /// What `rel` looks like now (see [`Identity`]): one `fstatat`. There is no cache-only
    /// form of it; the open-file cache calls it only for names it resolved moments ago,
    /// whose directory entries the kernel still holds.
    pub(crate) fn identity(&self, rel: &str) -> Identity {
        identity_at(&self.fd, rel)
    }

    /// Opens `rel` beneath the root; there is no way to ask for a cache-only lookup, so
    /// `mode` is ignored.
    pub(crate) fn lookup(&self, rel: &str, _mode: Mode) -> Result<Opened, OpenError> {
        walk::open(&self.fd, rel)
    }
}

/// No non-blocking read exists here: read directly (a local disk is assumed).
pub(crate) fn read_at_nowait(
    file: &File,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    use std::os::unix::fs::FileExt as _;
    file.read_at(buf, offset).map(Some)
}
