//! [`PathCaptures`]: what a `PathMatch::Regex` route's expression captured.

use std::ops::Range;
use std::sync::Arc;

/// The groups a [`PathMatch::Regex`](super::PathMatch::Regex) route's expression
/// captured from the request path, in the extensions of the request the route is given:
/// the values a rewrite's `{id}` or `{1}` stands for. Only regex routes insert it (one
/// allocation there); other routes leave the extensions alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathCaptures {
    path: Box<str>,
    /// Group 0 (the whole match) first; `None` for a group that took no part.
    groups: Box<[Option<Range<usize>>]>,
    /// The name of each group (`None` for unnamed ones and group 0).
    names: Arc<[Option<Box<str>>]>,
}

impl PathCaptures {
    /// Captures of `path` by groups `groups` (byte ranges into it, group 0 first) named
    /// `names` (one per group, `None` for an unnamed one): what a regex route makes; a
    /// test of a layer that reads them can make its own.
    pub fn new(
        path: &str,
        groups: impl IntoIterator<Item = Option<Range<usize>>>,
        names: Arc<[Option<Box<str>>]>,
    ) -> Self {
        Self {
            path: path.into(),
            groups: groups.into_iter().collect(),
            names,
        }
    }

    /// Group `index` (0 is the whole match), if it took part.
    pub fn get(&self, index: usize) -> Option<&str> {
        let range = self.groups.get(index)?.clone()?;
        self.path.get(range)
    }

    /// The group named `name` (`(?<name>...)`), if the expression has one and it took
    /// part.
    pub fn name(&self, name: &str) -> Option<&str> {
        let index = self.names.iter().position(|n| n.as_deref() == Some(name))?;
        self.get(index)
    }

    /// A group by the name a template uses for it: a number is a group's index, anything
    /// else its name.
    pub fn lookup(&self, key: &str) -> Option<&str> {
        match key.parse::<usize>() {
            Ok(index) => self.get(index),
            Err(_) => self.name(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_found_by_index_and_by_name() {
        let names: Arc<[Option<Box<str>>]> = vec![None, Some("id".into()), None].into();
        let c = PathCaptures::new("/users/42", [Some(0..9), Some(7..9), None], names);
        assert_eq!(c.get(0), Some("/users/42"));
        assert_eq!(c.name("id"), Some("42"));
        assert_eq!(c.lookup("1"), Some("42"));
        assert_eq!(c.lookup("id"), Some("42"));
        assert_eq!(c.get(2), None);
        assert_eq!(c.get(3), None);
        assert_eq!(c.name("other"), None);
    }
}
