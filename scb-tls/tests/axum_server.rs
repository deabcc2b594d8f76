//! axum-server with `TlsAcceptor::server_config()`: serves axum over TLS, negotiates h2,
//! and follows `TlsAcceptor::reload`.

mod common;

use axum::Router;
use axum::routing::get;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use common::{KeyKind, Pki, connect, file_leaf, peer_leaf};
use scb_tls::{TlsAcceptor, TlsSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn axum_server_serves_with_the_acceptor_config_and_follows_reload() {
    let pki = Pki::new();
    let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files.clone()])).unwrap();

    let handle = Handle::new();
    let server = axum_server::bind_rustls(
        "127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap(),
        RustlsConfig::from_config(acceptor.server_config()),
    )
    .handle(handle.clone());
    let app = Router::new().route("/", get(|| async { "hello from axum" }));
    tokio::spawn(server.serve(app.into_make_service()));
    let addr = handle.listening().await.unwrap();

    let http1 = pki.client().alpn(&[b"http/1.1"]).build();
    let mut stream = connect(addr, &http1, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), file_leaf(&files.cert));
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("hello from axum"), "{response}");

    let h2 = pki.client().build();
    let stream = connect(addr, &h2, "a.test").await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    pki.leaf("a", &["a.test"], KeyKind::Ed25519);
    acceptor.reload().unwrap();
    let stream = connect(addr, &h2, "a.test").await.unwrap();
    assert_eq!(peer_leaf(&stream), file_leaf(&files.cert));
    handle.shutdown();
}
