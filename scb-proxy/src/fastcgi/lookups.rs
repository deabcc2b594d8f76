//! The scripts a worker found (or did not find) lately, kept for a moment so that a busy
//! script is not looked up again on every request.
//!
//! Looking up `/index.php` costs three system calls (`openat2` beneath the root, `fstat`,
//! `close`) and the path's decoding and splitting; for a "hello" script that was a third
//! of scb's system calls per request. The answer is kept per request path for
//! [`script_cache`](super::FastCgiBuilder::script_cache) (1 s by default), as nginx's
//! `open_file_cache_valid` keeps its lookups: a script deleted or added shows within that
//! time. What a kept answer cannot do is let a path out of the root: it was found beneath
//! the root by the kernel, and the interpreter opens the file by name afterwards in any
//! case (a symlink swapped in after the check is the application server's to refuse, with
//! or without this cache).
//!
//! One cache per worker (each worker's [`FastCgi`](super::FastCgi) takes its own through
//! `with_own_pool`), so the lock is never contended; it holds at most [`CAPACITY`] paths
//! and is emptied when full, so a client asking for endless made-up paths costs a lookup
//! each, as without the cache, and never memory. Keys are hashed with std's keyed hash:
//! the paths are the client's choice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::script::{Script, Scripts};

/// The most paths kept.
const CAPACITY: usize = 4096;

/// Recent lookups of one worker.
#[derive(Debug)]
pub(crate) struct Lookups {
    valid: Duration,
    entries: Mutex<HashMap<Box<str>, Entry>>,
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    script: Option<Arc<Script>>,
}

impl Lookups {
    /// Lookups kept for `valid`; zero keeps none.
    pub(crate) fn new(valid: Duration) -> Self {
        Self {
            valid,
            entries: Mutex::default(),
        }
    }

    /// The script `path` names beneath `scripts`' root, as [`Scripts::find`] says, or as
    /// it said less than the validity ago.
    pub(crate) fn find(&self, scripts: &Scripts, path: &str) -> Option<Arc<Script>> {
        if self.valid.is_zero() {
            return scripts.find(path).map(Arc::new);
        }
        self.find_at(scripts, path, Instant::now())
    }

    fn find_at(&self, scripts: &Scripts, path: &str, now: Instant) -> Option<Arc<Script>> {
        if let Some(entry) = self.lock().get(path)
            && now.saturating_duration_since(entry.at) < self.valid
        {
            return entry.script.clone();
        }
        let script = scripts.find(path).map(Arc::new);
        let mut entries = self.lock();
        if entries.len() >= CAPACITY && !entries.contains_key(path) {
            entries.clear();
        }
        entries.insert(
            path.into(),
            Entry {
                at: now,
                script: script.clone(),
            },
        );
        script
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Entry>> {
        // A panic while holding it leaves whole entries only: the map is still good.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::script::tests::tempdir;

    fn scripts(dir: &tempdir::Dir) -> Scripts {
        std::fs::write(dir.path().join("index.php"), "<?php").unwrap();
        Scripts::new(dir.path(), "index.php".into(), vec![".php".into()]).unwrap()
    }

    #[test]
    fn a_lookup_is_kept_for_its_validity_then_made_again() {
        let dir = tempdir::Dir::new();
        let scripts = scripts(&dir);
        let lookups = Lookups::new(Duration::from_secs(3600));
        let found = lookups.find(&scripts, "/index.php").expect("found");
        assert_eq!(found.name, "/index.php");
        assert_eq!(lookups.find(&scripts, "/new.php"), None);

        std::fs::remove_file(dir.path().join("index.php")).unwrap();
        std::fs::write(dir.path().join("new.php"), "<?php").unwrap();
        // Within the validity both answers stand.
        assert!(Arc::ptr_eq(
            &lookups.find(&scripts, "/index.php").unwrap(),
            &found
        ));
        assert_eq!(lookups.find(&scripts, "/new.php"), None);

        // Past it, the files are looked at again.
        let later = Instant::now() + Duration::from_secs(3601);
        assert_eq!(lookups.find_at(&scripts, "/index.php", later), None);
        assert_eq!(
            lookups
                .find_at(&scripts, "/new.php", later)
                .map(|s| s.name.clone()),
            Some("/new.php".to_owned())
        );
    }

    #[test]
    fn zero_validity_looks_up_every_time() {
        let dir = tempdir::Dir::new();
        let scripts = scripts(&dir);
        let lookups = Lookups::new(Duration::ZERO);
        assert!(lookups.find(&scripts, "/index.php").is_some());
        std::fs::remove_file(dir.path().join("index.php")).unwrap();
        assert_eq!(lookups.find(&scripts, "/index.php"), None);
        assert!(lookups.lock().is_empty());
    }

    #[test]
    fn made_up_paths_never_hold_more_than_the_capacity() {
        let dir = tempdir::Dir::new();
        let scripts = scripts(&dir);
        let lookups = Lookups::new(Duration::from_secs(3600));
        for i in 0..CAPACITY * 2 + 3 {
            assert_eq!(lookups.find(&scripts, &format!("/nothing-{i}.php")), None);
            assert!(lookups.lock().len() <= CAPACITY);
        }
        assert!(lookups.find(&scripts, "/index.php").is_some());
    }
}
