//! The crypto provider, named in one place: every rustls config of this crate (the
//! server's, the ACME client's, the TLS-ALPN-01 challenge's) takes it from here.

use rustls::SupportedCipherSuite;
use rustls::crypto::CryptoProvider;
use rustls::crypto::aws_lc_rs::{self, cipher_suite, kx_group};

use crate::hkdf;

/// The cipher suites, chosen here rather than taken from the provider's defaults so that
/// the list is visible and does not change under us with a rustls upgrade.
///
/// TLS 1.3: its three suites. TLS 1.2: only ECDHE key exchange (forward secrecy) with AEAD
/// ciphers (AES-GCM, ChaCha20-Poly1305). rustls implements nothing else for TLS 1.2 (no
/// CBC, no static-RSA or DHE key exchange), so this is also the whole TLS 1.2 set; TLS 1.0
/// and 1.1 do not exist in rustls. AES-128 comes first, as in Mozilla's "intermediate"
/// profile, though rustls follows the client's order among these (`ignore_client_order`
/// is off): a client without AES instructions puts ChaCha20 first and gets it.
///
/// The TLS 1.3 suites are rustls' with the HKDF of [`crate::hkdf`] (why: that module).
fn cipher_suites() -> Vec<SupportedCipherSuite> {
    vec![
        hkdf::tls13_aes_128_gcm_sha256(),
        hkdf::tls13_aes_256_gcm_sha384(),
        hkdf::tls13_chacha20_poly1305_sha256(),
        cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ]
}

/// The provider every config of this crate uses: aws-lc-rs (why: the crate docs) with the
/// suites above and the key exchange groups X25519MLKEM768 (post-quantum hybrid, TLS 1.3
/// only), X25519, P-256 and P-384. rustls picks the first group in the client's order that
/// is in this list, so a client that prefers the hybrid (current Chrome and Firefox) gets it.
///
/// Named explicitly rather than through rustls' process-wide default, so that another
/// crate in the same build turning on rustls' `ring` feature changes nothing here.
pub(crate) fn provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: cipher_suites(),
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ],
        ..aws_lc_rs::default_provider()
    }
}
