//! `[tracing]`: trace context, sampling and the span exporter's address, checked.

use std::collections::BTreeMap;

use http::uri::Scheme;
use http::{HeaderName, HeaderValue, Uri};
use toml::Spanned;

use crate::config::{Located, TracingConfig};
use crate::otlp::ExportPlan;

/// `[tracing]`, checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TracingPlan {
    /// Where spans go; `None`: trace ids and propagation only.
    pub(crate) export: Option<ExportPlan>,
    /// The share of traces starting here that are sampled.
    pub(crate) sample_ratio: f64,
    /// Whether upstreams are told this server's span.
    pub(crate) propagate: bool,
}

/// Checks `[tracing]`.
pub(super) fn plan(config: &TracingConfig) -> Result<TracingPlan, Located> {
    let service_name = match &config.service_name {
        Some(name) if name.get_ref().trim().is_empty() => {
            return Err(Located::at(
                name,
                "tracing.service_name",
                "must not be empty",
            ));
        }
        Some(name) => name.get_ref().clone(),
        None => "scb".to_owned(),
    };
    let export = match &config.otlp {
        None => {
            if let Some(root) = &config.ca_root {
                return Err(Located::at(root, "tracing.ca_root", "needs `otlp`"));
            }
            if let Some((name, _)) = config.headers.iter().next() {
                return Err(Located::at(name, "tracing.headers", "needs `otlp`"));
            }
            None
        }
        Some(otlp) => {
            let endpoint =
                endpoint(otlp.get_ref()).map_err(|why| Located::at(otlp, "tracing.otlp", why))?;
            let ca_root = config.ca_root.as_ref().map(|root| root.get_ref().clone());
            // The roots are read now so that a bad file is an error of the config, with
            // its line, not of the exporter's start.
            if endpoint.scheme() == Some(&Scheme::HTTPS) {
                scb_tls::client::roots(ca_root.as_deref()).map_err(|e| match &config.ca_root {
                    Some(root) => Located::at(root, "tracing.ca_root", e),
                    None => Located::at(otlp, "tracing.otlp", e),
                })?;
            }
            Some(ExportPlan {
                endpoint,
                service_name,
                ca_root,
                headers: headers(&config.headers)?,
            })
        }
    };
    let sample_ratio = match &config.sample_ratio {
        None => 1.0,
        Some(ratio) if (0.0..=1.0).contains(ratio.get_ref()) => *ratio.get_ref(),
        Some(ratio) => {
            return Err(Located::at(
                ratio,
                "tracing.sample_ratio",
                "must be between 0 and 1 (0.05 samples one trace in twenty)",
            ));
        }
    };
    Ok(TracingPlan {
        export,
        sample_ratio,
        propagate: config.propagate.unwrap_or(true),
    })
}

/// `headers`, checked: each a field name and a value a field may carry, the values
/// marked sensitive (never printed, never indexed by HTTP/2's HPACK).
fn headers(
    config: &BTreeMap<Spanned<String>, Spanned<String>>,
) -> Result<Vec<(HeaderName, HeaderValue)>, Located> {
    config
        .iter()
        .map(|(name, value)| {
            let key = || format!("tracing.headers.{}", name.get_ref());
            let parsed = HeaderName::from_bytes(name.get_ref().as_bytes())
                .map_err(|_| Located::at(name, key(), "is not a header name"))?;
            let mut field = HeaderValue::from_str(value.get_ref()).map_err(|_| {
                Located::at(
                    value,
                    key(),
                    "is not a header value (visible ASCII and spaces)",
                )
            })?;
            field.set_sensitive(true);
            Ok((parsed, field))
        })
        .collect()
}

/// The collector's traces endpoint: `url` as given when it names a path, else with the
/// OTLP/HTTP path `/v1/traces` (the address of a collector, as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// takes it).
fn endpoint(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => Scheme::HTTP,
        Some("https") => Scheme::HTTPS,
        _ => return Err(format!("{url:?} must start with http:// or https://")),
    };
    let Some(authority) = uri.authority() else {
        return Err(format!("{url:?} names no host"));
    };
    let path = uri.path();
    if path.is_empty() || path == "/" {
        return Uri::builder()
            .scheme(scheme)
            .authority(authority.clone())
            .path_and_query("/v1/traces")
            .build()
            .map_err(|e| e.to_string());
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_address_gets_the_traces_path_and_a_full_url_is_kept() {
        assert_eq!(
            endpoint("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            endpoint("http://collector/otlp/v1/traces").unwrap(),
            "http://collector/otlp/v1/traces"
        );
        assert_eq!(
            endpoint("https://otlp.example.com").unwrap(),
            "https://otlp.example.com/v1/traces"
        );
        for bad in ["grpc://c:4317", "c:4318", "http://", "not a url"] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }
}
