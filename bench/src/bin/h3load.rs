//! h3load: the harness's HTTP/3 load generator (quinn and h3's client), because Debian's
//! h2load is built without QUIC. It prints its report in h2load's format (the `finished
//! in`, `requests:` and `time for request:` lines), so the one parser reads both.
//!
//! ```text
//! h3load -c CONNECTIONS -m STREAMS -t THREADS -D DURATION URL   # load, then the report
//! h3load --get URL                                              # one GET: status, then the body
//! h3load --idle -c CONNECTIONS -D DURATION URL                  # one GET each, then idle
//! ```
//!
//! `--idle` holds the connections open and idle for DURATION after one request each: what
//! an idle QUIC connection costs the server (its resident memory) is read meanwhile.
//!
//! Each of the THREADS threads runs its own current-thread runtime and QUIC endpoint (one
//! UDP socket) with its share of the connections; each connection keeps STREAMS requests
//! in flight, each a GET of URL whose body is read whole. The window starts once every
//! connection is open, as h2load's timing-based runs exclude nothing but do connect
//! first. Certificates are not verified (h2load does not either): the harness's is
//! self-signed.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::{Buf as _, Bytes};
use clap::Parser;

#[path = "common/any_certificate.rs"]
mod any_certificate;
use any_certificate::AnyCertificate;
#[path = "common/report.rs"]
mod report;
use report::{Counts, parse_duration};

#[derive(Parser, Debug)]
#[command(about = "HTTP/3 load in h2load's terms")]
struct Args {
    /// Connections.
    #[arg(short = 'c', default_value_t = 1)]
    connections: usize,
    /// Requests in flight per connection.
    #[arg(short = 'm', default_value_t = 1)]
    streams: usize,
    /// Threads (each its own endpoint).
    #[arg(short = 't', default_value_t = 1)]
    threads: usize,
    /// How long to load: `500ms` or `2s`.
    #[arg(short = 'D', default_value = "1s")]
    duration: String,
    /// One GET, printing the status on the first line and then the body.
    #[arg(long)]
    get: bool,
    /// One GET on each connection, then the connections idle for the duration.
    #[arg(long)]
    idle: bool,
    /// `https://HOST:PORT/PATH`.
    url: String,
}

fn client_config() -> anyhow::Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    host: &str,
) -> anyhow::Result<SendRequest> {
    let conn = endpoint.connect(addr, host)?.await?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn)).await?;
    tokio::task::spawn_local(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok(send)
}

/// One GET on `send`: the status and the body.
async fn get(send: &mut SendRequest, uri: &http::Uri) -> anyhow::Result<(u16, Vec<u8>)> {
    let req = http::Request::get(uri.clone()).body(())?;
    let mut stream = send.send_request(req).await?;
    stream.finish().await?;
    let res = stream.recv_response().await?;
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await? {
        while chunk.has_remaining() {
            let piece = chunk.chunk();
            body.extend_from_slice(piece);
            let n = piece.len();
            chunk.advance(n);
        }
    }
    Ok((res.status().as_u16(), body))
}

/// One thread's share: `connections` connections, then the load until `end`.
fn thread(
    addr: SocketAddr,
    uri: http::Uri,
    connections: usize,
    streams: usize,
    window: Duration,
    idle: bool,
    ready: Arc<Barrier>,
) -> anyhow::Result<Counts> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let bind: SocketAddr = if addr.is_ipv6() {
            "[::]:0".parse()?
        } else {
            "0.0.0.0:0".parse()?
        };
        let mut endpoint = quinn::Endpoint::client(bind)?;
        endpoint.set_default_client_config(client_config()?);
        let host = uri.host().unwrap_or("localhost").to_owned();
        let mut senders = Vec::with_capacity(connections);
        for _ in 0..connections {
            senders.push(connect(&endpoint, addr, &host).await?);
        }
        if idle {
            let mut counts = Counts::default();
            for send in &mut senders {
                let started = Instant::now();
                let status = get(send, &uri).await.ok().map(|(status, _)| status);
                counts.record(started, status);
            }
            ready.wait();
            tokio::time::sleep(window).await;
            return Ok(counts);
        }
        // Blocking this thread is harmless: its connections idle until the window opens.
        ready.wait();
        let end = Instant::now() + window;
        let mut tasks = Vec::new();
        for send in senders {
            for _ in 0..streams {
                let mut send = send.clone();
                let uri = uri.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let mut counts = Counts::default();
                    while Instant::now() < end {
                        let started = Instant::now();
                        match get(&mut send, &uri).await {
                            Ok((status, _)) => counts.record(started, Some(status)),
                            Err(_) => {
                                counts.record(started, None);
                                break;
                            }
                        }
                    }
                    counts
                }));
            }
        }
        let mut total = Counts::default();
        for task in tasks {
            total.add(&task.await?);
        }
        endpoint.close(0u32.into(), b"done");
        Ok(total)
    })
}

#[allow(clippy::print_stdout, reason = "the report is the command's output")]
fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let uri: http::Uri = args.url.parse().context("the URL")?;
    let host = uri.host().context("the URL has no host")?;
    let port = uri.port_u16().unwrap_or(443);
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .context("the host resolves to nothing")?;
    if args.get {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let local = tokio::task::LocalSet::new();
        let (status, body) = local.block_on(&rt, async {
            let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse()?)?;
            endpoint.set_default_client_config(client_config()?);
            let mut send = connect(&endpoint, addr, host).await?;
            get(&mut send, &uri).await
        })?;
        println!("{status}");
        use std::io::Write as _;
        std::io::stdout().write_all(&body)?;
        return Ok(());
    }
    let window = parse_duration(&args.duration)?;
    let threads = args.threads.clamp(1, args.connections.max(1));
    let ready = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for i in 0..threads {
        // The connections spread as evenly as they divide.
        let share = args.connections / threads + usize::from(i < args.connections % threads);
        let (uri, ready) = (uri.clone(), Arc::clone(&ready));
        let (streams, idle) = (args.streams, args.idle);
        handles.push(std::thread::spawn(move || {
            thread(addr, uri, share, streams, window, idle, ready)
        }));
    }
    ready.wait();
    let started = Instant::now();
    let mut total = Counts::default();
    for handle in handles {
        let counts = handle
            .join()
            .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
        total.add(&counts);
    }
    report::print(&total, started.elapsed().as_secs_f64());
    Ok(())
}
