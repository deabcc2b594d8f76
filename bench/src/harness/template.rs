//! Config templates: `{{NAME}}` placeholders replaced by plain string substitution.
//!
//! The committed configs under `bench/configs/` are the servers' own formats with
//! placeholders for what differs per run (ports, paths, workers). Rendering is one pass
//! (a value is never scanned for placeholders itself), and a placeholder the harness does
//! not know is an error naming it and its line, so a typo cannot reach a server as a
//! literal `{{HTTP_PROT}}`.

use std::collections::BTreeMap;

use anyhow::bail;

/// The placeholder values for one rendering.
#[derive(Clone, Debug, Default)]
pub(crate) struct Vars(BTreeMap<&'static str, String>);

impl Vars {
    /// No values yet.
    pub(crate) fn new() -> Vars {
        Vars::default()
    }

    /// Sets `{{name}}` to `value`.
    pub(crate) fn set(mut self, name: &'static str, value: impl Into<String>) -> Vars {
        self.0.insert(name, value.into());
        self
    }
}

/// Whether `name` looks like a placeholder name: `A-Z`, `0-9`, `_`, starting with a letter.
fn is_placeholder_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Renders `template` (named `origin` in errors).
///
/// Text that is not `{{NAME}}` with an upper-case name (nginx and Caddy blocks, Lua, a
/// stray `{{`) passes through unchanged.
///
/// # Errors
///
/// When the template uses a placeholder that `vars` does not define.
pub(crate) fn render(origin: &str, template: &str, vars: &Vars) -> anyhow::Result<String> {
    let mut out = String::with_capacity(template.len() + 256);
    let mut unknown = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) if is_placeholder_name(&after[..end]) => {
                let name = &after[..end];
                match vars.0.get(name) {
                    Some(value) => out.push_str(value),
                    None => {
                        let line = template[..template.len() - rest.len() + start]
                            .matches('\n')
                            .count()
                            + 1;
                        unknown.push(format!(
                            "{origin}:{line}: unknown placeholder {{{{{name}}}}}"
                        ));
                        out.push_str(&rest[start..start + 2 + end + 2]);
                    }
                }
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    if !unknown.is_empty() {
        let known: Vec<_> = vars.0.keys().copied().collect();
        bail!("{} (known: {})", unknown.join("; "), known.join(", "));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars::new()
            .set("HTTP_PORT", "8080")
            .set("DOCROOT", "/srv/{{x}}")
    }

    #[test]
    fn placeholders_are_replaced_everywhere() {
        let out = render(
            "t",
            "listen {{HTTP_PORT}}; root {{DOCROOT}}; # {{HTTP_PORT}}",
            &vars(),
        );
        assert_eq!(out.unwrap(), "listen 8080; root /srv/{{x}}; # 8080");
    }

    #[test]
    fn values_are_not_rescanned() {
        let v = Vars::new().set("A", "{{B}}");
        assert_eq!(render("t", "{{A}}", &v).unwrap(), "{{B}}");
    }

    #[test]
    fn unknown_placeholder_is_an_error_with_its_line() {
        let err = render("nginx.conf", "a\nlisten {{HTTP_PROT}};\n", &vars()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("nginx.conf:2: unknown placeholder {{HTTP_PROT}}"),
            "{msg}"
        );
        assert!(msg.contains("HTTP_PORT"), "{msg}");
    }

    #[test]
    fn server_syntax_that_is_not_a_placeholder_passes_through() {
        let text = "location / { return 200; }\n{{ lower }} {{}} {{a}} {{ \n{{DOCROOT";
        assert_eq!(render("t", text, &vars()).unwrap(), text);
    }

    #[test]
    fn caddy_placeholders_in_single_braces_are_untouched() {
        let text = "header X-Path {path} {{HTTP_PORT}}";
        assert_eq!(
            render("t", text, &vars()).unwrap(),
            "header X-Path {path} 8080"
        );
    }
}
