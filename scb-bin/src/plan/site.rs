//! Sites: `[[site]]`s and the default site, their hosts, header rules and error pages,
//! and route names unique across them.

use std::collections::HashMap;
use std::sync::Arc;

use http::StatusCode;
use scb_core::error_pages::ErrorPagesLayer;
use scb_core::header_rules::{HeaderRules, HeaderRulesLayer};
use scb_core::virtual_hosts::VirtualHosts;

use crate::config::{Config, Located, SiteConfig};
use crate::route::Guards;

use super::Context;
use super::route::{RoutePlan, routes};
use crate::config::convert::header_rules;

/// One site: the hosts it answers for and its routes, each guarded by the site's header
/// rules and error pages as well as its own.
#[derive(Clone, Debug)]
pub(crate) struct SitePlan {
    /// Host names and `*.` wildcards; empty for the default site.
    pub(crate) hosts: Vec<String>,
    /// The routes, in config order.
    pub(crate) routes: Arc<[RoutePlan]>,
    /// What stands in front of the site's 404 when no route matches: its header rules and
    /// error pages.
    pub(crate) fallback: Guards,
}

impl SitePlan {
    /// Puts the site's header rules (first on the request, last on the response) and
    /// error pages in front of each of `routes` and of the fallback.
    fn guard(
        &mut self,
        mut routes: Vec<RoutePlan>,
        headers: HeaderRulesLayer,
        pages: ErrorPagesLayer,
    ) {
        let pages = (!pages.is_empty()).then_some(pages);
        for route in &mut routes {
            let merged = match &route.guards.headers {
                Some(own) => headers.and(own),
                None => headers.clone(),
            };
            route.guards.headers = (!merged.is_empty()).then_some(merged);
            route.guards.error_pages.clone_from(&pages);
        }
        self.routes = routes.into();
        self.fallback = Guards {
            headers: (!headers.is_empty()).then_some(headers),
            error_pages: pages,
            ..Guards::default()
        };
    }
}

/// The sites: `[[site]]`s with `hosts` in order, then the default site, which is the
/// top-level `[[route]]`s or a `[[site]]` without `hosts` (not both).
pub(super) fn sites(config: &Config, ctx: &Context) -> Result<Vec<SitePlan>, Located> {
    unique_cache_paths(config)?;
    let mut named = Vec::new();
    let mut default: Option<SitePlan> = None;
    // Host names are checked here, with their place in the file, as VirtualHosts will.
    let mut hosts_seen = VirtualHosts::<()>::new();
    // Route names are metric labels: unique across sites. Name -> where.
    let mut names: HashMap<Arc<str>, String> = HashMap::new();
    for (i, site) in config.site.iter().enumerate() {
        let key = format!("site[{i}]");
        let plan = site_plan(site.get_ref(), ctx).map_err(|e| e.within(&key))?;
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
            let routes = routes(&config.route, ctx, None)?;
            let plan = SitePlan {
                hosts: Vec::new(),
                routes: routes.into(),
                fallback: Guards::default(),
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

/// Fails when two routes' caches name one disk directory: each store indexes and
/// removes the records in its directory as its own.
fn unique_cache_paths(config: &Config) -> Result<(), Located> {
    let top = config
        .route
        .iter()
        .enumerate()
        .map(|(j, r)| (format!("route[{j}]"), r));
    let in_sites = config.site.iter().enumerate().flat_map(|(i, site)| {
        site.get_ref()
            .route
            .iter()
            .enumerate()
            .map(move |(j, r)| (format!("site[{i}].route[{j}]"), r))
    });
    let mut seen: HashMap<&std::path::Path, String> = HashMap::new();
    for (key, route) in top.chain(in_sites) {
        let Some(path) = route
            .get_ref()
            .cache
            .as_ref()
            .and_then(|c| c.get_ref().path.as_ref())
        else {
            continue;
        };
        if let Some(other) = seen.get(path.get_ref().as_path()) {
            return Err(Located::at(
                path,
                format!("{key}.cache.path"),
                format_args!(
                    "{:?} is already the cache directory of {other}: give each cache its own",
                    path.get_ref()
                ),
            ));
        }
        seen.insert(path.get_ref(), key);
    }
    Ok(())
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
fn site_plan(site: &SiteConfig, ctx: &Context) -> Result<SitePlan, Located> {
    let hosts: Vec<String> = site
        .hosts
        .as_ref()
        .map(|h| h.get_ref().iter().map(|h| h.get_ref().clone()).collect())
        .unwrap_or_default();
    // Derived route names of a named site start with its first host, so that two sites'
    // `/` routes are not both `root`.
    let routes = routes(&site.route, ctx, hosts.first().map(String::as_str))?;
    let mut layer = HeaderRulesLayer::new().trusted_proxies(ctx.trusted.clone());
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
    let mut site = SitePlan {
        hosts,
        routes: Arc::from([]),
        fallback: Guards::default(),
    };
    site.guard(routes, layer, error_pages);
    Ok(site)
}
