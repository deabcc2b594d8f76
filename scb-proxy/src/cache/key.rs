//! What a response is stored under: by default the request's scheme, host, path and
//! query; with a template ([`CacheLayer::key`](super::CacheLayer::key)), the text the
//! template makes of them.
//!
//! | placeholder | value |
//! |---|---|
//! | `{scheme}` | `http` or `https` |
//! | `{host}` | the host the request named (its `Host`, or the URI's authority), lower-cased, with its port if it gave one |
//! | `{path}` | the path, as received (percent-encoded) |
//! | `{query}` | `?` and the query, or nothing when there is none |
//!
//! A template must hold `{path}`: without it every URL would share one stored response.
//! Leaving `{host}` out shares responses between every host the route serves; leaving
//! `{query}` out shares them between queries (what a route whose origin ignores
//! tracking parameters wants); leaving `{scheme}` out shares them between http and https.
//! The method is not part of the key: only GET responses are stored, and HEAD is
//! answered from them.

use std::borrow::Cow;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, LazyLock};

use quick_cache::Equivalent;

/// What a response is stored under ([`Keying`] makes it): by default the scheme, the host
/// and the path with its query; with a key template, no scheme, no host and the
/// template's text as `target`. The method is always GET: HEAD is answered from a
/// stored GET.
///
/// A key carries its [`digest`], taken once when it is made: a miss looks its key up in
/// the store, joins or leads a fill, stores, and ends the fill, and each of those hashed
/// the whole URL with SipHash again (a fifth of a miss's added instructions). The maps
/// keyed by keys hash the digest alone ([`ByDigest`]).
#[derive(Clone, Debug)]
pub(crate) struct Key {
    /// `https` rather than `http`: the two are different URIs, and may be answered
    /// differently (a redirect to https on one, the page on the other).
    pub(crate) secure: bool,
    /// Shared, not boxed: a miss clones its key for the fill it leads and the guard that
    /// ends it, and a clone is then a count, not two allocations and copies.
    pub(crate) host: Arc<str>,
    pub(crate) target: Arc<str>,
    digest: u64,
}

impl Key {
    pub(crate) fn new(secure: bool, host: Arc<str>, target: Arc<str>) -> Self {
        let digest = digest(secure, &host, &target);
        Self {
            secure,
            host,
            target,
            digest,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
            && self.secure == other.secure
            && self.host == other.host
            && self.target == other.target
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

/// A [`Key`] borrowed from a request where it can be, to look up a hit without
/// allocating. It hashes as the key's digest, so either finds the other.
#[derive(Debug)]
pub(crate) struct KeyRef<'a> {
    pub(crate) secure: bool,
    pub(crate) host: Cow<'a, str>,
    pub(crate) target: Cow<'a, str>,
    digest: u64,
}

impl<'a> KeyRef<'a> {
    pub(crate) fn new(secure: bool, host: Cow<'a, str>, target: Cow<'a, str>) -> Self {
        let digest = digest(secure, &host, &target);
        Self {
            secure,
            host,
            target,
            digest,
        }
    }

    pub(crate) fn to_key(&self) -> Key {
        Key {
            secure: self.secure,
            host: self.host.as_ref().into(),
            target: self.target.as_ref().into(),
            digest: self.digest,
        }
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.digest == key.digest
            && self.secure == key.secure
            && *self.host == *key.host
            && *self.target == *key.target
    }
}

/// SipHash with a key drawn once per process: the keys are the clients' URLs, chosen to
/// collide if the hash let them, and a digest that SipHash spreads cannot be steered
/// into one bucket by choosing URLs.
static SEED: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A key's hash, as every map of keys uses it.
fn digest(secure: bool, host: &str, target: &str) -> u64 {
    let mut hasher = SEED.build_hasher();
    secure.hash(&mut hasher);
    host.hash(&mut hasher);
    target.hash(&mut hasher);
    hasher.finish()
}

/// The hasher of maps keyed by [`Key`]: the key's digest, already SipHash's, is the hash.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ByDigest;

impl BuildHasher for ByDigest {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(0)
    }
}

/// What [`ByDigest`] builds: keeps the `u64` it is given. Keys write nothing else; any
/// other bytes are folded in (FNV-1a), so that a map of something else still works.
#[derive(Debug)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Why a key template cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyTemplateError {
    /// A `{name}` that is not one of the placeholders, or a `{` without its `}`.
    #[error(
        "unknown placeholder in cache key {template:?}: use {{scheme}}, {{host}}, {{path}} \
         or {{query}}"
    )]
    Placeholder {
        /// The template.
        template: String,
    },
    /// No `{path}`: every URL would share one stored response.
    #[error("cache key {template:?} has no {{path}}: every URL would share one response")]
    NoPath {
        /// The template.
        template: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Text(Box<str>),
    Scheme,
    Host,
    Path,
    Query,
}

/// How a request's URL becomes its key.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) enum Keying {
    /// Scheme, host, path and query: the whole URL.
    #[default]
    Url,
    /// What the template makes of them.
    Template(Arc<[Part]>),
}

/// The parts of a request's URL that keys are made of.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Url<'a> {
    pub(crate) secure: bool,
    /// As the request named it (any case, with its port if any).
    pub(crate) host: &'a str,
    /// The path and query.
    pub(crate) target: &'a str,
}

/// The URL a stored response was fetched for (host lower-cased, path and query): what a
/// purge names, whatever the key template kept of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) host: Arc<str>,
    pub(crate) target: Arc<str>,
}

impl Source {
    /// The URL of a request, host lower-cased.
    pub(crate) fn of(url: Url<'_>) -> Self {
        Self {
            host: url.host.to_ascii_lowercase().into(),
            target: url.target.into(),
        }
    }

    /// The URL of a request whose key `key` is, as `keying` makes it: the key's own
    /// strings when the key is the URL (no copy), else [`Source::of`].
    pub(crate) fn keyed(keying: &Keying, url: Url<'_>, key: &Key) -> Self {
        match keying {
            Keying::Url => Self {
                host: Arc::clone(&key.host),
                target: Arc::clone(&key.target),
            },
            Keying::Template(_) => Self::of(url),
        }
    }

    /// Whether a purge of `host` (any when `None`) and `target` (exactly, or as a
    /// `prefix`) names it.
    pub(crate) fn matches(&self, host: Option<&str>, target: &str, prefix: bool) -> bool {
        host.is_none_or(|h| self.host.eq_ignore_ascii_case(h))
            && if prefix {
                self.target.starts_with(target)
            } else {
                &*self.target == target
            }
    }
}

impl Keying {
    /// The keying of `template`.
    pub(crate) fn template(template: &str) -> Result<Self, KeyTemplateError> {
        let placeholder = || KeyTemplateError::Placeholder {
            template: template.to_owned(),
        };
        let parts = scb_core::template::split(
            template,
            Part::Text,
            |name| match name {
                "scheme" => Ok(Part::Scheme),
                "host" => Ok(Part::Host),
                "path" => Ok(Part::Path),
                "query" => Ok(Part::Query),
                _ => Err(placeholder()),
            },
            placeholder,
        )?;
        if parts
            .iter()
            .any(|p| matches!(p, Part::Text(text) if text.contains('}')))
        {
            return Err(placeholder());
        }
        if !parts.contains(&Part::Path) {
            return Err(KeyTemplateError::NoPath {
                template: template.to_owned(),
            });
        }
        Ok(Self::Template(parts.into()))
    }

    /// The key of `url`. The whole URL borrows from it (unless its host has capitals);
    /// a template's text is made anew.
    pub(crate) fn key<'a>(&self, url: Url<'a>) -> KeyRef<'a> {
        let host = if url.host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(url.host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(url.host)
        };
        let parts = match self {
            Keying::Url => {
                return KeyRef::new(url.secure, host, Cow::Borrowed(url.target));
            }
            Keying::Template(parts) => parts,
        };
        let (path, query) = match url.target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (url.target, None),
        };
        let mut text = String::with_capacity(host.len() + url.target.len() + 16);
        for part in parts.iter() {
            match part {
                Part::Text(t) => text.push_str(t),
                Part::Scheme => text.push_str(if url.secure { "https" } else { "http" }),
                Part::Host => text.push_str(&host),
                Part::Path => text.push_str(path),
                Part::Query => {
                    if let Some(query) = query {
                        text.push('?');
                        text.push_str(query);
                    }
                }
            }
        }
        // What the template left out is left out of the key: no scheme, no host.
        KeyRef::new(false, Cow::Borrowed(""), Cow::Owned(text))
    }
}

/// Whether two hashers agree on a key and its borrowed form: the property lookups by
/// [`KeyRef`] rest on.
#[cfg(test)]
pub(crate) fn hashes_agree(key: &Key, key_ref: &KeyRef<'_>) -> bool {
    let state = RandomState::new();
    ByDigest.hash_one(key) == ByDigest.hash_one(key_ref)
        && state.hash_one(key) == state.hash_one(key_ref)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(secure: bool, host: &'static str, target: &'static str) -> Url<'static> {
        Url {
            secure,
            host,
            target,
        }
    }

    fn text(keying: &Keying, url: Url<'_>) -> String {
        keying.key(url).target.into_owned()
    }

    #[test]
    fn templates_take_the_parts_they_name() {
        let keying = Keying::template("{scheme}://{host}{path}{query}").unwrap();
        assert_eq!(
            text(&keying, url(true, "Example.COM:8443", "/a/b?x=1&y")),
            "https://example.com:8443/a/b?x=1&y"
        );
        let no_query = Keying::template("{host}{path}").unwrap();
        assert_eq!(
            text(&no_query, url(false, "example.com", "/a?utm=1")),
            text(&no_query, url(true, "example.com", "/a"))
        );
        let path_only = Keying::template("v1:{path}").unwrap();
        assert_eq!(text(&path_only, url(false, "a", "/x?q")), "v1:/x");
        assert_eq!(text(&path_only, url(false, "b", "/x")), "v1:/x");
    }

    #[test]
    fn an_empty_query_is_kept_apart_from_none() {
        let keying = Keying::template("{path}{query}").unwrap();
        assert_eq!(text(&keying, url(false, "h", "/a?")), "/a?");
        assert_eq!(text(&keying, url(false, "h", "/a")), "/a");
    }

    #[test]
    fn the_whole_url_is_borrowed_with_the_host_lower_cased() {
        let key = Keying::Url.key(url(true, "Example.com", "/a?b"));
        assert!(key.secure);
        assert_eq!(key.host, "example.com");
        assert!(matches!(key.target, Cow::Borrowed("/a?b")));
        assert!(matches!(
            Keying::Url.key(url(true, "example.com", "/")).host,
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_source_is_the_lower_cased_url_and_shares_a_url_key_s_strings() {
        let request = url(true, "Example.com", "/a?b");
        let key = Keying::Url.key(request).to_key();
        let source = Source::keyed(&Keying::Url, request, &key);
        assert_eq!(source, Source::of(request));
        assert_eq!(&*source.host, "example.com");
        assert!(Arc::ptr_eq(&source.host, &key.host));
        assert!(Arc::ptr_eq(&source.target, &key.target));
        // A template's key is not the URL: the source is made from the URL itself.
        let keying = Keying::template("v1:{path}").unwrap();
        let key = keying.key(request).to_key();
        assert_eq!(Source::keyed(&keying, request, &key), Source::of(request));
    }

    #[test]
    fn bad_templates_are_refused_with_what_is_wrong() {
        for bad in ["{host}{path", "{path}{cookie}", "{path}}", "{Path}"] {
            assert!(
                matches!(
                    Keying::template(bad),
                    Err(KeyTemplateError::Placeholder { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Keying::template("{host}{query}"),
            Err(KeyTemplateError::NoPath { .. })
        ));
    }
}
