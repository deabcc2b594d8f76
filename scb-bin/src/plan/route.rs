//! Routes: one `[[route]]` checked on its own, its handler and its guards.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use http::StatusCode;
use scb_core::client_ip::{Networks, TrustedProxies};
use scb_core::header_rules::HeaderRulesLayer;
use scb_core::health::{HealthCheck, Readiness};
use scb_core::ip_filter::IpFilterLayer;
use scb_core::max_concurrent::MaxConcurrentLayer;
use scb_core::redirect::Redirect;
use scb_core::respond::Respond;
use scb_core::router::{Glob, PathMatch, RouteMatch, Router};
use scb_static::compress::CompressLayer;
use toml::Spanned;

use super::Context;
use crate::config::{Located, MatchConfig, ProxyConfig, RedirectConfig, RouteConfig};
use crate::route::{Guards, Handler};

use crate::config::convert::{basic_auth, cors, forward_auth, header_rules, rate_limit, rewrite};
use crate::labels::RESERVED;

/// One route: its name, how it matches, what answers and what stands in front.
#[derive(Clone, Debug)]
pub(crate) struct RoutePlan {
    /// The `route` label of its metrics and the access log; unique across sites.
    pub(crate) name: Arc<str>,
    /// Exact path, expression or prefix, and the route's `match` conditions; a path,
    /// expression or prefix is unique per kind within its site among the routes without
    /// conditions.
    pub(crate) matcher: RouteMatch,
    /// What answers, turned into a service on each worker.
    pub(crate) handler: Handler,
    /// Its guards, the site's header rules and error pages among them.
    pub(crate) guards: Guards,
}

/// The route name for a path when none is given: its segments joined with `-`, `root`
/// for `/`. `/respond` gives `respond`, `/api/v1/` gives `api-v1`. An expression gives
/// the name of its literal start: `^/users/(?<id>\d+)$` gives `users`.
fn derive_name(matcher: &PathMatch) -> String {
    let path = match matcher {
        PathMatch::Exact(p) | PathMatch::Prefix(p) => p.as_str(),
        PathMatch::Regex(r) => {
            let r = r.strip_prefix('^').unwrap_or(r);
            let literal = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/-_".contains(c)))
                .unwrap_or(r.len());
            &r[..literal]
        }
    };
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

pub(super) fn routes(
    configs: &[Spanned<RouteConfig>],
    ctx: &Context,
    site: Option<&str>,
) -> Result<Vec<RoutePlan>, Located> {
    let mut plans = Vec::with_capacity(configs.len());
    // Name -> index of the route that has it; path -> index, per match kind.
    let mut names: HashMap<Arc<str>, usize> = HashMap::new();
    let mut paths: HashMap<PathMatch, usize> = HashMap::new();
    for (i, config) in configs.iter().enumerate() {
        let key = format!("route[{i}]");
        let (plan, field, path) = route(config, ctx, site).map_err(|e| e.within(&key))?;
        // Routes with conditions may share a path: each takes what it matches, and the
        // one without conditions the rest.
        if !plan.matcher.is_conditional()
            && let Some(&first) = paths.get(plan.matcher.path())
        {
            return Err(Located::at(
                path,
                format!("{key}.{field}"),
                format_args!(
                    "{field} {:?} is already routed by route[{first}]; give one of them \
                     `match` conditions",
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
        if !plan.matcher.is_conditional() {
            paths.insert(plan.matcher.path().clone(), i);
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// One route, checked on its own (keys relative to the route), with the key and value of
/// its path or prefix for errors about it.
fn route<'a>(
    config: &'a Spanned<RouteConfig>,
    ctx: &Context,
    site: Option<&str>,
) -> Result<(RoutePlan, &'static str, &'a Spanned<String>), Located> {
    let (readiness, trusted) = (&ctx.readiness, &ctx.trusted);
    let route = config.get_ref();
    let given: Vec<(&'static str, &Spanned<String>)> = [
        ("path", route.path.as_ref()),
        ("prefix", route.prefix.as_ref()),
        ("path_regex", route.path_regex.as_ref()),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some((key, value?)))
    .collect();
    let (field, path) = match given[..] {
        [one] => one,
        [] => {
            return Err(Located::at(
                config,
                "",
                "a route needs `path` (exact match), `prefix` or `path_regex`",
            ));
        }
        [(first, _), (second, value), ..] => {
            return Err(Located::at(
                value,
                second,
                format_args!(
                    "a route has one of `path`, `prefix` and `path_regex`: `{first}` is set"
                ),
            ));
        }
    };
    let path_match = match field {
        "path" => {
            check_path(path, "path")?;
            PathMatch::Exact(path.get_ref().clone())
        }
        "prefix" => {
            check_path(path, "prefix")?;
            PathMatch::Prefix(path.get_ref().clone())
        }
        _ => {
            let regex = PathMatch::Regex(path.get_ref().clone());
            // The router's own check: what it refuses is refused here, with the place.
            if let Err(e) = Router::<()>::new().route("check", regex.clone(), ()) {
                return Err(Located::at(path, "path_regex", e));
            }
            regex
        }
    };
    let matcher = match &route.conditions {
        Some(conditions) => {
            route_match(path_match, conditions, trusted).map_err(|e| e.within("match"))?
        }
        None => RouteMatch::new(path_match),
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
        None => match (site, matcher.path()) {
            (Some(host), PathMatch::Exact(p) | PathMatch::Prefix(p)) => {
                format!("{host}{}", p.trim_end_matches('/')).into()
            }
            (Some(host), regex) => format!("{host}-{}", derive_name(regex)).into(),
            (None, p) => derive_name(p).into(),
        },
    };
    if let Some((_, what)) = RESERVED.iter().find(|(reserved, _)| **reserved == *name) {
        let at = route.name.as_ref().map_or(path, |name| name);
        return Err(Located::at(
            at,
            "name",
            format_args!("{:?} is the name of {what}", &*name),
        ));
    }
    let mut handler = handler(
        config,
        matcher.path(),
        readiness,
        trusted,
        site.is_some(),
        ctx.propagate_trace,
    )?;
    // The cache's metrics carry the route's name, as every other per-route series.
    if let Handler::Proxy {
        cache: Some(cache), ..
    } = &mut handler
    {
        *cache = cache.clone().route(name.to_string());
    }
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
        .map(|r| rewrite(r, route.path_regex.as_ref()).map_err(|e| e.within("rewrite")))
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
        .map(|r| {
            rate_limit(r.get_ref(), trusted, ctx.cluster.as_ref(), &name)
                .map_err(|e| e.within("rate_limit"))
        })
        .transpose()?;
    let basic_auth = route
        .basic_auth
        .as_ref()
        .map(|a| basic_auth(a.get_ref()).map_err(|e| e.within("basic_auth")))
        .transpose()?;
    let try_files = try_files(route, &try_files_root(&handler))?;
    let forward_auth = route
        .forward_auth
        .as_ref()
        .map(|a| forward_auth(a, trusted).map_err(|e| e.within("forward_auth")))
        .transpose()?;
    let plan = RoutePlan {
        name,
        matcher,
        handler,
        guards: Guards {
            // The site's: set by the site's plan.
            error_pages: None,
            ip_filter: (!ip_filter.is_empty()).then_some(ip_filter),
            rate_limit,
            max_concurrent,
            headers: (!headers.is_empty()).then_some(headers),
            rewrite,
            cors,
            basic_auth,
            compress,
            try_files,
            forward_auth,
        },
    };
    Ok((plan, field, path))
}

/// The root a `try_files` looks beneath and the script extensions it splits paths at:
/// a static route's root, or a FastCGI route's (its scripts' extensions).
fn try_files_root(handler: &Handler) -> Option<(std::path::PathBuf, Vec<String>, bool)> {
    match handler {
        Handler::Static { files, .. } => {
            Some((files.root().to_owned(), Vec::new(), files.shows_hidden()))
        }
        Handler::FastCgi { fastcgi, .. } => Some((
            fastcgi.root().to_owned(),
            fastcgi.extensions().to_vec(),
            false,
        )),
        _ => None,
    }
}

/// `try_files = [...]`, on a static or FastCGI route.
fn try_files(
    route: &RouteConfig,
    root: &Option<(std::path::PathBuf, Vec<String>, bool)>,
) -> Result<Option<scb_static::try_files::TryFilesLayer>, Located> {
    let Some(entries) = &route.try_files else {
        return Ok(None);
    };
    let Some((root, split, show_hidden)) = root else {
        return Err(Located::at(
            entries,
            "try_files",
            "looks for files beneath a root: it goes on a `static` or `fastcgi` route",
        ));
    };
    let list = entries.get_ref();
    let layer = scb_static::try_files::TryFilesLayer::new(root, list.iter().map(|e| e.get_ref()))
        .map_err(|e| match &e {
        scb_static::try_files::TryFilesError::Entry { index, .. } => {
            Located::at(&list[*index], format!("try_files[{index}]"), e)
        }
        _ => Located::at(entries, "try_files", e),
    })?;
    Ok(Some(layer.split_path(split).show_hidden(*show_hidden)))
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
    propagate_trace: bool,
) -> Result<Handler, Located> {
    let route = config.get_ref();
    // `health = false` is as good as absent.
    let health = route.health.as_ref().filter(|h| *h.get_ref());
    let given: Vec<(&str, Range<usize>)> = [
        ("respond", route.respond.as_ref().map(Spanned::span)),
        ("health", health.map(Spanned::span)),
        ("static", route.static_files.as_ref().map(Spanned::span)),
        ("proxy", route.proxy.as_ref().map(Spanned::span)),
        ("fastcgi", route.fastcgi.as_ref().map(Spanned::span)),
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
    if let Some(cache) = &route.cache
        && route.proxy.is_none()
    {
        return Err(Located::at(
            cache,
            "cache",
            "a cache stores what a `proxy` answers: put it on a proxy route (a static route \
             needs none, its files are already at hand)",
        ));
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
        let proxy = proxy_handler(proxy.get_ref(), matcher, trusted, propagate_trace)
            .map_err(|e| e.within("proxy"))?;
        let cache = route
            .cache
            .as_ref()
            .map(|c| {
                crate::config::convert::cache_layer(c.get_ref()).map_err(|e| e.within("cache"))
            })
            .transpose()?;
        return Ok(Handler::Proxy { proxy, cache });
    }
    if let Some(fastcgi) = &route.fastcgi {
        return fastcgi_handler(fastcgi, trusted, propagate_trace).map_err(|e| e.within("fastcgi"));
    }
    if let Some(redirect) = &route.redirect {
        return redirect_handler(redirect.get_ref(), matcher, named_site)
            .map_err(|e| e.within("redirect"));
    }
    Err(Located::at(
        config,
        "",
        "a route needs a handler: `respond = { ... }`, `static = { ... }`, `proxy = { ... }`, \
         `fastcgi = { ... }`, `redirect = { ... }` or `health = true`",
    ))
}

/// A FastCGI route: the scripts, and a file server over the same root for the rest (its
/// defaults: no hidden files, no listings). `REMOTE_ADDR` is the client `[server]
/// trusted_proxies` names, as everywhere.
fn fastcgi_handler(
    config: &Spanned<crate::config::FastCgiConfig>,
    trusted: &TrustedProxies,
    propagate_trace: bool,
) -> Result<Handler, Located> {
    let table = config.get_ref();
    let fastcgi = scb_proxy::fastcgi::FastCgiBuilder::try_from(table)?
        .trusted_proxies(trusted.clone())
        .propagate_trace(propagate_trace)
        .build()
        .map_err(|e| match e {
            scb_proxy::BuildError::Root { .. } => Located::at(&table.root, "root", e),
            e => Located::at(&table.upstreams, "upstreams", e),
        })?;
    let files = scb_static::ServeStatic::builder(table.root.get_ref().clone())
        .no_index()
        .build()
        .map_err(|e| Located::at(&table.root, "root", e))?;
    Ok(Handler::FastCgi { fastcgi, files })
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
    propagate_trace: bool,
) -> Result<scb_proxy::ReverseProxy, Located> {
    let mut builder =
        scb_proxy::ReverseProxyBuilder::try_from(config)?.propagate_trace(propagate_trace);
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
            PathMatch::Exact(_) | PathMatch::Regex(_) => {
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
    Ok(proxy)
}

/// `match = { methods, headers, query, remote }` onto the route's path (keys relative to
/// the `match` table). Client networks are read through `[server] trusted_proxies`, as
/// allow/deny read them.
fn route_match(
    path: PathMatch,
    config: &Spanned<MatchConfig>,
    trusted: &TrustedProxies,
) -> Result<RouteMatch, Located> {
    let c = config.get_ref();
    if c.methods.is_none() && c.headers.is_none() && c.query.is_none() && c.remote.is_none() {
        return Err(Located::at(
            config,
            "",
            "names no condition: give `methods`, `headers`, `query` or `remote`, or leave \
             `match` out",
        ));
    }
    let mut m = RouteMatch::new(path);
    if let Some(methods) = &c.methods {
        if methods.get_ref().is_empty() {
            return Err(Located::at(methods, "methods", "names no method"));
        }
        let mut list = Vec::new();
        for (i, method) in methods.get_ref().iter().enumerate() {
            let text = method.get_ref();
            // Methods are case-sensitive tokens (RFC 9110 9.1); a lower-case `get` is
            // another method, which no client sends for GET: refused as a likely typo.
            let parsed = http::Method::from_bytes(text.as_bytes())
                .ok()
                .filter(|_| !text.is_empty() && !text.bytes().any(|b| b.is_ascii_lowercase()));
            let Some(parsed) = parsed else {
                return Err(Located::at(
                    method,
                    format!("methods[{i}]"),
                    format_args!("{text:?} is not a method name (upper case, as `POST`)"),
                ));
            };
            list.push(parsed);
        }
        m = m.methods(list);
    }
    if let Some(headers) = &c.headers {
        for (name, value) in headers.get_ref() {
            let parsed = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                Located::at(
                    value,
                    format!("headers.{name}"),
                    format_args!("{name:?} is not a header name"),
                )
            })?;
            m = m.header(parsed, Glob::new(value.get_ref().as_str()));
        }
    }
    if let Some(query) = &c.query {
        for (key, value) in query.get_ref() {
            if key.is_empty() {
                return Err(Located::at(value, "query", "a parameter needs a name"));
            }
            m = m.query(key.as_str(), Glob::new(value.get_ref().as_str()));
        }
    }
    if let Some(remote) = &c.remote {
        let entries = remote.get_ref();
        if entries.is_empty() {
            return Err(Located::at(remote, "remote", "names no network"));
        }
        let networks =
            Networks::new(entries.iter().map(|e| e.get_ref().as_str())).map_err(|bad| {
                Located::at(&entries[bad.index], format!("remote[{}]", bad.index), bad)
            })?;
        m = m.remote(networks).trusted_proxies(trusted.clone());
    }
    Ok(m)
}

/// A route path: absolute, and a valid URI path (no query, no fragment), so that some
/// request can match it.
pub(super) fn check_path(path: &Spanned<String>, key: &str) -> Result<(), Located> {
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
