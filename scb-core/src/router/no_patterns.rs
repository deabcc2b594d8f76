//! Regular-expression routes in a build without the `regex` feature: refused when
//! added, so that no route silently never matches.

use http::Request;

use super::RouterError;
use super::captures::PathCaptures;
use super::route::Route;

/// No regex routes: none can be added.
#[derive(Clone, Debug)]
pub(super) struct Patterns<S> {
    _routes: std::marker::PhantomData<S>,
}

impl<S> Default for Patterns<S> {
    fn default() -> Self {
        Self {
            _routes: std::marker::PhantomData,
        }
    }
}

impl<S> Patterns<S> {
    pub(super) fn insert(&mut self, pattern: String, _route: Route<S>) -> Result<(), RouterError> {
        Err(RouterError::Regex {
            pattern,
            reason: "scb-core was built without its `regex` feature".to_owned(),
        })
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::empty()
    }

    pub(super) fn find<B>(
        &self,
        _path: &str,
        _req: &Request<B>,
    ) -> Option<(&Route<S>, PathCaptures)> {
        None
    }
}
