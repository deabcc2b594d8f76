//! `bench idle`: what an idle keep-alive connection costs each server in resident memory.
//!
//! For each server, twice (plain HTTP/1.1, then HTTP/1.1 over TLS 1.3): start it from its
//! committed config, read the resident memory of its process tree, open the connections
//! one after another with one `GET /respond` each (the answer read whole, the connection
//! kept open), read the resident memory again at once and after the connections have been
//! idle for `--settle` seconds, and check that every tenth connection still answers a
//! second request (the figure is of connections the server kept, not of ones it
//! dropped). The difference over the count is the memory per idle connection: just
//! opened (between requests), and settled (idle for a while: scb parks a connection idle
//! for a second, two for those that went idle before their worker was crowded).
//! Browsers and mobile clients leave keep-alive connections open by the thousand; this
//! is what each one costs.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::harness::cert::CertFiles;
use crate::harness::cli::Args;
use crate::harness::proctree;
use crate::harness::run::{Ctx, prepare, progress, start_verified};
use crate::harness::scenario::Scenario;
use crate::harness::server::Server;
use crate::harness::settings::Settings;

/// The flags of `bench idle`.
#[derive(Debug, clap::Args)]
pub(crate) struct IdleArgs {
    /// Plain connections to hold open.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub(crate) plain: usize,
    /// TLS connections to hold open.
    #[arg(long, default_value_t = 2_000, value_name = "N")]
    pub(crate) tls: usize,
    /// Seconds the connections stay idle before the settled reading.
    #[arg(long, default_value_t = 3, value_name = "S")]
    pub(crate) settle: u64,
    /// Everything else as for a run (`--servers` as given, default scb and nginx;
    /// `--scenarios`, `--duration` and `--rounds` are ignored).
    #[command(flatten)]
    pub(crate) run: Args,
}

/// The upstream port written into the configs (`GET /respond` never goes upstream).
const UNUSED_UPSTREAM_PORT: u16 = 9;

/// How long a client waits for one answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The request every connection makes, keep-alive.
const REQUEST: &[u8] = b"GET /respond HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// One measurement.
#[derive(Debug)]
struct Row {
    server: Server,
    kind: &'static str,
    connections: usize,
    before_kib: u64,
    /// Read as soon as the last connection's answer came.
    with_them_kib: u64,
    /// Read after they were idle for `--settle` seconds.
    settled_kib: u64,
}

impl Row {
    fn kib_per_connection(&self, with_them_kib: u64) -> f64 {
        with_them_kib.saturating_sub(self.before_kib) as f64 / self.connections as f64
    }
}

/// Runs the measurement; `Ok(true)` when every server kept every connection.
pub(crate) fn run(args: IdleArgs, argv: &[String]) -> anyhow::Result<bool> {
    crate::harness::process::install_signal_cleanup()?;
    let mut run_args = args.run;
    if run_args.servers == Server::ALL {
        run_args.servers = vec![Server::Scb, Server::Nginx];
    }
    run_args.scenarios = vec![Scenario::Respond, Scenario::TlsHandshake];
    let mut settings = Settings::from_args(run_args, argv)?;
    // nginx closes idle keep-alive connections once its free list runs low, before
    // `worker_connections` is reached: twice the count keeps every one open.
    settings.max_connections = 2 * args.plain.max(args.tls) + 256;
    raise_descriptor_limit(2 * args.plain.max(args.tls) + 256)?;
    let (work, fixtures, cert) = prepare(&settings)?;
    let ctx = Ctx {
        settings: &settings,
        fixtures: &fixtures,
        cert: &cert,
        work: &work,
    };
    let tls = client_config(&cert)?;
    let mut rows = Vec::new();
    for &server in &settings.servers {
        for (scenario, count) in [
            (Scenario::Respond, args.plain),
            (Scenario::TlsHandshake, args.tls),
        ] {
            if count == 0 || !server.supports(scenario) {
                continue;
            }
            let settle = Duration::from_secs(args.settle);
            rows.push(measure(&ctx, server, scenario, count, &tls, settle)?);
        }
    }
    let report = table(&rows, &settings, Duration::from_secs(args.settle));
    crate::harness::run::publish(&settings.out, "idle.md", &report)?;
    Ok(true)
}

fn measure(
    ctx: &Ctx<'_>,
    server: Server,
    scenario: Scenario,
    count: usize,
    tls: &Arc<rustls::ClientConfig>,
    settle: Duration,
) -> anyhow::Result<Row> {
    let kind = if scenario == Scenario::TlsHandshake {
        "TLS 1.3"
    } else {
        "plain"
    };
    let dir = ctx
        .work
        .join(format!("idle-{kind}-{server}").replace(' ', ""));
    let expected = scenario.expected(ctx.fixtures);
    // No upstream runs; nginx's config still needs a port it could reach.
    let mut started = start_verified(
        ctx,
        scenario,
        server,
        &dir,
        UNUSED_UPSTREAM_PORT,
        &expected,
        &[],
    )
    .map_err(|(stage, e)| e.context(format!("starting {server} ({stage:?})")))?;
    let addr = address_of(&started.url)?;
    let pid = started.process.pid();
    let before_kib = proctree::tree_rss_kib(pid)?;
    progress(&format!(
        "[idle] {server}, {kind}: opening {count} connections"
    ));
    let mut connections: Vec<Box<dyn Stream>> = Vec::with_capacity(count);
    for i in 0..count {
        let mut stream = connect(addr, (scenario == Scenario::TlsHandshake).then_some(tls))
            .with_context(|| format!("{server}, {kind}: connection {i}"))?;
        exchange(&mut stream)
            .with_context(|| format!("{server}, {kind}: request on connection {i}"))?;
        connections.push(stream);
    }
    let with_them_kib = proctree::tree_rss_kib(pid)?;
    std::thread::sleep(settle);
    let settled_kib = proctree::tree_rss_kib(pid)?;
    // Kept, not dropped: a second request on every tenth connection is answered.
    for (i, stream) in connections.iter_mut().enumerate().step_by(10) {
        exchange(stream)
            .with_context(|| format!("{server}, {kind}: second request on idle connection {i}"))?;
    }
    drop(connections);
    started.process.ensure_running()?;
    started.process.stop()?;
    let row = Row {
        server,
        kind,
        connections: count,
        before_kib,
        with_them_kib,
        settled_kib,
    };
    progress(&format!(
        "[idle] {server}, {kind}: {:.1} KiB per connection settled, {:.1} just opened ({} KiB \
         before, {} KiB with them, {} KiB settled)",
        row.kib_per_connection(row.settled_kib),
        row.kib_per_connection(row.with_them_kib),
        row.before_kib,
        row.with_them_kib,
        row.settled_kib
    ));
    Ok(row)
}

fn table(rows: &[Row], settings: &Settings, settle: Duration) -> String {
    let mut out = format!(
        "# Idle keep-alive connections\n\nEach connection made one `GET /respond` (HTTP/1.1, \
         keep-alive) and stayed open; resident memory of the server's process tree before, \
         with them just opened, and after they were idle for {} s. {} worker(s), server CPUs \
         {}.\n\n\
         | server | connections | count | RSS before MiB | RSS with them MiB | settled MiB | \
         KiB per connection, just opened | KiB per connection, settled |\n\
         |---|---|--:|--:|--:|--:|--:|--:|\n",
        settle.as_secs(),
        settings.workers,
        settings.server_cpus.as_str()
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            row.server,
            row.kind,
            row.connections,
            row.before_kib as f64 / 1024.0,
            row.with_them_kib as f64 / 1024.0,
            row.settled_kib as f64 / 1024.0,
            row.kib_per_connection(row.with_them_kib),
            row.kib_per_connection(row.settled_kib)
        );
    }
    out
}

/// `127.0.0.1:PORT` of a `http://` or `https://` URL the harness made.
fn address_of(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .context("a URL without a scheme")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .parse()
        .with_context(|| format!("the address of {url}"))
}

/// A connection, plain or TLS.
pub(crate) trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

pub(crate) fn connect(
    addr: SocketAddr,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Box<dyn Stream>> {
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    tcp.set_read_timeout(Some(TIMEOUT))?;
    tcp.set_write_timeout(Some(TIMEOUT))?;
    tcp.set_nodelay(true)?;
    Ok(match tls {
        None => Box::new(tcp),
        Some(config) => {
            let name = ServerName::IpAddress(addr.ip().into());
            let session = rustls::ClientConnection::new(Arc::clone(config), name)?;
            Box::new(rustls::StreamOwned::new(session, tcp))
        }
    })
}

/// Sends [`REQUEST`] and reads its answer whole (a 200 with a `Content-Length`).
pub(crate) fn exchange(stream: &mut Box<dyn Stream>) -> anyhow::Result<()> {
    stream.write_all(REQUEST)?;
    stream.flush()?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = response.parse(&buf)? {
            if response.code != Some(200) {
                bail!("status {:?}", response.code);
            }
            let length: usize = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .context("no Content-Length")?;
            let mut rest = (head + length).saturating_sub(buf.len());
            while rest > 0 {
                let n = stream.read(&mut chunk[..rest.min(512)])?;
                if n == 0 {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
                }
                rest -= n;
            }
            return Ok(());
        }
    }
}

/// A client trusting the harness's certificate only.
pub(crate) fn client_config(cert: &CertFiles) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_file_iter(&cert.cert)
        .with_context(|| format!("reading {}", cert.cert.display()))?
    {
        roots.add(der?)?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// This process needs a descriptor per connection.
pub(crate) fn raise_descriptor_limit(wanted: usize) -> anyhow::Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let wanted = wanted as u64 + 64;
    if limit.current.is_some_and(|current| current < wanted) {
        limit.current = Some(limit.maximum.map_or(wanted, |max| max.min(wanted)));
        setrlimit(Resource::Nofile, limit).context("raising the descriptor limit")?;
    }
    Ok(())
}
