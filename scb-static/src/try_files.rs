//! [`TryFilesLayer`]: nginx's and Caddy's `try_files`. The first candidate path that
//! names something beneath the root becomes the request's path; when none does, the
//! last entry decides: a path the request is rewritten to, or `=404` (any 4xx or 5xx).
//!
//! ```
//! use http::{Request, Response};
//! use scb_core::Body;
//! use scb_static::try_files::TryFilesLayer;
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = std::env::temp_dir().join(format!("try-files-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&root)?;
//! std::fs::write(root.join("about.html"), "about")?;
//! // A single-page app: files as they are, `.html` pages without their extension, and
//! // the app's entry point for every other path.
//! let layer = TryFilesLayer::new(&root, ["{path}", "{path}.html", "/index.html"])?;
//! let seen = layer.layer(service_fn(|req: Request<Body>| async move {
//!     Ok::<_, std::convert::Infallible>(Response::new(Body::from(req.uri().to_string())))
//! }));
//! let path = |res: Response<Body>| async move {
//!     use http_body_util::BodyExt as _;
//!     res.into_body().collect().await.unwrap().to_bytes()
//! };
//! let res = seen.clone().oneshot(Request::get("/about").body(Body::empty())?).await?;
//! assert_eq!(path(res).await, "/about.html");
//! let res = seen.oneshot(Request::get("/users/7?tab=x").body(Body::empty())?).await?;
//! assert_eq!(path(res).await, "/index.html?tab=x");
//! # std::fs::remove_dir_all(&root)?;
//! # Ok(())
//! # }
//! ```
//!
//! - **Placeholders**: `{path}` is the request's path as the client sent it
//!   (percent-encoded), `{query}` its query. A candidate without `?` keeps the request's
//!   query when it is chosen; one with `?` sets its own.
//! - **Existence** is decided as the file server decides what to serve: the candidate is
//!   percent-decoded and normalised once, and resolved by the kernel beneath the root's
//!   descriptor (`openat2(RESOLVE_BENEATH)`, the lookup of [`ServeStatic`](crate::ServeStatic)),
//!   so nothing outside the root can match. A candidate ending in `/` needs a directory,
//!   any other a file; dotfiles count as missing unless
//!   [`show_hidden`](TryFilesLayer::show_hidden) says otherwise, as for the file server.
//!   The lookup is inline with `RESOLVE_CACHED`; only when the kernel says it would wait
//!   for the disk do the candidates run once on the blocking pool.
//! - **Scripts**: with [`split_path`](TryFilesLayer::split_path) (`.php`, as a FastCGI
//!   route sets it), a candidate is looked up up to its first segment ending in a script
//!   extension, so `/index.php/users/7` exists when `/index.php` does (Caddy's
//!   `split_path`), and keeps its path info when chosen.
//! - **The client's URI** stays in the request as
//!   [`OriginalUri`] when the path changes (CGI's `REQUEST_URI`).
//! - Whatever the candidates say, the inner service still decides on its own request:
//!   this layer only chooses the path.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use pin_project_lite::pin_project;
use scb_core::Body;
use scb_core::original_uri::OriginalUri;
use tower::{Layer, Service};

use crate::path::normalize;
use crate::sys::{Kind, Mode, OpenError, RootDir, Symlinks};

/// Why a [`TryFilesLayer`] cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TryFilesError {
    /// The root directory cannot be opened.
    #[error("cannot open the root directory {path}: {source}")]
    Root {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Fewer than two entries: a candidate and what answers when none exists.
    #[error("try_files needs at least two entries: candidates, then a path or `=404`")]
    TooFew,
    /// An entry that is not a path template.
    #[error("entry {index} ({entry:?}): {reason}")]
    Entry {
        /// Its position.
        index: usize,
        /// The entry as given.
        entry: String,
        /// What is wrong.
        reason: &'static str,
    },
}

#[derive(Debug)]
enum Piece {
    Text(Box<str>),
    Path,
    Query,
}

/// A candidate or fallback path, split once.
#[derive(Debug)]
struct Template {
    pieces: Box<[Piece]>,
    /// Whether it sets the query itself (has a `?`).
    has_query: bool,
}

impl Template {
    fn parse(index: usize, entry: &str) -> Result<Self, TryFilesError> {
        let bad = |reason| TryFilesError::Entry {
            index,
            entry: entry.to_owned(),
            reason,
        };
        let pieces = scb_core::template::split(
            entry,
            Piece::Text,
            |name| match name {
                "path" => Ok(Piece::Path),
                "query" => Ok(Piece::Query),
                _ => Err(bad("placeholders are {path} and {query}")),
            },
            || bad("a `{` without its `}`"),
        )?;
        match pieces.first() {
            Some(Piece::Path) => {}
            Some(Piece::Text(t)) if t.starts_with('/') => {}
            _ => return Err(bad("a path: starts with `/` or `{path}`")),
        }
        let mut has_query = false;
        for piece in &pieces {
            if let Piece::Text(t) = piece {
                has_query |= t.contains('?');
                if t.contains(['#', ' ']) || t.chars().any(char::is_control) {
                    return Err(bad("bytes a URI cannot hold"));
                }
            }
        }
        Ok(Self {
            pieces: pieces.into(),
            has_query,
        })
    }

    /// The template for a request of `path` and `query`; borrowed when it is `{path}`.
    fn expand<'a>(&self, path: &'a str, query: Option<&str>) -> Cow<'a, str> {
        if let [Piece::Path] = &*self.pieces {
            return Cow::Borrowed(path);
        }
        let mut out = String::with_capacity(path.len() + 32);
        for piece in &*self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Path => out.push_str(path),
                Piece::Query => out.push_str(query.unwrap_or("")),
            }
        }
        Cow::Owned(out)
    }
}

#[derive(Debug)]
enum Fallback {
    Status(StatusCode),
    Path(Template),
}

struct Config {
    root: RootDir,
    candidates: Vec<Template>,
    fallback: Fallback,
    show_hidden: bool,
    /// Lower-case, each with its dot.
    split: Vec<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TryFiles")
            .field("candidates", &self.candidates)
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

/// Chooses a request's path among candidates; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct TryFilesLayer {
    config: Arc<Config>,
}

impl TryFilesLayer {
    /// Tries `entries` beneath `root`: each but the last is a candidate, the last is the
    /// path to use when none exists, or `=CODE` (4xx or 5xx) to answer with.
    ///
    /// # Errors
    ///
    /// When the root cannot be opened, fewer than two entries are given, or an entry is
    /// not a path template (see [`TryFilesError`]).
    pub fn new(
        root: impl AsRef<Path>,
        entries: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<Self, TryFilesError> {
        let entries: Vec<String> = entries.into_iter().map(|e| e.as_ref().to_owned()).collect();
        let Some((last, candidates)) = entries.split_last().filter(|(_, c)| !c.is_empty()) else {
            return Err(TryFilesError::TooFew);
        };
        let candidates = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| Template::parse(i, c))
            .collect::<Result<Vec<_>, _>>()?;
        let index = entries.len() - 1;
        let fallback = match last.strip_prefix('=') {
            Some(code) => Fallback::Status(
                code.parse::<u16>()
                    .ok()
                    .and_then(|c| StatusCode::from_u16(c).ok())
                    .filter(|c| c.is_client_error() || c.is_server_error())
                    .ok_or_else(|| TryFilesError::Entry {
                        index,
                        entry: last.clone(),
                        reason: "`=` takes a 4xx or 5xx status, as `=404`",
                    })?,
            ),
            None => Fallback::Path(Template::parse(index, last)?),
        };
        let root_path = root.as_ref();
        let root =
            RootDir::open(root_path, Symlinks::Beneath).map_err(|source| TryFilesError::Root {
                path: root_path.to_owned(),
                source,
            })?;
        Ok(Self {
            config: Arc::new(Config {
                root,
                candidates,
                fallback,
                show_hidden: false,
                split: Vec::new(),
            }),
        })
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::get_mut(&mut self.config).expect("settings are made before the layer is cloned")
    }

    /// Whether dotfiles (`.env`, `.git/`) count as existing. Defaults to `false`, as the
    /// file server hides them.
    ///
    /// # Panics
    ///
    /// When called on a clone of a layer still shared with another: settings are made
    /// before the layer is used.
    #[must_use]
    pub fn show_hidden(mut self, show: bool) -> Self {
        self.config_mut().show_hidden = show;
        self
    }

    /// Script extensions (with their dot, as `.php`) at whose first segment a candidate
    /// is cut for the lookup (see the [module documentation](self)). Defaults to none.
    ///
    /// # Panics
    ///
    /// As [`show_hidden`](Self::show_hidden).
    #[must_use]
    pub fn split_path(mut self, extensions: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        self.config_mut().split = extensions
            .into_iter()
            .map(|e| e.as_ref().to_ascii_lowercase())
            .collect();
        self
    }
}

impl<S> Layer<S> for TryFilesLayer {
    type Service = TryFiles<S>;

    fn layer(&self, inner: S) -> TryFiles<S> {
        TryFiles {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// What the candidates decided for one request.
#[derive(Debug)]
enum Decision {
    /// The request's own path: nothing to change.
    Keep,
    Rewrite(Uri),
    Answer(StatusCode),
    /// A lookup would have waited for the disk.
    WouldBlock,
}

/// Whether a lookup found what a candidate needs.
enum Found {
    Yes,
    No,
    WouldBlock,
}

impl Config {
    fn exists(&self, candidate: &str, mode: Mode) -> Found {
        let path = candidate.split_once('?').map_or(candidate, |(p, _)| p);
        let Ok(normal) = normalize(path) else {
            return Found::No;
        };
        if normal.hidden && !self.show_hidden {
            return Found::No;
        }
        let (rel, want_dir) = match self.split_at_script(&normal.rel) {
            Some(script) => (script, false),
            None => (&*normal.rel, normal.trailing_slash),
        };
        match self.root.lookup(rel, mode) {
            Ok(opened) => match (opened.meta.kind, want_dir) {
                (Kind::Dir, true) | (Kind::File, false) => Found::Yes,
                _ => Found::No,
            },
            // Something is there that the server may not read: it exists, and whatever
            // serves it answers 403.
            Err(OpenError::Forbidden) => Found::Yes,
            Err(OpenError::WouldBlock) => Found::WouldBlock,
            Err(OpenError::NotFound | OpenError::Refused | OpenError::Io(_)) => Found::No,
        }
    }

    /// `rel` up to its first segment ending in a script extension, if any.
    fn split_at_script<'a>(&self, rel: &'a str) -> Option<&'a str> {
        if self.split.is_empty() {
            return None;
        }
        let mut end = 0;
        for segment in rel.split('/') {
            end += segment.len();
            let script = self.split.iter().any(|e| {
                let (s, e) = (segment.as_bytes(), e.as_bytes());
                s.len() >= e.len() && s[s.len() - e.len()..].eq_ignore_ascii_case(e)
            });
            if script {
                return Some(&rel[..end]);
            }
            end += 1;
        }
        None
    }

    fn decide(&self, uri: &Uri, mode: Mode) -> Decision {
        let path = uri.path();
        let query = uri.query();
        for candidate in &self.candidates {
            let expanded = candidate.expand(path, query);
            match self.exists(&expanded, mode) {
                Found::Yes => return rewritten(uri, &expanded, candidate.has_query),
                Found::No => {}
                Found::WouldBlock => return Decision::WouldBlock,
            }
        }
        match &self.fallback {
            Fallback::Status(status) => Decision::Answer(*status),
            Fallback::Path(template) => {
                rewritten(uri, &template.expand(path, query), template.has_query)
            }
        }
    }
}

/// The decision to use `chosen` (a path, with its own query when `has_query`).
fn rewritten(uri: &Uri, chosen: &str, has_query: bool) -> Decision {
    if !has_query && chosen == uri.path() {
        return Decision::Keep;
    }
    let target = match (has_query, uri.query()) {
        (false, Some(query)) => Cow::Owned(format!("{chosen}?{query}")),
        _ => Cow::Borrowed(chosen),
    };
    let target = target.strip_suffix('?').unwrap_or(&target);
    // A template's texts were checked and `{path}`/`{query}` come from a valid URI, so
    // this parses; were it not to, the request keeps its path rather than fail.
    match PathAndQuery::try_from(target) {
        Ok(pq) => {
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(pq);
            Uri::from_parts(parts).map_or(Decision::Keep, Decision::Rewrite)
        }
        Err(_) => Decision::Keep,
    }
}

/// Chooses the path, then calls the inner service; see [`TryFilesLayer`].
#[derive(Clone, Debug)]
pub struct TryFiles<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> TryFiles<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, this one consumed.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<Request<B>> for TryFiles<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible> + Clone,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let decision = self.config.decide(req.uri(), Mode::Cached);
        let state = match decision {
            Decision::Keep => State::Called {
                future: self.inner.call(req),
            },
            Decision::Rewrite(uri) => {
                OriginalUri::rewrite(&mut req, uri);
                State::Called {
                    future: self.inner.call(req),
                }
            }
            Decision::Answer(status) => State::Answer {
                status: Some(status),
            },
            Decision::WouldBlock => {
                // The ready service goes with the request; a clone takes its place here.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let config = Arc::clone(&self.config);
                let uri = req.uri().clone();
                State::Blocking {
                    lookup: tokio::task::spawn_blocking(move || {
                        config.decide(&uri, Mode::Blocking)
                    }),
                    rest: Some((inner, req)),
                }
            }
        };
        ResponseFuture { state }
    }
}

pin_project! {
    /// Response future of [`TryFiles`].
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<B>>,
    {
        Called {
            #[pin]
            future: S::Future,
        },
        Answer {
            status: Option<StatusCode>,
        },
        Blocking {
            lookup: tokio::task::JoinHandle<Decision>,
            rest: Option<(S, Request<B>)>,
        },
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("try_files::ResponseFuture")
    }
}

impl<S, B> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            let next = match this.state.as_mut().project() {
                StateProj::Called { future } => return future.poll(cx),
                StateProj::Answer { status } => {
                    let status = status.take().expect("polled after completion");
                    return Poll::Ready(Ok(scb_core::respond::reason(status)));
                }
                StateProj::Blocking { lookup, rest } => {
                    let decision = match ready!(Pin::new(lookup).poll(cx)) {
                        Ok(decision) => decision,
                        // The lookup panicked (it does not): the path stays as it came.
                        Err(_) => Decision::Keep,
                    };
                    let (mut inner, mut req) = rest.take().expect("polled after completion");
                    match decision {
                        Decision::Answer(status) => State::Answer {
                            status: Some(status),
                        },
                        Decision::Rewrite(uri) => {
                            OriginalUri::rewrite(&mut req, uri);
                            State::Called {
                                future: inner.call(req),
                            }
                        }
                        Decision::Keep | Decision::WouldBlock => State::Called {
                            future: inner.call(req),
                        },
                    }
                }
            };
            this.state.set(next);
        }
    }
}

#[cfg(test)]
mod tests;
