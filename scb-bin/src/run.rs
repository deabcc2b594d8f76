//! `scb run`: install the metrics recorder, bind every listener, start the servers, and
//! shut them down gracefully on SIGTERM or SIGINT.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use scb_core::server::{Server, ServerHandle, WorkerInfo, shutdown_signal};

use crate::plan::{Plan, RoutePlan};
use crate::stack;

/// Histogram buckets for request durations, in seconds: from 100 µs (a fixed response or a
/// cached small file on loopback) to 10 s (a slow upstream), roughly 2.5x apart, so the
/// quantiles that matter for a web server (p50, p99) fall between buckets that are close
/// together wherever the server is fast or slow.
const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How often the recorder drains histogram samples into buckets. `install_recorder` leaves
/// this to the caller; 5 s is what the exporter's own upkeep task uses. Between upkeeps the
/// samples wait in a lock-free queue; a scrape drains them too, so this only bounds memory.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Reads `file`, installs the metrics recorder when it has a `[metrics]` section, and
/// then builds the plan: every metric handle a layer registers as it is built (a proxy's
/// per-upstream metrics) binds to that recorder, so nothing is built twice.
///
/// # Errors
///
/// A config error (returned as is, for the caller to print), or the recorder's.
pub(crate) fn load_with_recorder(
    file: &std::path::Path,
) -> Result<(Plan, Option<PrometheusHandle>), LoadError> {
    let parsed = Plan::parse(file).map_err(LoadError::Config)?;
    let recorder = parsed
        .wants_metrics()
        .then(install_recorder)
        .transpose()
        .map_err(LoadError::Recorder)?;
    let plan = parsed.plan().map_err(LoadError::Config)?;
    Ok((plan, recorder))
}

/// Why [`load_with_recorder`] failed.
#[derive(Debug)]
pub(crate) enum LoadError {
    Config(crate::config::ConfigError),
    Recorder(anyhow::Error),
}

/// Runs the plan until SIGTERM or SIGINT, then shuts down gracefully. `recorder` is the
/// metrics recorder installed before the plan was built, when it has a metrics endpoint.
///
/// # Errors
///
/// When a listener cannot be bound or the signal handlers cannot be installed. Nothing is
/// left running on error.
pub(crate) fn run(plan: Plan, recorder: Option<PrometheusHandle>) -> anyhow::Result<()> {
    let Plan {
        server,
        request_id_header: header,
        routes,
        metrics: metrics_plan,
        access_log: _,
        grace_period,
        limits,
        tls,
        https,
        pid_file,
        readiness,
        drain_delay,
    } = plan;
    let routes: Arc<[RoutePlan]> = routes;

    // One stack on this thread first, so that a stack that cannot be built is an error
    // here, not a panic in a worker.
    stack::app(&routes, &header, &stack::Https::default()).context("building the service stack")?;
    let metrics_stack = match (&metrics_plan, &recorder) {
        (Some(metrics), Some(handle)) => Some(
            stack::metrics(
                handle.clone(),
                &metrics.path,
                metrics
                    .probes
                    .as_ref()
                    .map(|(l, r)| (l.as_str(), r.as_str())),
                &readiness,
                &header,
            )
            .context("building the metrics stack")?,
        ),
        _ => None,
    };

    // Bind everything before starting anything, so that an address in use stops the
    // process before a single request is served.
    let app = server.bind()?;
    let metrics = match &metrics_plan {
        Some(metrics) => {
            // One worker is plenty for a scrape every few seconds.
            let mut builder = Server::builder()
                .workers(1)
                .limits(limits)
                .request_id_header(header.clone())
                .listen(metrics.listen);
            if let Some(grace_period) = grace_period {
                builder = builder.grace_period(grace_period);
            }
            let bound = builder.bind().context("the metrics listener")?;
            Some(bound)
        }
        None => None,
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the main runtime")?;
    let handles = runtime.block_on(async move {
        // Handlers first, addresses after: whoever sends SIGTERM as soon as it reads
        // "listening on" must get a graceful shutdown, not the signal's default action.
        let signal = shutdown_signal().context("installing the signal handlers")?;

        let mut reload = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("installing the SIGHUP handler")?;
        // A second SIGTERM or SIGINT during the drain delay ends the delay: whoever sends it
        // wants the process gone, not announced.
        let mut again = Again::install().context("installing the signal handlers")?;

        let mut handles = Vec::with_capacity(2);
        let app_addrs = app.local_addrs().to_vec();
        let https = stack::Https::new(&https, &app_addrs);
        handles.push(app.start(move |worker: &WorkerInfo| {
            tracing::debug!(worker = worker.index, "building the service stack");
            stack::app(&routes, &header, &https).expect("the same stack was built before starting")
        }));
        for addr in app_addrs {
            tracing::info!("listening on {addr}");
        }
        if let (Some(bound), Some(service), Some(config)) = (metrics, metrics_stack, metrics_plan) {
            let addr = bound.local_addrs()[0];
            handles.push(bound.start(move |_: &WorkerInfo| service.clone()));
            tracing::info!("metrics on {addr} {}", config.path);
        }

        let upkeep = async {
            let Some(recorder) = &recorder else {
                return std::future::pending::<Infallible>().await;
            };
            let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
            loop {
                interval.tick().await;
                recorder.run_upkeep();
            }
        };
        let _pid_file = match &pid_file {
            Some(path) => Some(PidFile::write(path)?),
            None => None,
        };
        let reloads = async {
            while reload.recv().await.is_some() {
                reload_tls(&tls);
            }
        };
        tokio::select! {
            () = signal => {}
            never = upkeep => match never {},
            () = reloads => {}
        }
        // Not ready from now on; the listeners still accept for `drain_delay`, so that a
        // load balancer polling the readiness probe stops sending before they close.
        readiness.drain();
        if !drain_delay.is_zero() {
            // Before the log line, so that a signal sent after reading it counts as the
            // second.
            again.forget_pending().await;
            tracing::info!(?drain_delay, "draining: readiness says 503, still serving");
            tokio::select! {
                () = tokio::time::sleep(drain_delay) => {}
                () = again.next() => tracing::info!("second signal: ending the drain delay"),
            }
        }
        tracing::info!("shutting down: no new connections, in-flight requests may finish");
        for handle in &handles {
            handle.shutdown();
        }
        anyhow::Ok(handles)
    })?;
    handles.into_iter().for_each(ServerHandle::join);
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM and SIGINT again, after the one that started the shutdown.
struct Again {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Again {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Drops the delivery these listeners saw too: the signal that started the shutdown.
    async fn forget_pending(&mut self) {
        for signal in [&mut self.term, &mut self.int] {
            tokio::select! {
                biased;
                _ = signal.recv() => {}
                () = std::future::ready(()) => {}
            }
        }
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Re-reads every TLS listener's certificate files: new connections get the new
/// certificates, open ones keep theirs, and a listener whose new files are broken keeps
/// serving the old ones (the error is logged).
fn reload_tls(acceptors: &[scb_tls::TlsAcceptor]) {
    tracing::info!("SIGHUP: reloading {} TLS listener(s)", acceptors.len());
    for acceptor in acceptors {
        match acceptor.reload() {
            Ok(()) => tracing::info!("TLS certificates reloaded"),
            Err(e) => tracing::error!("TLS reload failed, the old certificates stay: {e}"),
        }
    }
}

/// The pid file of a running `scb run`, removed when dropped if it still holds this
/// process's id: a file another process has written since is theirs.
struct PidFile(std::path::PathBuf);

impl PidFile {
    fn write(path: &std::path::Path) -> anyhow::Result<Self> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing the pid file {}", path.display()))?;
        Ok(Self(path.to_owned()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.0)
            .is_ok_and(|text| text.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// `scb reload`: signals the `scb run` whose pid file `pid_file` is to re-read its TLS
/// certificates.
pub(crate) fn signal_reload(pid_file: &std::path::Path) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(pid_file)
        .with_context(|| format!("reading the pid file {}", pid_file.display()))?;
    let pid: i32 = text
        .trim()
        .parse()
        .with_context(|| format!("{} holds no process id", pid_file.display()))?;
    let target = rustix::process::Pid::from_raw(pid)
        .with_context(|| format!("{} holds no process id", pid_file.display()))?;
    rustix::process::kill_process(target, rustix::process::Signal::HUP)
        .with_context(|| format!("signalling process {pid}"))?;
    Ok(pid)
}

/// Installs the Prometheus recorder as the global `metrics` recorder and describes scb's
/// metrics to it.
fn install_recorder() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        // Buckets make the duration a real Prometheus histogram instead of a summary, so
        // that it can be aggregated across instances.
        .set_buckets_for_metric(
            Matcher::Full(scb_core::metrics::REQUEST_DURATION_SECONDS.to_owned()),
            &DURATION_BUCKETS,
        )?
        .install_recorder()
        .context("installing the metrics recorder")?;
    scb_core::metrics::describe();
    scb_proxy::metrics::describe();
    Ok(handle)
}
