//! The files every server serves, written once per run into the work dir's document root.
//!
//! Every byte is a function of a fixed seed, so the harness can recompute what any URL must
//! return and compare it with what a server sent, and every server and every run sees the
//! same files.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::harness::php;
use crate::harness::prng::SplitMix64;

/// Seed of `1m.bin`.
const ONE_MIB_SEED: u64 = 0x5CB0_0001;
/// Seed mixed with a file's index for `many/NNNNN.txt`.
const MANY_SEED: u64 = 0x5CB0_0002;
/// Seed of the `static-many` request order.
const ORDER_SEED: u64 = 0x5CB0_0003;
/// Seed of the verification sample of `static-many`.
const SAMPLE_SEED: u64 = 0x5CB0_0004;

/// The document root and what is in it, and the PHP scripts' root.
#[derive(Debug, Clone)]
pub(crate) struct Fixtures {
    docroot: PathBuf,
    php_root: PathBuf,
}

impl Fixtures {
    /// `small.txt`'s path and bytes: the same 13 bytes as `/respond` and the upstream.
    pub(crate) const SMALL_PATH: &str = "/small.txt";
    /// The 13 bytes.
    pub(crate) const SMALL_BODY: &[u8] = b"Hello, world!";
    /// The 1 MiB file's path.
    pub(crate) const ONE_MIB_PATH: &str = "/1m.bin";
    /// Size of `1m.bin`.
    pub(crate) const ONE_MIB_LEN: usize = 1 << 20;
    /// The 100 KiB file's path: the first 100 KiB of `1m.bin`.
    pub(crate) const HUNDRED_K_PATH: &str = "/100k.bin";
    /// Size of `100k.bin`.
    pub(crate) const HUNDRED_K_LEN: usize = 100 << 10;
    /// Number of `many/` files: enough distinct paths that a per-lookup cost shows, rather
    /// than one hot cache entry.
    pub(crate) const MANY_COUNT: usize = 10_000;
    /// Size of each `many/` file.
    pub(crate) const MANY_LEN: usize = 1024;

    /// Writes the document root under `dir` (`dir/docroot`), replacing any previous one,
    /// and the PHP root (`dir/php-root`, see [`php::write_app`]). The PHP root is not
    /// beneath the document root: no server serves the scripts' source as files.
    ///
    /// # Errors
    ///
    /// On any file system error.
    pub(crate) fn create(dir: &Path) -> anyhow::Result<Fixtures> {
        let docroot = dir.join("docroot");
        if docroot.exists() {
            fs::remove_dir_all(&docroot)
                .with_context(|| format!("removing old {}", docroot.display()))?;
        }
        let many = docroot.join("many");
        fs::create_dir_all(&many).with_context(|| format!("creating {}", many.display()))?;
        let php_root = dir.join("php-root");
        php::write_app(&php_root)?;
        let fixtures = Fixtures { docroot, php_root };
        let write = |rel: &str, bytes: &[u8]| -> anyhow::Result<()> {
            let path = fixtures.docroot.join(rel.trim_start_matches('/'));
            let mut file =
                fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            file.write_all(bytes)
                .with_context(|| format!("writing {}", path.display()))
        };
        write(Fixtures::SMALL_PATH, Fixtures::SMALL_BODY)?;
        write(Fixtures::ONE_MIB_PATH, &fixtures.one_mib())?;
        write(Fixtures::HUNDRED_K_PATH, &fixtures.hundred_k())?;
        for i in 0..Fixtures::MANY_COUNT {
            write(&Fixtures::many_path(i), &Fixtures::many_body(i))?;
        }
        Ok(fixtures)
    }

    /// The document root.
    pub(crate) fn docroot(&self) -> &Path {
        &self.docroot
    }

    /// The root of the PHP scripts the FastCGI scenarios run (every server's FastCGI
    /// routes name it, so it exists in every scenario).
    pub(crate) fn php_root(&self) -> &Path {
        &self.php_root
    }

    /// The bytes of `1m.bin`.
    pub(crate) fn one_mib(&self) -> Vec<u8> {
        let mut bytes = vec![0; Fixtures::ONE_MIB_LEN];
        SplitMix64::new(ONE_MIB_SEED).fill(&mut bytes);
        bytes
    }

    /// The bytes of `100k.bin`.
    pub(crate) fn hundred_k(&self) -> Vec<u8> {
        let mut bytes = self.one_mib();
        bytes.truncate(Fixtures::HUNDRED_K_LEN);
        bytes
    }

    /// The URL path of file `i` of `many/`.
    pub(crate) fn many_path(i: usize) -> String {
        format!("/many/{i:05}.txt")
    }

    /// The bytes of file `i` of `many/`: its own name on the first line (so a server that
    /// answers with the wrong file is caught at a glance), then printable pseudo-random
    /// text, 1 KiB in all, ending in a newline.
    pub(crate) fn many_body(i: usize) -> Vec<u8> {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";
        let mut body = format!("many/{i:05}.txt\n").into_bytes();
        let mut rng = SplitMix64::new(MANY_SEED ^ (i as u64).wrapping_mul(0x9E37_79B9));
        while body.len() < Fixtures::MANY_LEN - 1 {
            let c = ALPHABET[rng.below(ALPHABET.len())];
            body.push(c);
        }
        body.push(b'\n');
        body
    }

    /// All `many/` paths in the fixed shuffled order of the `static-many` load.
    pub(crate) fn many_paths_shuffled(&self) -> Vec<String> {
        let mut order: Vec<usize> = (0..Fixtures::MANY_COUNT).collect();
        SplitMix64::new(ORDER_SEED).shuffle(&mut order);
        order.into_iter().map(Fixtures::many_path).collect()
    }

    /// Indices of the `many/` files verified before `static-many`: the first, the last and
    /// `n` others chosen with a fixed seed.
    pub(crate) fn many_sample(&self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (1..Fixtures::MANY_COUNT - 1).collect();
        SplitMix64::new(SAMPLE_SEED).shuffle(&mut order);
        let mut sample = vec![0, Fixtures::MANY_COUNT - 1];
        sample.extend(order.into_iter().take(n));
        sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_files_are_1k_distinct_and_named_inside() {
        let a = Fixtures::many_body(0);
        let b = Fixtures::many_body(9999);
        assert_eq!(a.len(), Fixtures::MANY_LEN);
        assert_eq!(b.len(), Fixtures::MANY_LEN);
        assert_ne!(a, b);
        assert!(b.starts_with(b"many/09999.txt\n"));
        assert_eq!(Fixtures::many_path(42), "/many/00042.txt");
    }

    #[test]
    fn the_request_order_is_fixed_and_covers_every_file() {
        let f = Fixtures {
            docroot: PathBuf::new(),
            php_root: PathBuf::new(),
        };
        let order = f.many_paths_shuffled();
        assert_eq!(order, f.many_paths_shuffled());
        assert_eq!(order.len(), Fixtures::MANY_COUNT);
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), Fixtures::MANY_COUNT);
        assert_ne!(order[0], "/many/00000.txt");
    }

    #[test]
    fn the_sample_has_the_first_and_last_file() {
        let f = Fixtures {
            docroot: PathBuf::new(),
            php_root: PathBuf::new(),
        };
        let sample = f.many_sample(20);
        assert_eq!(sample.len(), 22);
        assert!(sample.contains(&0) && sample.contains(&9999));
    }

    #[test]
    fn created_files_match_what_verification_expects() {
        let dir = std::env::temp_dir().join(format!("scb-bench-fixtures-{}", std::process::id()));
        let f = Fixtures::create(&dir).unwrap();
        assert_eq!(
            fs::read(f.docroot().join("small.txt")).unwrap(),
            b"Hello, world!"
        );
        assert_eq!(fs::read(f.docroot().join("1m.bin")).unwrap(), f.one_mib());
        assert_eq!(
            fs::read(f.docroot().join("many/01234.txt")).unwrap(),
            Fixtures::many_body(1234)
        );
        assert_eq!(
            fs::read_to_string(f.php_root().join("php/hello.php")).unwrap(),
            php::SCRIPT
        );
        assert!(!f.php_root().starts_with(f.docroot()));
        fs::remove_dir_all(&dir).unwrap();
    }
}
