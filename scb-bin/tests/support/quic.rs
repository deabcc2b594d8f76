//! A QUIC client (quinn and h3's), for the tests of `http3 = true` listeners: the
//! certificate each handshake was given, and GETs on the connection.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf as _, Bytes};
use scb_tls::rustls;

pub(crate) type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// A QUIC connection to `addr` for `localhost` trusting `roots`: its h3 request sender and
/// the certificate the server presented.
pub(crate) async fn connect(
    addr: SocketAddr,
    roots: &[&[u8]],
) -> (quinn::Endpoint, SendRequest, Vec<u8>) {
    let mut store = rustls::RootCertStore::empty();
    for der in roots {
        store
            .add(rustls::pki_types::CertificateDer::from(der.to_vec()))
            .unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let conn = endpoint
        .connect(addr, "localhost")
        .unwrap()
        .await
        .expect("QUIC handshake");
    let presented = conn
        .peer_identity()
        .and_then(|id| {
            id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .map(|chain| chain[0].to_vec())
        .unwrap();
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    (endpoint, send, presented)
}

/// `GET path` on `send`: the status and the body.
pub(crate) async fn get(send: &mut SendRequest, path: &str) -> (u16, String) {
    let req = http::Request::get(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    stream.finish().await.unwrap();
    let res = stream.recv_response().await.unwrap();
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        while chunk.has_remaining() {
            let bytes = chunk.chunk().to_vec();
            chunk.advance(bytes.len());
            body.extend(bytes);
        }
    }
    (res.status().as_u16(), String::from_utf8(body).unwrap())
}
