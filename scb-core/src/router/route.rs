//! One route of a table: its name, its service and its conditions.

use std::sync::Arc;

use http::Request;

use super::conditions::Conditions;

/// A route: what answers, and what a request must be for it to.
#[derive(Clone, Debug)]
pub(super) struct Route<S> {
    pub(super) name: Arc<str>,
    pub(super) service: S,
    conditions: Option<Box<Conditions>>,
}

impl<S> Route<S> {
    pub(super) fn new(name: Arc<str>, service: S, conditions: Option<Box<Conditions>>) -> Self {
        Self {
            name,
            service,
            conditions,
        }
    }

    pub(super) fn is_conditional(&self) -> bool {
        self.conditions.is_some()
    }

    /// Whether `req` meets the route's conditions (all true for a route without any).
    pub(super) fn admits<B>(&self, req: &Request<B>) -> bool {
        self.conditions.as_ref().is_none_or(|c| c.matches(req))
    }
}
