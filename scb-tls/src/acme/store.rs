//! The state directory: the account's credentials and the certificate with its key,
//! private files written whole.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use super::AcmeError;
use crate::CertFiles;

/// Where one ACME certificate and its account live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Store {
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Store {
    /// The files for the certificate named after `first` (a domain or an address) in `dir`.
    pub(crate) fn new(dir: &Path, first: &str) -> Self {
        // Names are checked by the config, but a file name must never be a path.
        let stem: String = first
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Self {
            dir: dir.to_owned(),
            cert: dir.join(format!("{stem}.crt.pem")),
            key: dir.join(format!("{stem}.key.pem")),
        }
    }

    /// The certificate's files, for the loader.
    pub(crate) fn files(&self) -> CertFiles {
        CertFiles::new(self.cert.clone(), self.key.clone())
    }

    /// Where a new certificate waits until it is known to load.
    pub(crate) fn staged(&self) -> CertFiles {
        CertFiles::new(staged(&self.cert), staged(&self.key))
    }

    /// Puts the staged certificate in place: the key first (see
    /// [`write_certificate`](Self::write_certificate)).
    pub(crate) fn commit(&self) -> Result<(), AcmeError> {
        for path in [&self.key, &self.cert] {
            std::fs::rename(staged(path), path).map_err(|source| AcmeError::State {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Forgets a staged certificate that does not load.
    pub(crate) fn discard(&self) {
        let _ = std::fs::remove_file(staged(&self.key));
        let _ = std::fs::remove_file(staged(&self.cert));
    }

    /// Whether a certificate has been stored.
    pub(crate) fn has_certificate(&self) -> bool {
        self.cert.is_file() && self.key.is_file()
    }

    pub(crate) fn account_path(&self) -> PathBuf {
        self.dir.join("account.json")
    }

    /// The stored account credentials, if any.
    pub(crate) fn read_account(&self) -> Result<Option<Vec<u8>>, AcmeError> {
        let path = self.account_path();
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(AcmeError::State { path, source }),
        }
    }

    pub(crate) fn write_account(&self, json: &[u8]) -> Result<(), AcmeError> {
        self.write_private(&self.account_path(), json)
    }

    /// Stages a certificate chain and its key beside the served ones; [`commit`](Self::commit)
    /// puts them in place. The key goes first there, so that a crash between the two
    /// renames leaves a key that does not match the old certificate (refused at load, and
    /// ordered again) rather than a certificate without its key.
    pub(crate) fn write_certificate(
        &self,
        chain_pem: &str,
        key_pem: &str,
    ) -> Result<(), AcmeError> {
        self.write_private(&staged(&self.key), key_pem.as_bytes())?;
        self.write_private(&staged(&self.cert), chain_pem.as_bytes())
    }

    /// Writes `bytes` to `path` through a temporary file and a rename, mode 0600, in the
    /// directory made 0700 if missing.
    fn write_private(&self, path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
        let state = |path: &Path| {
            let path = path.to_owned();
            move |source| AcmeError::State { path, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(state(&self.dir))?;
        let tmp = path.with_extension("tmp");
        // A new file, so that the mode is this one: a leftover with a wider mode is
        // removed, not reused.
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(state(&tmp))?;
        file.write_all(bytes).map_err(state(&tmp))?;
        file.sync_all().map_err(state(&tmp))?;
        std::fs::rename(&tmp, path).map_err(state(path))?;
        // The rename itself reaches the disk with the directory.
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// An exclusive lock on a certificate's state, held while one process orders it: the
/// instances that share a state directory (on one machine, or a network filesystem with
/// locks) order each certificate once. The kernel (or the file server's lease) releases
/// it when the holder exits or dies, so a crashed instance never blocks the others.
#[derive(Debug)]
pub(crate) struct StoreLock {
    _file: std::fs::File,
}

impl Store {
    /// Takes the certificate's lock (`NAME.lock` in the state directory) if no other
    /// process holds it; `Ok(None)` when one does.
    pub(crate) fn lock(&self) -> Result<Option<StoreLock>, AcmeError> {
        let path = self.cert.with_extension("").with_extension("lock");
        let state = |source| AcmeError::State {
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|source| AcmeError::State {
                path: self.dir.clone(),
                source,
            })?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(state)?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // Who holds it, for whoever looks: the lock itself is the kernel's.
                let _ = file.set_len(0);
                let _ = writeln!(file, "pid {}", std::process::id());
                Ok(Some(StoreLock { _file: file }))
            }
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(state(e.into())),
        }
    }
}

/// `path` with `.new` after its name.
fn staged(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn one_process_holds_a_certificates_lock_at_a_time() {
        let dir = std::env::temp_dir().join(format!("scb-tls-acme-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(&dir, "example.com");
        let held = store.lock().unwrap().expect("free");
        // flock is per open file: a second open (as another process's) is refused.
        assert!(store.lock().unwrap().is_none());
        assert!(
            std::fs::read_to_string(dir.join("example.com.lock"))
                .unwrap()
                .starts_with("pid ")
        );
        drop(held);
        assert!(store.lock().unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_are_private_and_named_after_the_first_domain() {
        let dir = std::env::temp_dir().join(format!("scb-tls-acme-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new(&dir.join("state"), "*.Example.com/../x");
        assert!(!store.has_certificate());
        store.write_certificate("CHAIN", "KEY").unwrap();
        assert!(!store.has_certificate(), "staged, not served yet");
        store.commit().unwrap();
        store.write_account(b"{}").unwrap();
        assert!(store.has_certificate());
        let files = store.files();
        assert_eq!(
            files.cert.file_name().unwrap(),
            "_.Example.com_.._x.crt.pem"
        );
        for path in [&files.cert, &files.key, &store.account_path()] {
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
        let mode = std::fs::metadata(dir.join("state"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(std::fs::read_to_string(&files.key).unwrap(), "KEY");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
