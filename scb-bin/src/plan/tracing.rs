//! `[tracing]`: trace context, sampling and the span exporter's address, checked.

use http::Uri;

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
        None => None,
        Some(otlp) => Some(ExportPlan {
            endpoint: endpoint(otlp.get_ref())
                .map_err(|why| Located::at(otlp, "tracing.otlp", why))?,
            service_name,
        }),
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

/// The collector's traces endpoint: `url` as given when it names a path, else with the
/// OTLP/HTTP path `/v1/traces` (the address of a collector, as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// takes it).
fn endpoint(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "https collectors are not supported yet: send to a local collector or agent \
                 over http (OTLP/HTTP, port 4318)"
                    .to_owned(),
            );
        }
        _ => return Err(format!("{url:?} must start with http://")),
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("{url:?} names no host"));
    };
    let path = uri.path();
    if path.is_empty() || path == "/" {
        return Uri::builder()
            .scheme("http")
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
        for bad in [
            "https://c:4318",
            "grpc://c:4317",
            "c:4318",
            "http://",
            "not a url",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }
}
