//! Config errors that point at the file, line, column and dotted key they are about.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        /// The file as named on the command line.
        file: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The file was read but is not a valid config.
    #[error("{}", Location(self))]
    Invalid {
        /// The file as named on the command line.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// The dotted key, e.g. `limits.send_timeout` or `route[1].path`; empty for a
        /// syntax error outside any key.
        key: String,
        /// What is wrong, lower-case, no trailing period.
        message: String,
    },
}

/// Formats [`ConfigError::Invalid`] as `file:line:column: key: message`.
struct Location<'a>(&'a ConfigError);

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ConfigError::Invalid {
            file,
            line,
            column,
            key,
            message,
        } = self.0
        else {
            return Ok(());
        };
        write!(f, "{}:{line}:{column}: ", file.display())?;
        if !key.is_empty() {
            write!(f, "{key}: ")?;
        }
        f.write_str(message)
    }
}

/// An error found in the document: where (a byte range, if known), which key, and what.
///
/// Errors are raised with the key relative to the piece being checked and are given
/// their parents' keys with [`within`](Self::within) on the way up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) span: Option<Range<usize>>,
    pub(crate) key: String,
    pub(crate) message: String,
}

impl Located {
    /// An error about the value `at` of `key`.
    pub(crate) fn at<T>(
        at: &Spanned<T>,
        key: impl Into<String>,
        message: impl fmt::Display,
    ) -> Self {
        Self {
            span: Some(at.span()),
            key: key.into(),
            message: message.to_string(),
        }
    }

    /// An error about `key`, which has no place in the file (say, it is missing).
    pub(crate) fn nowhere(key: impl Into<String>, message: impl fmt::Display) -> Self {
        Self {
            span: None,
            key: key.into(),
            message: message.to_string(),
        }
    }

    /// Prefixes the key with its parent's: `status` within `route[0].respond`.
    pub(crate) fn within(mut self, parent: &str) -> Self {
        self.key = match (parent.is_empty(), self.key.is_empty()) {
            (true, _) => self.key,
            (false, true) => parent.to_owned(),
            (false, false) if self.key.starts_with('[') => format!("{parent}{}", self.key),
            (false, false) => format!("{parent}.{}", self.key),
        };
        self
    }

    /// An error from the TOML deserializer: its key is found from its span.
    pub(crate) fn from_toml(err: &toml::de::Error, source: &str) -> Self {
        let span = err.span();
        let key = span
            .as_ref()
            .map(|span| key_at(source, span.start))
            .unwrap_or_default();
        Self {
            span,
            key,
            message: err.message().trim_end().to_owned(),
        }
    }

    /// Resolves the span to a line and column in `source`, read from `file`.
    pub(crate) fn locate(self, file: &Path, source: &str) -> ConfigError {
        let (line, column) = self
            .span
            .map_or((1, 1), |span| line_column(source, span.start));
        ConfigError::Invalid {
            file: file.to_owned(),
            line,
            column,
            key: self.key,
            message: self.message,
        }
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `source`.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The dotted key of the deepest key or value in `source` that contains byte `offset`,
/// e.g. `limits.send_timeout` or `route[2].respond.status`. Empty if the document does
/// not parse or nothing contains the offset.
fn key_at(source: &str, offset: usize) -> String {
    let Ok(doc) = DeTable::parse(source) else {
        return String::new();
    };
    let mut best = Vec::new();
    let mut path = Vec::new();
    search_table(doc.get_ref(), offset, &mut path, &mut best);
    best.concat()
}

/// Depth-first search, keeping the longest path whose key or value contains `offset`.
/// Every node is visited: the span of a `[table]` need not cover the lines below its
/// header, so a parent not containing the offset says nothing about its children.
fn search_table(
    table: &DeTable<'_>,
    offset: usize,
    path: &mut Vec<String>,
    best: &mut Vec<String>,
) {
    for (key, value) in table.iter() {
        let part = if path.is_empty() {
            key.get_ref().to_string()
        } else {
            format!(".{}", key.get_ref())
        };
        path.push(part);
        let here = key.span().contains(&offset) || value.span().contains(&offset);
        if here && path.len() > best.len() {
            best.clone_from(path);
        }
        search_value(value, offset, path, best);
        path.pop();
    }
}

fn search_value(
    value: &Spanned<DeValue<'_>>,
    offset: usize,
    path: &mut Vec<String>,
    best: &mut Vec<String>,
) {
    match value.get_ref() {
        DeValue::Table(table) => search_table(table, offset, path, best),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(format!("[{i}]"));
                if item.span().contains(&offset) && path.len() > best.len() {
                    best.clone_from(path);
                }
                search_value(item, offset, path, best);
                path.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters_from_one() {
        let src = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_column(src, 0), (1, 1));
        assert_eq!(line_column(src, 4), (1, 5));
        assert_eq!(line_column(src, 6), (2, 1));
        // "bé = " is 6 bytes but 5 characters.
        assert_eq!(line_column(src, 12), (2, 6));
        assert_eq!(line_column(src, 10_000), (3, 1));
    }

    #[test]
    fn key_at_finds_the_deepest_dotted_key() {
        let src = "[limits]\nsend_timeout = \"30s\"\n\n[[route]]\npath = \"/a\"\n\n[[route]]\n\
                   respond = { status = 200 }\n";
        let at = |needle: &str| key_at(src, src.find(needle).unwrap());
        assert_eq!(at("\"30s\""), "limits.send_timeout");
        assert_eq!(at("send_timeout"), "limits.send_timeout");
        assert_eq!(at("\"/a\""), "route[0].path");
        assert_eq!(at("200"), "route[1].respond.status");
    }

    #[test]
    fn within_joins_keys_and_indices() {
        let e = Located::nowhere("status", "bad")
            .within("respond")
            .within("route[3]");
        assert_eq!(e.key, "route[3].respond.status");
        let e = Located::nowhere("[2]", "bad").within("listen");
        assert_eq!(e.key, "listen[2]");
        let e = Located::nowhere("", "bad").within("route[0]");
        assert_eq!(e.key, "route[0]");
    }
}
