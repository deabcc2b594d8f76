//! Client certificates (mutual TLS) on scb's server: required and optional, a client
//! with a certificate of another CA, and what requests carry (`ClientCertificate`), over
//! HTTP/1.1 and HTTP/2 alike.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Pki, connect};
use http::{Request, Response};
use scb_core::Body;
use scb_core::server::{ClientCertificate, Server, ServerHandle};
use scb_tls::{ClientAuth, TlsAcceptor, TlsSettings};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A server whose one route answers with the request's client certificate.
fn start(pki: &Pki, auth: ClientAuth) -> (SocketAddr, ServerHandle) {
    let files = pki.leaf("server", &["a.test"], common::KeyKind::EcdsaP256Pkcs8);
    let acceptor = TlsAcceptor::new(TlsSettings::new([files]).client_auth(auth)).unwrap();
    let bound = Server::builder()
        .workers(1)
        .grace_period(Duration::from_secs(1))
        .listen_secure("127.0.0.1:0".parse().unwrap(), Arc::new(acceptor))
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(|_| {
        tower::service_fn(|req: Request<Body>| async move {
            let text = match req.extensions().get::<ClientCertificate>() {
                Some(cert) => format!("subject={} sans={}", cert.subject(), cert.sans().join(",")),
                None => "no certificate".to_owned(),
            };
            Ok::<_, Infallible>(Response::new(Body::from(text)))
        })
    });
    (addr, handle)
}

/// One HTTP/1.1 request over TLS with `config`: the body, or the error of the handshake
/// or the exchange.
async fn ask(
    addr: SocketAddr,
    config: &Arc<scb_tls::rustls::ClientConfig>,
) -> std::io::Result<String> {
    let mut stream = connect(addr, config, "a.test").await?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .await?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).into_owned();
    Ok(text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned())
}

/// No answer: the handshake or the exchange failed, or the connection closed unanswered.
fn refused(result: &std::io::Result<String>) -> bool {
    result.as_ref().map_or(true, String::is_empty)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_required_certificate_is_verified_and_named_in_every_request() {
    let pki = Pki::new();
    let (addr, handle) = start(&pki, ClientAuth::required(pki.ca_file()));
    let alice = pki.client_cert(
        "alice",
        &["alice.example.com", "uri:spiffe://example.com/alice"],
    );
    let with_cert = pki.client().alpn(&[b"http/1.1"]).cert(alice).build();
    let without = pki.client().alpn(&[b"http/1.1"]).build();
    let stranger_ca = Pki::new();
    let mallory = stranger_ca.client_cert("mallory", &["mallory.example.com"]);
    let foreign = pki.client().alpn(&[b"http/1.1"]).cert(mallory).build();
    runtime().block_on(async {
        assert_eq!(
            ask(addr, &with_cert).await.unwrap(),
            "subject=O=Example\\, Inc.,CN=alice sans=alice.example.com,spiffe://example.com/alice"
        );
        // Without a certificate, or with one another CA signed: no request gets through
        // (TLS 1.3 reports the refusal after the client's handshake ends, so the failure
        // may show at the exchange rather than at `connect`).
        let res = ask(addr, &without).await;
        assert!(refused(&res), "{res:?}");
        let res = ask(addr, &foreign).await;
        assert!(refused(&res), "{res:?}");
    });
    handle.shutdown();
    handle.join();
}

#[test]
fn an_optional_certificate_lets_clients_without_one_in_unnamed() {
    let pki = Pki::new();
    let (addr, handle) = start(&pki, ClientAuth::optional(pki.ca_file()));
    let bob = pki.client_cert("bob", &[]);
    let with_cert = pki.client().alpn(&[b"http/1.1"]).cert(bob).build();
    let without = pki.client().alpn(&[b"http/1.1"]).build();
    let stranger_ca = Pki::new();
    let foreign = pki
        .client()
        .alpn(&[b"http/1.1"])
        .cert(stranger_ca.client_cert("mallory", &[]))
        .build();
    runtime().block_on(async {
        assert_eq!(
            ask(addr, &with_cert).await.unwrap(),
            "subject=O=Example\\, Inc.,CN=bob sans="
        );
        assert_eq!(ask(addr, &without).await.unwrap(), "no certificate");
        // A certificate that does not verify is refused even where none is required.
        let res = ask(addr, &foreign).await;
        assert!(refused(&res), "{res:?}");
    });
    handle.shutdown();
    handle.join();
}

#[test]
fn a_client_ca_that_is_not_a_certificate_is_refused_at_load() {
    let pki = Pki::new();
    let files = pki.leaf("server", &["a.test"], common::KeyKind::EcdsaP256Pkcs8);
    let bogus = pki.dir.join("bogus-ca.pem");
    std::fs::write(&bogus, "not a certificate\n").unwrap();
    let err = TlsAcceptor::new(
        TlsSettings::new([files.clone()]).client_auth(ClientAuth::required(&bogus)),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("bogus-ca.pem"), "{err}");
    let missing = pki.dir.join("absent.pem");
    let err = TlsSettings::new([files])
        .client_auth(ClientAuth::required(&missing))
        .check()
        .unwrap_err();
    assert!(err.to_string().contains("absent.pem"), "{err}");
}
