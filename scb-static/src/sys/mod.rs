//! Filesystem calls of the static-file layer behind one portable interface (the cap-std
//! shape): [`RootDir`] resolves a normalised relative path beneath a root directory and
//! returns an open file, and [`read_at_nowait`] reads without blocking on a page-cache
//! miss.
//!
//! On Linux the lookup is one `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from the
//! root's descriptor, so the kernel, not a string check, keeps every path beneath the root,
//! race-free against concurrent renames and symlink swaps; with [`Mode::Cached`] it adds
//! `RESOLVE_CACHED`, so a lookup that would need disk I/O says so instead of blocking the
//! worker. Where `openat2` is unavailable (kernel < 5.6, seccomp) it falls back, once and
//! for good, to a component-by-component `openat(O_NOFOLLOW)` walk (`walk.rs`), which is
//! also the portable implementation on other Unix systems.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(not(target_os = "linux"))]
mod portable;
mod walk;

use std::fs::File;
use std::io;

#[cfg(target_os = "linux")]
pub(crate) use linux::{RootDir, read_at_nowait};
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::{RootDir, read_at_nowait};

/// What to do with symbolic links met during a lookup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Symlinks {
    /// Follow links whose target stays beneath the root; the kernel refuses the rest.
    #[default]
    Beneath,
    /// Refuse every symbolic link.
    None,
}

/// Whether a lookup may wait for the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Only from the kernel's caches; [`OpenError::WouldBlock`] when I/O would be needed.
    /// Safe to call on an async worker.
    Cached,
    /// May block on I/O: for the blocking pool.
    Blocking,
}

/// Why a lookup found no file to serve.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// No such file, or a non-directory in the middle of the path: the client learns
    /// nothing more.
    #[error("not found")]
    NotFound,
    /// Something is there, but the kernel refused to resolve it beneath the root: a link
    /// that leads out (`EXDEV`), any link the policy or the walk does not follow, a link
    /// loop (`ELOOP`). The client gets the same answer as for [`NotFound`](Self::NotFound);
    /// the server knows the name is taken (an SPA fallback is not served there).
    #[error("refused")]
    Refused,
    /// The file exists but may not be read.
    #[error("permission denied")]
    Forbidden,
    /// Resolving from the caches alone was not possible; retry with [`Mode::Blocking`] off
    /// the worker.
    #[error("lookup would block")]
    WouldBlock,
    /// Anything else: an I/O error that is the server's problem, not the client's.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// What a lookup opened.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) file: File,
    pub(crate) meta: Meta,
}

/// The metadata the layer needs, from one `fstat` of the descriptor actually opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) kind: Kind,
    pub(crate) len: u64,
    pub(crate) modified_secs: i64,
    pub(crate) modified_nanos: u32,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// The inode's change time (`ctime`): moves with the content, and also with a
    /// `chmod`, a `chown` or a new link, which the open-file cache must notice too.
    pub(crate) changed_secs: i64,
    pub(crate) changed_nanos: u32,
}

impl Meta {
    /// The stamp a response's body is checked against before its last byte goes out.
    pub(crate) fn stamp(&self) -> scb_core::FileStamp {
        scb_core::FileStamp::new(
            self.len,
            (self.modified_secs, i64::from(self.modified_nanos)),
        )
    }
}

/// The kinds of file the layer tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    /// FIFOs, sockets, devices: never served.
    Other,
}

fn meta_of(file: &File) -> io::Result<Meta> {
    Ok(meta_from(&rustix::fs::fstat(file)?))
}

fn meta_from(st: &rustix::fs::Stat) -> Meta {
    let kind = match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::RegularFile => Kind::File,
        rustix::fs::FileType::Directory => Kind::Dir,
        _ => Kind::Other,
    };
    Meta {
        kind,
        len: u64::try_from(st.st_size).unwrap_or(0),
        modified_secs: st.st_mtime,
        modified_nanos: u32::try_from(st.st_mtime_nsec).unwrap_or(0),
        changed_secs: st.st_ctime,
        changed_nanos: u32::try_from(st.st_ctime_nsec).unwrap_or(0),
        #[allow(
            clippy::useless_conversion,
            reason = "st_dev and st_ino widths vary by platform"
        )]
        dev: u64::from(st.st_dev),
        #[allow(
            clippy::useless_conversion,
            reason = "st_dev and st_ino widths vary by platform"
        )]
        ino: u64::from(st.st_ino),
    }
}

/// What a name beneath the root looked like to one `stat`: enough to tell, later, whether
/// a lookup made then would still find the same thing. Equal identities mean the same
/// inode with the same size, modification and change times, or the same failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Something is there.
    Found(Meta),
    /// Nothing is there (`ENOENT`, `ENOTDIR`, `ENAMETOOLONG`: what a lookup calls
    /// [`OpenError::NotFound`]).
    Missing,
    /// `stat` failed otherwise (a link loop, no search permission, ...).
    Failed(rustix::io::Errno),
}

/// The [`Identity`] of `rel` (normalised, `""` for the root) beneath `root`: one
/// `fstatat` that follows symbolic links. It is a change detector, not a lookup: it does
/// not confine itself beneath the root, so whatever it reports only decides whether to
/// look up again with [`RootDir::lookup`], which does.
fn identity_at(root: &std::os::fd::OwnedFd, rel: &str) -> Identity {
    use rustix::io::Errno;
    let path = if rel.is_empty() { "." } else { rel };
    match rustix::fs::statat(root, path, rustix::fs::AtFlags::empty()) {
        Ok(st) => Identity::Found(meta_from(&st)),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG) => Identity::Missing,
        Err(e) => Identity::Failed(e),
    }
}

/// Maps an `open` errno to what the client may learn.
fn classify(e: rustix::io::Errno) -> OpenError {
    use rustix::io::Errno;
    match e {
        Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG => OpenError::NotFound,
        Errno::XDEV | Errno::LOOP => OpenError::Refused,
        Errno::ACCESS | Errno::PERM => OpenError::Forbidden,
        Errno::AGAIN => OpenError::WouldBlock,
        other => OpenError::Io(other.into()),
    }
}

/// The entries of a directory that [`RootDir::lookup`] opened, `.` and `..` left out.
///
/// Reads from the handle the lookup returned (rustix reopens it as `.` relative to
/// itself, so the listing is of the directory that was resolved beneath the root, not of
/// whatever a path names by now). `getdents` has no cache-only form: call this off the
/// worker.
pub(crate) fn read_dir(dir: &File) -> io::Result<ReadDir> {
    Ok(ReadDir {
        dir: rustix::fs::Dir::read_from(dir)?,
    })
}

/// The iterator of [`read_dir`].
#[derive(Debug)]
pub(crate) struct ReadDir {
    dir: rustix::fs::Dir,
}

/// One name in a directory.
#[derive(Debug)]
pub(crate) struct DirEntry {
    pub(crate) name: std::ffi::OsString,
    pub(crate) kind: EntryKind,
}

/// What a directory entry says it is, without following it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Dir,
    /// A symbolic link: what it leads to, and whether it may be followed, is for a lookup
    /// to say.
    Link,
    /// The file system does not say (`DT_UNKNOWN`): a lookup can.
    Unknown,
    /// FIFOs, sockets, devices.
    Other,
}

impl Iterator for ReadDir {
    type Item = io::Result<DirEntry>;

    fn next(&mut self) -> Option<io::Result<DirEntry>> {
        use std::os::unix::ffi::OsStringExt as _;
        loop {
            let entry = match self.dir.read()? {
                Ok(entry) => entry,
                Err(e) => return Some(Err(e.into())),
            };
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match entry.file_type() {
                rustix::fs::FileType::RegularFile => EntryKind::File,
                rustix::fs::FileType::Directory => EntryKind::Dir,
                rustix::fs::FileType::Symlink => EntryKind::Link,
                rustix::fs::FileType::Unknown => EntryKind::Unknown,
                _ => EntryKind::Other,
            };
            return Some(Ok(DirEntry {
                name: std::ffi::OsString::from_vec(name.to_vec()),
                kind,
            }));
        }
    }
}

#[cfg(test)]
mod tests;
