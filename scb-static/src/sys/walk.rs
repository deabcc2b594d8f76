//! The portable lookup: one `openat(O_NOFOLLOW)` per path component from the root's
//! descriptor. No symbolic link is followed at all, so nothing can lead outside the root;
//! the price is that in-tree links are refused too, which is why Linux uses `openat2`
//! whenever the kernel has it.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode as FileMode, OFlags, openat};

use super::{OpenError, Opened, classify, meta_of};

/// Resolves `rel` (normalised: `/`-separated, no `.` or `..`, no empty components)
/// beneath `root`, one component at a time, refusing every symbolic link.
pub(super) fn open(root: &OwnedFd, rel: &str) -> Result<Opened, OpenError> {
    let mut dir: Option<OwnedFd> = None;
    let mut components = rel.split('/').filter(|c| !c.is_empty()).peekable();
    if components.peek().is_none() {
        return finish(openat(root, ".", final_flags(), FileMode::empty()));
    }
    while let Some(component) = components.next() {
        let at = dir.as_ref().map_or(root.as_fd(), AsFd::as_fd);
        if components.peek().is_none() {
            return finish(openat(at, component, final_flags(), FileMode::empty()));
        }
        let next = openat(
            at,
            component,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FileMode::empty(),
        )
        .map_err(classify)?;
        dir = Some(next);
    }
    Err(OpenError::NotFound)
}

/// The last component: read-only, never a link, and non-blocking so that a FIFO planted
/// under the root cannot hang the worker on open.
pub(super) fn final_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

pub(super) fn finish(fd: rustix::io::Result<OwnedFd>) -> Result<Opened, OpenError> {
    let file = File::from(fd.map_err(classify)?);
    let meta = meta_of(&file)?;
    Ok(Opened { file, meta })
}
