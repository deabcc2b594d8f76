//! `cors = { ... }` into tower-http's CORS layer, checked.

use http::HeaderName;
use toml::Spanned;

use crate::config::{CorsConfig, Located};

/// `cors = { ... }` as tower-http's layer, checked here: tower-http asserts at the first
/// request that credentials go with no wildcard, and a worker must not panic on that.
pub(crate) fn cors(config: &CorsConfig) -> Result<tower_http::cors::CorsLayer, Located> {
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
