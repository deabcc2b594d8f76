//! The HTTPS client that talks to the CA's directory.
//!
//! instant-acme's own constructors build their rustls client from the process-wide
//! default provider, which is ambiguous (and panics) when a build has both aws-lc-rs and
//! ring, as this workspace's bench does. This one names aws-lc-rs, like the listeners, and
//! trusts the system's roots or the configured `ca_root`.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::AcmeError;

/// A client for the directory, trusting `ca_root` (PEM) or the system's roots, giving up
/// on a request after `timeout` (hyper's client has no deadline of its own: a CA that
/// accepts and never answers would hold the renewal task forever).
pub(crate) fn directory_client(
    ca_root: Option<&Path>,
    timeout: Duration,
) -> Result<Box<dyn HttpClient>, AcmeError> {
    let mut roots = RootCertStore::empty();
    match ca_root {
        Some(path) => {
            let bad = |reason: String| AcmeError::CaRoot {
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
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(AcmeError::Other(
                    "no usable root certificate in the system's store; give ca_root".into(),
                ));
            }
        }
    }
    let provider = Arc::new(crate::provider::provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AcmeError::Other(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let client: Client<_, BodyWrapper<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    Ok(Box::new(Timed {
        inner: Box::new(client),
        timeout,
    }))
}

/// An [`HttpClient`] whose requests fail after `timeout`.
struct Timed {
    inner: Box<dyn HttpClient>,
    timeout: Duration,
}

impl HttpClient for Timed {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let timeout = self.timeout;
        let answer = self.inner.request(req);
        Box::pin(async move {
            // The body too: hyper's response resolves at the head, and a CA (or something
            // in front of it) that stalls after the head would hold the task forever.
            let whole = async {
                let mut res = answer.await?;
                let body = res
                    .body
                    .into_bytes()
                    .await
                    .map_err(instant_acme::Error::Other)?;
                let full = http::Response::from_parts(res.parts, http_body_util::Full::new(body));
                Ok(BytesResponse::from(full))
            };
            tokio::time::timeout(timeout, whole)
                .await
                .unwrap_or_else(|_| {
                    Err(instant_acme::Error::Other(
                        format!("the CA did not answer within {timeout:?}").into(),
                    ))
                })
        })
    }
}
