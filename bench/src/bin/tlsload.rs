//! tlsload: the harness's load generator for TLS handshakes, a new connection per request,
//! with sessions resumed or not. wrk (the `tls-handshake` scenario) never resumes, and
//! neither h2load nor wrk opens a connection per request with a session ticket: browsers
//! do both, so the resumed handshake needs a client of its own. It prints its report in
//! h2load's format, as h3load does, plus one line the harness checks:
//!
//! ```text
//! tlsload -c CONNECTIONS -t THREADS -D DURATION [--resume] URL
//! ...
//! handshakes: 51234 full, 0 resumed
//! ```
//!
//! Each of the THREADS threads runs its own current-thread runtime with its share of the
//! CONNECTIONS loops; each loop connects, does a TLS 1.3 handshake (ALPN http/1.1), sends
//! `GET PATH` with `Connection: close`, reads the response whole (by its Content-Length),
//! sends close_notify and closes: what wrk does with `Connection: close` over TLS.
//!
//! The handshake matches wrk's OpenSSL 3.0: TLS 1.3 only, X25519 alone for the key
//! exchange (no post-quantum hybrid, which OpenSSL 3.0 lacks and would make the server's
//! side dearer). With `--resume`, each loop keeps the tickets the server sends (rustls'
//! memory store, one per loop: a loop is one client) and offers one in every handshake:
//! a PSK with an X25519 exchange (`psk_dhe_ke`, all rustls offers), so the server signs
//! nothing. Certificates are not verified: the harness's is self-signed.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

#[path = "common/any_certificate.rs"]
mod any_certificate;
use any_certificate::AnyCertificate;
#[path = "common/report.rs"]
mod report;
use report::{Counts, parse_duration};

#[derive(Parser, Debug)]
#[command(about = "TLS handshakes, a connection per request, in h2load's terms")]
struct Args {
    /// Connections open at once (each loop makes one after another).
    #[arg(short = 'c', default_value_t = 1)]
    connections: usize,
    /// Threads (each its own runtime).
    #[arg(short = 't', default_value_t = 1)]
    threads: usize,
    /// How long to load: `500ms` or `2s`.
    #[arg(short = 'D', default_value = "1s")]
    duration: String,
    /// Resume sessions with the tickets the server sent.
    #[arg(long)]
    resume: bool,
    /// `https://HOST:PORT/PATH`.
    url: String,
}

/// The largest response head read (the harness's answers are a few hundred bytes).
const MAX_HEAD: usize = 16 * 1024;

/// What one thread counted: the requests, and how many handshakes resumed.
#[derive(Default)]
struct ThreadCounts {
    requests: Counts,
    resumed: u64,
}

fn client_config(resume: bool) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::CryptoProvider {
        kx_groups: vec![rustls::crypto::aws_lc_rs::kx_group::X25519],
        ..rustls::crypto::aws_lc_rs::default_provider()
    });
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    tls.resumption = if resume {
        Resumption::in_memory_sessions(256)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(tls))
}

/// The target: where to connect, the name to send and the request's bytes.
struct Target {
    addr: SocketAddr,
    name: ServerName<'static>,
    request: Vec<u8>,
}

/// One request on a new connection: its status, and whether the handshake resumed.
async fn one(connector: &TlsConnector, target: &Target) -> anyhow::Result<(u16, bool)> {
    let tcp = TcpStream::connect(target.addr).await?;
    tcp.set_nodelay(true)?;
    let mut tls = connector.connect(target.name.clone(), tcp).await?;
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    tls.write_all(&target.request).await?;
    let mut buf = Vec::with_capacity(1024);
    let (status, body_start, length) = loop {
        if tls.read_buf(&mut buf).await? == 0 {
            bail!("the connection closed before the response's head ended");
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(n) = res.parse(&buf)? {
            let length = res
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| {
                    std::str::from_utf8(h.value)
                        .ok()?
                        .trim()
                        .parse::<usize>()
                        .ok()
                })
                .context("a response without Content-Length")?;
            break (res.code.unwrap_or(0), n, length);
        }
        if buf.len() > MAX_HEAD {
            bail!("a response head over {MAX_HEAD} bytes");
        }
    };
    while buf.len() < body_start + length {
        if tls.read_buf(&mut buf).await? == 0 {
            bail!("the connection closed before the body ended");
        }
    }
    // close_notify, then the TCP close, as wrk's SSL_shutdown does; a server that has
    // already closed makes this fail, which is no failure of the request.
    let _ = tls.shutdown().await;
    Ok((status, resumed))
}

/// One thread's share: `connections` loops of connection after connection until `window`
/// has passed from the moment every thread is ready.
fn thread(
    target: Arc<Target>,
    connections: usize,
    window: Duration,
    resume: bool,
    ready: Arc<Barrier>,
) -> anyhow::Result<ThreadCounts> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    // A config per loop: each loop is one client with its own tickets, as 64 browsers
    // would be (rustls' store keeps 8 tickets per server name, fewer than the loops).
    let connectors = (0..connections)
        .map(|_| client_config(resume).map(TlsConnector::from))
        .collect::<anyhow::Result<Vec<_>>>()?;
    local.block_on(&rt, async move {
        ready.wait();
        let end = Instant::now() + window;
        let mut tasks = Vec::with_capacity(connections);
        for connector in connectors {
            let target = Arc::clone(&target);
            tasks.push(tokio::task::spawn_local(async move {
                let mut counts = ThreadCounts::default();
                while Instant::now() < end {
                    let started = Instant::now();
                    match one(&connector, &target).await {
                        Ok((status, resumed)) => {
                            counts.requests.record(started, Some(status));
                            counts.resumed += u64::from(resumed);
                        }
                        Err(_) => counts.requests.record(started, None),
                    }
                }
                counts
            }));
        }
        let mut total = ThreadCounts::default();
        for task in tasks {
            let counts = task.await?;
            total.requests.add(&counts.requests);
            total.resumed += counts.resumed;
        }
        Ok(total)
    })
}

#[allow(clippy::print_stdout, reason = "the report is the command's output")]
fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let uri: http::Uri = args.url.parse().context("the URL")?;
    let host = uri.host().context("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let addr = (host.as_str(), port)
        .to_socket_addrs()?
        .next()
        .context("the host resolves to nothing")?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let target = Arc::new(Target {
        addr,
        name: ServerName::try_from(host.clone())?,
        request: format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n")
            .into_bytes(),
    });
    let window = parse_duration(&args.duration)?;
    let threads = args.threads.clamp(1, args.connections.max(1));
    let ready = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for i in 0..threads {
        // The connections spread as evenly as they divide.
        let share = args.connections / threads + usize::from(i < args.connections % threads);
        let (target, ready) = (Arc::clone(&target), Arc::clone(&ready));
        let resume = args.resume;
        handles.push(std::thread::spawn(move || {
            thread(target, share, window, resume, ready)
        }));
    }
    ready.wait();
    let started = Instant::now();
    let mut total = ThreadCounts::default();
    for handle in handles {
        let counts = handle
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        total.requests.add(&counts.requests);
        total.resumed += counts.resumed;
    }
    report::print(&total.requests, started.elapsed().as_secs_f64());
    let full = total.requests.done - total.requests.errored - total.resumed;
    println!("handshakes: {full} full, {} resumed", total.resumed);
    Ok(())
}
