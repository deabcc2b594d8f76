//! `scb check --print`: the plan as scb will run it, for people.

use std::fmt::Write as _;

use scb_core::access_log::AccessLogFormat;
use scb_core::router::PathMatch;

use super::{Plan, RoutePlan};
use crate::route::Handler;

impl Plan {
    /// The effective plan: the files read, the listeners, the routes in the order a
    /// request path is matched against them, their upstreams, metrics and the log.
    pub(crate) fn describe(&self) -> String {
        let mut out = String::new();
        let files: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
        if !files.is_empty() {
            let _ = writeln!(out, "files: {}", files.join(", "));
        }
        out.push_str("listeners:\n");
        for (addr, kind) in &self.listeners {
            let _ = writeln!(out, "  {addr}  {kind}");
        }
        if self.trusted_proxies.is_empty() {
            out.push_str("client address: the peer (no trusted proxies)\n");
        } else {
            let _ = writeln!(
                out,
                "client address: from X-Forwarded-For when the peer is in {}",
                self.trusted_proxies
            );
        }
        if let Some(cluster) = &self.cluster {
            let _ = writeln!(
                out,
                "cluster: Redis {}, keys under {:?}",
                cluster.shown(),
                cluster.prefix()
            );
        }
        if let Some(metrics) = &self.metrics {
            let _ = write!(out, "metrics: {} {}", metrics.listen, metrics.path);
            if let Some((live, ready)) = &metrics.probes {
                let _ = write!(out, ", liveness {live}, readiness {ready}");
            }
            if metrics.status {
                let _ = write!(
                    out,
                    ", status page {} and {}",
                    crate::status::STATUS_PATH,
                    crate::status::STATUS_JSON_PATH
                );
            }
            out.push('\n');
        }
        if let Some(tracing) = &self.tracing {
            let _ = write!(
                out,
                "tracing: trace context{}, ",
                if tracing.propagate {
                    " propagated to upstreams"
                } else {
                    ", upstreams get the client's"
                }
            );
            match &tracing.export {
                Some(export) => {
                    let _ = writeln!(
                        out,
                        "spans to {} as {:?}, {} of new traces sampled",
                        export.endpoint, export.service_name, tracing.sample_ratio
                    );
                }
                None => out.push_str("no spans (no otlp)\n"),
            }
        }
        for site in self.sites.iter() {
            if site.hosts.is_empty() {
                out.push_str("default site");
            } else {
                let _ = write!(out, "site {}", site.hosts.join(", "));
            }
            out.push_str(
                ", routes in match order (exact paths, then expressions, then prefixes, \
                 longest first; with conditions first):\n",
            );
            routes(&mut out, &site.routes);
        }
        if self.sites.iter().all(|s| !s.hosts.is_empty()) {
            out.push_str("any other host: 421\n");
        }
        match &self.access_log {
            None => out.push_str("access log: off\n"),
            Some(access) => {
                let place = access
                    .path
                    .as_ref()
                    .map_or_else(|| "stderr".to_owned(), |p| p.display().to_string());
                let format = match &access.format {
                    None => "as --log-format".to_owned(),
                    Some(AccessLogFormat::Json) => "json".to_owned(),
                    Some(AccessLogFormat::Template(template)) => {
                        let style = if template.is_json() {
                            "json"
                        } else {
                            "combined"
                        };
                        format!("template, {style} escaping: {template}")
                    }
                    Some(_) => "combined".to_owned(),
                };
                let _ = writeln!(out, "access log: {place} ({format})");
            }
        }
        out
    }
}

/// A site's routes as the router orders them: exact paths, then expressions in config
/// order, then the longest prefix; routes of one path with `match` conditions before
/// the one without (each row shows its conditions after `when`).
fn routes(out: &mut String, routes: &[RoutePlan]) {
    let kind = |r: &RoutePlan| match r.matcher.path() {
        PathMatch::Exact(_) => 0,
        PathMatch::Regex(_) => 1,
        PathMatch::Prefix(_) => 2,
    };
    let mut rows: Vec<(usize, &RoutePlan)> = routes.iter().enumerate().collect();
    // A stable sort: config order stays among equals (expressions, conditional routes).
    rows.sort_by(|(_, a), (_, b)| {
        let by_path = match (a.matcher.path(), b.matcher.path()) {
            (PathMatch::Exact(x), PathMatch::Exact(y)) => x.cmp(y),
            (PathMatch::Prefix(x), PathMatch::Prefix(y)) => y.len().cmp(&x.len()).then(x.cmp(y)),
            _ => std::cmp::Ordering::Equal,
        };
        kind(a)
            .cmp(&kind(b))
            .then(by_path)
            .then(b.matcher.is_conditional().cmp(&a.matcher.is_conditional()))
    });
    for (_, route) in rows {
        let matcher = match route.matcher.path() {
            PathMatch::Exact(p) => format!("= {p}"),
            PathMatch::Prefix(p) => format!("^ {p}"),
            PathMatch::Regex(r) => format!("~ {r}"),
        };
        let conditions = if route.matcher.is_conditional() {
            format!(" when {}", route.matcher)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {matcher:<24} {:<12} {}{}{conditions}",
            route.name,
            handler(&route.handler),
            guards(route)
        );
    }
    // A `prefix = "/"` route without conditions takes every path: nothing is left
    // unmatched.
    let catches_all = routes.iter().any(|r| {
        !r.matcher.is_conditional() && matches!(r.matcher.path(), PathMatch::Prefix(p) if p == "/")
    });
    if !catches_all {
        let _ = writeln!(out, "  (anything else)          unmatched    404");
    }
}

/// What stands in front of the handler, in the order requests meet it.
fn guards(route: &RoutePlan) -> String {
    let names = route.guards.names();
    if names.is_empty() {
        String::new()
    } else {
        format!(" [{}]", names.join(", "))
    }
}

fn handler(handler: &Handler) -> String {
    match handler {
        Handler::Respond(respond) => {
            let body = String::from_utf8_lossy(respond.body_bytes());
            let body: String = body.chars().take(32).collect();
            format!("respond {} {body:?}", respond.status().as_u16())
        }
        Handler::Health(_) => "health (readiness: 200, 503 once draining)".to_owned(),
        Handler::Redirect(redirect) => format!(
            "redirect {} {}",
            redirect.status_code().as_u16(),
            redirect.template()
        ),
        Handler::Static { files, compress } => format!(
            "static {}{}",
            files.root().display(),
            if compress.is_some() {
                ", compressed"
            } else {
                ""
            }
        ),
        Handler::FastCgi { fastcgi, .. } => {
            let upstreams: Vec<String> = fastcgi.upstreams().map(ToString::to_string).collect();
            format!(
                "fastcgi {} (scripts and files beneath {})",
                upstreams.join(", "),
                fastcgi.root().display()
            )
        }
        Handler::Proxy { proxy, cache } => {
            let upstreams: Vec<String> = proxy.upstreams().map(ToString::to_string).collect();
            // The config's name for it: `LeastConn` is `least_conn`.
            let mut balance = String::new();
            for c in format!("{:?}", proxy.balance()).chars() {
                if c.is_ascii_uppercase() && !balance.is_empty() {
                    balance.push('_');
                }
                balance.push(c.to_ascii_lowercase());
            }
            let protocol = match proxy.settings().protocol {
                scb_proxy::UpstreamProtocol::H2 => ", h2",
                scb_proxy::UpstreamProtocol::H2c => ", h2c",
                _ => "",
            };
            let trusted = &proxy.settings().trusted_proxies;
            let trusted = if trusted.is_empty() {
                String::new()
            } else {
                format!(", forwards X-Forwarded-* from {trusted}")
            };
            let cached = if cache.is_some() { ", cached" } else { "" };
            format!(
                "proxy {} ({balance}{protocol}{trusted}){cached}",
                upstreams.join(", ")
            )
        }
    }
}
