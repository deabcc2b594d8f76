//! `TlsAcceptor::reload`: new handshakes get the new files, open connections keep working,
//! a broken file changes nothing.

mod common;

use std::sync::Arc;

use common::{Dates, KeyKind, Pki, connect, file_leaf, new_key, peer_leaf, round_trip, serve};
use scb_tls::tokio_rustls;
use scb_tls::{TlsAcceptor, TlsError, TlsSettings};
use tokio::net::TcpListener;

#[tokio::test]
async fn reload_serves_the_new_certificate_and_keeps_open_connections() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let old_leaf = file_leaf(&files.cert);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files.clone()])).unwrap();
    let (addr, _outcomes) = serve(acceptor.clone()).await;
    let client = pki.client().build();

    let mut before = connect(addr, &client, "a.test").await.unwrap();
    round_trip(&mut before, b"before").await;
    assert_eq!(peer_leaf(&before), old_leaf);

    // A new key and certificate (another key type, too) at the same paths.
    pki.leaf("a", &["a.test"], KeyKind::Ed25519);
    let new_leaf = file_leaf(&files.cert);
    assert_ne!(new_leaf, old_leaf);
    acceptor.reload().unwrap();

    let mut after = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&after), new_leaf);
    round_trip(&mut after, b"after").await;

    // The connection opened before the reload still reads and writes.
    round_trip(&mut before, b"still here").await;
    assert_eq!(peer_leaf(&before), old_leaf);
}

#[tokio::test]
async fn reload_with_a_corrupt_certificate_errs_and_the_old_one_keeps_serving() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let old_leaf = file_leaf(&files.cert);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files.clone()])).unwrap();
    let (addr, _outcomes) = serve(acceptor.clone()).await;
    let client = pki.client().build();

    // Half a PEM section: the write an editor or a renewal tool was in the middle of.
    let pem = std::fs::read_to_string(&files.cert).unwrap();
    std::fs::write(&files.cert, &pem[..pem.len() / 2]).unwrap();
    let error = acceptor.reload().unwrap_err();
    assert!(
        matches!(error, TlsError::Pem { ref path, .. } if *path == files.cert),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&files.cert.display().to_string()),
        "{error}"
    );

    let mut stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), old_leaf);
    round_trip(&mut stream, b"old certificate").await;
}

#[tokio::test]
async fn reload_with_one_bad_file_of_several_changes_nothing() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let b = pki.leaf("b", &["b.test"], KeyKind::EcdsaP256Pkcs8);
    let (a_leaf, b_leaf) = (file_leaf(&a.cert), file_leaf(&b.cert));
    let acceptor = TlsAcceptor::new(TlsSettings::new([a.clone()]).cert(b.clone())).unwrap();
    let (addr, _outcomes) = serve(acceptor.clone()).await;
    let client = pki.client().build();

    // a.test gets a good new certificate, b.test an expired one: neither is taken.
    pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    pki.leaf_with("b", &["b.test"], KeyKind::EcdsaP256Pkcs8, Dates::Expired);
    let error = acceptor.reload().unwrap_err();
    assert!(
        matches!(error, TlsError::Expired { ref path, .. } if *path == b.cert),
        "{error:?}"
    );

    let stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), a_leaf);
    let stream = connect(addr, &client, "b.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), b_leaf);
}

#[tokio::test]
async fn reload_with_a_key_of_another_certificate_errs() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let old_leaf = file_leaf(&files.cert);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files.clone()])).unwrap();
    let (addr, _outcomes) = serve(acceptor.clone()).await;

    // A renewal that wrote the new certificate but not yet its key.
    let new_key = new_key(KeyKind::EcdsaP256Pkcs8);
    std::fs::write(&files.cert, pki.issue(&["a.test"], &new_key, Dates::Valid)).unwrap();
    let error = acceptor.reload().unwrap_err();
    assert!(matches!(error, TlsError::KeyMismatch { .. }), "{error:?}");

    let stream = connect(addr, &pki.client().build(), "a.test")
        .await
        .unwrap();
    assert_eq!(peer_leaf(&stream), old_leaf);
}

/// axum-server (and anything else taking `server_config()`) shares the config whose
/// resolver `reload` swaps: its listener sees reloads too.
#[tokio::test]
async fn server_config_users_see_reloads() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files.clone()])).unwrap();
    let config = acceptor.server_config();

    // A server built from the config alone, as axum-server builds its own.
    let other = tokio_rustls::TlsAcceptor::from(Arc::clone(&config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let other = other.clone();
            tokio::spawn(async move {
                if let Ok(stream) = other.accept(tcp).await {
                    common::echo(stream).await;
                }
            });
        }
    });

    let client = pki.client().build();
    let stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), file_leaf(&files.cert));

    pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    acceptor.reload().unwrap();
    let mut stream = connect(addr, &client, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), file_leaf(&files.cert));
    round_trip(&mut stream, b"through server_config").await;
    assert!(Arc::ptr_eq(&config, &acceptor.server_config()));
}

#[tokio::test]
async fn certificates_describe_what_is_served_after_a_reload() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test", "*.a.test"], KeyKind::EcdsaP256Pkcs8);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files.clone()])).unwrap();
    let infos = acceptor.certificates();
    assert_eq!(infos.len(), 1);
    assert_eq!(infos[0].cert, files.cert);
    assert_eq!(infos[0].names, ["a.test", "*.a.test"]);

    pki.leaf("a", &["a.test", "b.test"], KeyKind::EcdsaP256Pkcs8);
    acceptor.reload().unwrap();
    assert_eq!(acceptor.certificates()[0].names, ["a.test", "b.test"]);
}

#[tokio::test]
async fn session_tickets_issued_before_a_reload_still_resume() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files])).unwrap();
    let (addr, _outcomes) = serve(acceptor.clone()).await;
    let client = pki.client().resume().tls13_only().build();

    let mut first = connect(addr, &client, "a.test").await.unwrap();
    round_trip(&mut first, b"take a ticket").await;
    pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    acceptor.reload().unwrap();

    let mut second = connect(addr, &client, "a.test").await.unwrap();
    round_trip(&mut second, b"resumed").await;
    assert_eq!(
        second.get_ref().1.handshake_kind(),
        Some(scb_tls::rustls::HandshakeKind::Resumed)
    );
}
