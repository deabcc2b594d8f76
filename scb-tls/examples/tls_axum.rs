//! An axum app served over TLS by axum-server, with scb-tls's certificates: SNI across
//! several certificates, validation at start-up, and reload on SIGHUP.
//!
//! ```text
//! cargo run -p scb-tls --example tls_axum -- 127.0.0.1:8443 site.pem site.key [other.pem other.key ...]
//! curl -k --http2 https://127.0.0.1:8443/
//! kill -HUP <pid>    # after replacing the files
//! ```

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example program reports to whoever runs it"
)]

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;
use scb_tls::{CertFiles, TlsAcceptor, TlsSettings};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: tls_axum ADDR CERT KEY [CERT KEY ...]";
    let addr: SocketAddr = args.next().ok_or(usage)?.parse()?;
    let mut certs = Vec::new();
    while let Some(cert) = args.next() {
        let key = args.next().ok_or(usage)?;
        certs.push(CertFiles::new(cert, key));
    }
    // The first certificate is the default (no SNI, or a name no certificate has).
    let settings = TlsSettings::new(certs);

    // Every file is read and checked here (key matches certificate, dates), before the
    // listener opens; an error names the file.
    let acceptor = TlsAcceptor::new(settings)?;
    for cert in acceptor.certificates() {
        println!("{}: {}", cert.cert.display(), cert.names.join(", "));
    }

    // axum-server takes the rustls ServerConfig as is: ALPN h2 + http/1.1, session tickets,
    // and the certificate resolver of the acceptor. `acceptor.reload()` swaps the
    // certificates inside that resolver, i.e. inside this same ServerConfig, so reloads
    // reach axum-server's listener too; `RustlsConfig::reload_*` is not needed.
    let config = RustlsConfig::from_config(acceptor.server_config());

    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            let acceptor = acceptor.clone();
            // reload() reads files: keep it off the async workers.
            match tokio::task::spawn_blocking(move || acceptor.reload()).await {
                Ok(Ok(())) => eprintln!("certificates reloaded"),
                Ok(Err(e)) => eprintln!("reload failed, still serving the previous ones: {e}"),
                Err(e) => eprintln!("reload task failed: {e}"),
            }
        }
    });

    let app = Router::new().route("/", get(|| async { "Hello over TLS\n" }));
    println!("listening on https://{addr}");
    axum_server::bind_rustls(addr, config)
        .serve(app.into_make_service())
        .await?;
    Ok(())
}
