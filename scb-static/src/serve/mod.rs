//! [`ServeStatic`]: a tower service that serves the files beneath a directory.
//!
//! Each request is decided inline on the worker: the path is normalised and looked up in
//! the worker's open-file cache; a name not there is opened with one
//! `openat2(RESOLVE_BENEATH | RESOLVE_CACHED)` from the root's descriptor, a small file is
//! read whole with `preadv2(RWF_NOWAIT)`, and what was found is kept. Only when the kernel
//! answers that this would wait for the disk does the whole request run once more on
//! tokio's blocking pool; with a warm page cache nothing leaves the worker thread.
//!
//! ```no_run
//! use scb_static::ServeStatic;
//! use tower::ServiceExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let files = ServeStatic::builder("/srv/www")
//!     .precompressed(["br", "gzip"])
//!     .build()?;
//! let req = http::Request::get("/index.html").body(()).unwrap();
//! let res = files.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), http::StatusCode::OK);
//! # Ok(())
//! # }
//! ```

mod chain;
mod config;
mod decide;
mod entry;
pub(crate) mod layer;
mod listing;
mod lookup;

pub use layer::{ServeStaticLayer, ServeStaticOr};

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use scb_core::Body;
use tower::Service;

use self::config::Config;
use self::entry::{Entry, WouldBlock};
use self::lookup::{FileCache, Resolver};
use crate::cache::{self, OpenFileCache, Owner};
use crate::cache_control::{CacheControlError, CacheControlRules};
use crate::encoding::{Coding, UnknownCoding};
use crate::sys::{Mode, RootDir, Symlinks};
use scb_core::range::DEFAULT_MAX_RANGES;

/// Serves the files beneath a root directory: each request is decided inline on the worker
/// (`openat2(RESOLVE_CACHED)`, `preadv2(RWF_NOWAIT)`) and moves to the blocking pool only
/// when the kernel says it would wait for the disk.
///
/// Cloning is cheap (one `Arc`), and the service is `Send + Sync`, so it can be used in
/// axum (`Router::fallback_service`, `nest_service`) as well as on scb's own runtime.
#[derive(Clone)]
pub struct ServeStatic {
    config: Arc<Config>,
    /// Whether a 404 sends the configured not-found page. Off in the
    /// [`ServeStaticLayer`] form, which passes those requests on and would only throw
    /// the page away.
    not_found_page: bool,
}

impl fmt::Debug for ServeStatic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeStatic")
            .field("root", &self.config.root_path)
            .finish_non_exhaustive()
    }
}

/// Why a [`ServeStatic`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The root directory could not be opened.
    #[error("cannot open the root directory {path}: {source}")]
    Root {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A precompressed coding that is not `br`, `zstd` or `gzip`.
    #[error(transparent)]
    Coding(#[from] UnknownCoding),
    /// A Cache-Control rule that does not compile.
    #[error(transparent)]
    CacheControl(#[from] CacheControlError),
    /// A [`fallback`](ServeStaticBuilder::fallback) or
    /// [`not_found`](ServeStaticBuilder::not_found) file that is not a path beneath the
    /// root.
    #[error("{setting} must name a file beneath the root, without `..`: {name:?}")]
    SiteFile {
        /// `fallback` or `not_found`.
        setting: &'static str,
        /// The name given.
        name: String,
    },
}

impl From<BuildError> for std::io::Error {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Root { source, .. } => source,
            other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
        }
    }
}

/// Builds a [`ServeStatic`]; see [`ServeStatic::builder`].
#[derive(Debug)]
pub struct ServeStaticBuilder {
    root: PathBuf,
    symlinks: Symlinks,
    index: Option<String>,
    precompressed: Vec<String>,
    show_hidden: bool,
    cache_control: Vec<(String, String)>,
    max_ranges: usize,
    fallback: Option<String>,
    not_found: Option<String>,
    list_directories: bool,
    cache: Option<OpenFileCache>,
}

impl ServeStatic {
    /// A builder for a service over the directory `root`.
    pub fn builder(root: impl Into<PathBuf>) -> ServeStaticBuilder {
        ServeStaticBuilder {
            root: root.into(),
            symlinks: Symlinks::default(),
            index: Some("index.html".to_owned()),
            precompressed: Vec::new(),
            show_hidden: false,
            cache_control: Vec::new(),
            max_ranges: DEFAULT_MAX_RANGES,
            fallback: None,
            not_found: None,
            list_directories: false,
            cache: Some(OpenFileCache::new()),
        }
    }

    /// A service over `root` with the default settings.
    ///
    /// # Errors
    ///
    /// When `root` cannot be opened as a directory.
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, BuildError> {
        Self::builder(root).build()
    }

    /// The root directory, as given.
    pub fn root(&self) -> &Path {
        &self.config.root_path
    }

    /// Whether dotfiles are served ([`ServeStaticBuilder::show_hidden`]).
    pub fn shows_hidden(&self) -> bool {
        self.config.show_hidden
    }
}

impl ServeStaticBuilder {
    /// What to do with symbolic links. Defaults to [`Symlinks::Beneath`]: links that stay
    /// beneath the root are followed, the kernel refuses the rest.
    pub fn symlinks(mut self, symlinks: Symlinks) -> Self {
        self.symlinks = symlinks;
        self
    }

    /// The file served for a directory requested with a trailing slash. Defaults to
    /// `index.html`; [`no_index`](Self::no_index) turns it off.
    pub fn index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// No index file: a directory requested with a trailing slash is 404 (or listed, with
    /// [`list_directories`](Self::list_directories)).
    pub fn no_index(mut self) -> Self {
        self.index = None;
        self
    }

    /// Precompressed sidecars to look for (`br`, `zstd`, `gzip`), in the server's order
    /// of preference; `app.js` is then served from `app.js.br` to a client that accepts
    /// brotli, with `Vary: Accept-Encoding` on every response. Defaults to none.
    pub fn precompressed<I, S>(mut self, codings: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.precompressed = codings.into_iter().map(Into::into).collect();
        self
    }

    /// Whether to serve paths with a segment starting with `.` (`.env`, `.git/`).
    /// Defaults to `false`: they are answered 404.
    pub fn show_hidden(mut self, show: bool) -> Self {
        self.show_hidden = show;
        self
    }

    /// Adds a `Cache-Control` rule: files whose path matches `glob` get `value`; the first
    /// matching rule wins. A glob without `/` matches the file name at any depth
    /// (`*.html`), one with `/` is anchored at the root (`assets/**`). Defaults to no
    /// rules (no `Cache-Control` header).
    pub fn cache_control(mut self, glob: impl Into<String>, value: impl Into<String>) -> Self {
        self.cache_control.push((glob.into(), value.into()));
        self
    }

    /// The most ranges one request may ask for before it gets the whole file instead
    /// (0 turns ranges off). Defaults to 16.
    pub fn max_ranges(mut self, max: usize) -> Self {
        self.max_ranges = max;
        self
    }

    /// A file (relative to the root, e.g. `index.html`) that answers, with 200, every GET
    /// or HEAD for a path that names no file: the entry point of a single-page app, whose
    /// client-side router owns those paths. It is served as itself: its own validators,
    /// content type, sidecars, conditional and range handling. Paths refused as
    /// malformed (400), hidden or climbing above the root still get 404, and so does
    /// every path when the fallback itself is missing. Its responses are files found, so
    /// [`ServeStaticLayer`] does not pass them to its inner service. Defaults to none.
    pub fn fallback(mut self, file: impl Into<String>) -> Self {
        self.fallback = Some(file.into());
        self
    }

    /// A file (relative to the root, e.g. `404.html`) sent, with status 404 and its own
    /// content type, wherever the answer is 404: a missing, hidden or escaping path, a
    /// directory without index or listing. No ranges and no 304 apply to it. When it is
    /// missing, the plain 404. [`ServeStaticLayer`] still passes those requests to its
    /// inner service, and the page is not used there. Defaults to none.
    pub fn not_found(mut self, file: impl Into<String>) -> Self {
        self.not_found = Some(file.into());
        self
    }

    /// Whether a directory requested with a trailing slash that has no index file gets
    /// an HTML listing of its entries (dotfiles only with
    /// [`show_hidden`](Self::show_hidden); at most 10,000 entries). Defaults to `false`:
    /// 404.
    pub fn list_directories(mut self, list: bool) -> Self {
        self.list_directories = list;
        self
    }

    /// The open-file cache each worker thread keeps of what it looked up: files (their
    /// descriptors, the bytes of small ones, their header values), directories and
    /// missing names, checked again with one `stat` per name once per window. Defaults to
    /// [`OpenFileCache::new`]'s settings (10,000 names, 32 MiB, 1 s).
    pub fn cache(mut self, settings: OpenFileCache) -> Self {
        self.cache = Some(settings);
        self
    }

    /// No open-file cache: every request looks its names up (an `openat2`, a `fstat` and
    /// a read of small files each), and a change on disk is seen by the next request.
    pub fn no_cache(mut self) -> Self {
        self.cache = None;
        self
    }

    /// Opens the root directory and checks the settings.
    ///
    /// # Errors
    ///
    /// When the root cannot be opened, a coding is unknown, a Cache-Control rule does
    /// not compile, or the fallback or not-found file is not a path beneath the root.
    pub fn build(self) -> Result<ServeStatic, BuildError> {
        let fallback = site_file("fallback", self.fallback)?;
        let not_found = site_file("not_found", self.not_found)?;
        let root = RootDir::open(&self.root, self.symlinks).map_err(|source| BuildError::Root {
            path: self.root.clone(),
            source,
        })?;
        let precompressed = self
            .precompressed
            .iter()
            .map(|c| c.parse::<Coding>())
            .collect::<Result<Vec<_>, UnknownCoding>>()?;
        let cache_control = CacheControlRules::new(self.cache_control)?;
        Ok(ServeStatic {
            not_found_page: true,
            config: Arc::new(Config {
                root,
                root_path: self.root,
                index: self.index,
                precompressed,
                show_hidden: self.show_hidden,
                cache_control,
                max_ranges: self.max_ranges,
                fallback,
                not_found,
                list_directories: self.list_directories,
                cache: self.cache,
                owner: Owner::new(),
            }),
        })
    }
}

/// A configured file name as a lookup path: `/`-separated segments beneath the root, a
/// leading `/` ignored. Not the request-path normaliser: nothing is percent-decoded (a
/// file may be called `100%.html`). `..` is refused outright rather than resolved: the
/// portable walk looks up segments as given, and a name that climbs is a mistake anyway.
fn site_file(setting: &'static str, name: Option<String>) -> Result<Option<String>, BuildError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let segments: Vec<&str> = name
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if segments.is_empty() || segments.iter().any(|s| *s == ".." || s.contains('\0')) {
        return Err(BuildError::SiteFile { setting, name });
    }
    Ok(Some(segments.join("/")))
}

impl<B> Service<Request<B>> for ServeStatic {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> ResponseFuture {
        let (parts, _body) = req.into_parts();
        let page = self.not_found_page;
        let config = &*self.config;
        let cached = config.cache.as_ref().and_then(|settings| {
            cache::with_thread_cache(
                &config.owner,
                || FileCache::new(settings),
                |cache| decide::decide(config, &parts, page, &mut Resolver::cached(cache)),
            )
        });
        let decided = cached.unwrap_or_else(|| {
            decide::decide(
                config,
                &parts,
                page,
                &mut Resolver::direct(Mode::Cached, false),
            )
        });
        match decided {
            Ok(res) => ResponseFuture {
                state: State::Ready(Some(res)),
            },
            Err(WouldBlock) => {
                let config = Arc::clone(&self.config);
                let record = config.cache.is_some();
                let task = tokio::task::spawn_blocking(move || {
                    let mut resolver = Resolver::direct(Mode::Blocking, record);
                    let res = decide::decide(&config, &parts, page, &mut resolver).unwrap_or_else(
                        |WouldBlock| decide::status(StatusCode::INTERNAL_SERVER_ERROR),
                    );
                    (res, resolver.into_recorded())
                });
                ResponseFuture {
                    state: State::Blocking {
                        task,
                        config: Arc::clone(&self.config),
                    },
                }
            }
        }
    }
}

/// The response future of [`ServeStatic`]: ready at once when the request was decided on
/// the worker, else the blocking-pool task.
#[derive(Debug)]
pub struct ResponseFuture {
    state: State,
}

/// What the blocking pool hands back: the response, and the entries it looked up, for
/// the cache of the thread that polls the response.
type Decided = (Response<Body>, Vec<(String, Entry)>);

#[derive(Debug)]
enum State {
    Ready(Option<Response<Body>>),
    Blocking {
        task: tokio::task::JoinHandle<Decided>,
        config: Arc<Config>,
    },
}

impl Future for ResponseFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            State::Ready(res) => Poll::Ready(Ok(res
                .take()
                .unwrap_or_else(|| decide::status(StatusCode::INTERNAL_SERVER_ERROR)))),
            State::Blocking { task, config } => match Pin::new(task).poll(cx) {
                Poll::Ready(Ok((res, found))) => {
                    if let Some(settings) = &config.cache
                        && !found.is_empty()
                    {
                        let now = std::time::Instant::now();
                        cache::with_thread_cache(
                            &config.owner,
                            || FileCache::new(settings),
                            |cache| {
                                for (rel, entry) in found {
                                    cache.insert(&rel, std::rc::Rc::new(entry), now);
                                }
                            },
                        );
                    }
                    Poll::Ready(Ok(res))
                }
                Poll::Ready(Err(e)) => {
                    tracing::error!(error = %e, "static file task failed");
                    Poll::Ready(Ok(decide::status(StatusCode::INTERNAL_SERVER_ERROR)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests;
