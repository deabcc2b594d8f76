//! Real handshakes against `TlsAcceptor` with a tokio-rustls client: key types and
//! encodings, protocol versions and suites, ALPN, SNI, session resumption.

mod common;

use common::{KeyKind, Pki, connect, peer_names, round_trip, serve};
use scb_core::server::Protocol;
use scb_tls::rustls::client::{Resumption, Tls12Resumption};
use scb_tls::rustls::{self, CipherSuite, HandshakeKind, ProtocolVersion, SignatureScheme};
use scb_tls::{Alpn, TlsAcceptor, TlsSettings};

/// One certificate of `kind` for `a.test`; a TLS 1.3 and a TLS 1.2 handshake, each
/// checked end to end (certificate chain verified by the client, bytes echoed).
async fn handshakes_with(kind: KeyKind) {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], kind);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files])).unwrap();
    let (addr, mut outcomes) = serve(acceptor).await;

    let tls13 = pki.client().tls13_only().build();
    let mut stream = connect(addr, &tls13, "a.test").await.unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_3)
    );
    round_trip(&mut stream, b"hello over 1.3").await;
    outcomes.recv().await.unwrap().unwrap();

    let tls12 = pki.client().tls12_only().build();
    let mut stream = connect(addr, &tls12, "a.test").await.unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_2)
    );
    round_trip(&mut stream, b"hello over 1.2").await;
    outcomes.recv().await.unwrap().unwrap();
}

#[tokio::test]
async fn ecdsa_p256_pkcs8_key_serves_tls13_and_tls12() {
    handshakes_with(KeyKind::EcdsaP256Pkcs8).await;
}

#[tokio::test]
async fn ecdsa_p256_sec1_key_serves_tls13_and_tls12() {
    handshakes_with(KeyKind::EcdsaP256Sec1).await;
}

#[tokio::test]
async fn ecdsa_p384_key_serves_tls13_and_tls12() {
    handshakes_with(KeyKind::EcdsaP384Pkcs8).await;
}

#[tokio::test]
async fn ed25519_key_serves_tls13_and_tls12() {
    handshakes_with(KeyKind::Ed25519).await;
}

#[tokio::test]
async fn rsa_pkcs8_key_serves_tls13_and_tls12() {
    handshakes_with(KeyKind::RsaPkcs8).await;
}

#[tokio::test]
async fn rsa_pkcs1_key_serves_tls13_and_tls12() {
    handshakes_with(KeyKind::RsaPkcs1).await;
}

#[tokio::test]
async fn tls12_negotiates_ecdhe_with_an_aead_suite() {
    let pki = Pki::new();
    let rsa = pki.leaf("rsa", &["rsa.test"], KeyKind::RsaPkcs8);
    let ecdsa = pki.leaf("ec", &["ec.test"], KeyKind::EcdsaP256Pkcs8);
    let acceptor = TlsAcceptor::new(TlsSettings::new([rsa]).cert(ecdsa)).unwrap();
    let (addr, _outcomes) = serve(acceptor).await;
    let client = pki.client().tls12_only().build();

    let stream = connect(addr, &client, "rsa.test").await.unwrap();
    let suite = stream
        .get_ref()
        .1
        .negotiated_cipher_suite()
        .unwrap()
        .suite();
    assert!(
        [
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ]
        .contains(&suite),
        "{suite:?}"
    );

    let stream = connect(addr, &client, "ec.test").await.unwrap();
    let suite = stream
        .get_ref()
        .1
        .negotiated_cipher_suite()
        .unwrap()
        .suite();
    assert!(
        [
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ]
        .contains(&suite),
        "{suite:?}"
    );
}

#[tokio::test]
async fn alpn_picks_h2_when_the_client_offers_it_even_after_http1() {
    let pki = Pki::new();
    let acceptor = TlsAcceptor::new(TlsSettings::new([pki.leaf(
        "a",
        &["a.test"],
        KeyKind::EcdsaP256Pkcs8,
    )]))
    .unwrap();
    let (addr, mut outcomes) = serve(acceptor).await;
    // The server's order decides: h2 although the client lists it second.
    let client = pki.client().alpn(&[b"http/1.1", b"h2"]).build();
    let stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(outcomes.recv().await.unwrap().unwrap(), Protocol::Http2);
}

#[tokio::test]
async fn alpn_picks_http1_when_only_http1_is_offered() {
    let pki = Pki::new();
    let acceptor = TlsAcceptor::new(TlsSettings::new([pki.leaf(
        "a",
        &["a.test"],
        KeyKind::EcdsaP256Pkcs8,
    )]))
    .unwrap();
    let (addr, mut outcomes) = serve(acceptor).await;
    let client = pki.client().alpn(&[b"http/1.1"]).build();
    let stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(outcomes.recv().await.unwrap().unwrap(), Protocol::Http1);
}

#[tokio::test]
async fn no_alpn_from_the_client_means_http1() {
    let pki = Pki::new();
    let acceptor = TlsAcceptor::new(TlsSettings::new([pki.leaf(
        "a",
        &["a.test"],
        KeyKind::EcdsaP256Pkcs8,
    )]))
    .unwrap();
    let (addr, mut outcomes) = serve(acceptor).await;
    let client = pki.client().alpn(&[]).build();
    let stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), None);
    assert_eq!(outcomes.recv().await.unwrap().unwrap(), Protocol::Http1);
}

#[tokio::test]
async fn http1_only_setting_never_picks_h2() {
    let pki = Pki::new();
    let settings = TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)])
        .alpn(Alpn::Http1Only);
    let (addr, mut outcomes) = serve(TlsAcceptor::new(settings).unwrap()).await;

    let both = pki.client().alpn(&[b"h2", b"http/1.1"]).build();
    let stream = connect(addr, &both, "a.test").await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(outcomes.recv().await.unwrap().unwrap(), Protocol::Http1);

    // A client that speaks only h2 is refused (no_application_protocol), not downgraded.
    let h2_only = pki.client().alpn(&[b"h2"]).build();
    assert!(connect(addr, &h2_only, "a.test").await.is_err());
    let refused = outcomes.recv().await.unwrap().unwrap_err();
    let refused = refused
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert_eq!(refused, Some(&rustls::Error::NoApplicationProtocol));
}

/// `a.test`, `b.test` + `www.b.test`, `*.wild.test`, in that order (`a.test` is the default).
fn sni_settings(pki: &Pki) -> TlsSettings {
    TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)])
        .cert(pki.leaf("b", &["b.test", "www.b.test"], KeyKind::Ed25519))
        .cert(pki.leaf("wild", &["*.wild.test"], KeyKind::RsaPkcs8))
}

#[tokio::test]
async fn sni_picks_the_certificate_with_that_name() {
    let pki = Pki::new();
    let (addr, _outcomes) = serve(TlsAcceptor::new(sni_settings(&pki)).unwrap()).await;
    let client = pki.client().build();
    for (name, expected) in [
        ("a.test", vec!["a.test"]),
        ("b.test", vec!["b.test", "www.b.test"]),
        ("www.b.test", vec!["b.test", "www.b.test"]),
        ("x.wild.test", vec!["*.wild.test"]),
        ("UPPER.Wild.Test", vec!["*.wild.test"]),
    ] {
        let mut stream = connect(addr, &client, name).await.unwrap();
        assert_eq!(peer_names(&stream), expected, "for {name}");
        round_trip(&mut stream, name.as_bytes()).await;
    }
}

#[tokio::test]
async fn wildcard_covers_one_label_only_and_other_names_get_the_default() {
    let pki = Pki::new();
    let (addr, _outcomes) = serve(TlsAcceptor::new(sni_settings(&pki)).unwrap()).await;
    for name in ["wild.test", "a.b.wild.test"] {
        let client = pki.client().verify_as("a.test").build();
        let stream = connect(addr, &client, name).await.unwrap();
        assert_eq!(peer_names(&stream), ["a.test"], "for {name}");
    }
}

#[tokio::test]
async fn unknown_name_gets_the_first_certificate() {
    let pki = Pki::new();
    let (addr, _outcomes) = serve(TlsAcceptor::new(sni_settings(&pki)).unwrap()).await;
    let client = pki.client().verify_as("a.test").build();
    let stream = connect(addr, &client, "unknown.example").await.unwrap();
    assert_eq!(peer_names(&stream), ["a.test"]);
}

#[tokio::test]
async fn client_without_sni_gets_the_first_certificate() {
    let pki = Pki::new();
    let (addr, _outcomes) = serve(TlsAcceptor::new(sni_settings(&pki)).unwrap()).await;
    // Verified for a.test, but the name is not sent: the server must pick the default.
    let client = pki.client().no_sni().build();
    let mut stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(peer_names(&stream), ["a.test"]);
    round_trip(&mut stream, b"no sni").await;
}

#[tokio::test]
async fn exact_name_wins_over_a_wildcard_listed_first() {
    let pki = Pki::new();
    let settings = TlsSettings::new([pki.leaf("wild", &["*.x.test"], KeyKind::EcdsaP256Pkcs8)])
        .cert(pki.leaf("www", &["www.x.test"], KeyKind::EcdsaP256Pkcs8));
    let (addr, _outcomes) = serve(TlsAcceptor::new(settings).unwrap()).await;
    let client = pki.client().build();
    let stream = connect(addr, &client, "www.x.test").await.unwrap();
    assert_eq!(peer_names(&stream), ["www.x.test"]);
    let stream = connect(addr, &client, "api.x.test").await.unwrap();
    assert_eq!(peer_names(&stream), ["*.x.test"]);
}

#[tokio::test]
async fn same_name_with_ecdsa_and_rsa_serves_the_key_type_the_client_accepts() {
    let pki = Pki::new();
    let ecdsa = pki.leaf("ec", &["dual.test"], KeyKind::EcdsaP256Pkcs8);
    let rsa = pki.leaf("rsa", &["dual.test"], KeyKind::RsaPkcs8);
    let settings = TlsSettings::new([ecdsa.clone()]).cert(rsa.clone());
    let (addr, _outcomes) = serve(TlsAcceptor::new(settings).unwrap()).await;

    let any = pki.client().build();
    let stream = connect(addr, &any, "dual.test").await.unwrap();
    assert_eq!(common::peer_leaf(&stream), common::file_leaf(&ecdsa.cert));

    let rsa_only = pki
        .client()
        .schemes(&[
            SignatureScheme::RSA_PSS_SHA256,
            SignatureScheme::RSA_PKCS1_SHA256,
        ])
        .build();
    let stream = connect(addr, &rsa_only, "dual.test").await.unwrap();
    assert_eq!(common::peer_leaf(&stream), common::file_leaf(&rsa.cert));
}

/// Connects twice with one client config: the second handshake must be `Resumed`.
async fn second_connection_resumes(
    client: std::sync::Arc<scb_tls::rustls::ClientConfig>,
    settings: TlsSettings,
) -> (HandshakeKind, HandshakeKind) {
    let (addr, _outcomes) = serve(TlsAcceptor::new(settings).unwrap()).await;
    let mut first = connect(addr, &client, "a.test").await.unwrap();
    // Reading makes the client process the tickets the server sent after its handshake.
    round_trip(&mut first, b"first").await;
    let first_kind = first.get_ref().1.handshake_kind().unwrap();
    let mut second = connect(addr, &client, "a.test").await.unwrap();
    round_trip(&mut second, b"second").await;
    (first_kind, second.get_ref().1.handshake_kind().unwrap())
}

#[tokio::test]
async fn tls13_session_ticket_resumes_the_second_connection() {
    let pki = Pki::new();
    let settings = TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)]);
    let kinds =
        second_connection_resumes(pki.client().resume().tls13_only().build(), settings).await;
    assert_eq!(kinds, (HandshakeKind::Full, HandshakeKind::Resumed));
}

/// Each TLS 1.3 suite, whose key schedule is scb's own HKDF (scb-tls' `hkdf` module): a
/// full handshake and a resumed one agree on every key with rustls' client (its own
/// HKDF), data goes both ways on each, and the suite is the one offered.
#[tokio::test]
async fn every_tls13_suite_handshakes_and_resumes() {
    let pki = Pki::new();
    for suite in [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let settings = TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)]);
        let (addr, _outcomes) = serve(TlsAcceptor::new(settings).unwrap()).await;
        let client = pki.client().resume().tls13_only().suite(suite).build();
        for (message, kind) in [
            (&b"full"[..], HandshakeKind::Full),
            (&b"resumed"[..], HandshakeKind::Resumed),
        ] {
            let mut stream = connect(addr, &client, "a.test").await.unwrap();
            round_trip(&mut stream, message).await;
            let session = stream.get_ref().1;
            assert_eq!(session.handshake_kind(), Some(kind), "{suite:?}");
            assert_eq!(
                session.negotiated_cipher_suite().map(|s| s.suite()),
                Some(suite)
            );
        }
    }
}

#[tokio::test]
async fn tls12_session_ticket_resumes_the_second_connection() {
    let pki = Pki::new();
    // No session cache: only the ticket can resume it.
    let settings =
        TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)]).session_cache(0);
    let kinds =
        second_connection_resumes(pki.client().resume().tls12_only().build(), settings).await;
    assert_eq!(kinds, (HandshakeKind::Full, HandshakeKind::Resumed));
}

fn session_id_only_client(pki: &Pki) -> std::sync::Arc<scb_tls::rustls::ClientConfig> {
    let mut config = (*pki.client().resume().tls12_only().build()).clone();
    config.resumption =
        Resumption::in_memory_sessions(16).tls12_resumption(Tls12Resumption::SessionIdOnly);
    std::sync::Arc::new(config)
}

#[tokio::test]
async fn tls12_session_id_resumes_from_the_server_cache() {
    let pki = Pki::new();
    let settings = TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)]);
    let kinds = second_connection_resumes(session_id_only_client(&pki), settings).await;
    assert_eq!(kinds, (HandshakeKind::Full, HandshakeKind::Resumed));
}

#[tokio::test]
async fn tls12_session_id_does_not_resume_without_the_server_cache() {
    let pki = Pki::new();
    let settings =
        TlsSettings::new([pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8)]).session_cache(0);
    let kinds = second_connection_resumes(session_id_only_client(&pki), settings).await;
    assert_eq!(kinds, (HandshakeKind::Full, HandshakeKind::Full));
}
