//! A checked config, ready to run: scb-core builders and per-route handlers.
//!
//! Building a [`Plan`] is the whole of validation: `scb check` builds one and discards it,
//! `scb run` builds one and runs it, so whatever `check` accepts, `run` starts with, and
//! the server never starts half-configured.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use http::StatusCode;
use scb_core::access_log::AccessLogFormat;
use scb_core::basic_auth::{BasicAuthLayer, Users};
use scb_core::client_ip::{Networks, TrustedProxies};
use scb_core::error_pages::ErrorPagesLayer;
use scb_core::header_rules::{HeaderRules, HeaderRulesLayer};
use scb_core::health::{HealthCheck, Readiness};
use scb_core::ip_filter::IpFilterLayer;
use scb_core::max_concurrent::MaxConcurrentLayer;
use scb_core::rate_limit::{Rate, RateKey, RateLimitLayer};
use scb_core::redirect::Redirect;
use scb_core::respond::Respond;
use scb_core::rewrite::RewriteLayer;
use scb_core::router::PathMatch;
use scb_core::server::{Limits, ListenOptions, ProxyProtocol, Server};
use scb_core::virtual_hosts::VirtualHosts;
use scb_static::compress::CompressLayer;
use toml::Spanned;

use crate::config::ListenAddr;
use crate::config::{
    BasicAuthConfig, Config, ConfigError, CorsConfig, HeaderRulesConfig, HeadersConfig, Located,
    ProbesConfig, ProxyConfig, RateLimitConfig, RedirectConfig, RewriteConfig, RouteConfig,
    SiteConfig,
};
use crate::route::Handler;

/// Everything `scb run` needs, checked.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The main server: workers, grace period, limits, request-id header, listeners.
    pub(crate) server: Server,
    /// The request-id header, for the stacks' `RequestIdLayer`.
    pub(crate) request_id_header: HeaderName,
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
    /// The configured grace period (absent: scb-core's default), for the metrics server,
    /// which shares it with the main server.
    pub(crate) grace_period: Option<Duration>,
    /// The limits, for the metrics server, which shares them with the main server.
    pub(crate) limits: Limits,
    /// Redirects to `https` and `Strict-Transport-Security`, by listener.
    pub(crate) https: HttpsPlan,
    /// `[server] workers` as configured (a reload cannot change it).
    pub(crate) workers: Option<usize>,
    /// `[server] upgrade_socket`: where `scb run --upgrade` takes the listeners over.
    pub(crate) upgrade_socket: Option<std::path::PathBuf>,
    /// Where `scb run` writes its process id.
    pub(crate) pid_file: Option<std::path::PathBuf>,
    /// The process's readiness, drained on SIGTERM: read by `[health]`'s readiness path
    /// and by `health = true` routes.
    pub(crate) readiness: Readiness,
    /// How long readiness says 503 before the listeners close (`[health] drain_delay`).
    pub(crate) drain_delay: Duration,
}

/// Where the access log goes and how it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccessPlan {
    /// The file; `None` is stderr.
    pub(crate) path: Option<std::path::PathBuf>,
    /// `None`: as the process's own log (`--log-format`).
    pub(crate) format: Option<AccessLogFormat>,
}

/// What the plain and TLS listeners add to the stack, by `[[listen]]` index (the order of
/// the bound addresses).
#[derive(Clone, Debug, Default)]
pub(crate) struct HttpsPlan {
    /// Plain listeners whose requests get a 308 to `https`.
    pub(crate) redirect: Vec<usize>,
    /// The listener whose port those redirects name: the first TLS listener (port 443
    /// when there is none).
    pub(crate) https_listener: Option<usize>,
    /// The `Strict-Transport-Security` value, and the TLS listeners that send it.
    pub(crate) hsts: Option<(http::HeaderValue, Vec<usize>)>,
    /// The listeners whose certificates ACME obtains (one acceptor per certificate, shared
    /// by the listeners that serve it): each runs one renewal task, and their HTTP-01
    /// answers are served on every listener.
    pub(crate) acme: Vec<scb_tls::TlsAcceptor>,
}

/// The route label of requests no route matched; no route may take the name.
pub(crate) const UNMATCHED: &str = "unmatched";

/// One site: the hosts it answers for, its routes and its header rules.
#[derive(Clone, Debug)]
pub(crate) struct SitePlan {
    /// Host names and `*.` wildcards; empty for the default site.
    pub(crate) hosts: Vec<String>,
    /// The routes, in config order.
    pub(crate) routes: Arc<[RoutePlan]>,
    /// The site's header rules (`headers`, `security_headers`); empty when none.
    pub(crate) headers: HeaderRulesLayer,
    /// The site's `error_pages`, read at load; empty when none.
    pub(crate) error_pages: ErrorPagesLayer,
}

/// One route: its name, how it matches, and what answers.
#[derive(Clone, Debug)]
pub(crate) struct RoutePlan {
    /// The `route` label of its metrics and the access log; unique across sites.
    pub(crate) name: Arc<str>,
    /// Exact path or prefix; unique per kind within its site.
    pub(crate) matcher: PathMatch,
    /// What answers, turned into a service on each worker.
    pub(crate) handler: Handler,
    /// The route's own header rules; empty when none.
    pub(crate) headers: HeaderRulesLayer,
    /// The route's `allow` and `deny`; letting everyone through when none.
    pub(crate) ip_filter: IpFilterLayer,
    /// The route's `cors`, if any.
    pub(crate) cors: Option<tower_http::cors::CorsLayer>,
    /// The route's `rewrite`, if any.
    pub(crate) rewrite: Option<RewriteLayer>,
    /// The route's `max_concurrent`, if any: one count for every worker.
    pub(crate) max_concurrent: Option<MaxConcurrentLayer>,
    /// The route's `rate_limit`, if any: one table for every worker.
    pub(crate) rate_limit: Option<RateLimitLayer>,
    /// The route's `basic_auth`, if any, its users read at load.
    pub(crate) basic_auth: Option<BasicAuthLayer>,
    /// On-the-fly compression of a handler other than static files (whose compression is
    /// part of [`Handler::Static`]).
    pub(crate) compress: Option<CompressLayer>,
}

/// Where the Prometheus endpoint listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetricsPlan {
    /// The metrics server's own address, clashing with no `[[listen]]` address.
    pub(crate) listen: SocketAddr,
    /// The path of the scrape, absolute.
    pub(crate) path: String,
    /// `[health]`: the liveness and readiness paths, answered beside the scrape.
    pub(crate) probes: Option<(String, String)>,
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
        let limits = Limits::default();
        Ok(Self {
            server: server.limits(limits.clone()),
            request_id_header: HeaderName::from_static("x-request-id"),
            sites: Arc::from([SitePlan {
                hosts: Vec::new(),
                routes: Arc::from([RoutePlan {
                    name: "static".into(),
                    matcher: PathMatch::Prefix("/".to_owned()),
                    handler: Handler::Static {
                        files,
                        compress: compress.then(CompressLayer::new),
                    },
                    headers: HeaderRulesLayer::new(),
                    ip_filter: IpFilterLayer::new(),
                    cors: None,
                    rewrite: None,
                    max_concurrent: None,
                    rate_limit: None,
                    basic_auth: None,
                    compress: None,
                }]),
                headers: HeaderRulesLayer::new(),
                error_pages: ErrorPagesLayer::new(),
            }]),
            metrics: None,
            listeners: vec![(listen.to_string(), "plain")],
            files: Vec::new(),
            access_log: Some(AccessPlan {
                path: None,
                format: None,
            }),
            trusted_proxies: scb_core::client_ip::TrustedProxies::default(),
            grace_period: None,
            limits,
            https: HttpsPlan::default(),
            workers,
            upgrade_socket: None,
            pid_file: None,
            readiness: Readiness::new(),
            drain_delay: Duration::ZERO,
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
            .limits(limits.clone())
            .request_id_header(request_id_header.clone())
            // Its own answers, connections and handshakes: counted when something reads them.
            .metrics(config.metrics.is_some());
        if let Some(workers) = &config.server.workers {
            if *workers.get_ref() == 0 {
                return Err(Located::at(workers, "server.workers", "must be at least 1"));
            }
            server = server.workers(*workers.get_ref());
        }
        let grace_period = config.server.grace_period.map(|g| g.0);
        if let Some(grace_period) = grace_period {
            server = server.grace_period(grace_period);
        }

        let listen = listen_addrs(config)?;
        let (server, https) = listeners(config, server)?;
        let metrics = metrics(config, &listen)?;
        let trusted_proxies = match &config.server.trusted_proxies {
            None => scb_core::client_ip::TrustedProxies::default(),
            Some(entries) => {
                crate::config::convert::trusted_proxies(entries).map_err(|e| e.within("server"))?
            }
        };
        let sites = sites(config, &readiness, &trusted_proxies)?;

        Ok(Self {
            server,
            request_id_header,
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
            access_log: match &config.log.access {
                crate::config::AccessConfig::Off => None,
                crate::config::AccessConfig::On(table) => Some(AccessPlan {
                    path: table.path.clone(),
                    format: table.format.as_ref().map(|f| match f.get_ref() {
                        crate::config::AccessFormat::Combined => AccessLogFormat::Combined,
                        crate::config::AccessFormat::Json => AccessLogFormat::Json,
                    }),
                }),
            },
            trusted_proxies,
            grace_period,
            limits,
            https,
            workers: config.server.workers.as_ref().map(|w| *w.get_ref()),
            upgrade_socket: config.server.upgrade_socket.clone(),
            pid_file: config.server.pid_file.clone(),
            readiness,
            drain_delay: config
                .health
                .as_ref()
                .and_then(|h| h.get_ref().drain_delay)
                .map_or(Duration::ZERO, |d| d.0),
        })
    }
}

/// Adds every `[[listen]]` to `server`: plain, or secured by a TLS acceptor loaded (and
/// so checked: files, key match, validity dates) here.
fn listeners(config: &Config, mut server: Server) -> Result<(Server, HttpsPlan), Located> {
    let mut https = HttpsPlan::default();
    // The index of each TCP listener among the TCP listeners: the order of the bound
    // addresses the stack is built with.
    let mut tcp = 0;
    for (i, listen) in config.listen.iter().enumerate() {
        let addr = match listen.addr.get_ref() {
            ListenAddr::Unix(path) => {
                server = server.listen_unix(unix_listen(listen, path, i)?);
                continue;
            }
            ListenAddr::Tcp(addr) => *addr,
        };
        for (key, value) in [
            ("mode", &listen.mode),
            ("owner", &listen.owner),
            ("group", &listen.group),
        ] {
            if let Some(value) = value {
                return Err(Located::at(
                    value,
                    format!("listen[{i}].{key}"),
                    "is for unix: listeners",
                ));
            }
        }
        let t = tcp;
        tcp += 1;
        let redirect = listen.redirect_https.as_ref();
        let mut options = ListenOptions::new();
        if let Some(proxy) = &listen.proxy_protocol {
            let trusted = &proxy.get_ref().trusted;
            let key = |rest: &str| format!("listen[{i}].proxy_protocol.trusted{rest}");
            if trusted.get_ref().is_empty() {
                return Err(Located::at(
                    trusted,
                    key(""),
                    "name the balancers whose headers are believed",
                ));
            }
            let networks = Networks::new(trusted.get_ref().iter().map(|t| t.get_ref().as_str()))
                .map_err(|bad| {
                    Located::at(
                        &trusted.get_ref()[bad.index],
                        key(&format!("[{}]", bad.index)),
                        bad,
                    )
                })?;
            options = options.proxy_protocol(ProxyProtocol::new(networks));
        }
        match &listen.tls {
            None => {
                server = server.listen_with(addr, options);
                if redirect.is_some_and(|r| *r.get_ref()) {
                    https.redirect.push(t);
                }
            }
            Some(config_tls) => {
                if let Some(redirect) = redirect.filter(|r| *r.get_ref()) {
                    return Err(Located::at(
                        redirect,
                        format!("listen[{i}].redirect_https"),
                        "is for plain listeners; this one has `tls`",
                    ));
                }
                let mut acceptor =
                    tls_acceptor(config_tls).map_err(|e| e.within(&format!("listen[{i}]")))?;
                if acceptor.settings().acme_settings().is_some() {
                    // Two listeners of one certificate (IPv4 and IPv6, say) share its
                    // acceptor: one renewal task, one set of files.
                    // Same files: the same state directory and first name.
                    let files = |a: &scb_tls::TlsAcceptor| {
                        a.settings()
                            .acme_settings()
                            .map(|s| (s.state_dir().to_owned(), s.domains().first().cloned()))
                    };
                    match https.acme.iter().find(|a| files(a) == files(&acceptor)) {
                        Some(same) if same.settings() == acceptor.settings() => {
                            acceptor = same.clone();
                        }
                        Some(_) => {
                            return Err(Located::at(
                                config_tls,
                                format!("listen[{i}].tls"),
                                "an earlier listener keeps its acme certificate in the same files \
                                 (state_dir and first domain) with other settings; give both \
                                 the same, or another state_dir",
                            ));
                        }
                        None => https.acme.push(acceptor.clone()),
                    }
                }
                server = server.listen_with(addr, options.secure(Arc::new(acceptor)));
                https.https_listener.get_or_insert(t);
                if let Some(hsts) = &config_tls.get_ref().hsts {
                    let value = http::HeaderValue::from_str(hsts.get_ref()).map_err(|_| {
                        Located::at(
                            hsts,
                            format!("listen[{i}].tls.hsts"),
                            "invalid header value",
                        )
                    })?;
                    match &mut https.hsts {
                        None => https.hsts = Some((value, vec![t])),
                        Some((first, listeners)) if *first == value => listeners.push(t),
                        Some(_) => {
                            return Err(Located::at(
                                hsts,
                                format!("listen[{i}].tls.hsts"),
                                "differs from an earlier listener's: HSTS is a property of \
                                 the site, give every TLS listener the same value",
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok((server, https))
}

/// A `unix:` listener: plain HTTP only, its file's mode and owner checked.
fn unix_listen(
    listen: &crate::config::ListenConfig,
    path: &std::path::Path,
    i: usize,
) -> Result<scb_core::server::UnixListen, Located> {
    let refuse = |span: std::ops::Range<usize>, key: &str| Located {
        span: Some(span),
        key: format!("listen[{i}].{key}"),
        message: "is not for unix: listeners (plain HTTP only; TLS and PROXY headers are \
                  for TCP)"
            .to_owned(),
    };
    if let Some(tls) = &listen.tls {
        return Err(refuse(tls.span(), "tls"));
    }
    if let Some(redirect) = &listen.redirect_https {
        return Err(refuse(redirect.span(), "redirect_https"));
    }
    if let Some(proxy) = &listen.proxy_protocol {
        return Err(refuse(proxy.span(), "proxy_protocol"));
    }
    let mut unix = scb_core::server::UnixListen::new(path);
    if let Some(mode) = &listen.mode {
        let bits = u32::from_str_radix(mode.get_ref().trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| {
                Located::at(
                    mode,
                    format!("listen[{i}].mode"),
                    "expected octal permission bits, such as \"0660\"",
                )
            })?;
        unix = unix.mode(bits);
    }
    if let Some(owner) = &listen.owner {
        let uid = crate::users::uid(owner.get_ref())
            .map_err(|e| Located::at(owner, format!("listen[{i}].owner"), e))?;
        unix = unix.owner(uid);
    }
    if let Some(group) = &listen.group {
        let gid = crate::users::gid(group.get_ref())
            .map_err(|e| Located::at(group, format!("listen[{i}].group"), e))?;
        unix = unix.group(gid);
    }
    Ok(unix)
}

/// Loads a listener's certificates.
fn tls_acceptor(
    config: &Spanned<crate::config::TlsConfig>,
) -> Result<scb_tls::TlsAcceptor, Located> {
    let tls = config.get_ref();
    let mut files = Vec::new();
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => files.push(scb_tls::CertFiles::new(
            cert.get_ref().clone(),
            key.get_ref().clone(),
        )),
        (None, None) => {}
        (Some(cert), None) => {
            return Err(Located::at(cert, "tls.key", "`cert` needs its `key`"));
        }
        (None, Some(key)) => {
            return Err(Located::at(key, "tls.cert", "`key` needs its `cert`"));
        }
    }
    for cert in &tls.certs {
        let c = cert.get_ref();
        files.push(scb_tls::CertFiles::new(c.cert.clone(), c.key.clone()));
    }
    let mut settings = match &tls.acme {
        Some(acme) if !files.is_empty() => {
            return Err(Located::at(
                acme,
                "tls.acme",
                "certificates come from files or from ACME, not both",
            ));
        }
        Some(acme) => scb_tls::TlsSettings::acme(acme_settings(acme)?),
        None => scb_tls::TlsSettings::new(files),
    };
    if settings.certs().is_empty() && settings.acme_settings().is_none() {
        return Err(Located::at(
            config,
            "tls",
            "needs `cert` and `key`, `certs = [{ cert, key }, ...]`, or `acme = { domains, state_dir }`",
        ));
    }
    match (&tls.client_ca, &tls.client_auth) {
        (None, None) => {}
        (None, Some(auth)) => {
            return Err(Located::at(auth, "tls.client_auth", "needs `client_ca`"));
        }
        (Some(ca), auth) => {
            let required = match auth {
                None => true,
                Some(a) if a.get_ref() == "required" => true,
                Some(a) if a.get_ref() == "optional" => false,
                Some(a) => {
                    return Err(Located::at(
                        a,
                        "tls.client_auth",
                        "expected \"required\" or \"optional\"",
                    ));
                }
            };
            let ca = ca.get_ref().clone();
            settings = settings.client_auth(if required {
                scb_tls::ClientAuth::required(ca)
            } else {
                scb_tls::ClientAuth::optional(ca)
            });
        }
    }
    scb_tls::TlsAcceptor::new(settings).map_err(|e| Located::at(config, "tls", e))
}

/// A listener's `acme` table, checked: names a CA can validate, an `https` directory.
fn acme_settings(
    config: &Spanned<crate::config::AcmeConfig>,
) -> Result<scb_tls::AcmeSettings, Located> {
    let acme = config.get_ref();
    let domains = acme.domains.get_ref();
    if domains.is_empty() {
        return Err(Located::at(
            &acme.domains,
            "tls.acme.domains",
            "name at least one domain",
        ));
    }
    for (i, domain) in domains.iter().enumerate() {
        let name = domain.get_ref();
        let ip = name.parse::<std::net::IpAddr>().is_ok();
        let dns = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !ip && !dns {
            return Err(Located::at(
                domain,
                format!("tls.acme.domains[{i}]"),
                "is not a DNS name or an IP address (wildcards need the DNS-01 challenge, \
                 which scb does not answer)",
            ));
        }
    }
    let mut settings = scb_tls::AcmeSettings::new(
        domains.iter().map(|d| d.get_ref().clone()),
        acme.state_dir.get_ref().clone(),
    );
    if let Some(email) = &acme.email {
        if !email.get_ref().contains('@') {
            return Err(Located::at(
                email,
                "tls.acme.email",
                "is not an email address",
            ));
        }
        settings = settings.email(email.get_ref().clone());
    }
    if let Some(directory) = &acme.directory {
        let url = directory.get_ref();
        if url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.scheme_str().map(str::to_owned))
            != Some("https".to_owned())
        {
            return Err(Located::at(
                directory,
                "tls.acme.directory",
                "is not an https:// URL",
            ));
        }
        settings = settings.directory(url.clone());
    }
    if let Some(root) = &acme.ca_root {
        settings = settings.ca_root(root.get_ref().clone());
    }
    if let Some(challenge) = &acme.challenge {
        settings = settings.challenge(match challenge.get_ref().as_str() {
            "tls-alpn-01" => scb_tls::AcmeChallenge::TlsAlpn01,
            "http-01" => scb_tls::AcmeChallenge::Http01,
            _ => {
                return Err(Located::at(
                    challenge,
                    "tls.acme.challenge",
                    "expected \"tls-alpn-01\" or \"http-01\"",
                ));
            }
        });
    }
    if let Some(retry) = &acme.retry {
        settings = settings.retry(retry.get_ref().0);
    }
    if let Some(timeout) = &acme.timeout {
        settings = settings.timeout(timeout.get_ref().0);
    }
    Ok(settings)
}

/// Whether two listen addresses would share connections. With `SO_REUSEPORT` on every
/// listener, binding the same address twice does not fail: the kernel would silently
/// spread connections across both, so the clash must be caught here. A wildcard address
/// clashes with any address of its family on the same port; port 0 never clashes.
fn clash(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The TCP listen addresses, checked for clashes (and the Unix paths for repeats).
fn listen_addrs(config: &Config) -> Result<Vec<Spanned<SocketAddr>>, Located> {
    if config.listen.is_empty() {
        return Err(Located::nowhere(
            "listen",
            "at least one [[listen]] with an `addr` is required",
        ));
    }
    let all: Vec<_> = config.listen.iter().map(|l| &l.addr).collect();
    for (i, addr) in all.iter().enumerate() {
        let earlier = &all[..i];
        let other = match addr.get_ref() {
            ListenAddr::Tcp(a) => earlier.iter().find_map(|e| match e.get_ref() {
                ListenAddr::Tcp(b) if clash(*a, *b) => Some(b.to_string()),
                _ => None,
            }),
            ListenAddr::Unix(p) => earlier.iter().find_map(|e| match e.get_ref() {
                ListenAddr::Unix(q) if p == q => Some(format!("unix:{}", q.display())),
                _ => None,
            }),
        };
        if let Some(other) = other {
            return Err(Located::at(
                addr,
                format!("listen[{i}].addr"),
                format_args!("{} clashes with {other}", listen_text(addr.get_ref())),
            ));
        }
    }
    Ok(all
        .into_iter()
        .filter_map(|a| match a.get_ref() {
            ListenAddr::Tcp(addr) => Some(Spanned::new(a.span(), *addr)),
            ListenAddr::Unix(_) => None,
        })
        .collect())
}

/// A listen address as the log and `check --print` show it.
pub(crate) fn listen_text(addr: &ListenAddr) -> String {
    match addr {
        ListenAddr::Tcp(addr) => addr.to_string(),
        ListenAddr::Unix(path) => format!("unix:{}", path.display()),
    }
}

fn metrics(
    config: &Config,
    listen: &[Spanned<SocketAddr>],
) -> Result<Option<MetricsPlan>, Located> {
    let Some(metrics) = &config.metrics else {
        if let Some(health) = &config.health {
            return Err(Located::at(
                health,
                "health",
                "the probes are served on the [metrics] listener: add a [metrics] table",
            ));
        }
        return Ok(None);
    };
    let addr = *metrics.listen.get_ref();
    if let Some(other) = listen.iter().find(|l| clash(*l.get_ref(), addr)) {
        return Err(Located::at(
            &metrics.listen,
            "metrics.listen",
            format_args!(
                "{addr} clashes with the [[listen]] address {}: the metrics endpoint needs \
                 its own address",
                other.get_ref()
            ),
        ));
    }
    let path = match &metrics.path {
        None => "/metrics".to_owned(),
        Some(path) => {
            check_path(path, "metrics.path")?;
            path.get_ref().clone()
        }
    };
    let probes = match &config.health {
        None => None,
        Some(health) => {
            let (live, ready) = probes(health)?;
            if path == live || path == ready {
                return Err(Located::at(
                    health,
                    "health",
                    "the probe paths and the metrics path must differ",
                ));
            }
            Some((live, ready))
        }
    };
    Ok(Some(MetricsPlan {
        listen: addr,
        path,
        probes,
    }))
}

/// `[health]`'s two paths, checked and distinct.
fn probes(health: &Spanned<ProbesConfig>) -> Result<(String, String), Located> {
    let config = health.get_ref();
    let path = |value: &Option<Spanned<String>>, key: &str, default: &str| match value {
        None => Ok(default.to_owned()),
        Some(p) => check_path(p, key).map(|()| p.get_ref().clone()),
    };
    let live = path(&config.liveness, "health.liveness", "/healthz")?;
    let ready = path(&config.readiness, "health.readiness", "/readyz")?;
    if live == ready {
        return Err(Located::at(
            health,
            "health",
            "liveness and readiness need paths of their own",
        ));
    }
    Ok((live, ready))
}

/// A route path: absolute, and a valid URI path (no query, no fragment), so that some
/// request can match it.
fn check_path(path: &Spanned<String>, key: &str) -> Result<(), Located> {
    let p = path.get_ref();
    if !p.starts_with('/') {
        return Err(Located::at(path, key, "must start with '/'"));
    }
    let valid = !p.contains(['?', '#']) && p.parse::<http::uri::PathAndQuery>().is_ok();
    if !valid {
        return Err(Located::at(
            path,
            key,
            "must be a URI path (no spaces, query or fragment)",
        ));
    }
    Ok(())
}

/// The route name for a path when none is given: its segments joined with `-`, `root`
/// for `/`. `/respond` gives `respond`, `/api/v1/` gives `api-v1`.
fn derive_name(path: &str) -> String {
    let name = path
        .split('/')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    if name.is_empty() {
        "root".to_owned()
    } else {
        name
    }
}

/// The sites: `[[site]]`s with `hosts` in order, then the default site, which is the
/// top-level `[[route]]`s or a `[[site]]` without `hosts` (not both).
fn sites(
    config: &Config,
    readiness: &Readiness,
    trusted: &TrustedProxies,
) -> Result<Vec<SitePlan>, Located> {
    let mut named = Vec::new();
    let mut default: Option<SitePlan> = None;
    // Host names are checked here, with their place in the file, as VirtualHosts will.
    let mut hosts_seen = VirtualHosts::<()>::new();
    // Route names are metric labels: unique across sites. Name -> where.
    let mut names: HashMap<Arc<str>, String> = HashMap::new();
    for (i, site) in config.site.iter().enumerate() {
        let key = format!("site[{i}]");
        let plan = site_plan(site.get_ref(), readiness, trusted).map_err(|e| e.within(&key))?;
        if let Some(hosts) = &site.get_ref().hosts {
            if hosts.get_ref().is_empty() {
                return Err(Located::at(
                    hosts,
                    format!("{key}.hosts"),
                    "names no host: leave `hosts` out for the default site",
                ));
            }
            for (j, host) in hosts.get_ref().iter().enumerate() {
                hosts_seen = hosts_seen
                    .site([host.get_ref().as_str()], ())
                    .map_err(|e| Located::at(host, format!("{key}.hosts[{j}]"), e))?;
            }
            unique_names(&plan, &key, site.get_ref(), &mut names)?;
            named.push(plan);
        } else {
            if !config.route.is_empty() {
                return Err(Located::at(
                    site,
                    key,
                    "a [[site]] without `hosts` is the default site, and the top-level \
                     [[route]]s are too: move them into it",
                ));
            }
            if default.is_some() {
                return Err(Located::at(site, key, "a second [[site]] without `hosts`"));
            }
            unique_names(&plan, &key, site.get_ref(), &mut names)?;
            default = Some(plan);
        }
    }
    if config.site.iter().all(|s| s.get_ref().hosts.is_some()) {
        // The top-level routes, unless every site is named and there are none.
        if !config.route.is_empty() || config.site.is_empty() {
            let routes = routes(&config.route, readiness, trusted, None)?;
            let plan = SitePlan {
                hosts: Vec::new(),
                routes: routes.into(),
                headers: HeaderRulesLayer::new(),
                error_pages: ErrorPagesLayer::new(),
            };
            for (j, route) in plan.routes.iter().enumerate() {
                if let Some(other) = names.get(&route.name) {
                    return Err(Located::at(
                        &config.route[j],
                        format!("route[{j}].name"),
                        format_args!("{:?} is already the name of {other}", &*route.name),
                    ));
                }
            }
            default = Some(plan);
        }
    }
    named.extend(default);
    Ok(named)
}

/// Fails when a route of `plan` (site `key`) has a name another site's route has.
fn unique_names(
    plan: &SitePlan,
    key: &str,
    config: &SiteConfig,
    names: &mut HashMap<Arc<str>, String>,
) -> Result<(), Located> {
    for (j, route) in plan.routes.iter().enumerate() {
        let here = format!("{key}.route[{j}]");
        if let Some(other) = names.get(&route.name) {
            return Err(Located::at(
                &config.route[j],
                format!("{here}.name"),
                format_args!(
                    "{:?} is already the name of {other}: route names are metric labels, \
                     unique across sites",
                    &*route.name
                ),
            ));
        }
        names.insert(Arc::clone(&route.name), here);
    }
    Ok(())
}

/// One `[[site]]`'s plan (keys relative to the site).
fn site_plan(
    site: &SiteConfig,
    readiness: &Readiness,
    trusted: &TrustedProxies,
) -> Result<SitePlan, Located> {
    let hosts: Vec<String> = site
        .hosts
        .as_ref()
        .map(|h| h.get_ref().iter().map(|h| h.get_ref().clone()).collect())
        .unwrap_or_default();
    // Derived route names of a named site start with its first host, so that two sites'
    // `/` routes are not both `root`.
    let routes = routes(
        &site.route,
        readiness,
        trusted,
        hosts.first().map(String::as_str),
    )?;
    let mut layer = HeaderRulesLayer::new().trusted_proxies(trusted.clone());
    let (mut request, mut response) = match &site.headers {
        Some(headers) => header_rules(headers.get_ref()).map_err(|e| e.within("headers"))?,
        None => (HeaderRules::new(), HeaderRules::new()),
    };
    if site.security_headers {
        response = response.and(&HeaderRules::security());
    }
    if !request.is_empty() {
        layer = layer.request(std::mem::take(&mut request));
    }
    if !response.is_empty() {
        layer = layer.response(response);
    }
    let mut error_pages = ErrorPagesLayer::new();
    for (status, file) in site.error_pages.iter().flatten() {
        let key = format!("error_pages.{status}");
        let code = status
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
            .filter(|c| c.is_client_error() || c.is_server_error())
            .ok_or_else(|| Located::at(file, key.clone(), "the key is not a 4xx or 5xx status"))?;
        let page = std::fs::read(file.get_ref()).map_err(|e| {
            Located::at(
                file,
                key.clone(),
                format_args!("cannot read {}: {e}", file.get_ref().display()),
            )
        })?;
        error_pages = error_pages.page(code, page.into());
    }
    Ok(SitePlan {
        hosts,
        routes: routes.into(),
        headers: layer,
        error_pages,
    })
}

/// `headers = { request, response }` as two rule sets.
fn header_rules(config: &HeadersConfig) -> Result<(HeaderRules, HeaderRules), Located> {
    let one = |rules: &HeaderRulesConfig, key: &str| -> Result<HeaderRules, Located> {
        let mut out = HeaderRules::new();
        for name in &rules.remove {
            out = out
                .remove(name.get_ref())
                .map_err(|e| Located::at(name, format!("{key}.remove"), e))?;
        }
        for (name, value) in &rules.set {
            out = out
                .set(name, value.get_ref())
                .map_err(|e| Located::at(value, format!("{key}.set.{name}"), e))?;
        }
        for (name, value) in &rules.add {
            out = out
                .add(name, value.get_ref())
                .map_err(|e| Located::at(value, format!("{key}.add.{name}"), e))?;
        }
        Ok(out)
    };
    Ok((
        one(&config.request, "request")?,
        one(&config.response, "response")?,
    ))
}

fn routes(
    configs: &[Spanned<RouteConfig>],
    readiness: &Readiness,
    trusted: &TrustedProxies,
    site: Option<&str>,
) -> Result<Vec<RoutePlan>, Located> {
    let mut plans = Vec::with_capacity(configs.len());
    // Name -> index of the route that has it; path -> index, per match kind.
    let mut names: HashMap<Arc<str>, usize> = HashMap::new();
    let mut paths: HashMap<PathMatch, usize> = HashMap::new();
    for (i, config) in configs.iter().enumerate() {
        let key = format!("route[{i}]");
        let (plan, field, path) =
            route(config, readiness, trusted, site).map_err(|e| e.within(&key))?;
        if let Some(&first) = paths.get(&plan.matcher) {
            return Err(Located::at(
                path,
                format!("{key}.{field}"),
                format_args!(
                    "{field} {:?} is already routed by route[{first}]",
                    path.get_ref()
                ),
            ));
        }
        if let Some(&first) = names.get(&plan.name) {
            return Err(match &config.get_ref().name {
                Some(name) => Located::at(
                    name,
                    format!("{key}.name"),
                    format_args!("{:?} is already the name of route[{first}]", name.get_ref()),
                ),
                None => Located::at(
                    config,
                    format!("{key}.name"),
                    format_args!(
                        "the name {:?} derived from the {field} is already the name of \
                         route[{first}]; give this route a `name`",
                        &*plan.name
                    ),
                ),
            });
        }
        names.insert(Arc::clone(&plan.name), i);
        paths.insert(plan.matcher.clone(), i);
        plans.push(plan);
    }
    Ok(plans)
}

/// One route, checked on its own (keys relative to the route), with the key and value of
/// its path or prefix for errors about it.
fn route<'a>(
    config: &'a Spanned<RouteConfig>,
    readiness: &Readiness,
    trusted: &TrustedProxies,
    site: Option<&str>,
) -> Result<(RoutePlan, &'static str, &'a Spanned<String>), Located> {
    let route = config.get_ref();
    let (matcher, field, path) = match (&route.path, &route.prefix) {
        (Some(path), None) => {
            check_path(path, "path")?;
            (PathMatch::Exact(path.get_ref().clone()), "path", path)
        }
        (None, Some(prefix)) => {
            check_path(prefix, "prefix")?;
            (
                PathMatch::Prefix(prefix.get_ref().clone()),
                "prefix",
                prefix,
            )
        }
        (Some(_), Some(prefix)) => {
            return Err(Located::at(
                prefix,
                "prefix",
                "a route has either `path` (exact) or `prefix`, not both",
            ));
        }
        (None, None) => {
            return Err(Located::at(
                config,
                "",
                "a route needs `path` (exact match) or `prefix`",
            ));
        }
    };
    let name: Arc<str> = match &route.name {
        Some(name) => {
            let n = name.get_ref();
            if n.is_empty() || n.chars().any(char::is_control) {
                return Err(Located::at(
                    name,
                    "name",
                    "must be non-empty, without control characters",
                ));
            }
            n.as_str().into()
        }
        None => {
            let (PathMatch::Exact(p) | PathMatch::Prefix(p)) = &matcher;
            match site {
                Some(host) => format!("{host}{}", p.trim_end_matches('/')).into(),
                None => derive_name(p).into(),
            }
        }
    };
    // Their metrics would add up with those of answers no route gave.
    let reserved = [
        (UNMATCHED, "requests no route matches"),
        (
            scb_core::server::metrics::SERVER_ROUTE,
            "the server's own answers",
        ),
        (
            crate::stack::HTTPS_REDIRECT_ROUTE,
            "redirect_https's answers",
        ),
        (crate::stack::ACME_ROUTE, "ACME validations"),
    ];
    if let Some((_, what)) = reserved.iter().find(|(reserved, _)| **reserved == *name) {
        let at = route.name.as_ref().map_or(path, |name| name);
        return Err(Located::at(
            at,
            "name",
            format_args!("{:?} is the name of {what}", &*name),
        ));
    }
    let mut handler = handler(config, &matcher, readiness, trusted, site.is_some())?;
    // `compress` on the route, or in its handler's table (not both); a static route's
    // compression stays in its handler, where it needs no allocation.
    let compress = route_compression(route)?;
    let compress = match &mut handler {
        Handler::Static {
            compress: inner, ..
        } => {
            if compress.is_some() {
                *inner = compress;
            }
            None
        }
        _ => compress,
    };
    let mut headers = HeaderRulesLayer::new().trusted_proxies(trusted.clone());
    if let Some(rules) = &route.headers {
        let (request, response) = header_rules(rules.get_ref()).map_err(|e| e.within("headers"))?;
        if !request.is_empty() {
            headers = headers.request(request);
        }
        if !response.is_empty() {
            headers = headers.response(response);
        }
    }
    let networks = |list: &Option<Vec<Spanned<String>>>, key: &str| {
        list.as_ref()
            .map(|entries| {
                Networks::new(entries.iter().map(|e| e.get_ref().as_str())).map_err(|bad| {
                    Located::at(&entries[bad.index], format!("{key}[{}]", bad.index), bad)
                })
            })
            .transpose()
    };
    let mut ip_filter = IpFilterLayer::new().trusted_proxies(trusted.clone());
    if let Some(allow) = networks(&route.allow, "allow")? {
        ip_filter = ip_filter.allow(allow);
    }
    if let Some(deny) = networks(&route.deny, "deny")? {
        ip_filter = ip_filter.deny(deny);
    }
    let cors = route
        .cors
        .as_ref()
        .map(|c| cors(c.get_ref()).map_err(|e| e.within("cors")))
        .transpose()?;
    let rewrite = route
        .rewrite
        .as_ref()
        .map(|r| rewrite(r).map_err(|e| e.within("rewrite")))
        .transpose()?;
    let max_concurrent = match &route.max_concurrent {
        Some(max) if *max.get_ref() == 0 => {
            return Err(Located::at(max, "max_concurrent", "must be at least 1"));
        }
        Some(max) => Some(MaxConcurrentLayer::new(*max.get_ref())),
        None => None,
    };
    let rate_limit = route
        .rate_limit
        .as_ref()
        .map(|r| rate_limit(r.get_ref(), trusted).map_err(|e| e.within("rate_limit")))
        .transpose()?;
    let basic_auth = route
        .basic_auth
        .as_ref()
        .map(|a| basic_auth(a.get_ref()).map_err(|e| e.within("basic_auth")))
        .transpose()?;
    let plan = RoutePlan {
        name,
        matcher,
        handler,
        headers,
        ip_filter,
        cors,
        rewrite,
        max_concurrent,
        rate_limit,
        basic_auth,
        compress,
    };
    Ok((plan, field, path))
}

/// `rate_limit = { key, rate, burst }`.
fn rate_limit(
    config: &RateLimitConfig,
    trusted: &TrustedProxies,
) -> Result<RateLimitLayer, Located> {
    let rate: Rate = config
        .rate
        .get_ref()
        .parse()
        .map_err(|e| Located::at(&config.rate, "rate", e))?;
    let mut layer = RateLimitLayer::new(rate).trusted_proxies(trusted.clone());
    if let Some(key) = &config.key {
        let text = key.get_ref();
        layer = layer.key(if text == "client_ip" {
            RateKey::ClientIp
        } else if let Some(name) = text.strip_prefix("header:") {
            RateKey::Header(HeaderName::try_from(name).map_err(|_| {
                Located::at(key, "key", format_args!("`{name}` is not a header name"))
            })?)
        } else {
            return Err(Located::at(
                key,
                "key",
                "expected `client_ip` or `header:NAME`",
            ));
        });
    }
    if let Some(burst) = &config.burst {
        if *burst.get_ref() == 0 {
            return Err(Located::at(burst, "burst", "must be at least 1"));
        }
        layer = layer.burst(*burst.get_ref());
    }
    if let Some(max) = &config.max_keys {
        if *max.get_ref() == 0 {
            return Err(Located::at(max, "max_keys", "must be at least 1"));
        }
        layer = layer.max_keys(*max.get_ref());
    }
    Ok(layer)
}

/// `basic_auth = { users, realm }`: the htpasswd file read now, so that a bad line fails
/// the load (or the reload) rather than a request.
fn basic_auth(config: &BasicAuthConfig) -> Result<BasicAuthLayer, Located> {
    let path = config.users.get_ref();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Located::at(
            &config.users,
            "users",
            format_args!("cannot read {}: {e}", path.display()),
        )
    })?;
    let users = Users::from_htpasswd(&text).map_err(|e| {
        Located::at(
            &config.users,
            "users",
            format_args!("{}: {e}", path.display()),
        )
    })?;
    let realm = config
        .realm
        .as_ref()
        .map_or("restricted", |r| r.get_ref().as_str());
    BasicAuthLayer::new(users, realm).map_err(|e| match &config.realm {
        Some(r) => Located::at(r, "realm", e),
        None => Located::at(&config.users, "realm", e),
    })
}

/// The route's `compress`, or its handler's (`static`, `proxy` or `respond` table): at most
/// one of them may say it, so that no setting silently loses to another.
fn route_compression(route: &RouteConfig) -> Result<Option<CompressLayer>, Located> {
    let given = [
        ("compress", route.compress.as_ref()),
        (
            "static.compress",
            route
                .static_files
                .as_ref()
                .and_then(|s| s.get_ref().compress.as_ref()),
        ),
        (
            "proxy.compress",
            route
                .proxy
                .as_ref()
                .and_then(|p| p.get_ref().compress.as_ref()),
        ),
        (
            "respond.compress",
            route
                .respond
                .as_ref()
                .and_then(|r| r.get_ref().compress.as_ref()),
        ),
    ];
    let mut set = given
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)));
    let Some((key, value)) = set.next() else {
        return Ok(None);
    };
    if let Some((second, again)) = set.next() {
        return Err(Located::at(
            again,
            second,
            format_args!("compression is already set by `{key}`: set it in one place"),
        ));
    }
    crate::config::convert::compress_layer(value.get_ref()).map_err(|e| e.within(key))
}

/// The route's one handler.
fn handler(
    config: &Spanned<RouteConfig>,
    matcher: &PathMatch,
    readiness: &Readiness,
    trusted: &TrustedProxies,
    named_site: bool,
) -> Result<Handler, Located> {
    let route = config.get_ref();
    // `health = false` is as good as absent.
    let health = route.health.as_ref().filter(|h| *h.get_ref());
    let given: Vec<(&str, Range<usize>)> = [
        ("respond", route.respond.as_ref().map(Spanned::span)),
        ("health", health.map(Spanned::span)),
        ("static", route.static_files.as_ref().map(Spanned::span)),
        ("proxy", route.proxy.as_ref().map(Spanned::span)),
        ("redirect", route.redirect.as_ref().map(Spanned::span)),
    ]
    .into_iter()
    .filter_map(|(key, span)| Some((key, span?)))
    .collect();
    if let [(first, _), (second, span), ..] = given.as_slice() {
        return Err(Located {
            span: Some(span.clone()),
            key: (*second).to_owned(),
            message: format!("a route has exactly one handler: `{first}` or `{second}`, not both"),
        });
    }
    if let Some(respond) = &route.respond {
        return Ok(Handler::Respond(
            Respond::try_from(respond.get_ref()).map_err(|e| e.within("respond"))?,
        ));
    }
    if health.is_some() {
        return Ok(Handler::Health(HealthCheck::readiness(readiness.clone())));
    }
    if let Some(files) = &route.static_files {
        return Ok(Handler::Static {
            files: scb_static::ServeStatic::try_from(files.get_ref())
                .map_err(|e| e.within("static"))?,
            // Set from the table by `route_compression`, with the route's own key.
            compress: None,
        });
    }
    if let Some(proxy) = &route.proxy {
        return proxy_handler(proxy.get_ref(), matcher, trusted).map_err(|e| e.within("proxy"));
    }
    if let Some(redirect) = &route.redirect {
        return redirect_handler(redirect.get_ref(), matcher, named_site)
            .map_err(|e| e.within("redirect"));
    }
    Err(Located::at(
        config,
        "",
        "a route needs a handler: `respond = { ... }`, `static = { ... }`, `proxy = { ... }`, \
         `redirect = { ... }` or `health = true`",
    ))
}

/// `cors = { ... }` as tower-http's layer, checked here: tower-http asserts at the first
/// request that credentials go with no wildcard, and a worker must not panic on that.
fn cors(config: &CorsConfig) -> Result<tower_http::cors::CorsLayer, Located> {
    use tower_http::cors::{
        AllowHeaders, AllowMethods, AllowOrigin, Any, CorsLayer, ExposeHeaders,
    };
    let wildcard = |list: &[Spanned<String>]| list.len() == 1 && list[0].get_ref() == "*";
    let origins = config.origins.get_ref();
    if origins.is_empty() {
        return Err(Located::at(&config.origins, "origins", "names no origin"));
    }
    let mut layer = CorsLayer::new();
    let mut any = false;
    layer = if wildcard(origins) {
        any = true;
        layer.allow_origin(AllowOrigin::from(Any))
    } else {
        let mut values = Vec::with_capacity(origins.len());
        for (i, origin) in origins.iter().enumerate() {
            let text = origin.get_ref();
            // An origin is scheme://host[:port]: no path, not even `/`.
            let valid = text.split_once("://").is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
            });
            let value = http::HeaderValue::from_str(text).ok().filter(|_| valid);
            values.push(value.ok_or_else(|| {
                Located::at(
                    origin,
                    format!("origins[{i}]"),
                    "is not an origin (https://host[:port], no path) or \"*\" alone",
                )
            })?);
        }
        layer.allow_origin(AllowOrigin::list(values))
    };
    layer = match &config.methods {
        None => layer.allow_methods([http::Method::GET, http::Method::HEAD, http::Method::POST]),
        Some(list) if wildcard(list) => {
            any = true;
            layer.allow_methods(AllowMethods::from(Any))
        }
        Some(list) => {
            let mut methods = Vec::with_capacity(list.len());
            for (i, m) in list.iter().enumerate() {
                methods.push(
                    http::Method::from_bytes(m.get_ref().as_bytes())
                        .map_err(|_| Located::at(m, format!("methods[{i}]"), "is not a method"))?,
                );
            }
            layer.allow_methods(methods)
        }
    };
    let names = |list: &[Spanned<String>], key: &str| -> Result<Vec<HeaderName>, Located> {
        list.iter()
            .enumerate()
            .map(|(i, n)| {
                HeaderName::try_from(n.get_ref().as_str()).map_err(|_| {
                    Located::at(n, format!("{key}[{i}]"), "is not a header field name")
                })
            })
            .collect()
    };
    if wildcard(&config.headers) {
        any = true;
        layer = layer.allow_headers(AllowHeaders::from(Any));
    } else if !config.headers.is_empty() {
        layer = layer.allow_headers(names(&config.headers, "headers")?);
    }
    if wildcard(&config.expose) {
        any = true;
        layer = layer.expose_headers(ExposeHeaders::from(Any));
    } else if !config.expose.is_empty() {
        layer = layer.expose_headers(names(&config.expose, "expose")?);
    }
    if let Some(credentials) = config.credentials.as_ref().filter(|c| *c.get_ref()) {
        if any {
            return Err(Located::at(
                credentials,
                "credentials",
                "cannot go with \"*\" in origins, methods, headers or expose (the Fetch \
                 standard forbids it): name them",
            ));
        }
        layer = layer.allow_credentials(true);
    }
    if let Some(max_age) = &config.max_age {
        layer = layer.max_age(max_age.0);
    }
    Ok(layer)
}

/// `rewrite = { prefix | regex, to }`.
fn rewrite(config: &Spanned<RewriteConfig>) -> Result<RewriteLayer, Located> {
    let r = config.get_ref();
    match (&r.prefix, &r.regex) {
        (Some(prefix), None) => RewriteLayer::prefix(prefix.get_ref(), r.to.get_ref())
            .map_err(|e| Located::at(&r.to, "to", e)),
        (None, Some(regex)) => {
            RewriteLayer::regex(regex.get_ref(), r.to.get_ref()).map_err(|e| match e {
                scb_core::rewrite::RewriteError::Regex(_) => Located::at(regex, "regex", e),
                _ => Located::at(&r.to, "to", e),
            })
        }
        _ => Err(Located::at(
            config,
            "",
            "a rewrite has `prefix` or `regex` (one of them) and `to`",
        )),
    }
}

/// A redirect route. `{host}` is refused on the default site, which takes any host: a
/// client could send its own and be redirected there.
fn redirect_handler(
    config: &RedirectConfig,
    matcher: &PathMatch,
    named_site: bool,
) -> Result<Handler, Located> {
    let mut redirect =
        Redirect::to(config.to.get_ref()).map_err(|e| Located::at(&config.to, "to", e))?;
    if redirect.uses_host() && !named_site {
        return Err(Located::at(
            &config.to,
            "to",
            "{host} is only for routes of a [[site]] with `hosts`: the default site takes \
             any host, and a client could choose where it is sent",
        ));
    }
    if let Some(status) = &config.status {
        let code = StatusCode::from_u16(*status.get_ref())
            .map_err(|_| Located::at(status, "status", "not an HTTP status"))?;
        redirect = redirect
            .status(code)
            .map_err(|e| Located::at(status, "status", e))?;
    }
    if let PathMatch::Prefix(prefix) = matcher {
        redirect = redirect.prefix(prefix);
    }
    Ok(Handler::Redirect(redirect))
}

/// A proxy route: the settings, plus `strip_prefix`, which strips the route's own prefix.
/// On an exact `path` route it is refused rather than read as "strip the whole path" (every
/// request would go up as `/`): a `path` route with `strip_prefix` is far more likely a
/// `prefix` route written wrong.
///
/// Whose `X-Forwarded-For` is believed is `[server] trusted_proxies` (`trusted`), as for
/// the access log, allow/deny and rate limits: one setting names the client everywhere.
/// The proxy's own `trusted_proxies` may only narrow it (forward fewer hops' claims); an
/// entry outside it is refused, since the rest of the server would not believe it.
fn proxy_handler(
    config: &ProxyConfig,
    matcher: &PathMatch,
    trusted: &TrustedProxies,
) -> Result<Handler, Located> {
    let mut builder = scb_proxy::ReverseProxyBuilder::try_from(config)?;
    match config.trusted_proxies.as_deref() {
        None => builder = builder.trusted_proxies(trusted.clone()),
        Some(entries) => {
            let narrowed = crate::config::convert::trusted_proxies(entries)?;
            if let Some(outside) = narrowed.first_outside(trusted) {
                return Err(Located::at(
                    &entries[outside],
                    format!("trusted_proxies[{outside}]"),
                    format_args!(
                        "{:?} is not within [server] trusted_proxies ({}): that setting \
                         decides who the client is everywhere; put it there, and here only \
                         what narrows it",
                        entries[outside].get_ref(),
                        if trusted.is_empty() {
                            "none".to_owned()
                        } else {
                            trusted.to_string()
                        }
                    ),
                ));
            }
        }
    }
    if let Some(strip) = &config.strip_prefix
        && *strip.get_ref()
    {
        match matcher {
            PathMatch::Prefix(prefix) => builder = builder.strip_prefix(prefix.clone()),
            PathMatch::Exact(_) => {
                return Err(Located::at(
                    strip,
                    "strip_prefix",
                    "only a `prefix` route has a prefix to strip",
                ));
            }
        }
    }
    let proxy = builder.build().map_err(|e| {
        if let scb_proxy::BuildError::Tls(why) = &e {
            let file = match why.file() {
                Some(scb_proxy::TlsFile::CaFile) => config.ca_file.as_ref().map(|f| (f, "ca_file")),
                Some(scb_proxy::TlsFile::ClientCert) => {
                    config.client_cert.as_ref().map(|f| (f, "client_cert"))
                }
                Some(scb_proxy::TlsFile::ClientKey) => {
                    config.client_key.as_ref().map(|f| (f, "client_key"))
                }
                _ => None,
            };
            if let Some((file, key)) = file {
                return Located::at(file, key, e);
            }
            if let (scb_proxy::UpstreamTlsError::PinWithRoots, Some(pin)) = (why, &config.pin) {
                return Located::at(pin, "pin", e);
            }
        }
        if let (scb_proxy::BuildError::Protocol(_), Some(protocol)) = (&e, &config.protocol) {
            return Located::at(protocol, "protocol", e);
        }
        Located::at(&config.upstreams, "upstreams", e)
    })?;
    Ok(Handler::Proxy(proxy))
}

mod print;
#[cfg(test)]
mod tests;
