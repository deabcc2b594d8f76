//! What every request of one [`ServeStatic`](super::ServeStatic) shares: the settings
//! the builder resolved, the root's descriptor and the open-file cache.

use std::path::PathBuf;

use crate::cache::{OpenFileCache, Owner};
use crate::cache_control::CacheControlRules;
use crate::encoding::Coding;
use crate::sys::RootDir;

/// What every request of one [`ServeStatic`](super::ServeStatic) shares.
#[derive(Debug)]
pub(crate) struct Config {
    pub(super) root: RootDir,
    pub(super) root_path: PathBuf,
    pub(super) index: Option<String>,
    pub(super) precompressed: Vec<Coding>,
    pub(super) show_hidden: bool,
    pub(super) cache_control: CacheControlRules,
    pub(super) max_ranges: usize,
    pub(super) fallback: Option<String>,
    pub(super) not_found: Option<String>,
    pub(super) list_directories: bool,
    /// `None`: every request looks its names up.
    pub(super) cache: Option<OpenFileCache>,
    /// Finds this service's cache on each thread.
    pub(super) owner: Owner,
}
