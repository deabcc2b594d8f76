//! `scb run`: install the metrics recorder, bind every listener, start the servers, and
//! shut them down gracefully on SIGTERM or SIGINT.

use std::sync::Arc;
use std::time::Duration;

use crate::recorder::{MetricsHandle, MetricsRecorder};
use anyhow::Context as _;
use scb_core::access_log::{AccessLogFormat, AccessLogLayer, AccessLogWriter};
use scb_core::health::Readiness;
use scb_core::server::{Server, ServerHandle, WorkerInfo, shutdown_signal};
use scb_core::spans::SpansLayer;

use crate::otlp::{ExportPlan, OtlpSink};
use crate::plan::{AccessPlan, MetricsPlan, Plan, SitePlan};
use crate::reload_status::{self, ReloadStatus};
use crate::stack::{self, AppService, MetricsService};
use crate::switch::{Maker, Switch};
use crate::{activation, upgrade};

/// Histogram buckets for request durations, in seconds: from 100 µs (a fixed response or a
/// cached small file on loopback) to 10 s (a slow upstream), roughly 2.5x apart, so the
/// quantiles that matter for a web server (p50, p99) fall between buckets that are close
/// together wherever the server is fast or slow.
const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How often the exporter drains the samples of the histograms that are not scb's own
/// (scb's count into their buckets as they record; a library's histogram queues until
/// drained). 5 s is what the exporter's own upkeep task uses; a scrape drains them too,
/// so this only bounds memory.
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
) -> Result<(Plan, Option<MetricsHandle>), LoadError> {
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

/// Runs the plan until SIGTERM or SIGINT, then shuts down gracefully; SIGHUP reloads
/// `file` (absent for `scb serve`). `recorder` is the metrics recorder installed before
/// the plan was built, when it has a metrics endpoint.
///
/// # Errors
///
/// When a listener cannot be bound or the signal handlers cannot be installed. Nothing is
/// left running on error.
/// The plan was built before the log existed: what scb-proxy warned then is said again.
fn warn_insecure(plan: &Plan) {
    for site in plan.sites.iter() {
        for route in site.routes.iter() {
            if let crate::route::Handler::Proxy { proxy, .. } = &route.handler
                && proxy
                    .settings()
                    .upstream_tls
                    .as_ref()
                    .is_some_and(scb_proxy::UpstreamTls::skips_verification)
            {
                tracing::warn!(
                    route = %route.name,
                    "proxy: upstream certificates are NOT verified (insecure_skip_verify): anyone \
                     on the path to an https upstream can read and change its traffic"
                );
            }
        }
    }
}

pub(crate) fn run(
    file: Option<std::path::PathBuf>,
    plan: Plan,
    recorder: Option<MetricsHandle>,
    access_format: AccessLogFormat,
    upgrade: bool,
) -> anyhow::Result<()> {
    warn_insecure(&plan);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the main runtime")?;
    let handles = runtime.block_on(async move {
        // Handlers first, addresses after: whoever sends SIGTERM as soon as it reads
        // "listening on" must get a graceful shutdown, not the signal's default action.
        let signal = shutdown_signal().context("installing the signal handlers")?;
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("installing the SIGHUP handler")?;
        let mut reopen =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
                .context("installing the SIGUSR1 handler")?;
        // A second SIGTERM or SIGINT during the drain delay ends the delay: whoever sends it
        // wants the process gone, not announced.
        let mut again = Again::install().context("installing the signal handlers")?;

        // An upgrade takes the running process's listeners before binding anything.
        let taken_over = if upgrade {
            let path = plan.upgrade_socket.as_deref().context(
                "--upgrade needs [server] upgrade_socket, where the running scb listens",
            )?;
            let (taken, sockets) = upgrade::take_over(path)?;
            tracing::info!(sockets = sockets.len(), "upgrade: listeners taken over");
            Some((taken, sockets))
        } else {
            None
        };
        let (taken, sockets) = taken_over.map_or((None, Vec::new()), |(t, s)| (Some(t), s));
        let mut running = Running::start(file, plan, recorder, access_format, sockets, upgrade)?;
        // Written before an upgrade's hand-over is confirmed: the old process only exits
        // after it, and must find this process's id there (or it would remove the file
        // as its own, leaving none), and whoever reads the file once the old process is
        // gone must find this one's.
        let _pid_file = match &running.pid_file {
            Some(path) => Some(PidFile::write(path)?),
            None => None,
        };
        if let Some(taken) = taken {
            taken.serving()?;
            tracing::info!("upgrade: serving; the old process drains and exits");
        }
        running.write_reload_status(None);
        let upgrades = match &running.upgrade_socket {
            Some(path) => Some(upgrade::UpgradeSocket::bind(path)?),
            None => None,
        };
        let mut handing_over: Option<std::pin::Pin<Box<dyn Future<Output = Option<i32>>>>> = None;
        let mut upgraded = false;
        let mut upkeep = tokio::time::interval(UPKEEP_INTERVAL);
        tokio::pin!(signal);
        loop {
            tokio::select! {
                () = &mut signal => break,
                asking = async { upgrades.as_ref()?.next().await.ok() }, if upgrades.is_some()
                    && handing_over.is_none() => {
                    let Some(asking) = asking else { continue };
                    match running.listening_sockets().and_then(|s| asking.hand_over(&s)) {
                        Ok(waiting) => handing_over = Some(Box::pin(waiting)),
                        Err(e) => tracing::error!("upgrade: cannot hand the listeners over: {e:#}"),
                    }
                }
                served = async { handing_over.as_mut()?.await }, if handing_over.is_some() => {
                    handing_over = None;
                    if let Some(pid) = served {
                        tracing::info!(pid, "upgrade: the new process serves; draining");
                        upgraded = true;
                        break;
                    }
                }
                _ = upkeep.tick() => {
                    if let Some(recorder) = &running.recorder {
                        recorder.run_upkeep();
                    }
                }
                // SIGHUPs that arrive during a reload are kept by the stream and coalesce
                // into one more reload, which reads the file as it is by then.
                Some(()) = hangup.recv() => running.reload().await,
                Some(()) = reopen.recv() => running.reopen_logs(),
            }
        }
        // Not ready from now on; the listeners still accept for `drain_delay`, so that a
        // load balancer polling the readiness probe stops sending before they close.
        running.readiness.drain();
        // After an upgrade the new process serves the same sockets: nothing to wait for.
        let drain_delay = if upgraded {
            Duration::ZERO
        } else {
            running.drain_delay
        };
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
        let access = running.access.take().map(|(_, writer)| writer);
        let handles = running.into_handles();
        for handle in &handles {
            handle.shutdown();
        }
        anyhow::Ok((handles, access))
    })?;
    let (handles, access) = handles;
    handles.into_iter().for_each(ServerHandle::join);
    // The last requests' lines; a pipe nobody reads gets a few seconds, not forever.
    if let Some(access) = access
        && !access.close(Duration::from_secs(5))
    {
        tracing::warn!("the access log could not be written out in 5 s");
    }
    tracing::info!("stopped");
    Ok(())
}

/// What `scb run` runs: the main server, the metrics server, and what a reload replaces.
struct Running {
    /// The config file a reload reads.
    file: Option<std::path::PathBuf>,
    app: ServerHandle,
    app_stack: Arc<Switch<AppService>>,
    metrics: Option<MetricsServer>,
    recorder: Option<MetricsHandle>,
    readiness: Readiness,
    drain_delay: Duration,
    /// The access log's writer and what it was opened for; `None` when off.
    access: Option<(AccessPlan, AccessLogWriter)>,
    /// The access log's format when the config names none (`--log-format`).
    access_format: AccessLogFormat,
    /// Where a new process takes the listeners over (`--upgrade`).
    upgrade_socket: Option<std::path::PathBuf>,
    /// What a reload cannot change, to warn when it tries.
    workers: usize,
    pid_file: Option<std::path::PathBuf>,
    /// Reloads attempted so far, for the reload status file.
    reload_generation: u64,
    /// The ACME listeners' renewal tasks, on this (the main) thread's runtime.
    acme: AcmeTasks,
    /// The routes' response caches, which a reload hands to the routes of the same name.
    caches: Vec<(Arc<str>, scb_proxy::cache::CacheLayer)>,
    /// The status page's sampler, while `[status]` is on: kept by a reload, so that the
    /// chart carries on.
    status: Option<Arc<crate::status::Sampled>>,
    /// The span exporter and what it was started for; `None` without `[tracing] otlp`.
    exporter: Option<(ExportPlan, OtlpSink)>,
}

/// One task per ACME certificate, aborted when dropped (a reload replaces them).
struct AcmeTasks(Vec<tokio::task::AbortHandle>);

impl AcmeTasks {
    /// Starts the renewal task of every ACME acceptor of `plan`.
    fn start(plan: &Plan) -> Self {
        Self(
            plan.https
                .acme
                .iter()
                .filter_map(scb_tls::TlsAcceptor::acme_task)
                .map(|task| tokio::spawn(task).abort_handle())
                .collect(),
        )
    }
}

impl Drop for AcmeTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The metrics listener's server and stack.
struct MetricsServer {
    handle: ServerHandle,
    stack: Arc<Switch<MetricsService>>,
}

impl Running {
    /// Binds every listener, then starts the servers.
    fn start(
        file: Option<std::path::PathBuf>,
        plan: Plan,
        recorder: Option<MetricsHandle>,
        access_format: AccessLogFormat,
        handed_over: Vec<std::net::TcpListener>,
        upgrade: bool,
    ) -> anyhow::Result<Self> {
        let access = open_access_log(plan.access_log.as_ref(), None, &access_format)?;
        // Bind everything before starting anything, so that an address in use stops the
        // process before a single request is served.
        // Sockets from systemd or the process being upgraded: the metrics listener's own,
        // and the rest for the main server.
        let mut inherited = activation::take();
        inherited.extend(handed_over);
        let metrics_addr = plan.metrics.as_ref().map(|m| m.listen);
        let (for_metrics, for_app): (Vec<_>, Vec<_>) = inherited
            .into_iter()
            .partition(|s| s.local_addr().ok() == metrics_addr && metrics_addr.is_some());
        // Unix sockets are not handed over: an upgrade renames its own over the paths.
        let app = plan
            .server
            .clone()
            .inherit(for_app)
            .replace_unix_sockets(upgrade)
            .bind()?;
        let metrics = match &plan.metrics {
            Some(metrics) => Some(
                metrics_server(&plan, metrics)
                    .inherit(for_metrics)
                    .bind()
                    .context("the metrics listener")?,
            ),
            None => None,
        };
        let app_addrs = app.local_addrs().to_vec();
        // One stack on this thread first, so that a stack that cannot be built is an error
        // here, not a panic in a worker.
        let exporter = open_exporter(&plan, None)?;
        let make_app = app_maker(
            &plan,
            &app_addrs,
            access.as_ref().map(|(_, w)| w),
            exporter.as_ref().map(|(_, s)| s),
        )?;
        make_app().context("building the service stack")?;
        let app_stack = Switch::new(make_app);
        let status = sampler(&plan, recorder.as_ref(), None)?;
        let metrics_stack = match (&plan.metrics, &recorder) {
            (Some(metrics), Some(handle)) => {
                let make = metrics_maker(&plan, metrics, handle, status.as_ref());
                make().context("building the metrics stack")?;
                Some(Switch::new(make))
            }
            _ => None,
        };

        let (version, workers) = (env!("CARGO_PKG_VERSION"), app.workers());
        tracing::info!(
            version,
            workers,
            "scb {version} starting with {workers} worker{}",
            if workers == 1 { "" } else { "s" }
        );
        let stack = Arc::clone(&app_stack);
        let app = app.start(move |worker: &WorkerInfo| {
            tracing::debug!(worker = worker.index, "building the service stack");
            stack
                .worker()
                .expect("the same stack was built before starting")
        });
        for addr in &app_addrs {
            tracing::info!("listening on {addr}");
        }
        for path in app.unix_paths() {
            tracing::info!("listening on unix:{}", path.display());
        }
        let metrics = match (metrics, metrics_stack, &plan.metrics) {
            (Some(bound), Some(stack), Some(config)) => {
                let addr = bound.local_addrs()[0];
                let switch = Arc::clone(&stack);
                let handle = bound.start(move |_: &WorkerInfo| {
                    switch
                        .worker()
                        .expect("the same stack was built before starting")
                });
                tracing::info!("metrics on {addr} {}", config.path);
                if config.status {
                    tracing::info!("status page on http://{addr}{}", crate::status::STATUS_PATH);
                }
                Some(MetricsServer { handle, stack })
            }
            _ => None,
        };
        let acme = AcmeTasks::start(&plan);
        let caches = plan.caches();
        Ok(Self {
            file,
            app,
            app_stack,
            metrics,
            recorder,
            access,
            access_format,
            readiness: plan.readiness,
            drain_delay: plan.drain_delay,
            upgrade_socket: plan.upgrade_socket,
            workers: plan.server.settings().workers,
            pid_file: plan.pid_file,
            reload_generation: 0,
            caches,
            acme,
            status,
            exporter,
        })
    }

    /// Every worker's listening socket of both servers, for an upgrade.
    fn listening_sockets(&self) -> anyhow::Result<Vec<std::net::TcpListener>> {
        let mut sockets = self.app.listening_sockets()?;
        if let Some(metrics) = &self.metrics {
            sockets.extend(metrics.handle.listening_sockets()?);
        }
        Ok(sockets)
    }

    /// Reloads the config file: everything is read, checked, bound and built first, and
    /// only then switched to; on any error the running config stays as it is.
    async fn reload(&mut self) {
        let Some(file) = self.file.clone() else {
            tracing::warn!("SIGHUP: `scb serve` has no config file to reload");
            return;
        };
        tracing::info!("SIGHUP: reloading {}", file.display());
        self.reload_generation += 1;
        let result = self.try_reload(&file).await;
        self.write_reload_status(result.as_ref().err().map(|e| format!("{e:#}")));
        match result {
            Ok(()) => tracing::info!(
                "reloaded {}: listening on {}",
                file.display(),
                self.app
                    .local_addrs()
                    .iter()
                    .map(ToString::to_string)
                    .chain(
                        self.app
                            .unix_paths()
                            .iter()
                            .map(|p| format!("unix:{}", p.display()))
                    )
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => tracing::error!("reload failed, the running config stays: {e:#}"),
        }
    }

    /// Writes the outcome of the latest reload (`failure`: why it did not take effect)
    /// beside the pid file, for `scb reload` (see [`crate::reload_status`]).
    fn write_reload_status(&self, failure: Option<String>) {
        let Some(pid_file) = &self.pid_file else {
            return;
        };
        let status = ReloadStatus {
            pid: std::process::id(),
            generation: self.reload_generation,
            failure,
        };
        if let Err(e) = status.write(&reload_status::path(pid_file)) {
            tracing::warn!("{e:#}");
        }
    }

    async fn try_reload(&mut self, file: &std::path::Path) -> anyhow::Result<()> {
        let parsed = Plan::parse(file)?;
        if parsed.wants_metrics() && self.recorder.is_none() {
            self.recorder = Some(install_recorder()?);
        }
        let mut plan = parsed.plan_with(self.readiness.clone())?;
        plan.keep_caches_of(&self.caches);
        if plan.server.settings().workers != self.workers {
            tracing::warn!("server.workers changed: it takes effect at the next start");
        }
        if plan.upgrade_socket != self.upgrade_socket {
            tracing::warn!("server.upgrade_socket changed: it takes effect at the next start");
        }
        if plan.pid_file != self.pid_file {
            tracing::warn!("server.pid_file changed: it takes effect at the next start");
        }

        // Bind first: an address that cannot be bound fails the reload here.
        let app = self.app.prepare(&plan.server)?;
        enum Metrics {
            Keep(scb_core::server::Prepared),
            Start(scb_core::server::BoundServer),
            Stop,
            None,
        }
        let metrics = match (&self.metrics, &plan.metrics) {
            (Some(running), Some(config)) => Metrics::Keep(
                running
                    .handle
                    .prepare(&metrics_server(&plan, config))
                    .context("the metrics listener")?,
            ),
            (None, Some(config)) => Metrics::Start(
                metrics_server(&plan, config)
                    .bind()
                    .context("the metrics listener")?,
            ),
            (Some(_), None) => Metrics::Stop,
            (None, None) => Metrics::None,
        };
        // Then open and build: a log that cannot be opened or a stack that cannot be built
        // fails the reload here.
        let access = open_access_log(
            plan.access_log.as_ref(),
            self.access.as_ref(),
            &self.access_format,
        )?;
        let exporter = open_exporter(&plan, self.exporter.as_ref())?;
        let make_app = app_maker(
            &plan,
            &app.local_addrs(),
            access.as_ref().map(|(_, w)| w),
            exporter.as_ref().map(|(_, s)| s),
        )?;
        make_app().context("building the service stack")?;
        let status = sampler(&plan, self.recorder.as_ref(), self.status.as_ref())?;
        let make_metrics = match (&plan.metrics, &self.recorder) {
            (Some(config), Some(handle)) => {
                let make = metrics_maker(&plan, config, handle, status.as_ref());
                make().context("building the metrics stack")?;
                Some(make)
            }
            _ => None,
        };

        // Nothing can fail from here on. The stack first, so that a request on a new
        // listener meets the new routes.
        self.app_stack.replace(make_app);
        self.app.apply(app).await;
        // The old tasks stop before the new start: two would race for the same files.
        self.acme = AcmeTasks(Vec::new());
        self.acme = AcmeTasks::start(&plan);
        match (metrics, make_metrics) {
            (Metrics::Keep(prepared), Some(make)) => {
                if let Some(running) = &mut self.metrics {
                    running.stack.replace(make);
                    running.handle.apply(prepared).await;
                }
            }
            (Metrics::Start(bound), Some(make)) => {
                let addr = bound.local_addrs()[0];
                let stack = Switch::new(make);
                let switch = Arc::clone(&stack);
                let handle = bound.start(move |_: &WorkerInfo| {
                    switch
                        .worker()
                        .expect("the same stack was built before starting")
                });
                tracing::info!("metrics on {addr}");
                if status.is_some() {
                    tracing::info!("status page on http://{addr}{}", crate::status::STATUS_PATH);
                }
                self.metrics = Some(MetricsServer { handle, stack });
            }
            (Metrics::Stop, _) => {
                if let Some(old) = self.metrics.take() {
                    // Scrapes are short: the reload waits for them (the grace period at
                    // most), so that once it is logged the listener is closed.
                    old.handle.shutdown();
                    let _ = tokio::task::spawn_blocking(move || old.handle.join()).await;
                }
            }
            _ => {}
        }
        self.drain_delay = plan.drain_delay;
        self.caches = plan.caches();
        // The old sampler (when the page is off now) ends once the old stack is gone.
        self.status = status;
        // The old writer (if another) ends once the last old stack is gone, after writing
        // what those stacks' requests queued; so does the old span exporter.
        self.access = access;
        self.exporter = exporter;
        Ok(())
    }

    /// SIGUSR1: the access log's file is closed and opened again (after logrotate moved
    /// it).
    fn reopen_logs(&self) {
        match &self.access {
            Some((_, writer)) if writer.path().is_some() => {
                tracing::info!("SIGUSR1: reopening the access log");
                writer.reopen();
            }
            _ => tracing::info!("SIGUSR1: no access log file to reopen"),
        }
    }

    fn into_handles(self) -> Vec<ServerHandle> {
        let mut handles = vec![self.app];
        handles.extend(self.metrics.map(|m| m.handle));
        handles
    }
}

/// The metrics listener's server: one worker is plenty for a scrape every few seconds.
fn metrics_server(plan: &Plan, metrics: &MetricsPlan) -> Server {
    Server::from_settings(plan.server.settings())
        .workers(1)
        .listen(metrics.listen)
}

/// Builds the main stack of `plan` on a worker; `addrs` are the bound listeners,
/// `access` the access log's writer when it is on.
fn app_maker(
    plan: &Plan,
    addrs: &[std::net::SocketAddr],
    access: Option<&AccessLogWriter>,
    spans: Option<&OtlpSink>,
) -> anyhow::Result<Maker<AppService>> {
    let sites: Arc<[SitePlan]> = Arc::clone(&plan.sites);
    let header = plan.server.settings().request_id_header;
    let https = stack::Https::new(&plan.https, addrs);
    let acme =
        (!plan.https.acme.is_empty()).then(|| scb_tls::Http01Layer::new(plan.https.acme.iter()));
    let metrics = plan.metrics.is_some();
    let logged = access.is_some();
    let mut access_log = AccessLogLayer::new().trusted_proxies(plan.trusted_proxies.clone());
    if let Some(writer) = access {
        access_log = access_log.writer(writer.clone());
    }
    // Propagation is the proxies' and FastCGI's (built with the plan's routes).
    let spans = plan.tracing.as_ref().map(|tracing| match spans {
        Some(sink) => SpansLayer::new(sink.clone()).sample_ratio(tracing.sample_ratio),
        None => SpansLayer::context_only(),
    });
    Ok(Arc::new(move || {
        Ok(stack::app(
            &sites,
            &header,
            &https,
            stack::Records {
                access_log: &access_log,
                logged,
                spans: spans.as_ref(),
            },
            acme.as_ref(),
            metrics,
        )?)
    }))
}

/// The access log's writer for `plan`: `running`'s when it was opened for the same plan,
/// else a new one.
fn open_access_log(
    plan: Option<&AccessPlan>,
    running: Option<&(AccessPlan, AccessLogWriter)>,
    default_format: &AccessLogFormat,
) -> anyhow::Result<Option<(AccessPlan, AccessLogWriter)>> {
    let Some(plan) = plan else { return Ok(None) };
    if let Some((same, writer)) = running.filter(|(p, _)| p == plan) {
        return Ok(Some((same.clone(), writer.clone())));
    }
    let format = plan
        .format
        .clone()
        .unwrap_or_else(|| default_format.clone());
    let writer = match &plan.path {
        Some(path) => AccessLogWriter::file(path, format)
            .with_context(|| format!("log.access.path: cannot open {}", path.display()))?,
        None => AccessLogWriter::stderr(format).context("starting the access log")?,
    };
    Ok(Some((plan.clone(), writer)))
}

/// The span exporter for `plan`: `running`'s when it exports to the same collector as
/// the same service, else a new one (the old one's thread sends what it holds and ends
/// with the last stack using it).
fn open_exporter(
    plan: &Plan,
    running: Option<&(ExportPlan, OtlpSink)>,
) -> anyhow::Result<Option<(ExportPlan, OtlpSink)>> {
    let Some(export) = plan.tracing.as_ref().and_then(|t| t.export.as_ref()) else {
        return Ok(None);
    };
    if let Some(same) = running.filter(|(p, _)| p == export) {
        return Ok(Some(same.clone()));
    }
    let sink = crate::otlp::start(export).context("tracing.otlp: starting the span exporter")?;
    Ok(Some((export.clone(), sink)))
}

/// The status page's sampler when `plan` has the page: `running` (the one a reload
/// keeps), or a new one reading `recorder`.
fn sampler(
    plan: &Plan,
    recorder: Option<&MetricsHandle>,
    running: Option<&Arc<crate::status::Sampled>>,
) -> anyhow::Result<Option<Arc<crate::status::Sampled>>> {
    let wanted = plan.metrics.as_ref().is_some_and(|m| m.status);
    match (wanted, running, recorder) {
        (false, _, _) | (true, _, None) => Ok(None),
        (true, Some(running), Some(_)) => Ok(Some(Arc::clone(running))),
        (true, None, Some(recorder)) => crate::status::start(recorder.clone())
            .map(Some)
            .context("starting the status page's sampler"),
    }
}

/// Builds the metrics listener's stack of `plan`, with the status page when `status`
/// (its sampler) is given.
fn metrics_maker(
    plan: &Plan,
    metrics: &MetricsPlan,
    handle: &MetricsHandle,
    status: Option<&Arc<crate::status::Sampled>>,
) -> Maker<MetricsService> {
    let handle = handle.clone();
    let path = metrics.path.clone();
    let probes = metrics.probes.clone();
    let readiness = plan.readiness.clone();
    let header = plan.server.settings().request_id_header;
    let caches = crate::purge::PurgeCaches::new(plan.caches());
    let status = status
        .map(|sampled| crate::status::StatusPage::new(Arc::clone(sampled), plan.status_sources()));
    Arc::new(move || {
        Ok(stack::metrics(
            handle.clone(),
            &path,
            probes.as_ref().map(|(l, r)| (l.as_str(), r.as_str())),
            &readiness,
            &header,
            &caches,
            status.as_ref(),
        )?)
    })
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

/// The pid file of a running `scb run`, removed when dropped if it still holds this
/// process's id: a file another process has written since is theirs.
struct PidFile(std::path::PathBuf);

impl PidFile {
    /// Written whole or not at all (a temporary file renamed over the path): a reader
    /// racing an upgrade sees the old process's id or the new one's, never an empty file.
    fn write(path: &std::path::Path) -> anyhow::Result<Self> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp);
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, path))
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
        // The reload status beside it goes too, if it is this process's.
        let status = reload_status::path(&self.0);
        if ReloadStatus::read(&status).is_some_and(|s| s.pid == std::process::id()) {
            let _ = std::fs::remove_file(status);
        }
    }
}

/// `scb reload`: signals the `scb run` whose pid file is `pid_file` to reload its config,
/// and waits up to `timeout` for what became of it (see [`crate::reload_status`]).
pub(crate) fn reload(
    pid_file: &std::path::Path,
    timeout: Duration,
) -> anyhow::Result<(i32, reload_status::Outcome)> {
    let status_file = reload_status::path(pid_file);
    // Read before the signal: the outcome to wait for is the first one after it.
    let before = ReloadStatus::read(&status_file);
    let pid = signal_reload(pid_file)?;
    let pid_u32 = u32::try_from(pid).context("a negative process id")?;
    let before = before
        .filter(|status| status.pid == pid_u32)
        .map(|status| status.generation);
    let outcome = reload_status::wait_for_outcome(&status_file, pid_u32, before, timeout);
    Ok((pid, outcome))
}

/// Sends SIGHUP to the process whose id `pid_file` holds, and returns that id.
fn signal_reload(pid_file: &std::path::Path) -> anyhow::Result<i32> {
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

/// Gauge set to 1, labelled with scb's `version`: which build a scrape came from.
const BUILD_INFO: &str = "scb_build_info";

/// Installs scb's recorder (the Prometheus exporter's, with fixed-bucket histograms for
/// the request and upstream durations) as the global `metrics` recorder and describes
/// scb's metrics to it.
fn install_recorder() -> anyhow::Result<MetricsHandle> {
    // Buckets make the durations real Prometheus histograms instead of summaries, so that
    // they can be aggregated across instances, and let each observation be counted as it
    // is recorded instead of queued (see `recorder::histogram`).
    let recorder = MetricsRecorder::new(&[
        (
            scb_core::metrics::REQUEST_DURATION_SECONDS,
            &DURATION_BUCKETS,
        ),
        (
            scb_proxy::metrics::UPSTREAM_RESPONSE_SECONDS,
            &DURATION_BUCKETS,
        ),
    ]);
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
    scb_core::metrics::describe();
    scb_core::server::metrics::describe();
    scb_proxy::metrics::describe();
    metrics_process::Collector::default().describe();
    metrics::describe_gauge!(
        BUILD_INFO,
        "scb's version, in the `version` label; always 1"
    );
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(handle)
}
