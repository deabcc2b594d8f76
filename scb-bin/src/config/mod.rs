//! The config file: TOML, deserialized with serde into the types below (unknown keys are
//! errors everywhere), then checked and converted into scb-core's builders by
//! [`Plan`](crate::plan::Plan).
//!
//! These types belong to the binary. The layer crates know nothing of them: each
//! conversion is a `From`/`TryFrom` here, from a config type into a layer's own builder
//! (see [`convert`]).
//!
//! Values whose meaning is checked after deserializing are kept [`Spanned`], so that an
//! error names the line, column and key it is about, like a deserializer error does.

mod convert;
mod error;
mod units;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

pub(crate) use error::{ConfigError, Located};
pub(crate) use units::{ByteSize, HumanDuration};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    #[serde(default)]
    pub(crate) server: ServerConfig,
    #[serde(default)]
    pub(crate) limits: LimitsConfig,
    #[serde(default)]
    pub(crate) request_id: RequestIdConfig,
    /// Absent: no metrics endpoint (the metrics layers record into nothing).
    pub(crate) metrics: Option<MetricsConfig>,
    #[serde(default)]
    pub(crate) log: LogConfig,
    /// At least one is required; that is checked with the rest, so that a missing
    /// `[[listen]]` reads like every other error.
    #[serde(default)]
    pub(crate) listen: Vec<ListenConfig>,
    #[serde(default)]
    pub(crate) route: Vec<Spanned<RouteConfig>>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerConfig {
    /// Worker threads; absent means one per available CPU.
    pub(crate) workers: Option<Spanned<usize>>,
    /// How long in-flight requests may finish after SIGTERM; absent means scb-core's
    /// default.
    pub(crate) grace_period: Option<HumanDuration>,
}

/// `[limits]`: every key is optional and defaults to scb-core's `Limits::default()`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsConfig {
    pub(crate) header_read_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) body_read_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) send_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) keep_alive_timeout: Option<Spanned<HumanDuration>>,
    pub(crate) max_header_bytes: Option<Spanned<ByteSize>>,
    pub(crate) max_headers: Option<Spanned<usize>>,
    pub(crate) max_body_bytes: Option<ByteSize>,
    pub(crate) max_connections: Option<Spanned<usize>>,
}

/// `[request_id]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestIdConfig {
    /// Absent means `x-request-id`.
    pub(crate) header: Option<Spanned<String>>,
}

/// `[metrics]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsConfig {
    pub(crate) listen: Spanned<SocketAddr>,
    /// Absent means `/metrics`.
    pub(crate) path: Option<Spanned<String>>,
}

/// `[log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogConfig {
    /// The access log (tracing target `scb::access`); off by default.
    #[serde(default)]
    pub(crate) access: bool,
}

/// One `[[listen]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListenConfig {
    pub(crate) addr: Spanned<SocketAddr>,
}

/// One `[[route]]`: a name, exactly one of `path` and `prefix`, and exactly one handler.
///
/// Later handlers (`proxy`) are further `Option` fields next to `respond` and `static`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteConfig {
    /// The route's name in metrics and logs; absent means one derived from the path.
    pub(crate) name: Option<Spanned<String>>,
    /// Exact match.
    pub(crate) path: Option<Spanned<String>>,
    /// Prefix match, on segment boundaries.
    pub(crate) prefix: Option<Spanned<String>>,
    pub(crate) respond: Option<Spanned<RespondConfig>>,
    /// `static = { ... }`: files beneath a directory.
    #[serde(rename = "static")]
    pub(crate) static_files: Option<Spanned<StaticConfig>>,
}

/// `static = { ... }`: the files beneath `root`. The request path is looked up beneath the
/// root as it is, prefix included (nginx's `root`, not `alias`): with
/// `prefix = "/assets/"` and `root = "/srv/www"`, `/assets/app.js` is
/// `/srv/www/assets/app.js`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StaticConfig {
    pub(crate) root: Spanned<std::path::PathBuf>,
    /// Absent means `index.html`; `""` means no index file.
    pub(crate) index: Option<Spanned<String>>,
    /// Sidecar codings in the server's order of preference (`br`, `zstd`, `gzip`);
    /// absent means none.
    pub(crate) precompressed: Option<Spanned<Vec<String>>>,
    /// `beneath` (absent) or `none`.
    pub(crate) symlinks: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) show_hidden: bool,
    /// `[{ glob = "*.html", value = "no-cache" }, ...]`, first match wins.
    #[serde(default)]
    pub(crate) cache_control: Vec<Spanned<CacheRuleConfig>>,
    /// A file beneath the root (`index.html`) served with 200 for paths that name no
    /// file: a single-page app's entry point. Absent means none.
    pub(crate) fallback: Option<Spanned<String>>,
    /// A file beneath the root (`404.html`) sent with every 404. Absent means the plain
    /// 404.
    pub(crate) not_found: Option<Spanned<String>>,
    /// HTML listings of directories without an index file.
    #[serde(default)]
    pub(crate) list_directories: bool,
    /// On-the-fly gzip/br/zstd for compressible types that have no sidecar.
    #[serde(default)]
    pub(crate) compress: bool,
}

/// One Cache-Control rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CacheRuleConfig {
    pub(crate) glob: String,
    pub(crate) value: String,
}

/// `respond = { ... }`: a fixed response.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RespondConfig {
    /// Absent means 200.
    pub(crate) status: Option<Spanned<u16>>,
    #[serde(default)]
    pub(crate) body: String,
    pub(crate) content_type: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<Spanned<String>, Spanned<String>>,
}

impl Config {
    /// Deserializes `source`; the result is well-typed but not yet checked (see
    /// [`Plan`](crate::plan::Plan)).
    pub(crate) fn parse(source: &str) -> Result<Self, Located> {
        toml::from_str(source).map_err(|e| Located::from_toml(&e, source))
    }

    /// Reads `file`, for error messages that name it as the user did.
    pub(crate) fn read(file: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
            file: file.to_owned(),
            source,
        })
    }
}
