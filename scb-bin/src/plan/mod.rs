//! A checked config, ready to run: scb-core builders and per-route handlers.
//!
//! Building a [`Plan`] is the whole of validation: `scb check` builds one and discards it,
//! `scb run` builds one and runs it, so whatever `check` accepts, `run` starts with, and
//! the server never starts half-configured.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use scb_core::access_log::{AccessLogFormat, AccessLogTemplate};
use scb_core::health::Readiness;
use scb_core::router::PathMatch;
use scb_core::server::{Limits, Server};
use scb_static::compress::CompressLayer;

use crate::config::{Config, ConfigError, Located};
use crate::route::{Guards, Handler};

/// Everything `scb run` needs, checked.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The main server: workers, grace period, limits, request-id header, listeners; its
    /// [`settings`](Server::settings) are what the stacks and the metrics server read.
    pub(crate) server: Server,
    /// The sites: the named ones in config order, then the default site (top-level
    /// `[[route]]`s, or a `[[site]]` without `hosts`) if there is one.
    pub(crate) sites: Arc<[SitePlan]>,
    /// The metrics endpoint, if configured.
    pub(crate) metrics: Option<MetricsPlan>,
    /// The listeners in config order, described for `scb check --print`.
    pub(crate) listeners: Vec<(String, &'static str)>,
    /// The files the config was read from (the main one first), for `scb check --print`.
    pub(crate) files: Vec<std::path::PathBuf>,
    /// The access log, when on.
    pub(crate) access_log: Option<AccessPlan>,
    /// `[server] trusted_proxies`, for the access log's client address.
    pub(crate) trusted_proxies: scb_core::client_ip::TrustedProxies,
    /// Redirects to `https` and `Strict-Transport-Security`, by listener.
    pub(crate) https: HttpsPlan,
    /// `[server] upgrade_socket`: where `scb run --upgrade` takes the listeners over.
    pub(crate) upgrade_socket: Option<std::path::PathBuf>,
    /// Where `scb run` writes its process id.
    pub(crate) pid_file: Option<std::path::PathBuf>,
    /// The process's readiness, drained on SIGTERM: read by `[health]`'s readiness path
    /// and by `health = true` routes.
    pub(crate) readiness: Readiness,
    /// How long readiness says 503 before the listeners close (`[health] drain_delay`).
    pub(crate) drain_delay: Duration,
    /// `[cluster]`: the fleet's Redis (one connection per URL and prefix in the process,
    /// kept by a reload).
    pub(crate) cluster: Option<scb_core::cluster::Cluster>,
    /// `[tracing]`: trace context and spans; `None`: no trace ids at all.
    pub(crate) tracing: Option<TracingPlan>,
}

/// What every route of a plan is built with.
#[derive(Debug)]
pub(super) struct Context {
    /// The process's readiness (`health = true` routes).
    pub(super) readiness: Readiness,
    /// `[server] trusted_proxies`: who names the client.
    pub(super) trusted: scb_core::client_ip::TrustedProxies,
    /// `[cluster]`, for shared rate limits.
    pub(super) cluster: Option<scb_core::cluster::Cluster>,
    /// `[tracing] propagate`: whether proxies and FastCGI tell upstreams the trace.
    pub(super) propagate_trace: bool,
}

/// Where the access log goes and how it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccessPlan {
    /// The file; `None` is stderr.
    pub(crate) path: Option<std::path::PathBuf>,
    /// `None`: as the process's own log (`--log-format`).
    pub(crate) format: Option<AccessLogFormat>,
}

/// A config file read and parsed, its plan not built yet: `scb run` looks at it first to
/// install the metrics recorder before any layer registers a handle.
#[derive(Debug)]
pub(crate) struct Parsed {
    source: crate::config::Source,
    config: Config,
}

impl Parsed {
    /// Whether the config has a `[metrics]` endpoint.
    pub(crate) fn wants_metrics(&self) -> bool {
        self.config.metrics.is_some()
    }

    /// Checks the config and builds the plan.
    pub(crate) fn plan(&self) -> Result<Plan, ConfigError> {
        self.plan_with(Readiness::new())
    }

    /// [`plan`](Self::plan) with the running process's `readiness`: a reload's routes
    /// and probes must answer from the same one that SIGTERM drains.
    pub(crate) fn plan_with(&self, readiness: Readiness) -> Result<Plan, ConfigError> {
        let mut plan = Plan::new(&self.config, readiness).map_err(|e| self.source.locate(e))?;
        plan.files = self.source.files().map(Path::to_path_buf).collect();
        Ok(plan)
    }
}

impl Plan {
    /// The response caches of its routes, by route name.
    pub(crate) fn caches(&self) -> Vec<(Arc<str>, scb_proxy::cache::CacheLayer)> {
        self.sites
            .iter()
            .flat_map(|site| site.routes.iter())
            .filter_map(|route| match &route.handler {
                crate::route::Handler::Proxy {
                    cache: Some(cache), ..
                } => Some((Arc::clone(&route.name), cache.clone())),
                _ => None,
            })
            .collect()
    }

    /// What the status page reads of this plan: each proxy and FastCGI route's upstreams,
    /// the TLS listeners' certificates, the workers, whether a route caches.
    pub(crate) fn status_sources(&self) -> crate::status::Sources {
        use crate::status::Upstreams;
        let routes = self.sites.iter().flat_map(|site| site.routes.iter());
        let upstreams = routes
            .filter_map(|route| {
                let upstreams = match &route.handler {
                    crate::route::Handler::Proxy { proxy, .. } => Upstreams::Proxy(proxy.clone()),
                    crate::route::Handler::FastCgi { fastcgi, .. } => {
                        Upstreams::FastCgi(fastcgi.clone())
                    }
                    _ => return None,
                };
                Some((Arc::clone(&route.name), upstreams))
            })
            .collect();
        crate::status::Sources {
            upstreams,
            acceptors: self.https.acceptors.clone(),
            workers: self.server.settings().workers,
            cache: !self.caches().is_empty(),
        }
    }

    /// Gives each cached route the store of the route of the same name in `previous`
    /// (the running config's), when its `max_bytes` is unchanged: a reload keeps what
    /// was stored.
    pub(crate) fn keep_caches_of(&mut self, previous: &[(Arc<str>, scb_proxy::cache::CacheLayer)]) {
        if previous.is_empty() {
            return;
        }
        let mut sites = self.sites.to_vec();
        for site in &mut sites {
            let mut routes = site.routes.to_vec();
            for route in &mut routes {
                if let crate::route::Handler::Proxy {
                    cache: Some(cache), ..
                } = &mut route.handler
                    && let Some((_, old)) = previous.iter().find(|(name, _)| *name == route.name)
                {
                    *cache = cache.clone().keep_store_of(old);
                }
            }
            site.routes = routes.into();
        }
        self.sites = sites.into();
    }

    /// The default site's routes (none when every site is named).
    #[cfg(test)]
    pub(crate) fn routes(&self) -> &[RoutePlan] {
        self.sites
            .iter()
            .find(|s| s.hosts.is_empty())
            .map_or(&[], |s| &s.routes)
    }

    /// Reads, parses and checks `file`.
    pub(crate) fn load(file: &Path) -> Result<Self, ConfigError> {
        Self::parse(file)?.plan()
    }

    /// Reads and parses `file` and the files it includes, its `${VAR}`s expanded from
    /// the environment, without building anything.
    pub(crate) fn parse(file: &Path) -> Result<Parsed, ConfigError> {
        let source = crate::config::Source::load(file, &|name| std::env::var(name).ok())?;
        let mut config = Config::parse(&source.text).map_err(|e| source.locate(e))?;
        let dir = std::path::absolute(file)
            .ok()
            .and_then(|file| file.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        config.resolve_paths(&dir);
        Ok(Parsed { source, config })
    }

    /// `scb serve DIR`: every path beneath `dir`, on `listen`, with sidecars, the access
    /// log and every other setting at its default.
    pub(crate) fn serve(
        dir: &Path,
        listen: SocketAddr,
        workers: Option<usize>,
        compress: bool,
    ) -> Result<Self, scb_static::BuildError> {
        let files = scb_static::ServeStatic::builder(dir)
            .precompressed(["br", "zstd", "gzip"])
            .build()?;
        let mut server = Server::builder().listen(listen);
        if let Some(workers) = workers {
            server = server.workers(workers);
        }
        Ok(Self {
            server,
            sites: Arc::from([SitePlan {
                hosts: Vec::new(),
                routes: Arc::from([RoutePlan {
                    name: "static".into(),
                    matcher: PathMatch::Prefix("/".to_owned()).into(),
                    handler: Handler::Static {
                        files,
                        compress: compress.then(CompressLayer::new),
                    },
                    guards: Guards::default(),
                }]),
                fallback: Guards::default(),
            }]),
            metrics: None,
            listeners: vec![(listen.to_string(), "plain")],
            files: Vec::new(),
            access_log: Some(AccessPlan {
                path: None,
                format: None,
            }),
            trusted_proxies: scb_core::client_ip::TrustedProxies::default(),
            https: HttpsPlan::default(),
            upgrade_socket: None,
            pid_file: None,
            readiness: Readiness::new(),
            cluster: None,
            drain_delay: Duration::ZERO,
            tracing: None,
        })
    }

    /// Parses and checks a config document.
    #[cfg(test)]
    pub(crate) fn from_source(source: &str) -> Result<Self, Located> {
        Self::new(&Config::parse(source)?, Readiness::new())
    }

    /// Checks `config` and converts it; `health = true` routes and the probes answer
    /// from `readiness`.
    pub(crate) fn new(config: &Config, readiness: Readiness) -> Result<Self, Located> {
        let limits = Limits::try_from(&config.limits).map_err(|e| e.within("limits"))?;
        let request_id_header = config
            .request_id
            .header_name()
            .map_err(|e| e.within("request_id"))?;

        let mut server = Server::builder()
            .limits(limits)
            .request_id_header(request_id_header)
            // Its own answers, connections and handshakes: counted when something reads them.
            .metrics(config.metrics.is_some());
        if let Some(workers) = &config.server.workers {
            if *workers.get_ref() == 0 {
                return Err(Located::at(workers, "server.workers", "must be at least 1"));
            }
            server = server.workers(*workers.get_ref());
        }
        if let Some(grace_period) = config.server.grace_period.map(|g| g.0) {
            server = server.grace_period(grace_period);
        }

        let cluster = match &config.cluster {
            Some(table) => Some(crate::cluster::shared(table).map_err(|e| e.within("cluster"))?),
            None => None,
        };
        let tickets = crate::tickets::keys(cluster.as_ref(), ticket_rotation(config)?);
        let listen = listen_addrs(config)?;
        let (server, https) = listeners(config, server, &tickets, cluster.as_ref())?;
        let metrics = metrics(config, &listen)?;
        let access_log = access_plan(config)?;
        let tracing = match &config.tracing {
            Some(table) => Some(tracing::plan(table.get_ref())?),
            None => None,
        };
        let trusted_proxies = match &config.server.trusted_proxies {
            None => scb_core::client_ip::TrustedProxies::default(),
            Some(entries) => {
                crate::config::convert::trusted_proxies(entries).map_err(|e| e.within("server"))?
            }
        };
        let ctx = Context {
            readiness: readiness.clone(),
            trusted: trusted_proxies.clone(),
            cluster: cluster.clone(),
            propagate_trace: tracing.as_ref().is_none_or(|t| t.propagate),
        };
        let sites = sites(config, &ctx)?;

        Ok(Self {
            server,
            sites: sites.into(),
            metrics,
            listeners: config
                .listen
                .iter()
                .map(|l| {
                    let kind = match (&l.tls, l.redirect_https.as_ref().map(|r| *r.get_ref())) {
                        (Some(tls), _) if tls.get_ref().acme.is_some() => {
                            "tls (h2, http/1.1), acme"
                        }
                        (Some(_), _) => "tls (h2, http/1.1)",
                        (None, Some(true)) => "plain, redirects to https",
                        (None, _) => "plain",
                    };
                    (listen_text(l.addr.get_ref()), kind)
                })
                .collect(),
            files: Vec::new(),
            access_log,
            trusted_proxies,
            https,
            upgrade_socket: config.server.upgrade_socket.clone(),
            pid_file: config.server.pid_file.clone(),
            readiness,
            cluster,
            tracing,
            drain_delay: config
                .health
                .as_ref()
                .and_then(|h| h.get_ref().drain_delay)
                .map_or(Duration::ZERO, |d| d.0),
        })
    }
}

/// `[log] access`: where, and in which format; a template is parsed here, so that its
/// error names the key and `scb check` refuses what `scb run` would.
fn access_plan(config: &Config) -> Result<Option<AccessPlan>, Located> {
    let crate::config::AccessConfig::On(table) = &config.log.access else {
        return Ok(None);
    };
    let format = match &table.format {
        None => None,
        Some(format) => Some(match format.get_ref() {
            crate::config::AccessFormat::Combined => AccessLogFormat::Combined,
            crate::config::AccessFormat::Json => AccessLogFormat::Json,
            crate::config::AccessFormat::Template(text) => AccessLogTemplate::parse(text)
                .map_err(|e| Located::at(format, "log.access.format", e))?
                .into(),
        }),
    };
    Ok(Some(AccessPlan {
        path: table.path.clone(),
        format,
    }))
}

/// `[cluster] ticket_rotation`: at least a minute (a ticket is good for one to two
/// periods); absent, or without `[cluster]`, 6 hours.
fn ticket_rotation(config: &Config) -> Result<Duration, Located> {
    let Some(rotation) = config
        .cluster
        .as_ref()
        .and_then(|c| c.get_ref().ticket_rotation.as_ref())
    else {
        return Ok(scb_tls::tickets::DEFAULT_PERIOD);
    };
    if rotation.get_ref().0 < Duration::from_secs(60) {
        return Err(Located::at(
            rotation,
            "cluster.ticket_rotation",
            "must be at least 1m: each rotation ends the tickets of two periods before",
        ));
    }
    Ok(rotation.get_ref().0)
}

mod listen;
mod print;
mod route;
mod site;
#[cfg(test)]
mod tests;
mod tracing;

pub(crate) use listen::{HttpsPlan, MetricsPlan, listen_text};
use listen::{listen_addrs, listeners, metrics};
pub(crate) use route::RoutePlan;
pub(crate) use site::SitePlan;
use site::sites;
pub(crate) use tracing::TracingPlan;
