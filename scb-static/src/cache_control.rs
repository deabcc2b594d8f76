//! `Cache-Control` by glob: an ordered list of (pattern, value) rules, first match wins.
//!
//! ```text
//! "*.html"              = "no-cache"                                 any HTML file
//! "assets/**"           = "public, max-age=31536000, immutable"      everything under /assets
//! "/sw.js"              = "no-cache"                                 only the root's sw.js
//! "*.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f].js"
//!                       = "public, max-age=31536000, immutable"      app.3f9a1c2b.js, anywhere
//! ```
//!
//! Patterns are matched against the normalised relative path of the file served (no leading
//! `/`, e.g. `assets/app.js`; the original's path when a sidecar is served), with these
//! semantics (`globset` with `literal_separator` on):
//!
//! - `*` matches any run of characters within one path segment and `?` any one character;
//!   neither crosses `/`. Both match a leading `.` (`*` matches `.env`).
//! - `**` crosses segments: `a/**` is everything under `a`, `**/b` is `b` at any depth
//!   (the root included), `a/**/b` is `b` anywhere under `a`.
//! - `[abc]`, `[a-z]` and `[!a-z]` are character classes; `{png,jpg}` is a choice between
//!   alternatives; `\` escapes the next character. There are no repetition counts:
//!   `[0-9a-f]{8}` is one hex digit followed by `8`, so write the class out eight times.
//! - Matching is case-sensitive, as paths on the file system are.
//! - As in `.gitignore`, a pattern with no `/` matches the file name at any depth (`*.html`
//!   is `**/*.html`), a pattern with a `/` is anchored at the root (`assets/*.js` does not
//!   match `x/assets/a.js`), and a leading `/` anchors a pattern without one
//!   (`/index.html` is only the root's). Without this, `*.html` would match only top-level
//!   files and every nested page would silently go without its rule.
//! - A pattern ending in `/` would match no file and is refused; `dir/**` is what it means.

use std::cell::RefCell;
use std::fmt;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use http::HeaderValue;

/// Compiled `Cache-Control` rules. The default has none and matches nothing.
#[derive(Clone, Default)]
pub(crate) struct CacheControlRules {
    set: GlobSet,
    /// In rule order: pattern as configured, and its value.
    rules: Vec<(Box<str>, HeaderValue)>,
}

/// Rules that cannot be compiled. `rule` is the 0-based position of the offending rule in
/// the list given, for the caller to point at the configuration entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheControlError {
    /// The pattern is not a glob.
    #[error("invalid glob `{pattern}`: {reason}")]
    Glob {
        /// Position of the rule.
        rule: usize,
        /// The pattern as configured.
        pattern: String,
        /// What the glob compiler found wrong with it.
        reason: String,
    },
    /// The pattern is a glob, but cannot match a file.
    #[error("glob `{pattern}` can match no file: {why}")]
    Unmatchable {
        /// Position of the rule.
        rule: usize,
        /// The pattern as configured.
        pattern: String,
        /// Why, and what to write instead.
        why: &'static str,
    },
    /// The patterns are valid one by one but too many or too large to compile together.
    #[error("cache-control globs too complex to compile together: {reason}")]
    TooComplex {
        /// What the glob compiler found wrong with them.
        reason: String,
    },
    /// The value cannot be sent as a header (empty, or control characters such as a
    /// newline).
    #[error("invalid Cache-Control value {value:?} for glob `{pattern}`")]
    Value {
        /// Position of the rule.
        rule: usize,
        /// The pattern as configured.
        pattern: String,
        /// The value as configured.
        value: String,
    },
}

impl CacheControlError {
    /// The 0-based position of the offending rule; `None` when the rules are only wrong
    /// together.
    pub fn rule(&self) -> Option<usize> {
        match self {
            Self::Glob { rule, .. } | Self::Unmatchable { rule, .. } | Self::Value { rule, .. } => {
                Some(*rule)
            }
            Self::TooComplex { .. } => None,
        }
    }
}

impl CacheControlRules {
    /// Compiles `(pattern, value)` rules, in priority order, into one matcher.
    ///
    /// # Errors
    ///
    /// The first rule whose pattern is not a glob, can match no file (empty, or ending in
    /// `/`), or whose value is not a valid non-empty header value; or
    /// [`TooComplex`](CacheControlError::TooComplex) when the rules together exceed what
    /// globset compiles.
    pub(crate) fn new<P, V>(
        rules: impl IntoIterator<Item = (P, V)>,
    ) -> Result<Self, CacheControlError>
    where
        P: AsRef<str>,
        V: AsRef<str>,
    {
        let mut builder = GlobSetBuilder::new();
        let mut compiled: Vec<(Box<str>, HeaderValue)> = Vec::new();
        for (rule, (pattern, value)) in rules.into_iter().enumerate() {
            let (pattern, value) = (pattern.as_ref(), value.as_ref());
            let unmatchable = |why| CacheControlError::Unmatchable {
                rule,
                pattern: pattern.to_owned(),
                why,
            };
            if pattern.is_empty() {
                return Err(unmatchable("it is empty"));
            }
            if pattern.ends_with('/') {
                return Err(unmatchable(
                    "it ends in `/`; `dir/**` matches everything under a directory",
                ));
            }
            let glob = GlobBuilder::new(&anchored(pattern))
                .literal_separator(true)
                // The default depends on the platform; a config file should not.
                .backslash_escape(true)
                .build()
                .map_err(|e| CacheControlError::Glob {
                    rule,
                    pattern: pattern.to_owned(),
                    reason: e.kind().to_string(),
                })?;
            let header = HeaderValue::from_str(value)
                .ok()
                .filter(|v| !v.as_bytes().trim_ascii().is_empty())
                .ok_or_else(|| CacheControlError::Value {
                    rule,
                    pattern: pattern.to_owned(),
                    value: value.to_owned(),
                })?;
            builder.add(glob);
            compiled.push((pattern.into(), header));
        }
        // Each glob compiled alone; together they can still exceed the regex size limit.
        let set = builder.build().map_err(|e| CacheControlError::TooComplex {
            reason: e.kind().to_string(),
        })?;
        Ok(CacheControlRules {
            set,
            rules: compiled,
        })
    }

    /// Whether there are no rules.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The value of the first rule whose pattern matches `rel`, the file's path relative to
    /// the root (`assets/app.js`; a leading `/` is ignored).
    ///
    /// Allocates nothing once a thread has matched against a set this size: the match
    /// indices go into a per-thread buffer that is reused.
    pub(crate) fn for_path(&self, rel: &str) -> Option<&HeaderValue> {
        if self.rules.is_empty() {
            return None;
        }
        let rel = rel.strip_prefix('/').unwrap_or(rel);
        let candidate = Candidate::from_bytes(rel);
        let first = MATCHES.with_borrow_mut(|matches| {
            self.set.matches_candidate_into(&candidate, matches);
            // Ascending: the first index is the first rule in configuration order.
            matches.first().copied()
        });
        first
            .and_then(|i| self.rules.get(i))
            .map(|(_, value)| value)
    }
}

thread_local! {
    /// `GlobSet` reports every matching rule into a `Vec`; reusing one per thread keeps
    /// the per-request path allocation-free.
    static MATCHES: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The `.gitignore` anchoring rule: no `/` matches at any depth, a leading `/` anchors.
fn anchored(pattern: &str) -> std::borrow::Cow<'_, str> {
    if let Some(rooted) = pattern.strip_prefix('/') {
        rooted.into()
    } else if pattern.contains('/') {
        pattern.into()
    } else {
        format!("**/{pattern}").into()
    }
}

impl fmt::Debug for CacheControlRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.rules.iter().map(|(p, v)| (p, v)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMMUTABLE: &str = "public, max-age=31536000, immutable";
    const HEX8: &str = "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]";

    fn rules(list: &[(&str, &str)]) -> CacheControlRules {
        CacheControlRules::new(list.iter().copied()).unwrap()
    }

    fn get<'r>(r: &'r CacheControlRules, rel: &str) -> Option<&'r str> {
        r.for_path(rel).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn first_matching_rule_wins() {
        let r = rules(&[
            ("assets/**", IMMUTABLE),
            ("*.html", "no-cache"),
            ("**", "public, max-age=300"),
        ]);
        assert_eq!(get(&r, "assets/page.html"), Some(IMMUTABLE));
        assert_eq!(get(&r, "docs/page.html"), Some("no-cache"));
        assert_eq!(get(&r, "img/a.png"), Some("public, max-age=300"));

        let reversed = rules(&[("*.html", "no-cache"), ("assets/**", IMMUTABLE)]);
        assert_eq!(get(&reversed, "assets/page.html"), Some("no-cache"));
    }

    #[test]
    fn no_matching_rule_gives_none() {
        let r = rules(&[("*.html", "no-cache")]);
        assert_eq!(get(&r, "a.css"), None);
        assert_eq!(get(&r, "html"), None);
        assert_eq!(get(&r, ""), None);
    }

    #[test]
    fn no_rules_match_nothing() {
        let r = CacheControlRules::default();
        assert!(r.is_empty());
        assert_eq!(get(&r, "index.html"), None);
        let r = CacheControlRules::new(Vec::<(String, String)>::new()).unwrap();
        assert!(r.is_empty());
        assert_eq!(get(&r, "index.html"), None);
    }

    #[test]
    fn pattern_without_slash_matches_the_file_name_at_any_depth() {
        let r = rules(&[("*.html", "no-cache"), ("favicon.ico", "max-age=86400")]);
        assert_eq!(get(&r, "index.html"), Some("no-cache"));
        assert_eq!(get(&r, "a/b/c/page.html"), Some("no-cache"));
        assert_eq!(get(&r, "favicon.ico"), Some("max-age=86400"));
        assert_eq!(get(&r, "sub/favicon.ico"), Some("max-age=86400"));
        assert_eq!(get(&r, "page.html/x"), None);
    }

    #[test]
    fn pattern_with_slash_is_anchored_at_the_root() {
        let r = rules(&[("assets/*.js", IMMUTABLE)]);
        assert_eq!(get(&r, "assets/app.js"), Some(IMMUTABLE));
        assert_eq!(get(&r, "x/assets/app.js"), None);
    }

    #[test]
    fn leading_slash_anchors_a_file_name_pattern() {
        let r = rules(&[("/sw.js", "no-cache"), ("/*.txt", "max-age=60")]);
        assert_eq!(get(&r, "sw.js"), Some("no-cache"));
        assert_eq!(get(&r, "app/sw.js"), None);
        assert_eq!(get(&r, "robots.txt"), Some("max-age=60"));
        assert_eq!(get(&r, "docs/notes.txt"), None);
    }

    #[test]
    fn star_does_not_cross_a_slash() {
        let r = rules(&[("assets/*", IMMUTABLE), ("a?c/x", "q")]);
        assert_eq!(get(&r, "assets/app.js"), Some(IMMUTABLE));
        assert_eq!(get(&r, "assets/js/app.js"), None);
        assert_eq!(get(&r, "abc/x"), Some("q"));
        assert_eq!(get(&r, "a/c/x"), None);
    }

    #[test]
    fn double_star_crosses_segments() {
        let r = rules(&[("assets/**", IMMUTABLE), ("docs/**/index.html", "no-cache")]);
        assert_eq!(get(&r, "assets/app.js"), Some(IMMUTABLE));
        assert_eq!(get(&r, "assets/js/vendor/lib.js"), Some(IMMUTABLE));
        assert_eq!(get(&r, "assets"), None);
        assert_eq!(get(&r, "docs/index.html"), Some("no-cache"));
        assert_eq!(get(&r, "docs/a/b/index.html"), Some("no-cache"));

        let everything = rules(&[("**", "max-age=60")]);
        for rel in ["a", "a/b/c", ".env", "a/.git/config"] {
            assert_eq!(get(&everything, rel), Some("max-age=60"), "{rel}");
        }
    }

    #[test]
    fn hashed_assets_match_with_spelled_out_classes() {
        let r = rules(&[(&format!("*.{HEX8}.{{js,css}}"), IMMUTABLE)]);
        assert_eq!(get(&r, "app.3f9a1c2b.js"), Some(IMMUTABLE));
        assert_eq!(get(&r, "assets/app.3f9a1c2b.css"), Some(IMMUTABLE));
        assert_eq!(get(&r, "app.3f9a1c2.js"), None);
        assert_eq!(get(&r, "app.3F9A1C2B.js"), None);
        assert_eq!(get(&r, "app.js"), None);
    }

    #[test]
    fn braces_are_alternatives_not_repetition_counts() {
        // The documented trap: `{8}` is the alternative "8", not "eight times".
        let r = rules(&[("*.[0-9a-f]{8}.js", IMMUTABLE)]);
        assert_eq!(get(&r, "app.a8.js"), Some(IMMUTABLE));
        assert_eq!(get(&r, "app.3f9a1c2b.js"), None);

        let r = rules(&[("*.{png,jpg,webp}", "max-age=86400")]);
        assert_eq!(get(&r, "img/a.webp"), Some("max-age=86400"));
        assert_eq!(get(&r, "img/a.gif"), None);
    }

    #[test]
    fn character_classes_negate_with_bang() {
        let r = rules(&[("v[!0-9]*", "a")]);
        assert_eq!(get(&r, "vx.txt"), Some("a"));
        assert_eq!(get(&r, "v1.txt"), None);
    }

    #[test]
    fn matching_is_case_sensitive() {
        let r = rules(&[("*.html", "no-cache")]);
        assert_eq!(get(&r, "INDEX.HTML"), None);
    }

    #[test]
    fn star_matches_dotfiles() {
        let r = rules(&[("*", "no-store")]);
        assert_eq!(get(&r, ".env"), Some("no-store"));
        assert_eq!(get(&r, "a/.hidden"), Some("no-store"));
    }

    #[test]
    fn backslash_escapes_a_metacharacter() {
        let r = rules(&[("a\\*.txt", "x")]);
        assert_eq!(get(&r, "a*.txt"), Some("x"));
        assert_eq!(get(&r, "ab.txt"), None);
    }

    #[test]
    fn a_leading_slash_in_the_path_is_ignored() {
        let r = rules(&[("assets/**", IMMUTABLE)]);
        assert_eq!(get(&r, "/assets/app.js"), Some(IMMUTABLE));
    }

    #[test]
    fn invalid_globs_are_errors_naming_the_pattern() {
        for (pattern, message) in [
            (
                "*.[a",
                "invalid glob `*.[a`: unclosed character class; missing ']'",
            ),
            (
                "{a,b",
                "invalid glob `{a,b`: unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)",
            ),
            (
                "a}",
                "invalid glob `a}`: unopened alternate group; missing '{' (maybe escape '}' with '[}]'?)",
            ),
            ("[z-a]", "invalid glob `[z-a]`: invalid range; 'z' > 'a'"),
            ("a\\", "invalid glob `a\\`: dangling '\\'"),
        ] {
            let err =
                CacheControlRules::new([("ok/**", "no-cache"), (pattern, "no-cache")]).unwrap_err();
            assert!(
                matches!(&err, CacheControlError::Glob { rule: 1, pattern: p, .. } if p == pattern),
                "{err:?}"
            );
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn patterns_that_match_no_file_are_refused() {
        let err = CacheControlRules::new([("assets/", "x")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "glob `assets/` can match no file: it ends in `/`; `dir/**` matches everything under a directory"
        );
        let err = CacheControlRules::new([("*.js", "x"), ("", "x")]).unwrap_err();
        assert_eq!(
            err,
            CacheControlError::Unmatchable {
                rule: 1,
                pattern: String::new(),
                why: "it is empty"
            }
        );
        assert!(CacheControlRules::new([("/", "x")]).is_err());
    }

    #[test]
    fn values_that_cannot_be_headers_are_refused() {
        for value in ["", "  ", "no-cache\r\nSet-Cookie: a=b", "max-age=1\0"] {
            let err = CacheControlRules::new([("*.html", value)]).unwrap_err();
            assert_eq!(
                err,
                CacheControlError::Value {
                    rule: 0,
                    pattern: "*.html".to_owned(),
                    value: value.to_owned()
                }
            );
        }
        let err = CacheControlRules::new([("*.html", "a\nb")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid Cache-Control value "a\nb" for glob `*.html`"#
        );
    }

    #[test]
    fn debug_lists_patterns_and_values() {
        let r = rules(&[("*.html", "no-cache")]);
        assert_eq!(format!("{r:?}"), r#"{"*.html": "no-cache"}"#);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use globset::GlobMatcher;
    use proptest::prelude::*;

    const PATTERNS: [&str; 10] = [
        "*.html",
        "assets/**",
        "/index.html",
        "**/b/*.js",
        "a/*",
        "*.{js,css}",
        "[ab]*",
        "?.txt",
        "**",
        "a/**/c.js",
    ];

    proptest! {
        /// The set's first match is what trying each rule in turn finds.
        #[test]
        fn for_path_is_the_first_rule_that_matches_alone(
            picks in proptest::sample::subsequence(PATTERNS.to_vec(), 0..=PATTERNS.len()).prop_shuffle(),
            rel in "[abc][abc.]{0,2}(/[abc.]{1,3}){0,3}(\\.(html|js|css|txt))?",
        ) {
            let list: Vec<(&str, String)> =
                picks.iter().enumerate().map(|(i, &p)| (p, format!("v{i}"))).collect();
            let r = CacheControlRules::new(list.iter().map(|(p, v)| (*p, v.as_str()))).unwrap();
            let one_by_one: Vec<GlobMatcher> = picks
                .iter()
                .map(|p| {
                    GlobBuilder::new(&anchored(p))
                        .literal_separator(true)
                        .backslash_escape(true)
                        .build()
                        .unwrap()
                        .compile_matcher()
                })
                .collect();
            let want = one_by_one.iter().position(|m| m.is_match(&rel)).map(|i| format!("v{i}"));
            let got = r.for_path(&rel).map(|v| v.to_str().unwrap().to_owned());
            prop_assert_eq!(got, want);
        }
    }
}
