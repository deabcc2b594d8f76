//! The shape of `/status.json` (the schema, with what each field means, is in the
//! [module docs](super)). Built once a second by the sampler from the recorder, except the
//! parts the plan knows of ([`Status::upstreams`], [`Status::certificates`], the
//! worker list), which each answer reads at that moment.

use serde::Serialize;

/// The whole document.
#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Status {
    pub(super) version: &'static str,
    pub(super) time: String,
    pub(super) window_seconds: f64,
    pub(super) requests: Requests,
    pub(super) status_classes: StatusClasses,
    pub(super) latency_ms: Latency,
    pub(super) routes: Vec<Route>,
    pub(super) connections: Connections,
    pub(super) upstreams: Vec<Upstream>,
    pub(super) certificates: Vec<Certificate>,
    pub(super) cache: Option<Cache>,
    pub(super) chart: Chart,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Requests {
    pub(super) per_second: f64,
    pub(super) errors_per_second: f64,
    pub(super) in_flight: f64,
    pub(super) total: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct StatusClasses {
    #[serde(rename = "1xx")]
    pub(super) informational: f64,
    #[serde(rename = "2xx")]
    pub(super) success: f64,
    #[serde(rename = "3xx")]
    pub(super) redirection: f64,
    #[serde(rename = "4xx")]
    pub(super) client_error: f64,
    #[serde(rename = "5xx")]
    pub(super) server_error: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Latency {
    pub(super) window_seconds: f64,
    pub(super) count: f64,
    pub(super) p50: Option<f64>,
    pub(super) p90: Option<f64>,
    pub(super) p99: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Route {
    pub(super) name: String,
    pub(super) per_second: f64,
    pub(super) errors_per_second: f64,
    pub(super) total: f64,
    pub(super) p99_ms: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Connections {
    pub(super) open: f64,
    pub(super) workers: Vec<Worker>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Worker {
    pub(super) worker: usize,
    pub(super) open: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Upstream {
    pub(super) route: String,
    pub(super) address: String,
    pub(super) up: bool,
    pub(super) in_flight: usize,
    pub(super) per_second: f64,
    pub(super) errors_per_second: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Certificate {
    pub(super) names: Vec<String>,
    pub(super) file: String,
    pub(super) not_before: String,
    pub(super) not_after: String,
    pub(super) expires_in_days: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Cache {
    pub(super) hit_ratio: Option<f64>,
    pub(super) hit_ratio_window_seconds: f64,
    pub(super) hit_ratio_total: Option<f64>,
    pub(super) per_second: CacheRates,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct CacheRates {
    pub(super) hit: f64,
    pub(super) stale: f64,
    pub(super) revalidated: f64,
    pub(super) miss: f64,
    pub(super) pass: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(super) struct Chart {
    pub(super) interval_seconds: f64,
    pub(super) requests_per_second: Vec<f64>,
    pub(super) errors_per_second: Vec<f64>,
}
