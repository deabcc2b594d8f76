//! The answers to pending challenges, read by handshakes (TLS-ALPN-01) and by
//! [`Http01`](super::Http01) (HTTP-01), written by the order in progress.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::AcmeError;

/// The challenges an order has set up and the CA has not finished with.
#[derive(Debug, Default)]
pub(crate) struct Challenges {
    /// HTTP-01: token to key authorization.
    http01: RwLock<HashMap<String, String>>,
    /// TLS-ALPN-01: the SNI the CA sends to the challenge certificate.
    alpn: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// TLS-ALPN-01: each identifier's key authorization digest, as it was given, for
    /// the instances of a fleet that may be asked instead.
    #[cfg_attr(
        not(feature = "cluster"),
        allow(dead_code, reason = "read by the fleet's ACME (feature `cluster`)")
    )]
    digests: RwLock<HashMap<String, Vec<u8>>>,
    /// Whether this process's own order is running (its answers are not another's).
    #[cfg_attr(
        not(feature = "cluster"),
        allow(dead_code, reason = "read by the fleet's ACME (feature `cluster`)")
    )]
    ordering: std::sync::atomic::AtomicBool,
}

/// The answers set up, as text another instance can set up too: HTTP-01 tokens with
/// their key authorizations, TLS-ALPN-01 identifiers with their digests.
#[cfg_attr(
    not(feature = "cluster"),
    allow(dead_code, reason = "read by the fleet's ACME (feature `cluster`)")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Answers {
    pub(crate) http01: Vec<(String, String)>,
    pub(crate) alpn: Vec<(String, Vec<u8>)>,
}

impl Challenges {
    pub(crate) fn http01(&self, token: &str) -> Option<String> {
        self.http01
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }

    pub(crate) fn alpn(&self, sni: &str) -> Option<Arc<CertifiedKey>> {
        self.alpn
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&sni.to_ascii_lowercase())
            .cloned()
    }

    pub(crate) fn put_http01(&self, token: String, key_authorization: String) {
        self.http01
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token, key_authorization);
    }

    /// Sets up the TLS-ALPN-01 answer for `identifier`, whose key authorization hashes to
    /// `digest`.
    pub(crate) fn put_alpn(
        &self,
        identifier: &str,
        digest: &[u8],
        provider: &CryptoProvider,
    ) -> Result<(), AcmeError> {
        let cert = challenge_certificate(identifier, digest, provider)?;
        self.alpn
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sni_for(identifier), cert);
        self.digests
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(identifier.to_owned(), digest.to_vec());
        Ok(())
    }

    /// Forgets every answer: the order is over, one way or the other.
    pub(crate) fn clear(&self) {
        self.http01
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.alpn
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.digests
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

#[cfg_attr(
    not(feature = "cluster"),
    allow(dead_code, reason = "read by the fleet's ACME (feature `cluster`)")
)]
impl Challenges {
    /// The answers set up now.
    pub(crate) fn answers(&self) -> Answers {
        let mut http01: Vec<(String, String)> = self
            .http01
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(t, k)| (t.clone(), k.clone()))
            .collect();
        let mut alpn: Vec<(String, Vec<u8>)> = self
            .digests
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(i, d)| (i.clone(), d.clone()))
            .collect();
        http01.sort();
        alpn.sort();
        Answers { http01, alpn }
    }

    /// Sets up whatever of `answers` is not set up yet (another instance's order).
    pub(crate) fn add(
        &self,
        answers: &Answers,
        provider: &CryptoProvider,
    ) -> Result<(), AcmeError> {
        for (token, key_authorization) in &answers.http01 {
            if self.http01(token).as_deref() != Some(key_authorization.as_str()) {
                self.put_http01(token.clone(), key_authorization.clone());
            }
        }
        for (identifier, digest) in &answers.alpn {
            let known = self
                .digests
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(identifier)
                .is_some_and(|d| d == digest);
            if !known {
                self.put_alpn(identifier, digest, provider)?;
            }
        }
        Ok(())
    }

    /// Notes whether this process's own order is running.
    pub(crate) fn set_ordering(&self, on: bool) {
        self.ordering
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this process's own order is running.
    pub(crate) fn is_ordering(&self) -> bool {
        self.ordering.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether no answer is set up.
    pub(crate) fn is_empty(&self) -> bool {
        self.http01
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
            && self
                .digests
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
    }
}

/// The SNI a validation of `identifier` arrives with: the name itself, or for an IP
/// address its reverse-DNS name (RFC 8738 §6).
fn sni_for(identifier: &str) -> String {
    match identifier.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            let [a, b, c, d] = ip.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        Ok(IpAddr::V6(ip)) => {
            let mut name = String::with_capacity(73);
            for byte in ip.octets().iter().rev() {
                name.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            name.push_str("ip6.arpa");
            name
        }
        Err(_) => identifier.to_ascii_lowercase(),
    }
}

/// The self-signed certificate of a TLS-ALPN-01 answer (RFC 8737 §3): the one name, and
/// the critical acmeIdentifier extension holding the SHA-256 of the key authorization.
fn challenge_certificate(
    identifier: &str,
    digest: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, AcmeError> {
    let failed =
        |e: &dyn std::fmt::Display| AcmeError::Other(format!("challenge certificate: {e}"));
    if digest.len() != 32 {
        return Err(AcmeError::Other(
            "key authorization digest is not SHA-256".into(),
        ));
    }
    let key = rcgen::KeyPair::generate().map_err(|e| failed(&e))?;
    let mut params =
        rcgen::CertificateParams::new(vec![identifier.to_owned()]).map_err(|e| failed(&e))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| failed(&e))?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: it parses the certificate to match the key, and webpki
    // refuses the critical acmeIdentifier extension it does not know.
    let signing_key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| failed(&e))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signing_key,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_identifiers_are_validated_under_their_reverse_names() {
        assert_eq!(sni_for("127.0.0.1"), "1.0.0.127.in-addr.arpa");
        assert_eq!(sni_for("Example.COM"), "example.com");
        assert!(sni_for("::1").starts_with("1.0.0.0."));
        assert!(sni_for("::1").ends_with(".ip6.arpa"));
    }

    #[test]
    fn answers_are_found_until_cleared() {
        let provider = crate::provider::provider();
        let challenges = Challenges::default();
        challenges.put_http01("tok".into(), "tok.thumb".into());
        challenges
            .put_alpn("example.com", &[7; 32], &provider)
            .unwrap();
        assert_eq!(challenges.http01("tok").as_deref(), Some("tok.thumb"));
        assert!(challenges.alpn("EXAMPLE.com").is_some());
        assert!(challenges.alpn("other.com").is_none());
        challenges.clear();
        assert!(challenges.http01("tok").is_none());
        assert!(challenges.alpn("example.com").is_none());
    }
}
