//! `rewrite = { prefix | regex, to }`, or `{ to }` on a `path_regex` route, into
//! scb-core's rewrite.

use scb_core::rewrite::RewriteLayer;
use toml::Spanned;

use crate::config::{Located, RewriteConfig};

/// `rewrite = { prefix | regex, to }`; `{ to }` alone takes the groups of the route's
/// `path_regex`.
pub(crate) fn rewrite(
    config: &Spanned<RewriteConfig>,
    path_regex: Option<&Spanned<String>>,
) -> Result<RewriteLayer, Located> {
    let r = config.get_ref();
    match (&r.prefix, &r.regex) {
        (None, None) if let Some(route_regex) = path_regex => {
            RewriteLayer::route_captures(route_regex.get_ref(), r.to.get_ref())
                .map_err(|e| Located::at(&r.to, "to", e))
        }
        (Some(prefix), None) => RewriteLayer::prefix(prefix.get_ref(), r.to.get_ref())
            .map_err(|e| Located::at(&r.to, "to", e)),
        (None, Some(regex)) => {
            RewriteLayer::regex(regex.get_ref(), r.to.get_ref()).map_err(|e| match e {
                scb_core::rewrite::RewriteError::Regex(_) => Located::at(regex, "regex", e),
                _ => Located::at(&r.to, "to", e),
            })
        }
        _ => Err(Located::at(
            config,
            "",
            "a rewrite has `prefix` or `regex` (one of them) and `to`, or only `to` on a \
             `path_regex` route (its groups are the placeholders)",
        )),
    }
}
