//! Regular-expression routes ([`PathMatch::Regex`](super::PathMatch::Regex)), with the
//! `regex` crate: linear-time matching, so no path makes it backtrack.
//!
//! A request that reaches them is matched against all the expressions in one pass of a
//! [`RegexSet`]: with 100 regex routes a request that matches none (the common case on a
//! server whose prefix routes take most traffic) costs one scan of its path, not 100.
//! Only a match looks further: the matching routes in the order they were added, their
//! conditions, then the one route's captures.

use std::sync::{Arc, OnceLock};

use http::Request;
use regex::{Regex, RegexSet};

use super::RouterError;
use super::captures::PathCaptures;
use super::route::Route;

/// The regex routes of a table, in the order they were added.
#[derive(Clone, Debug)]
pub(super) struct Patterns<S> {
    routes: Vec<PatternRoute<S>>,
    /// All the expressions, built at the first lookup after a change: building it on every
    /// insert would make adding n routes cost n set compilations. `None` when the set
    /// cannot be built (over the crate's size limit): the routes are then tried one by one.
    set: OnceLock<Option<RegexSet>>,
}

#[derive(Clone, Debug)]
struct PatternRoute<S> {
    pattern: Box<str>,
    regex: Regex,
    names: Arc<[Option<Box<str>>]>,
    route: Route<S>,
}

impl<S> Default for Patterns<S> {
    fn default() -> Self {
        Self {
            routes: Vec::new(),
            set: OnceLock::new(),
        }
    }
}

impl<S> Patterns<S> {
    /// Adds a route for `pattern`.
    pub(super) fn insert(&mut self, pattern: String, route: Route<S>) -> Result<(), RouterError> {
        if !route.is_conditional()
            && self
                .routes
                .iter()
                .any(|r| *r.pattern == *pattern && !r.route.is_conditional())
        {
            return Err(RouterError::DuplicatePattern { pattern });
        }
        let regex = Regex::new(&pattern).map_err(|e| RouterError::Regex {
            pattern: pattern.clone(),
            reason: e.to_string(),
        })?;
        let names = regex.capture_names().map(|n| n.map(Box::from)).collect();
        self.routes.push(PatternRoute {
            pattern: pattern.into_boxed_str(),
            regex,
            names,
            route,
        });
        self.set = OnceLock::new();
        Ok(())
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.routes.iter().map(|r| &*r.route.name)
    }

    /// The first route (in the order added) whose expression matches `path` and whose
    /// conditions `req` meets, with what it captured.
    pub(super) fn find<B>(
        &self,
        path: &str,
        req: &Request<B>,
    ) -> Option<(&Route<S>, PathCaptures)> {
        if self.routes.is_empty() {
            return None;
        }
        let set = self
            .set
            .get_or_init(|| RegexSet::new(self.routes.iter().map(|r| &*r.pattern)).ok());
        let candidate = |r: &PatternRoute<S>| r.route.admits(req);
        let chosen = match set {
            Some(set) => {
                // `is_match` allocates nothing; `matches` only runs when there is one.
                if !set.is_match(path) {
                    return None;
                }
                set.matches(path)
                    .into_iter()
                    .map(|i| &self.routes[i])
                    .find(|r| candidate(r))?
            }
            None => self
                .routes
                .iter()
                .find(|r| r.regex.is_match(path) && candidate(r))?,
        };
        let captures = chosen.regex.captures(path)?;
        let groups = captures.iter().map(|m| m.map(|m| m.range()));
        let captures = PathCaptures::new(path, groups, Arc::clone(&chosen.names));
        Some((&chosen.route, captures))
    }
}
