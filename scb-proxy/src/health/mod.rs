//! Upstream health: passive (failures seen by requests) and active (periodic `GET` checks).
//!
//! An upstream takes requests while it is actively up (always, without active checks) and
//! not in a passive cool-down. Both states are atomics in [`UpstreamState`], shared by all
//! workers, so one worker's failures steer the others' requests away too.

mod settings;
mod state;

pub use settings::{ActiveHealth, PassiveHealth};
pub(crate) use state::Health;

#[cfg(test)]
mod tests;
