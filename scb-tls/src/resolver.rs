//! Choosing the certificate for a handshake (SNI), from a set a reload can replace.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::SignatureScheme;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::acme::on_demand::OnDemand;
use crate::acme::{ACME_TLS_ALPN, Challenges};
use crate::certs::{CertInfo, Loaded};

/// The certificates being served: what every handshake reads, what a reload replaces.
///
/// A `RwLock<Arc<_>>` rather than `arc-swap`: a handshake takes the read lock for one hash
/// lookup and an `Arc` clone, a few tens of nanoseconds next to the handshake's signature
/// (tens of microseconds at least), and a writer holds it only to swap a pointer, once per
/// reload. Not worth a dependency.
#[derive(Debug)]
pub(crate) struct Resolver {
    current: RwLock<Arc<CertSet>>,
    /// An ACME listener's pending TLS-ALPN-01 answers.
    challenges: Option<Arc<Challenges>>,
    /// An on-demand listener's certificates, one per name.
    on_demand: Option<Arc<OnDemand>>,
}

impl Resolver {
    pub(crate) fn new(
        set: CertSet,
        challenges: Option<Arc<Challenges>>,
        on_demand: Option<Arc<OnDemand>>,
    ) -> Self {
        Self {
            current: RwLock::new(Arc::new(set)),
            challenges,
            on_demand,
        }
    }

    /// Serves `set` to every handshake from now on. Connections already open keep the
    /// certificate they were given (rustls holds it in their state).
    pub(crate) fn replace(&self, set: CertSet) {
        let set = Arc::new(set);
        // Poisoning cannot leave the set half-written (it is only ever replaced whole).
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = set;
    }

    pub(crate) fn current(&self) -> Arc<CertSet> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(challenges) = &self.challenges
            && hello
                .alpn()
                .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN))
        {
            // A validation: the challenge's certificate or nothing, never a real one.
            return challenges.alpn(hello.server_name()?);
        }
        if let Some(on_demand) = &self.on_demand {
            // What the handshake obtained before it got here (or nothing: the alert).
            return on_demand.certificate(hello.server_name()?);
        }
        let set = self.current.read().unwrap_or_else(PoisonError::into_inner);
        let chosen = set.choose(hello.server_name(), hello.signature_schemes());
        if chosen.is_none() {
            tracing::debug!(
                sni = hello.server_name().unwrap_or(""),
                "TLS handshake refused: no certificate yet (ACME has not issued one)"
            );
        }
        chosen.map(Arc::clone)
    }
}

/// A loaded set of certificates and the index of their names. Empty only for an ACME
/// listener before its first certificate.
#[derive(Debug)]
pub(crate) struct CertSet {
    certs: Vec<Loaded>,
    names: NameIndex,
}

impl CertSet {
    pub(crate) fn new(certs: Vec<Loaded>) -> Self {
        let names = NameIndex::new(certs.iter().map(|cert| cert.info.names.as_slice()));
        Self { certs, names }
    }

    pub(crate) fn infos(&self) -> Vec<CertInfo> {
        self.certs.iter().map(|cert| cert.info.clone()).collect()
    }

    /// The certificate for a client that sent `sni` and accepts signatures `schemes`.
    fn choose(&self, sni: Option<&str>, schemes: &[SignatureScheme]) -> Option<&Arc<CertifiedKey>> {
        let candidates = sni.and_then(|name| self.names.lookup(name));
        let Some(candidates) = candidates else {
            return self.certs.first().map(|cert| &cert.key);
        };
        let key = |i: &usize| &self.certs[*i].key;
        if let [only] = candidates {
            return Some(key(only));
        }
        // Several certificates for the name (typically ECDSA and RSA): the first the
        // client can verify, else the first (the handshake then fails as it would anyway).
        Some(
            candidates
                .iter()
                .map(key)
                .find(|cert| cert.key.choose_scheme(schemes).is_some())
                .unwrap_or_else(|| key(&candidates[0])),
        )
    }
}

/// Certificate indexes by DNS name: exact names, and wildcards by the part after `*.`.
#[derive(Debug, Default)]
struct NameIndex {
    exact: HashMap<String, Vec<usize>>,
    wildcard: HashMap<String, Vec<usize>>,
}

impl NameIndex {
    /// `names[i]`: the lower-case DNS names of certificate `i`.
    fn new<'a>(names: impl Iterator<Item = &'a [String]>) -> Self {
        let mut index = Self::default();
        for (i, names) in names.enumerate() {
            for name in names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut index.wildcard, parent),
                    None => (&mut index.exact, name.as_str()),
                };
                let entry = map.entry(key.to_owned()).or_default();
                if !entry.contains(&i) {
                    entry.push(i);
                }
            }
        }
        index
    }

    /// The certificates for `name` (as rustls hands it over: a valid DNS name, lower-case),
    /// in configuration order: exact matches if any, else the wildcards for its parent
    /// (`*.example.com` covers `a.example.com`, neither `example.com` nor `a.b.example.com`).
    fn lookup(&self, name: &str) -> Option<&[usize]> {
        let name = name.strip_suffix('.').unwrap_or(name);
        if let Some(found) = self.exact.get(name) {
            return Some(found);
        }
        let (_, parent) = name.split_once('.')?;
        self.wildcard.get(parent).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(certs: &[&[&str]]) -> NameIndex {
        let owned: Vec<Vec<String>> = certs
            .iter()
            .map(|names| names.iter().map(|n| (*n).to_owned()).collect())
            .collect();
        NameIndex::new(owned.iter().map(Vec::as_slice))
    }

    #[test]
    fn exact_names_find_their_certificates_in_order() {
        let index = index(&[&["a.test", "b.test"], &["b.test"], &["c.test"]]);
        assert_eq!(index.lookup("a.test"), Some(&[0][..]));
        assert_eq!(index.lookup("b.test"), Some(&[0, 1][..]));
        assert_eq!(index.lookup("c.test"), Some(&[2][..]));
        assert_eq!(index.lookup("d.test"), None);
        assert_eq!(index.lookup("test"), None);
    }

    #[test]
    fn wildcard_matches_exactly_one_label() {
        let index = index(&[&["default.test"], &["*.example.com"]]);
        assert_eq!(index.lookup("www.example.com"), Some(&[1][..]));
        assert_eq!(index.lookup("example.com"), None);
        assert_eq!(index.lookup("a.b.example.com"), None);
        assert_eq!(index.lookup("www.example.org"), None);
    }

    #[test]
    fn exact_name_wins_over_wildcard() {
        let index = index(&[&["*.example.com"], &["www.example.com"]]);
        assert_eq!(index.lookup("www.example.com"), Some(&[1][..]));
        assert_eq!(index.lookup("api.example.com"), Some(&[0][..]));
    }

    #[test]
    fn trailing_dot_is_the_same_name() {
        let index = index(&[&["a.test"], &["*.b.test"]]);
        assert_eq!(index.lookup("a.test."), Some(&[0][..]));
        assert_eq!(index.lookup("x.b.test."), Some(&[1][..]));
    }

    #[test]
    fn a_name_listed_twice_in_one_certificate_is_indexed_once() {
        let index = index(&[&["a.test", "a.test"]]);
        assert_eq!(index.lookup("a.test"), Some(&[0][..]));
    }
}
