//! Delivery: from a scheduled row to a recorded outcome.
//!
//! The [`worker`] claims due rows lane by lane (one per channel), has
//! [`compose`] decide whether each may still go out and render it, hands it
//! to its [`channel`] (email, the in-app inbox, a signed webhook), and
//! records what happened, retrying what failed for a passing reason. Safe to
//! run as many instances as wanted: every write after a claim is fenced.

pub mod channel;
pub mod compose;
pub mod health;
pub mod settings;
pub mod worker;
