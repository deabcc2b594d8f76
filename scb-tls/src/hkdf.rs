//! TLS 1.3's HKDF on aws-lc-rs' HMAC with the key schedule's keys set up once: the
//! TLS 1.3 suites of [`crate::provider`].
//!
//! Why not rustls' own aws-lc-rs suites: their HKDF is aws-lc-rs' `hkdf`, whose
//! `Salt::extract` keeps the salt and the secret and runs the whole of HKDF (the extract,
//! then the expand, each keying an HMAC from scratch) on every expansion. A TLS 1.3
//! handshake expands a dozen labels from each of its three secrets, so callgrind counted
//! ~500,000 instructions of SHA-384 compression per handshake (over a third of a resumed
//! handshake's server CPU, measured with perf, and as much as its X25519). Here the
//! extract runs once, and each secret's HMAC key (its inner and outer padded blocks
//! already hashed) is kept: an expansion is a copy of that state and two compressions.
//! The HKDF itself is rustls' ([`HkdfUsingHmac`]); only the HMAC is ours, a thin wrapper
//! of aws-lc-rs' (`rustls`' own is private to it). The suites are rustls' in every other
//! part (hash, AEAD, QUIC keys).

use std::sync::LazyLock;

use aws_lc_rs::hmac;
use rustls::SupportedCipherSuite;
use rustls::crypto::CipherSuiteCommon;
use rustls::crypto::aws_lc_rs::cipher_suite;
use rustls::crypto::hash::HashAlgorithm;
use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::{Tls13CipherSuite, crypto};

/// aws-lc-rs' HMAC with one hash, as rustls' [`Hmac`].
struct AwsLcHmac(hmac::Algorithm);

/// A keyed HMAC: aws-lc's context with the key's padded blocks hashed, copied per tag.
struct AwsLcHmacKey(hmac::Key);

impl Hmac for AwsLcHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(AwsLcHmacKey(hmac::Key::new(self.0, key)))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }
}

impl Key for AwsLcHmacKey {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut context = hmac::Context::with_key(&self.0);
        context.update(first);
        for piece in middle {
            context.update(piece);
        }
        context.update(last);
        Tag::new(context.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

static HMAC_SHA256: AwsLcHmac = AwsLcHmac(hmac::HMAC_SHA256);
static HMAC_SHA384: AwsLcHmac = AwsLcHmac(hmac::HMAC_SHA384);
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);

/// rustls' suite `of` with the HKDF above in place of its own.
fn with_our_hkdf(of: SupportedCipherSuite) -> Tls13CipherSuite {
    let SupportedCipherSuite::Tls13(suite) = of else {
        unreachable!("only TLS 1.3 suites are given")
    };
    let hkdf: &'static dyn crypto::tls13::Hkdf = match suite.common.hash_provider.algorithm() {
        HashAlgorithm::SHA256 => &HKDF_SHA256,
        HashAlgorithm::SHA384 => &HKDF_SHA384,
        other => unreachable!("no TLS 1.3 suite hashes with {other:?}"),
    };
    Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: suite.common.suite,
            hash_provider: suite.common.hash_provider,
            confidentiality_limit: suite.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: suite.aead_alg,
        quic: suite.quic,
    }
}

static AES_128_GCM_SHA256: LazyLock<Tls13CipherSuite> =
    LazyLock::new(|| with_our_hkdf(cipher_suite::TLS13_AES_128_GCM_SHA256));
static AES_256_GCM_SHA384: LazyLock<Tls13CipherSuite> =
    LazyLock::new(|| with_our_hkdf(cipher_suite::TLS13_AES_256_GCM_SHA384));
static CHACHA20_POLY1305_SHA256: LazyLock<Tls13CipherSuite> =
    LazyLock::new(|| with_our_hkdf(cipher_suite::TLS13_CHACHA20_POLY1305_SHA256));

/// TLS_AES_128_GCM_SHA256 with the HKDF above.
pub(crate) fn tls13_aes_128_gcm_sha256() -> SupportedCipherSuite {
    SupportedCipherSuite::Tls13(&AES_128_GCM_SHA256)
}

/// TLS_AES_256_GCM_SHA384 with the HKDF above.
pub(crate) fn tls13_aes_256_gcm_sha384() -> SupportedCipherSuite {
    SupportedCipherSuite::Tls13(&AES_256_GCM_SHA384)
}

/// TLS_CHACHA20_POLY1305_SHA256 with the HKDF above.
pub(crate) fn tls13_chacha20_poly1305_sha256() -> SupportedCipherSuite {
    SupportedCipherSuite::Tls13(&CHACHA20_POLY1305_SHA256)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HKDF of a suite, rustls' own or ours.
    fn hkdf(suite: SupportedCipherSuite) -> &'static dyn crypto::tls13::Hkdf {
        match suite {
            SupportedCipherSuite::Tls13(suite) => suite.hkdf_provider,
            SupportedCipherSuite::Tls12(_) => unreachable!(),
        }
    }

    /// Every operation rustls' key schedule uses, compared with rustls' own suites' on
    /// the same inputs: the outputs must be the same bytes.
    #[test]
    fn the_same_keys_as_rustls_own_hkdf() {
        let pairs = [
            (
                cipher_suite::TLS13_AES_128_GCM_SHA256,
                tls13_aes_128_gcm_sha256(),
            ),
            (
                cipher_suite::TLS13_AES_256_GCM_SHA384,
                tls13_aes_256_gcm_sha384(),
            ),
            (
                cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
                tls13_chacha20_poly1305_sha256(),
            ),
        ];
        let secret = [7u8; 48];
        let salt = [0x5au8; 48];
        let info: [&[u8]; 3] = [b"\x00\x20", b"tls13 c hs traffic", b"transcript"];
        for (theirs, ours) in pairs {
            assert_eq!(theirs.suite(), ours.suite());
            let (rustls_hkdf, our_hkdf) = (hkdf(theirs), hkdf(ours));
            let len = our_hkdf.extract_from_zero_ikm(None).hash_len();
            let expanders = [
                (
                    rustls_hkdf.extract_from_zero_ikm(None),
                    our_hkdf.extract_from_zero_ikm(None),
                ),
                (
                    rustls_hkdf.extract_from_zero_ikm(Some(&salt[..len])),
                    our_hkdf.extract_from_zero_ikm(Some(&salt[..len])),
                ),
                (
                    rustls_hkdf.extract_from_secret(Some(&salt[..len]), &secret[..32]),
                    our_hkdf.extract_from_secret(Some(&salt[..len]), &secret[..32]),
                ),
                (
                    rustls_hkdf.extract_from_secret(None, &secret),
                    our_hkdf.extract_from_secret(None, &secret),
                ),
            ];
            for (theirs, ours) in &expanders {
                assert_eq!(theirs.hash_len(), ours.hash_len());
                assert_eq!(
                    theirs.expand_block(&info).as_ref(),
                    ours.expand_block(&info).as_ref()
                );
                // Longer than one hash: T(1) | T(2) | part of T(3).
                let (mut a, mut b) = ([0u8; 100], [0u8; 100]);
                theirs.expand_slice(&info, &mut a).unwrap();
                ours.expand_slice(&info, &mut b).unwrap();
                assert_eq!(a, b);
                let block = ours.expand_block(&info);
                assert_eq!(
                    rustls_hkdf
                        .expander_for_okm(&block)
                        .expand_block(&info)
                        .as_ref(),
                    our_hkdf
                        .expander_for_okm(&block)
                        .expand_block(&info)
                        .as_ref()
                );
                assert_eq!(
                    rustls_hkdf.hmac_sign(&block, b"finished").as_ref(),
                    our_hkdf.hmac_sign(&block, b"finished").as_ref()
                );
            }
            // Too long an output is refused by both.
            let mut huge = vec![0u8; 255 * len + 1];
            assert!(expanders[0].0.expand_slice(&info, &mut huge).is_err());
            assert!(expanders[0].1.expand_slice(&info, &mut huge).is_err());
        }
    }
}
