//! Listeners, TLS, ACME and the metrics endpoint: the `[[listen]]`, `[metrics]` and
//! `[health]` tables, checked and turned into the server's listeners.

use std::net::SocketAddr;
use std::sync::Arc;

use scb_core::client_ip::Networks;
use scb_core::server::{ListenOptions, ProxyProtocol, Server};
use toml::Spanned;

use crate::config::ListenAddr;
use crate::config::{Config, Located, ProbesConfig};

use super::route::check_path;

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
    /// The listeners that also serve HTTP/3, each with the `Alt-Svc` max age its TCP
    /// answers advertise it with (none when zero).
    pub(crate) alt_svc: Vec<(usize, std::time::Duration)>,
    /// Every TLS listener's acceptor, in config order (two listeners of one ACME
    /// certificate share one): whose certificates the status page lists.
    pub(crate) acceptors: Vec<scb_tls::TlsAcceptor>,
}

/// How long clients may remember that a listener speaks HTTP/3, unless
/// `alt_svc_max_age` says otherwise: a day, as Caddy and most servers advertise.
const DEFAULT_ALT_SVC_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(86_400);

/// Where the Prometheus endpoint listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetricsPlan {
    /// The metrics server's own address, clashing with no `[[listen]]` address.
    pub(crate) listen: SocketAddr,
    /// The path of the scrape, absolute.
    pub(crate) path: String,
    /// `[health]`: the liveness and readiness paths, answered beside the scrape.
    pub(crate) probes: Option<(String, String)>,
    /// `[status] enabled`: the status page at [`STATUS_PATH`](crate::status::STATUS_PATH)
    /// and [`STATUS_JSON_PATH`](crate::status::STATUS_JSON_PATH).
    pub(crate) status: bool,
}

/// Adds every `[[listen]]` to `server`: plain, or secured by a TLS acceptor loaded (and
/// so checked: files, key match, validity dates) here.
pub(super) fn listeners(
    config: &Config,
    mut server: Server,
    tickets: &Arc<scb_tls::TicketKeys>,
    cluster: Option<&scb_core::cluster::Cluster>,
) -> Result<(Server, HttpsPlan), Located> {
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
        let http3 = listen.http3.as_ref().filter(|h| *h.get_ref());
        if listen.http3.is_none()
            && let Some(max_age) = &listen.alt_svc_max_age
        {
            return Err(Located::at(
                max_age,
                format!("listen[{i}].alt_svc_max_age"),
                "advertises HTTP/3: set `http3 = true` as well",
            ));
        }
        match &listen.tls {
            None => {
                if let Some(http3) = http3 {
                    return Err(Located::at(
                        http3,
                        format!("listen[{i}].http3"),
                        "HTTP/3 runs over QUIC, which is always encrypted: add `tls`",
                    ));
                }
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
                let mut acceptor = tls_acceptor(config_tls, tickets, cluster)
                    .map_err(|e| e.within(&format!("listen[{i}]")))?;
                if acceptor.settings().on_demand_settings().is_some() {
                    // Its renewals, and the HTTP-01 answers of its orders.
                    https.acme.push(acceptor.clone());
                } else if acceptor.settings().acme_settings().is_some() {
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
                if http3.is_some() {
                    let quic = acceptor
                        .http3()
                        .map_err(|e| Located::at(config_tls, format!("listen[{i}].http3"), e))?;
                    options = options.http3(quic);
                    let max_age = listen
                        .alt_svc_max_age
                        .as_ref()
                        .map_or(DEFAULT_ALT_SVC_MAX_AGE, |m| m.get_ref().0);
                    https.alt_svc.push((t, max_age));
                }
                https.acceptors.push(acceptor.clone());
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
    if let Some(http3) = &listen.http3 {
        return Err(refuse(http3.span(), "http3"));
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
    tickets: &Arc<scb_tls::TicketKeys>,
    cluster: Option<&scb_core::cluster::Cluster>,
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
    let mut settings = match (&tls.acme, &tls.on_demand) {
        (Some(acme), _) if !files.is_empty() => {
            return Err(Located::at(
                acme,
                "tls.acme",
                "certificates come from files or from ACME, not both",
            ));
        }
        (_, Some(on_demand)) if !files.is_empty() || tls.acme.is_some() => {
            return Err(Located::at(
                on_demand,
                "tls.on_demand",
                "an on-demand listener gets every certificate on demand: leave out `cert`, \
                 `certs` and `acme`",
            ));
        }
        (Some(acme), None) => scb_tls::TlsSettings::acme(acme_settings(acme, cluster)?),
        (None, Some(on_demand)) => {
            scb_tls::TlsSettings::on_demand(on_demand_settings(on_demand, cluster)?)
        }
        (None, None) => scb_tls::TlsSettings::new(files),
        (Some(_), Some(_)) => unreachable!("refused above"),
    };
    if settings.certs().is_empty()
        && settings.acme_settings().is_none()
        && settings.on_demand_settings().is_none()
    {
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
    settings = settings.ticket_keys(Arc::clone(tickets));
    scb_tls::TlsAcceptor::new(settings).map_err(|e| Located::at(config, "tls", e))
}

/// A listener's `acme` table, checked: names a CA can validate with the chosen challenge,
/// an `https` directory, and for DNS-01 a zone that holds every name's record and a TSIG
/// key that reads.
fn acme_settings(
    config: &Spanned<crate::config::AcmeConfig>,
    cluster: Option<&scb_core::cluster::Cluster>,
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
    let challenge = acme_challenge(acme)?;
    for (i, domain) in domains.iter().enumerate() {
        let key = || format!("tls.acme.domains[{i}]");
        let name = domain.get_ref();
        // A wildcard is `*.` as the leftmost label, then a name (RFC 8555 §7.1.3).
        let (wildcard, base) = match name.strip_prefix("*.") {
            Some(base) => (true, base),
            None => (false, name.as_str()),
        };
        let ip = !wildcard && name.parse::<std::net::IpAddr>().is_ok();
        if !ip && !is_dns_name(base) {
            return Err(Located::at(
                domain,
                key(),
                "is not a DNS name, a wildcard (`*.example.com`) or an IP address",
            ));
        }
        match &challenge {
            scb_tls::AcmeChallenge::Dns01(dns) => {
                if ip {
                    return Err(Located::at(
                        domain,
                        key(),
                        "an IP address cannot be proved by DNS-01 (RFC 8738 §7): give it a \
                         listener of its own with tls-alpn-01 or http-01",
                    ));
                }
                dns.rfc2136().check_domain(name).map_err(|e| {
                    Located::at(
                        domain,
                        key(),
                        format_args!("{e} (tls.acme.dns.rfc2136.zone)"),
                    )
                })?;
            }
            _ if wildcard => {
                return Err(Located::at(
                    domain,
                    key(),
                    "a wildcard is proved through DNS only: set `challenge = \"dns-01\"` and \
                     `dns = { rfc2136 = { ... } }`",
                ));
            }
            _ => {}
        }
    }
    let state_dir = match (&acme.state_dir, cluster) {
        (Some(dir), _) => dir.get_ref().clone(),
        // The fleet's Redis keeps the certificates; this is only the local copy.
        (None, Some(_)) => std::env::temp_dir().join("scb-acme"),
        (None, None) => {
            return Err(Located::at(
                config,
                "tls.acme.state_dir",
                "where the account and certificates are kept: give a directory, or a \
                 [cluster] to keep them in Redis",
            ));
        }
    };
    let mut settings = account(
        scb_tls::AcmeSettings::new(domains.iter().map(|d| d.get_ref().clone()), state_dir),
        cluster,
        Account {
            email: acme.email.as_ref(),
            directory: acme.directory.as_ref(),
            ca_root: acme.ca_root.as_ref(),
        },
        "tls.acme",
    )?;
    settings = settings.challenge(challenge);
    if let Some(retry) = &acme.retry {
        settings = settings.retry(retry.get_ref().0);
    }
    if let Some(timeout) = &acme.timeout {
        settings = settings.timeout(timeout.get_ref().0);
    }
    Ok(settings)
}

/// The account keys `acme` and `on_demand` share.
#[derive(Clone, Copy)]
struct Account<'a> {
    email: Option<&'a Spanned<String>>,
    directory: Option<&'a Spanned<String>>,
    ca_root: Option<&'a Spanned<std::path::PathBuf>>,
}

/// `settings` with the fleet's `cluster` and the table's account keys, checked (an email
/// with an `@`, an `https://` directory); `table` names the keys in errors.
fn account(
    mut settings: scb_tls::AcmeSettings,
    cluster: Option<&scb_core::cluster::Cluster>,
    keys: Account<'_>,
    table: &str,
) -> Result<scb_tls::AcmeSettings, Located> {
    if let Some(cluster) = cluster {
        settings = settings.cluster(cluster.clone());
    }
    if let Some(email) = keys.email {
        if !email.get_ref().contains('@') {
            return Err(Located::at(
                email,
                format!("{table}.email"),
                "is not an email address",
            ));
        }
        settings = settings.email(email.get_ref().clone());
    }
    if let Some(directory) = keys.directory {
        let url = directory.get_ref();
        if url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.scheme_str().map(str::to_owned))
            != Some("https".to_owned())
        {
            return Err(Located::at(
                directory,
                format!("{table}.directory"),
                "is not an https:// URL",
            ));
        }
        settings = settings.directory(url.clone());
    }
    if let Some(root) = keys.ca_root {
        settings = settings.ca_root(root.get_ref().clone());
    }
    Ok(settings)
}

/// A listener's `on_demand` table, checked: an `http` or `https` ask URL, where to keep
/// the certificates, and the ACME settings orders are made with.
fn on_demand_settings(
    config: &Spanned<crate::config::OnDemandConfig>,
    cluster: Option<&scb_core::cluster::Cluster>,
) -> Result<scb_tls::acme::OnDemandSettings, Located> {
    let c = config.get_ref();
    let ask = c.ask.get_ref();
    let scheme = ask
        .parse::<http::Uri>()
        .ok()
        .filter(|u| u.host().is_some())
        .and_then(|u| u.scheme_str().map(str::to_owned));
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err(Located::at(
            &c.ask,
            "tls.on_demand.ask",
            "is not an http:// or https:// URL",
        ));
    }
    let state_dir = match (&c.state_dir, cluster) {
        (Some(dir), _) => dir.get_ref().clone(),
        (None, Some(_)) => std::env::temp_dir().join("scb-acme"),
        (None, None) => {
            return Err(Located::at(
                config,
                "tls.on_demand.state_dir",
                "where the account and certificates are kept: give a directory, or a \
                 [cluster] to keep them in Redis",
            ));
        }
    };
    let mut acme = account(
        scb_tls::AcmeSettings::new(Vec::<String>::new(), state_dir),
        cluster,
        Account {
            email: c.email.as_ref(),
            directory: c.directory.as_ref(),
            ca_root: c.ca_root.as_ref(),
        },
        "tls.on_demand",
    )?;
    if let Some(challenge) = &c.challenge {
        acme = acme.challenge(match challenge.get_ref().as_str() {
            "tls-alpn-01" => scb_tls::AcmeChallenge::TlsAlpn01,
            "http-01" => scb_tls::AcmeChallenge::Http01,
            _ => {
                return Err(Located::at(
                    challenge,
                    "tls.on_demand.challenge",
                    "expected \"tls-alpn-01\" or \"http-01\" (a name asked for on demand \
                     is not in a zone scb updates)",
                ));
            }
        });
    }
    if let Some(timeout) = &c.timeout {
        acme = acme.timeout(timeout.get_ref().0);
    }
    let mut settings = scb_tls::acme::OnDemandSettings::new(ask.clone(), "").acme(acme);
    if let Some(wait) = &c.wait {
        if wait.get_ref().0.is_zero() {
            return Err(Located::at(
                wait,
                "tls.on_demand.wait",
                "must be more than 0s",
            ));
        }
        settings = settings.wait(wait.get_ref().0);
    }
    if let Some(per_hour) = &c.per_hour {
        settings = settings.per_hour(*per_hour.get_ref());
    }
    if let Some(max) = &c.max_names {
        if *max.get_ref() == 0 {
            return Err(Located::at(
                max,
                "tls.on_demand.max_names",
                "must be at least 1",
            ));
        }
        settings = settings.max_names(*max.get_ref());
    }
    Ok(settings)
}

/// `challenge` with, for DNS-01, its `dns` table (which the other challenges refuse).
fn acme_challenge(acme: &crate::config::AcmeConfig) -> Result<scb_tls::AcmeChallenge, Located> {
    let challenge = match &acme.challenge {
        None => scb_tls::AcmeChallenge::TlsAlpn01,
        Some(challenge) => match challenge.get_ref().as_str() {
            "tls-alpn-01" => scb_tls::AcmeChallenge::TlsAlpn01,
            "http-01" => scb_tls::AcmeChallenge::Http01,
            "dns-01" => {
                let Some(dns) = &acme.dns else {
                    return Err(Located::at(
                        challenge,
                        "tls.acme.challenge",
                        "dns-01 needs `dns = { rfc2136 = { server, zone, tsig_key, \
                         tsig_secret_file } }`: where the TXT records are published",
                    ));
                };
                let dns =
                    crate::config::convert::dns01(dns).map_err(|e| e.within("tls.acme.dns"))?;
                return Ok(scb_tls::AcmeChallenge::Dns01(dns));
            }
            _ => {
                return Err(Located::at(
                    challenge,
                    "tls.acme.challenge",
                    "expected \"tls-alpn-01\", \"http-01\" or \"dns-01\"",
                ));
            }
        },
    };
    match &acme.dns {
        Some(dns) => Err(Located::at(
            dns,
            "tls.acme.dns",
            format_args!(
                "is for `challenge = \"dns-01\"`, and this one is {}",
                challenge.name()
            ),
        )),
        None => Ok(challenge),
    }
}

/// Whether `name` is a DNS name a CA would issue for: letters, digits and inner hyphens,
/// in labels of 1 to 63 bytes, 253 in all.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether two listen addresses would share connections. With `SO_REUSEPORT` on every
/// listener, binding the same address twice does not fail: the kernel would silently
/// spread connections across both, so the clash must be caught here. A wildcard address
/// clashes with any address of its family on the same port; port 0 never clashes.
pub(super) fn clash(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && a.is_ipv4() == b.is_ipv4()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The TCP listen addresses, checked for clashes (and the Unix paths for repeats).
pub(super) fn listen_addrs(config: &Config) -> Result<Vec<Spanned<SocketAddr>>, Located> {
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

pub(super) fn metrics(
    config: &Config,
    listen: &[Spanned<SocketAddr>],
) -> Result<Option<MetricsPlan>, Located> {
    let status = config
        .status
        .as_ref()
        .filter(|s| *s.get_ref().enabled.get_ref());
    let Some(metrics) = &config.metrics else {
        if let Some(health) = &config.health {
            return Err(Located::at(
                health,
                "health",
                "the probes are served on the [metrics] listener: add a [metrics] table",
            ));
        }
        if let Some(status) = status {
            return Err(Located::at(
                &status.get_ref().enabled,
                "status.enabled",
                "the status page is served on the metrics listener: add [metrics]",
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
    if let Some(status) = status {
        let taken = std::iter::once(&path)
            .chain(probes.iter().flat_map(|(live, ready)| [live, ready]))
            .find(|p| {
                [crate::status::STATUS_PATH, crate::status::STATUS_JSON_PATH].contains(&p.as_str())
            });
        if let Some(taken) = taken {
            return Err(Located::at(
                &status.get_ref().enabled,
                "status.enabled",
                format_args!(
                    "the status page takes {taken} on the metrics listener: give the metrics \
                     path and the probes other paths"
                ),
            ));
        }
    }
    Ok(Some(MetricsPlan {
        listen: addr,
        path,
        probes,
        status: status.is_some(),
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
