//! `headers = { request, response }` into scb-core's header rules.

use scb_core::header_rules::HeaderRules;

use crate::config::{HeaderRulesConfig, HeadersConfig, Located};

/// `headers = { request, response }` as two rule sets.
pub(crate) fn header_rules(config: &HeadersConfig) -> Result<(HeaderRules, HeaderRules), Located> {
    let one = |rules: &HeaderRulesConfig, key: &str| -> Result<HeaderRules, Located> {
        let mut out = HeaderRules::new();
        for name in &rules.remove {
            out = out
                .remove(name.get_ref())
                .map_err(|e| Located::at(name, format!("{key}.remove"), e))?;
        }
        for (name, value) in &rules.set {
            out = out
                .set(name, value.get_ref())
                .map_err(|e| Located::at(value, format!("{key}.set.{name}"), e))?;
        }
        for (name, value) in &rules.add {
            out = out
                .add(name, value.get_ref())
                .map_err(|e| Located::at(value, format!("{key}.add.{name}"), e))?;
        }
        Ok(out)
    };
    Ok((
        one(&config.request, "request")?,
        one(&config.response, "response")?,
    ))
}
