//! The routing table: exact paths, regex routes, prefixes, and the order they are tried.

use std::sync::Arc;

use http::Request;
use rustc_hash::FxHashMap;

use super::captures::PathCaptures;
use super::conditions::RouteMatch;
use super::patterns::Patterns;
use super::route::Route;
use super::{PathMatch, RouterError, prefix_matches};

/// The routes of one exact path or one prefix: those with conditions in the order added,
/// then the one without (if any), which takes whatever they leave.
#[derive(Clone, Debug)]
pub(super) struct Candidates<S>(Vec<Route<S>>);

impl<S> Candidates<S> {
    fn pick<B>(&self, req: &Request<B>) -> Option<&Route<S>> {
        // Most paths have one route without conditions: the loop's first step takes it.
        self.0.iter().find(|r| r.admits(req))
    }

    /// Adds `route`; `Err` with it back when it has no conditions and another without
    /// any is already here.
    fn add(&mut self, route: Route<S>) -> Result<(), Route<S>> {
        let catch_all = self.0.last().is_some_and(|r| !r.is_conditional());
        if route.is_conditional() {
            let at = self.0.len() - usize::from(catch_all);
            self.0.insert(at, route);
        } else if catch_all {
            return Err(route);
        } else {
            self.0.push(route);
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub(super) struct Table<S> {
    /// Sorted by path length, then path, for a binary search. A table holds a handful of
    /// routes and a request path is short, so a few comparisons beat hashing the path
    /// (SipHash measured ~600 instructions a request); ordered by length first, most steps
    /// compare two integers and never call `memcmp`.
    pub(super) exact: Vec<(Box<str>, Candidates<S>)>,
    /// Regex routes, tried after the exact paths and before the prefixes.
    pub(super) patterns: Patterns<S>,
    /// Longest first, so the first match is the longest.
    pub(super) prefixes: Vec<(Box<str>, Candidates<S>)>,
    /// Where each prefix is in `prefixes`, once there are more than [`SCAN_MAX`]: a path
    /// is then matched by looking up its own prefixes (one per segment boundary, longest
    /// first) instead of comparing it with every route's. FxHash, as the site table: the
    /// client chooses what is looked up, but nothing it sends is inserted.
    prefix_index: Option<FxHashMap<Box<str>, usize>>,
    /// The route name noted for the fallback's answers.
    pub(super) fallback_name: Option<Arc<str>>,
    /// Whether the route is noted in the request's `AccessNotes`.
    pub(super) note_routes: bool,
}

/// The route a request goes to, and what a regex route captured.
pub(super) struct Found<'a, S> {
    pub(super) route: &'a Route<S>,
    pub(super) captures: Option<PathCaptures>,
}

impl<S> Table<S> {
    pub(super) fn new() -> Self {
        Self {
            exact: Vec::new(),
            patterns: Patterns::default(),
            prefixes: Vec::new(),
            prefix_index: None,
            fallback_name: None,
            note_routes: true,
        }
    }

    /// The route for `req`: its exact path's, then the first regex route's, then the
    /// longest prefix's, each only when `req` meets the route's conditions.
    pub(super) fn find<B>(&self, req: &Request<B>) -> Option<Found<'_, S>> {
        let path = req.uri().path();
        let found = |route| Found {
            route,
            captures: None,
        };
        if let Ok(at) = self.exact_position(path)
            && let Some(route) = self.exact[at].1.pick(req)
        {
            return Some(found(route));
        }
        if let Some((route, captures)) = self.patterns.find(path, req) {
            return Some(Found {
                route,
                captures: Some(captures),
            });
        }
        match &self.prefix_index {
            None => self
                .prefixes
                .iter()
                .filter(|(prefix, _)| prefix_matches(prefix, path))
                .find_map(|(_, candidates)| candidates.pick(req)),
            Some(index) => path_prefixes(path)
                .filter_map(|prefix| index.get(prefix))
                .find_map(|&at| self.prefixes[at].1.pick(req)),
        }
        .map(found)
    }

    /// Where `path` is among the exact routes, or where it would be inserted.
    fn exact_position(&self, path: &str) -> Result<usize, usize> {
        self.exact
            .binary_search_by(|(p, _)| (p.len(), p.as_bytes()).cmp(&(path.len(), path.as_bytes())))
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        let exact = self.exact.iter().flat_map(|(_, c)| c.0.iter());
        let prefixes = self.prefixes.iter().flat_map(|(_, c)| c.0.iter());
        exact
            .chain(prefixes)
            .map(|r| &*r.name)
            .chain(self.patterns.names())
    }

    pub(super) fn insert(
        &mut self,
        name: Arc<str>,
        matcher: RouteMatch,
        service: S,
    ) -> Result<(), RouterError> {
        if name.is_empty() {
            return Err(RouterError::EmptyName);
        }
        if self.names().any(|n| *n == *name) {
            return Err(RouterError::DuplicateName { name });
        }
        let RouteMatch { path, conditions } = matcher;
        let route = Route::new(name, service, conditions);
        match path {
            PathMatch::Exact(path) => {
                check_absolute(&path)?;
                match self.exact_position(&path) {
                    Ok(at) => self.exact[at]
                        .1
                        .add(route)
                        .map_err(|_| RouterError::DuplicateExact { path })?,
                    Err(at) => self
                        .exact
                        .insert(at, (path.into_boxed_str(), Candidates(vec![route]))),
                }
            }
            PathMatch::Prefix(prefix) => {
                check_absolute(&prefix)?;
                if let Some((_, candidates)) =
                    self.prefixes.iter_mut().find(|(p, _)| **p == *prefix)
                {
                    return candidates
                        .add(route)
                        .map_err(|_| RouterError::DuplicatePrefix { prefix });
                }
                let at = self
                    .prefixes
                    .partition_point(|(p, _)| p.len() >= prefix.len());
                self.prefixes
                    .insert(at, (prefix.into_boxed_str(), Candidates(vec![route])));
                // Built anew on each insert (positions move): a config's few hundred
                // routes cost microseconds, once.
                self.prefix_index = (self.prefixes.len() > SCAN_MAX).then(|| {
                    self.prefixes
                        .iter()
                        .enumerate()
                        .map(|(i, (p, _))| (p.clone(), i))
                        .collect()
                });
            }
            PathMatch::Regex(pattern) => self.patterns.insert(pattern, route)?,
        }
        Ok(())
    }
}

/// Up to this many prefixes a path is compared with each (a few instructions apiece when
/// it differs early); beyond, it is matched through the index. With 200 prefixes the
/// scan cost 1,700 instructions a request (`bench profile`, static-small), an eighth of
/// what the whole request costs.
const SCAN_MAX: usize = 16;

/// The prefixes of `path` that a [`PathMatch::Prefix`] can be, longest first: the path
/// itself, then at each `/` from the right the part before it and the part through it
/// (`/a/b` gives `/a/b`, `/a/`, `/a`, `/`). These are exactly the strings
/// [`prefix_matches`] accepts for `path`.
pub(super) fn path_prefixes(path: &str) -> impl Iterator<Item = &str> {
    let boundaries = path
        .match_indices('/')
        .rev()
        .flat_map(|(at, _)| [at + 1, at]);
    std::iter::once(path.len())
        .chain(boundaries)
        .filter(move |&end| end > 0 && end <= path.len())
        .scan(usize::MAX, |last, end| {
            // `/a/` ends at the `/` of its own boundary: the whole path and `..=at` can be
            // one string; each is given once.
            let again = *last == end;
            *last = end;
            Some((!again).then_some(end))
        })
        .flatten()
        .map(move |end| &path[..end])
}

fn check_absolute(path: &str) -> Result<(), RouterError> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(RouterError::NotAbsolute {
            path: path.to_owned(),
        })
    }
}
