//! What a rustls client cannot offer: TLS 1.0/1.1, CBC suites, non-ECDHE key exchange.
//! `openssl s_client` offers them; the server must refuse. Each test is skipped, with a
//! message on stderr, when `openssl` is not on PATH; with `SCB_REQUIRE_TOOLS` set (as
//! `cargo xtask ci` sets it) a missing `openssl` fails them instead (CI installs Debian's
//! `openssl`).

mod common;

use std::io;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use common::{KeyKind, Outcomes, Pki, serve};
use scb_core::server::Protocol;
use scb_tls::rustls;
use scb_tls::{TlsAcceptor, TlsSettings};

fn openssl_available() -> bool {
    let found = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
            "`openssl` is not on PATH, and SCB_REQUIRE_TOOLS says these tests must run"
        );
        #[allow(
            clippy::print_stderr,
            reason = "the only way to say why a test did nothing"
        )]
        {
            eprintln!("SKIPPED: `openssl` is not on PATH (Debian package `openssl`)");
        }
    }
    found
}

/// A server with an RSA certificate for `rsa.test` (RSA so that ECDHE-RSA and plain-RSA
/// suites are both candidates).
async fn rsa_server() -> (Pki, SocketAddr, Outcomes) {
    let pki = Pki::new();
    let files = pki.leaf("rsa", &["rsa.test"], KeyKind::RsaPkcs8);
    let (addr, outcomes) = serve(TlsAcceptor::new(TlsSettings::new([files])).unwrap()).await;
    (pki, addr, outcomes)
}

/// Runs `openssl s_client` against `addr` with `args`; success and everything it printed.
async fn s_client(addr: SocketAddr, args: &[&str]) -> (bool, String) {
    let mut command = Command::new("openssl");
    command
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            "rsa.test",
        ])
        .args(args)
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// The server's side of a refused handshake must be rustls refusing what the client
/// offered, not the client giving up before sending a ClientHello (OpenSSL 3 disables TLS
/// 1.0/1.1 at its default security level, hence `@SECLEVEL=0` below).
async fn assert_refused_as_incompatible(outcomes: &mut Outcomes, output: &str) {
    let error: io::Error = outcomes.recv().await.unwrap().unwrap_err();
    let rustls_error = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    assert!(
        matches!(rustls_error, Some(rustls::Error::PeerIncompatible(_))),
        "server saw {error:?}; s_client said:\n{output}"
    );
}

#[tokio::test]
async fn tls11_and_tls10_are_refused() {
    if !openssl_available() {
        return;
    }
    let (_pki, addr, mut outcomes) = rsa_server().await;
    for version in ["-tls1_1", "-tls1"] {
        let (ok, output) = s_client(addr, &[version, "-cipher", "DEFAULT@SECLEVEL=0"]).await;
        assert!(!ok, "{version} was accepted:\n{output}");
        assert_refused_as_incompatible(&mut outcomes, &output).await;
    }
}

#[tokio::test]
async fn tls12_cbc_and_non_ecdhe_suites_are_refused() {
    if !openssl_available() {
        return;
    }
    let (_pki, addr, mut outcomes) = rsa_server().await;
    for suite in [
        "AES128-SHA",                // RSA key exchange, CBC
        "AES128-GCM-SHA256",         // RSA key exchange, AEAD
        "ECDHE-RSA-AES128-SHA",      // ECDHE, CBC
        "ECDHE-RSA-AES128-SHA256",   // ECDHE, CBC
        "DHE-RSA-AES128-GCM-SHA256", // finite-field DHE, AEAD
    ] {
        let (ok, output) = s_client(addr, &["-tls1_2", "-cipher", suite]).await;
        assert!(!ok, "{suite} was accepted:\n{output}");
        assert_refused_as_incompatible(&mut outcomes, &output).await;
    }
}

#[tokio::test]
async fn tls12_ecdhe_rsa_aes128_gcm_is_accepted() {
    if !openssl_available() {
        return;
    }
    let (_pki, addr, mut outcomes) = rsa_server().await;
    let (ok, output) = s_client(addr, &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"]).await;
    assert!(ok, "{output}");
    assert!(
        output.contains("Cipher is ECDHE-RSA-AES128-GCM-SHA256"),
        "{output}"
    );
    outcomes.recv().await.unwrap().unwrap();
}

#[tokio::test]
async fn openssl_tls13_client_gets_h2_by_alpn() {
    if !openssl_available() {
        return;
    }
    let (_pki, addr, mut outcomes) = rsa_server().await;
    let (ok, output) = s_client(addr, &["-tls1_3", "-alpn", "h2,http/1.1"]).await;
    assert!(ok, "{output}");
    assert!(output.contains("ALPN protocol: h2"), "{output}");
    assert_eq!(outcomes.recv().await.unwrap().unwrap(), Protocol::Http2);
}
