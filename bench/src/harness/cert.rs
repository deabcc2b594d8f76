//! The self-signed certificate every TLS server uses, made with rcgen at the start of a run.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Paths of the PEM certificate and key.
#[derive(Debug, Clone)]
pub(crate) struct CertFiles {
    /// The certificate (PEM).
    pub(crate) cert: PathBuf,
    /// The private key (PEM, PKCS#8), readable by its owner only.
    pub(crate) key: PathBuf,
}

/// Names the certificate is valid for: the servers listen on 127.0.0.1 only, and clients
/// (curl, h2load) connect by IP; `localhost` is there for people trying it by hand.
const NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// Writes `cert.pem` and `key.pem` into `dir`: a self-signed ECDSA P-256 certificate for
/// 127.0.0.1 and localhost.
///
/// # Errors
///
/// When rcgen fails or the files cannot be written.
pub(crate) fn create(dir: &Path) -> anyhow::Result<CertFiles> {
    let names: Vec<String> = NAMES.iter().map(|s| (*s).to_owned()).collect();
    let certified = rcgen::generate_simple_self_signed(names)
        .context("generating the self-signed certificate")?;
    let files = CertFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    fs::write(&files.cert, certified.cert.pem())
        .with_context(|| format!("writing {}", files.cert.display()))?;
    let mut key = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&files.key)
        .with_context(|| format!("creating {}", files.key.display()))?;
    key.write_all(certified.signing_key.serialize_pem().as_bytes())
        .with_context(|| format!("writing {}", files.key.display()))?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_pem_certificate_and_a_private_key() {
        let dir = std::env::temp_dir().join(format!("scb-bench-cert-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let files = create(&dir).unwrap();
        let cert = fs::read_to_string(&files.cert).unwrap();
        let key = fs::read_to_string(&files.key).unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
