//! Which script a request path names, found beneath the root before anything reaches the
//! interpreter.
//!
//! The path is split after the first segment that ends in a script extension
//! (`/index.php/users/7` is `/index.php` with `PATH_INFO` `/users/7`), a path ending in
//! `/` names the index script of its directory, and the script must then exist beneath the
//! root as a regular file. Anything else is not executed: the classic attack on
//! `cgi.fix_pathinfo`, `/uploads/evil.jpg/x.php`, names a script that does not exist and
//! gets 404 here, so PHP never walks back to run `evil.jpg`; and a path that climbs out of
//! the root (`..`, a symlink pointing outside) is refused by the kernel's own resolution.
//!
//! On Linux the lookup is one `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from the
//! root's descriptor, as scb-static resolves files; elsewhere the path is canonicalized
//! and must stay under the canonical root.

use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;

/// A script found beneath the root, and how the request named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Script {
    /// `SCRIPT_NAME`: the path up to and including the script, decoded.
    pub(crate) name: String,
    /// `PATH_INFO`: what follows the script in the path (empty when nothing does).
    pub(crate) path_info: String,
    /// `SCRIPT_FILENAME`: the script's file.
    pub(crate) filename: PathBuf,
}

/// The scripts of one root.
#[derive(Debug)]
pub(crate) struct Scripts {
    root: PathBuf,
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    index: String,
    /// Lowercase, each starting with `.`.
    extensions: Vec<String>,
}

impl Scripts {
    /// The scripts beneath `root` (an existing directory, made absolute), `index` naming a
    /// directory's script and `extensions` (such as `.php`) the files that are scripts.
    ///
    /// # Errors
    ///
    /// When `root` cannot be opened as a directory.
    pub(crate) fn new(
        root: &Path,
        index: String,
        extensions: Vec<String>,
    ) -> std::io::Result<Self> {
        let root = std::fs::canonicalize(root)?;
        #[cfg(target_os = "linux")]
        let fd = rustix::fs::open(
            &root,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        #[cfg(not(target_os = "linux"))]
        if !root.is_dir() {
            return Err(std::io::ErrorKind::NotADirectory.into());
        }
        Ok(Self {
            root,
            #[cfg(target_os = "linux")]
            fd,
            index,
            extensions: extensions
                .into_iter()
                .map(|e| e.to_ascii_lowercase())
                .collect(),
        })
    }

    /// The root, canonical: `DOCUMENT_ROOT`.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Whether `name` (a path) ends in one of the script extensions.
    pub(crate) fn is_script(&self, name: &str) -> bool {
        self.extensions
            .iter()
            .any(|e| ends_with_ignore_case(name, e))
    }

    /// The script extensions, lower case, each with its dot.
    pub(crate) fn extensions(&self) -> &[String] {
        &self.extensions
    }

    /// Whether `path` (a request path, percent-encoded) may name a script: it ends in
    /// `/` (a directory's index), a segment of it ends in a script extension, or it does
    /// not decode. A route that serves other files beside the scripts sends these here
    /// and never to its file server, which would send a script's source.
    pub(crate) fn names_script(&self, path: &str) -> bool {
        match percent_decode_str(path).decode_utf8() {
            Ok(decoded) => decoded.ends_with('/') || self.split(&decoded).is_some(),
            Err(_) => true,
        }
    }

    /// The script `path` (a request path, percent-encoded) names, if it exists beneath
    /// the root; `None` for every path that must not reach the interpreter.
    pub(crate) fn find(&self, path: &str) -> Option<Script> {
        let decoded = percent_decode_str(path).decode_utf8().ok()?;
        if !decoded.starts_with('/')
            || decoded.contains('\0')
            || decoded.split('/').any(|segment| segment == "..")
        {
            return None;
        }
        let (name, path_info) = match self.split(&decoded) {
            Some(at) => (decoded[..at].to_owned(), decoded[at..].to_owned()),
            None if decoded.ends_with('/') && self.is_script(&self.index) => {
                (format!("{decoded}{}", self.index), String::new())
            }
            None => return None,
        };
        let relative = name.trim_start_matches('/');
        // Dotfiles and dot directories are hidden, as the file server beside the scripts
        // hides them (`/.git/hooks/x.php`, `/.env.php`); the path info may have any.
        if relative.is_empty()
            || relative.split('/').any(|segment| segment.starts_with('.'))
            || !self.is_regular_file(relative)
        {
            return None;
        }
        Some(Script {
            filename: self.root.join(relative),
            name,
            path_info,
        })
    }

    /// Where the script part of `path` ends: after the first segment ending in a script
    /// extension, followed by `/` or the end.
    fn split(&self, path: &str) -> Option<usize> {
        let mut end = 0;
        for segment in path.split_inclusive('/') {
            end += segment.len();
            let name = segment.strip_suffix('/').unwrap_or(segment);
            if name.len() > 1 && self.is_script(name) {
                return Some(end - (segment.len() - name.len()));
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    fn is_regular_file(&self, relative: &str) -> bool {
        use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
        let opened = rustix::fs::openat2(
            &self.fd,
            relative,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        );
        match opened {
            Ok(fd) => rustix::fs::fstat(&fd)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile),
            // No openat2 (a kernel before 5.6, a seccomp filter): the portable check.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                self.is_regular_file_portable(relative)
            }
            Err(_) => false,
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn is_regular_file(&self, relative: &str) -> bool {
        self.is_regular_file_portable(relative)
    }

    /// The path canonicalized, under the canonical root, a regular file. Racy against a
    /// symlink swapped in between (which needs write access to the root), unlike
    /// `openat2`.
    fn is_regular_file_portable(&self, relative: &str) -> bool {
        std::fs::canonicalize(self.root.join(relative))
            .is_ok_and(|real| real.starts_with(&self.root) && real.is_file())
    }
}

/// Whether `name` ends in `suffix` (lower case) in any case, without lowering `name`.
fn ends_with_ignore_case(name: &str, suffix: &str) -> bool {
    name.len() >= suffix.len()
        && name.as_bytes()[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn root() -> (tempdir::Dir, Scripts) {
        let dir = tempdir::Dir::new();
        let path = dir.path();
        std::fs::create_dir_all(path.join("blog")).unwrap();
        std::fs::create_dir_all(path.join("uploads/evil.jpg")).unwrap();
        std::fs::write(path.join("index.php"), "<?php").unwrap();
        std::fs::write(path.join("blog/index.php"), "<?php").unwrap();
        std::fs::write(path.join("uploads/evil.jpg.real"), "<?php").unwrap();
        std::fs::write(path.join("uploads/photo.jpg"), "jpg").unwrap();
        std::fs::create_dir_all(path.join("dir.php")).unwrap();
        let outside = path.with_extension("outside.php");
        std::fs::write(&outside, "<?php").unwrap();
        std::os::unix::fs::symlink(&outside, path.join("escape.php")).unwrap();
        std::os::unix::fs::symlink("index.php", path.join("alias.php")).unwrap();
        let scripts = Scripts::new(path, "index.php".into(), vec![".PHP".into()]).unwrap();
        (dir, scripts)
    }

    /// A directory removed when dropped (and the file beside it the tests make).
    pub(in crate::fastcgi) mod tempdir {
        pub(in crate::fastcgi) struct Dir(std::path::PathBuf);

        impl Dir {
            pub(in crate::fastcgi) fn new() -> Self {
                let path = std::env::temp_dir().join(format!(
                    "scb-fastcgi-{}-{}",
                    std::process::id(),
                    fastrand::u64(..)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }

            pub(in crate::fastcgi) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
                let _ = std::fs::remove_file(self.0.with_extension("outside.php"));
            }
        }
    }

    #[test]
    fn scripts_are_split_from_their_path_info() {
        let (dir, scripts) = root();
        let found = scripts.find("/index.php/users/7").unwrap();
        assert_eq!(found.name, "/index.php");
        assert_eq!(found.path_info, "/users/7");
        assert_eq!(found.filename, scripts.root().join("index.php"));
        let found = scripts.find("/blog/").unwrap();
        assert_eq!(found.name, "/blog/index.php");
        assert_eq!(found.path_info, "");
        // Percent-encoded paths name the same files; extensions are matched in any case
        // (configured as `.PHP` here).
        assert_eq!(scripts.find("/%69ndex.php").unwrap().name, "/index.php");
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/hook.php"), "<?php").unwrap();
        std::fs::write(dir.path().join(".env.php"), "<?php").unwrap();
        assert_eq!(scripts.find("/.git/hook.php"), None);
        assert_eq!(scripts.find("/.env.php"), None);
        assert_eq!(scripts.find("/%2eenv.php"), None);
        assert_eq!(
            scripts.find("/index.php/.hidden/info").unwrap().path_info,
            "/.hidden/info"
        );
        assert!(scripts.names_script("/index%2ephp"));
        assert!(scripts.names_script("/a/b.PHP/c"));
        assert!(scripts.names_script("/blog/"));
        assert!(scripts.names_script("/%ff"));
        assert!(!scripts.names_script("/style.css"));
        assert!(!scripts.names_script("/index.php.txt"));
        // A symlink that stays beneath the root is followed.
        assert_eq!(scripts.find("/alias.php").unwrap().name, "/alias.php");
    }

    #[test]
    fn nothing_but_a_script_beneath_the_root_is_found() {
        let (_dir, scripts) = root();
        for path in [
            // cgi.fix_pathinfo's attack: no such script, so PHP never walks back.
            "/uploads/evil.jpg/x.php",
            "/uploads/photo.jpg",
            "/uploads/photo.jpg/index.php",
            "/uploads/evil.jpg.real",
            // Not a script extension at the end of a segment.
            "/index.php.jpg",
            "/missing.php",
            // A directory named like a script.
            "/dir.php",
            "/dir.php/x",
            // Out of the root, by name or by link.
            "/../outside.php",
            "/blog/../../outside.php",
            "/escape.php",
            "/index.php%00.jpg",
            "/uploads/",
            "index.php",
            "/%ff.php",
        ] {
            assert_eq!(scripts.find(path), None, "{path}");
        }
    }
}
