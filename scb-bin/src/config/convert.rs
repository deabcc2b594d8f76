//! Config types into scb-core's builders. Each conversion checks what it converts and
//! reports errors with the key relative to its own table.

use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode, header};
use scb_core::respond::Respond;
use scb_core::server::Limits;
use toml::Spanned;

use super::{HumanDuration, LimitsConfig, Located, RequestIdConfig, RespondConfig, StaticConfig};

impl TryFrom<&LimitsConfig> for Limits {
    type Error = Located;

    fn try_from(config: &LimitsConfig) -> Result<Self, Located> {
        let mut limits = Limits::default();
        if let Some(value) = &config.header_read_timeout {
            limits.header_read_timeout = nonzero_duration(value, "header_read_timeout")?;
        }
        if let Some(value) = &config.body_read_timeout {
            limits.body_read_timeout = nonzero_duration(value, "body_read_timeout")?;
        }
        if let Some(value) = &config.send_timeout {
            limits.send_timeout = nonzero_duration(value, "send_timeout")?;
        }
        if let Some(value) = &config.keep_alive_timeout {
            limits.keep_alive_timeout = nonzero_duration(value, "keep_alive_timeout")?;
        }
        if let Some(value) = &config.max_header_bytes {
            let bytes = usize::try_from(value.get_ref().0)
                .map_err(|_| Located::at(value, "max_header_bytes", "too large"))?;
            limits.max_header_bytes = nonzero(value, bytes, "max_header_bytes")?;
        }
        if let Some(value) = &config.max_headers {
            limits.max_headers = nonzero(value, *value.get_ref(), "max_headers")?;
        }
        if let Some(value) = &config.max_connections {
            limits.max_connections = nonzero(value, *value.get_ref(), "max_connections")?;
        }
        // Zero is meaningful here: no request may have a body.
        if let Some(value) = config.max_body_bytes {
            limits.max_body_bytes = value.0;
        }
        Ok(limits)
    }
}

/// A zero timeout would fail every request at once; nobody means that.
fn nonzero_duration(value: &Spanned<HumanDuration>, key: &str) -> Result<Duration, Located> {
    let duration = value.get_ref().0;
    if duration.is_zero() {
        return Err(Located::at(value, key, "must be greater than zero"));
    }
    Ok(duration)
}

/// A limit of zero would refuse everything.
fn nonzero<T>(at: &Spanned<T>, n: usize, key: &str) -> Result<usize, Located> {
    if n == 0 {
        return Err(Located::at(at, key, "must be at least 1"));
    }
    Ok(n)
}

impl RequestIdConfig {
    /// The header name, `x-request-id` if none is given.
    pub(crate) fn header_name(&self) -> Result<HeaderName, Located> {
        let Some(name) = &self.header else {
            return Ok(scb_core::request_id::X_REQUEST_ID);
        };
        HeaderName::from_bytes(name.get_ref().as_bytes()).map_err(|_| {
            Located::at(
                name,
                "header",
                format_args!("invalid header name {:?}", name.get_ref()),
            )
        })
    }
}

/// Headers the server derives from the response itself; setting them by hand could only
/// contradict the framing it writes.
const FRAMING_HEADERS: [HeaderName; 3] = [
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
];

impl TryFrom<&RespondConfig> for Respond {
    type Error = Located;

    fn try_from(config: &RespondConfig) -> Result<Self, Located> {
        let status = match &config.status {
            None => StatusCode::OK,
            Some(status) => {
                let code = StatusCode::from_u16(*status.get_ref()).map_err(|_| {
                    Located::at(status, "status", "must be a status code from 100 to 999")
                })?;
                if code.is_informational() {
                    // A 1xx is never a final response: the client would keep waiting.
                    return Err(Located::at(
                        status,
                        "status",
                        "must not be 1xx (informational)",
                    ));
                }
                if matches!(code, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
                    && !config.body.is_empty()
                {
                    return Err(Located::at(
                        status,
                        "status",
                        format_args!("a {code} response cannot have a body"),
                    ));
                }
                code
            }
        };
        let mut respond = Respond::new(status);
        if let Some(value) = &config.content_type {
            let value = HeaderValue::from_str(value.get_ref())
                .map_err(|_| Located::at(value, "content_type", "invalid header value"))?;
            respond = respond.content_type(value);
        }
        for (name, value) in &config.headers {
            let key = format!("headers.{}", name.get_ref());
            let header = HeaderName::from_bytes(name.get_ref().as_bytes())
                .map_err(|_| Located::at(name, key.as_str(), "invalid header name"))?;
            if FRAMING_HEADERS.contains(&header) {
                return Err(Located::at(
                    name,
                    key,
                    "is set by the server from the response itself",
                ));
            }
            if header == header::CONTENT_TYPE {
                return Err(Located::at(name, key, "set it with `content_type`"));
            }
            let value = HeaderValue::from_str(value.get_ref())
                .map_err(|_| Located::at(value, key.as_str(), "invalid header value"))?;
            respond = respond.header(header, value);
        }
        Ok(respond.body(config.body.clone()))
    }
}

impl TryFrom<&StaticConfig> for scb_static::ServeStatic {
    type Error = Located;

    fn try_from(config: &StaticConfig) -> Result<Self, Located> {
        let mut builder =
            scb_static::ServeStatic::builder(config.root.get_ref()).show_hidden(config.show_hidden);
        if let Some(index) = &config.index {
            let index = index.get_ref();
            if index.contains('/') {
                return Err(Located::at(
                    config
                        .index
                        .as_ref()
                        .unwrap_or(&Spanned::new(0..0, String::new())),
                    "index",
                    "must be a file name, without '/'",
                ));
            }
            builder = builder.index((!index.is_empty()).then(|| index.clone()));
        }
        if let Some(codings) = &config.precompressed {
            builder = builder.precompressed(codings.get_ref().iter().cloned());
        }
        if let Some(symlinks) = &config.symlinks {
            builder = builder.symlinks(match symlinks.get_ref().as_str() {
                "beneath" => scb_static::Symlinks::Beneath,
                "none" => scb_static::Symlinks::None,
                _ => {
                    return Err(Located::at(
                        symlinks,
                        "symlinks",
                        "must be \"beneath\" or \"none\"",
                    ));
                }
            });
        }
        for rule in &config.cache_control {
            let r = rule.get_ref();
            builder = builder.cache_control(r.glob.clone(), r.value.clone());
        }
        if let Some(file) = &config.fallback {
            builder = builder.fallback(Some(site_file(file, "fallback")?));
        }
        if let Some(file) = &config.not_found {
            builder = builder.not_found(Some(site_file(file, "not_found")?));
        }
        builder = builder.list_directories(config.list_directories);
        builder.build().map_err(|e| match e {
            scb_static::BuildError::Root { .. } => Located::at(&config.root, "root", e),
            scb_static::BuildError::Coding(_) => match &config.precompressed {
                Some(p) => Located::at(p, "precompressed", e),
                None => Located::at(&config.root, "precompressed", e),
            },
            scb_static::BuildError::CacheControl(_) => match config.cache_control.first() {
                Some(first) => Located::at(first, "cache_control", e),
                None => Located::at(&config.root, "cache_control", e),
            },
            scb_static::BuildError::SiteFile { setting, .. } => {
                let at = match setting {
                    "fallback" => config.fallback.as_ref(),
                    _ => config.not_found.as_ref(),
                };
                match at {
                    Some(at) => Located::at(at, setting, e),
                    None => Located::at(&config.root, setting, e),
                }
            }
        })
    }
}

/// `fallback` and `not_found` name files beneath `root` as a request path would. A
/// filesystem path (absolute, or climbing out with `..`) there is a misunderstanding, so
/// it is refused rather than read as relative.
fn site_file<'a>(value: &'a Spanned<String>, key: &str) -> Result<&'a str, Located> {
    let name = value.get_ref();
    if name.starts_with('/') {
        return Err(Located::at(
            value,
            key,
            "must be a path relative to root, not an absolute path",
        ));
    }
    if name.split('/').any(|segment| segment == "..") {
        return Err(Located::at(
            value,
            key,
            "must not contain `..`: the file is beneath root",
        ));
    }
    if name
        .split('/')
        .all(|segment| segment.is_empty() || segment == ".")
    {
        return Err(Located::at(value, key, "must name a file beneath root"));
    }
    Ok(name)
}
