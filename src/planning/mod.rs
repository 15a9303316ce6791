//! Planning: from "something happened to a user" to scheduled messages.
//!
//! [`intake`] records API triggers in shared transactions and plans them at
//! once; [`planner`] turns each trigger into outbox rows, one per enabled
//! rule that matches, and sweeps for triggers a host inserted itself;
//! [`rule`] and [`recipient`] are what the API accepts for rules and users,
//! validated once, and [`category`] what a category name is for both;
//! [`template`] holds the minijinja templates and rule
//! conditions; [`workflow`] the rule's send windows, quiet hours, digests,
//! caps and escalation ([`digest`]: when a digest closes, on a window or
//! a calendar, and what its template sees), and [`dry_run`] what those
//! would do in a rule's preview. Everything here ends in a row of
//! `engagement_outbox`; nothing here talks to a channel.

pub mod category;
pub mod digest;
pub mod dry_run;
pub mod escalation;
pub mod fan_out;
pub mod intake;
pub mod planner;
pub mod recipient;
pub mod rule;
pub mod template;
pub mod workflow;
