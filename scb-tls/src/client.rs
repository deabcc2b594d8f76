//! The rustls client configuration for scb's own outgoing HTTPS: the ACME directory, the
//! on-demand `ask` endpoint, an OpenTelemetry collector.
//!
//! rustls' `ClientConfig::builder()` takes the process-wide default provider, which is
//! ambiguous (and panics) when a build has both aws-lc-rs and ring, as this workspace's
//! bench does; this one names aws-lc-rs, as the listeners do. Roots are the system's
//! store, or a PEM file of one's own (`ca_root`) for a private CA.
//!
//! ```
//! let roots = scb_tls::client::roots(None).unwrap_or_else(|_| scb_tls::rustls::RootCertStore::empty());
//! let config = scb_tls::client::client_config(roots);
//! assert!(config.alpn_protocols.is_empty());
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// Why no root store could be made.
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    /// The `ca_root` file could not be read or holds no certificate.
    #[error("ca_root {}: {reason}", path.display())]
    CaRoot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The system's store has no certificate rustls can use.
    #[error("no usable root certificate in the system's store; give ca_root")]
    NoSystemRoots,
}

/// The certificates in `ca_root` (PEM), or the system's when it is `None`.
///
/// # Errors
///
/// When `ca_root` cannot be read or holds no usable certificate, or the system's store
/// has none.
pub fn roots(ca_root: Option<&Path>) -> Result<RootCertStore, RootsError> {
    let mut roots = RootCertStore::empty();
    match ca_root {
        Some(path) => {
            let bad = |reason: String| RootsError::CaRoot {
                path: path.to_owned(),
                reason,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in the file".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                return Err(RootsError::NoSystemRoots);
            }
        }
    }
    Ok(roots)
}

/// A client configuration trusting `roots`, with aws-lc-rs and rustls' safe default
/// protocol versions, and no client certificate.
pub fn client_config(roots: RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(Arc::new(crate::provider::provider()))
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of this test's own under the system's temporary one.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("scb-tls-client-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_ca_root_that_is_missing_or_empty_is_named() {
        let dir = scratch("bad");
        let missing = dir.join("missing.pem");
        let err = roots(Some(&missing)).unwrap_err();
        assert!(matches!(&err, RootsError::CaRoot { path, .. } if path == &missing));
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = roots(Some(&empty)).unwrap_err();
        assert!(
            matches!(&err, RootsError::CaRoot { reason, .. } if reason == "no certificate in the file"),
            "{err}"
        );
    }

    #[test]
    fn a_ca_root_file_is_all_that_is_trusted() {
        let cert = rcgen::generate_simple_self_signed(vec!["collector.test".into()]).unwrap();
        let path = scratch("good").join("ca.pem");
        std::fs::write(&path, cert.cert.pem()).unwrap();
        let store = roots(Some(&path)).unwrap();
        assert_eq!(store.len(), 1);
    }
}
