//! The text a config is parsed from: the file with its `${VAR}`s expanded, and the files
//! its `include` names appended, with where each part came from so that an error names
//! the file and line it is in.
//!
//! An included file holds tables only (`[[route]]`, `[[listen]]`, `[metrics]`, ...):
//! appended to the main file's text, they are read as if written there, so a table the
//! main file has already (`[server]` twice) is the same error as in one file.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Located};

/// The config's text, and the files it came from.
#[derive(Debug)]
pub(crate) struct Source {
    /// The main file's text, then each included file's, each after a newline.
    pub(crate) text: String,
    /// Where each file's text starts in `text`, in order.
    parts: Vec<(usize, PathBuf)>,
}

/// Just the `include` key of the main file.
#[derive(Deserialize)]
struct Includes {
    #[serde(default)]
    include: Vec<Spanned<String>>,
}

impl Source {
    /// Reads `file` and the files it includes, expanding `${VAR}`s with `env`.
    pub(crate) fn load(
        file: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let main = read(file)?;
        let text = expand(&main, env).map_err(|e| e.locate(file, &main))?;
        let includes: Includes =
            toml::from_str(&text).map_err(|e| Located::from_toml(&e, &text).locate(file, &text))?;
        let mut source = Self {
            parts: vec![(0, file.to_owned())],
            text,
        };
        let dir = std::path::absolute(file)
            .ok()
            .and_then(|f| f.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        for (i, pattern) in includes.include.iter().enumerate() {
            let files = matches(&dir, pattern.get_ref()).map_err(|message| {
                Located::at(pattern, format!("include[{i}]"), message).locate(file, &source.text)
            })?;
            for included in files {
                source.append(&included, env)?;
            }
        }
        Ok(source)
    }

    /// Appends one included file, checked on its own first: a syntax error is located in
    /// it, and a key outside any table would join the table before it when appended.
    fn append(
        &mut self,
        file: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let raw = read(file)?;
        let text = expand(&raw, env).map_err(|e| e.locate(file, &raw))?;
        let doc = toml::de::DeTable::parse(&text).map_err(|e| {
            Located {
                span: e.span(),
                key: String::new(),
                message: e.message().trim_end().to_owned(),
            }
            .locate(file, &text)
        })?;
        for (key, value) in doc.get_ref() {
            let located = |message: &str| Located {
                span: Some(key.span()),
                key: key.get_ref().to_string(),
                message: message.to_owned(),
            };
            if key.get_ref() == "include" {
                return Err(
                    located("includes do not nest: list every file in the main config")
                        .locate(file, &text),
                );
            }
            let table = matches!(value.get_ref(), toml::de::DeValue::Table(_))
                || matches!(value.get_ref(), toml::de::DeValue::Array(items)
                    if items.iter().all(|i| matches!(i.get_ref(), toml::de::DeValue::Table(_))));
            if !table {
                return Err(located(
                    "an included file holds tables only ([[route]], [[listen]], ...): \
                     put this key in the main config",
                )
                .locate(file, &text));
            }
        }
        self.text.push('\n');
        self.parts.push((self.text.len(), file.to_owned()));
        self.text.push_str(&text);
        Ok(())
    }

    /// The files read, the main one first.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        self.parts.iter().map(|(_, file)| file.as_path())
    }

    /// `error`, located in the file its span falls in.
    pub(crate) fn locate(&self, error: Located) -> ConfigError {
        let start = error.span.as_ref().map_or(0, |s| s.start);
        let (offset, file) = self
            .parts
            .iter()
            .rev()
            .find(|(offset, _)| *offset <= start)
            .unwrap_or(&self.parts[0]);
        let end = self
            .parts
            .iter()
            .find(|(o, _)| o > offset)
            .map_or(self.text.len(), |(o, _)| *o);
        let shifted = Located {
            span: error
                .span
                .map(|s| s.start - offset..s.end.saturating_sub(*offset)),
            ..error
        };
        shifted.locate(file, &self.text[*offset..end])
    }
}

fn read(file: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        file: file.to_owned(),
        source,
    })
}

/// The files `pattern` names, relative to `dir`, sorted: a pattern with `*`, `?` or `[`
/// may match none (an empty `conf.d/` is fine), a plain path must exist.
fn matches(dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let full = dir.join(pattern);
    let full_text = full.to_str().ok_or("the path is not UTF-8")?;
    if !pattern.contains(['*', '?', '[']) {
        return if full.is_file() {
            Ok(vec![full])
        } else {
            Err(format!("{} is not a file", full.display()))
        };
    }
    let mut files: Vec<PathBuf> = glob::glob(full_text)
        .map_err(|e| format!("not a pattern: {e}"))?
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// `text` with `${NAME}` and `${NAME:-default}` replaced by the variable's value (the
/// default when it is unset or empty); `$${` is a literal `${`. Lines that are comments
/// are left alone. A value may not hold a newline: line numbers in errors stay true.
fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, Located> {
    let mut out = String::with_capacity(text.len());
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            offset += line.len();
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at..];
            if let Some(literal) = after.strip_prefix("$${") {
                out.push_str("${");
                rest = literal;
                continue;
            }
            let Some(inner) = after.strip_prefix("${") else {
                out.push('$');
                rest = &after[1..];
                continue;
            };
            let here = offset + (line.len() - rest.len()) + at;
            let error = |message: String| Located {
                span: Some(here..here + 2),
                key: String::new(),
                message,
            };
            let end = inner
                .find('}')
                .ok_or_else(|| error("`${` without its `}`".to_owned()))?;
            let (name, default) = match inner[..end].split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (&inner[..end], None),
            };
            let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(error(format!("`{name}` is not a variable name")));
            }
            let value = match (env(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => value,
                (None, Some(default)) => default.to_owned(),
                (None, None) => {
                    return Err(error(format!(
                        "${{{name}}} is not set and has no default (`${{{name}:-default}}`)"
                    )));
                }
            };
            if value.contains(['\n', '\r']) {
                return Err(error(format!("${{{name}}} holds a line break")));
            }
            out.push_str(&value);
            rest = &inner[end + 1..];
        }
        out.push_str(rest);
        offset += line.len();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("8081".to_owned()),
            "EMPTY" => Some(String::new()),
            "MULTI" => Some("a\nb".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn variables_expand_with_defaults_and_escapes() {
        let text = "a = \"${PORT}\"\nb = \"${NOPE:-x:y}\"\nc = \"${EMPTY:-d}\"\n\
                    d = \"$${PORT} $5 $\"\n# ${NOPE} in a comment\n";
        assert_eq!(
            expand(text, &env).unwrap(),
            "a = \"8081\"\nb = \"x:y\"\nc = \"d\"\nd = \"${PORT} $5 $\"\n# ${NOPE} in a comment\n"
        );
    }

    #[test]
    fn an_unset_variable_without_default_names_its_line() {
        let text = "a = 1\nb = \"${NOPE}\"\n";
        let err = expand(text, &env).unwrap_err();
        assert_eq!(
            err.locate(Path::new("scb.toml"), text).to_string(),
            "scb.toml:2:6: ${NOPE} is not set and has no default (`${NOPE:-default}`)"
        );
        for (bad, message) in [
            ("x = \"${PORT\"\n", "`${` without its `}`"),
            ("x = \"${1A}\"\n", "`1A` is not a variable name"),
            ("x = \"${MULTI}\"\n", "${MULTI} holds a line break"),
        ] {
            assert_eq!(expand(bad, &env).unwrap_err().message, message);
        }
    }
}
