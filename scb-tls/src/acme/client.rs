//! The HTTPS client that talks to the CA's directory.
//!
//! instant-acme's own constructors build their rustls client from the process-wide
//! default provider, which is ambiguous (and panics) when a build has both aws-lc-rs and
//! ring, as this workspace's bench does. This one is [`crate::client`]'s: aws-lc-rs, like
//! the listeners, trusting the system's roots or the configured `ca_root`.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};

use super::AcmeError;

/// A client for the directory, trusting `ca_root` (PEM) or the system's roots, giving up
/// on a request after `timeout` (hyper's client has no deadline of its own: a CA that
/// accepts and never answers would hold the renewal task forever).
pub(crate) fn directory_client(
    ca_root: Option<&Path>,
    timeout: Duration,
) -> Result<Box<dyn HttpClient>, AcmeError> {
    let tls = crate::client::client_config(crate::client::roots(ca_root)?);
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
