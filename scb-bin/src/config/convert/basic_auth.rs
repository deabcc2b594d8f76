//! `basic_auth = { users, realm }` into scb-core's basic auth, its users read now.

use scb_core::basic_auth::{BasicAuthLayer, Users};

use crate::config::{BasicAuthConfig, Located};

/// `basic_auth = { users, realm }`: the htpasswd file read now, so that a bad line fails
/// the load (or the reload) rather than a request.
pub(crate) fn basic_auth(config: &BasicAuthConfig) -> Result<BasicAuthLayer, Located> {
    let path = config.users.get_ref();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Located::at(
            &config.users,
            "users",
            format_args!("cannot read {}: {e}", path.display()),
        )
    })?;
    let users = Users::from_htpasswd(&text).map_err(|e| {
        Located::at(
            &config.users,
            "users",
            format_args!("{}: {e}", path.display()),
        )
    })?;
    let realm = config
        .realm
        .as_ref()
        .map_or("restricted", |r| r.get_ref().as_str());
    BasicAuthLayer::new(users, realm).map_err(|e| match &config.realm {
        Some(r) => Located::at(r, "realm", e),
        None => Located::at(&config.users, "realm", e),
    })
}
