//! What to do with a row, decided in pure functions so every branch has a
//! test that needs no database.
//!
//! # One vocabulary for a row's fate
//!
//! A delivery's result is said in two types and counted in two more:
//!
//! - [`Outcome`] (the channel's): what the attempt came to, in the
//!   channel's terms (`Retry`, `Terminal`, `Held`, the inbox message to
//!   write, ...).
//! - [`RecordAction`] (the store's, inside a [`crate::store::Record`] with
//!   the row, its claim and the inbox message): what to write. [`decide`]
//!   goes from the first to the second directly, and [`before_delivery`]
//!   returns the store's [`Finish`] itself.
//! - `record::RowResult`: whether the write landed (`LostClaim`,
//!   `Unrecorded` are not outcomes), tallied into `TickReport`.
//!
//! A hold's reason is a [`crate::domain::HoldReason`], decided with the
//! hold and carried through both, not read back from its words.
//!
//! The alternative was a decision type of the worker's own between the
//! two (a `Decision` with a `FinishSpec`, once written to keep `Finish`
//! comparable in tests): it said what `RecordAction` says, one field
//! renamed, and every new kind of fate had to be added to both.

use std::time::Duration;

use crate::clock::Millis;
use crate::delivery::channel::Outcome;
use crate::domain::SendStatus;
use crate::store::{Finish, OutboxRow, RecordAction};

/// How often and how long a row is tried; the defaults are
/// `worker.max_attempts` and `worker.retry`'s, each configurable.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Deliveries started before a row is given up on.
    pub max_attempts: u32,
    /// Flat, not exponential: `due_at` is also the grace window's clock, and a
    /// doubling backoff would push a delayed message arbitrarily far past the
    /// moment it was about.
    pub retry: Duration,
}

/// The longest `Retry-After` a provider's answer can make a row wait.
pub const MAX_RETRY_HINT: Duration = Duration::from_secs(6 * 3600);

/// Checks made after a row is claimed and before its channel is called.
/// `Some` means: do not deliver, record this. The grace window of a row a
/// rule planned is checked by the composer instead, which knows whether a
/// send window held it (the grace window then counts from the opening).
pub fn before_delivery(row: &OutboxRow, now: Millis, policy: RetryPolicy) -> Option<Finish> {
    if row.rule_id.is_none()
        && let Some(finish) = expired(row, now)
    {
        return Some(finish);
    }
    exhausted(row, policy)
}

/// A row past its grace window, recorded as `expired`.
pub fn expired(row: &OutboxRow, now: Millis) -> Option<Finish> {
    if let Some(expires_at) = row.expires_at
        && now > expires_at
    {
        // Reaching the user late is worse than not at all for a message about
        // a moment; the grace window is the rule's statement of "too late".
        return Some(Finish::because(
            SendStatus::Expired,
            format!(
                "not delivered before its grace window ended at {expires_at} (due {due}); it is no longer relevant",
                due = row.due_at
            ),
        ));
    }
    None
}

/// A row whose started attempts are used up, recorded as `failed`.
fn exhausted(row: &OutboxRow, policy: RetryPolicy) -> Option<Finish> {
    // Attempts are counted at claim. More than the maximum means earlier
    // deliveries were started and never finished (the process died or
    // stalled each time): a row that keeps killing its worker must end too.
    if row.attempts > i64::from(policy.max_attempts) {
        let last = row.last_error.as_deref().unwrap_or("none recorded");
        return Some(Finish::because(
            SendStatus::Failed,
            format!(
                "gave up after {} started attempts, the last ones interrupted before finishing (last error: {last})",
                row.attempts - 1
            ),
        ));
    }
    None
}

/// Turns a channel's outcome into what to record.
pub fn decide(outcome: Outcome, row: &OutboxRow, now: Millis, policy: RetryPolicy) -> RecordAction {
    let finish = |status, detail: String, address_hash| {
        RecordAction::Finish(Finish { status, detail: Some(detail), transport: None, address_hash, provider_id: None })
    };
    match outcome {
        Outcome::Sent { transport, detail, address_hash, provider_id } => RecordAction::Finish(Finish {
            status: SendStatus::Sent,
            detail,
            transport: Some(transport),
            address_hash,
            provider_id,
        }),
        Outcome::Retry { detail, address_hash, after } => {
            if row.attempts < i64::from(policy.max_attempts) {
                // The provider's hint, when it gave one, instead of the flat
                // interval; capped, so a hint of a week (or a hostile one)
                // cannot park a row past every grace window unseen.
                let wait = after.map_or(policy.retry, |a| a.min(MAX_RETRY_HINT));
                RecordAction::Reschedule { due_at: now.plus(wait), detail }
            } else {
                finish(
                    SendStatus::Failed,
                    format!("gave up after {} attempts; last error: {detail}", row.attempts),
                    address_hash,
                )
            }
        }
        Outcome::Suppressed { detail, address_hash } => finish(SendStatus::Suppressed, detail, address_hash),
        Outcome::Bounced { detail, address_hash } => finish(SendStatus::Bounced, detail, address_hash),
        Outcome::Terminal { detail, address_hash } => finish(SendStatus::Failed, detail, address_hash),
        Outcome::Cancelled { detail, address_hash } => finish(SendStatus::Cancelled, detail, address_hash),
        Outcome::Expired { detail, address_hash } => finish(SendStatus::Expired, detail, address_hash),
        Outcome::Held { until, expires_at, reason, detail } => {
            RecordAction::Hold { due_at: until, expires_at, reason, detail }
        }
        // The worker takes the message out before deciding; were one to get
        // here, it is still a delivery into the inbox.
        Outcome::Inbox(_) => RecordAction::Finish(Finish {
            status: SendStatus::Sent,
            detail: None,
            transport: Some("inbox".into()),
            address_hash: None,
            provider_id: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy { max_attempts: 5, retry: Duration::from_secs(300) };

    fn row(attempts: i64) -> OutboxRow {
        crate::store::claimed_row("r", "t", attempts)
    }

    #[test]
    fn retry_is_flat_until_the_last_attempt() {
        let now = Millis(10_000);
        for attempts in 1..5 {
            let d = decide(Outcome::retry("451 try later"), &row(attempts), now, POLICY);
            assert_eq!(d, RecordAction::Reschedule { due_at: Millis(310_000), detail: "451 try later".into() });
        }
        let RecordAction::Finish(f) = decide(Outcome::retry("451 try later"), &row(5), now, POLICY) else {
            panic!("fifth failure must give up");
        };
        assert_eq!(f.status, SendStatus::Failed);
        assert_eq!(f.detail.as_deref(), Some("gave up after 5 attempts; last error: 451 try later"));
    }

    #[test]
    fn a_providers_retry_after_replaces_the_flat_interval_up_to_a_cap() {
        let now = Millis(10_000);
        let hinted =
            |secs| Outcome::Retry { detail: "429".into(), address_hash: None, after: Some(Duration::from_secs(secs)) };
        assert_eq!(
            decide(hinted(1), &row(1), now, POLICY),
            RecordAction::Reschedule { due_at: Millis(11_000), detail: "429".into() }
        );
        let capped = decide(hinted(30 * 24 * 3600), &row(1), now, POLICY);
        assert_eq!(capped, RecordAction::Reschedule { due_at: now.plus(MAX_RETRY_HINT), detail: "429".into() });
        // The last attempt still gives up, hint or not.
        assert!(matches!(decide(hinted(1), &row(5), now, POLICY), RecordAction::Finish(_)));
    }

    #[test]
    fn each_outcome_keeps_its_own_name_and_hash() {
        let now = Millis(0);
        let bounced = Outcome::Bounced { detail: "550 5.1.1".into(), address_hash: Some("h".into()) };
        let RecordAction::Finish(f) = decide(bounced, &row(1), now, POLICY) else { panic!() };
        assert_eq!((f.status, f.address_hash.as_deref()), (SendStatus::Bounced, Some("h")));
        let suppressed = Outcome::Suppressed { detail: "unsubscribed".into(), address_hash: None };
        let RecordAction::Finish(f) = decide(suppressed, &row(1), now, POLICY) else { panic!() };
        assert_eq!(f.status, SendStatus::Suppressed);
        let RecordAction::Finish(f) = decide(Outcome::terminal("554"), &row(1), now, POLICY) else { panic!() };
        assert_eq!(f.status, SendStatus::Failed);
    }

    #[test]
    fn a_hold_keeps_its_reason_and_counts_no_attempt() {
        use crate::domain::HoldReason;
        let held = Outcome::Held {
            until: Millis(9_000),
            expires_at: Some(Millis(12_000)),
            reason: HoldReason::QuietHours,
            detail: "held by the recipient's quiet hours (22:00–07:00, UTC) until 9000".into(),
        };
        // On the last attempt too: a hold is not a failure.
        let action = decide(held, &row(5), Millis(0), POLICY);
        let RecordAction::Hold { due_at, expires_at, reason, .. } = action else { panic!("{action:?}") };
        assert_eq!((due_at, expires_at, reason), (Millis(9_000), Some(Millis(12_000)), HoldReason::QuietHours));
    }

    #[test]
    fn a_row_past_its_grace_window_expires_instead_of_delivering() {
        let mut r = row(1);
        r.expires_at = Some(Millis(5_000));
        assert!(before_delivery(&r, Millis(5_000), POLICY).is_none(), "the boundary itself is still on time");
        let f = before_delivery(&r, Millis(5_001), POLICY).expect("expired");
        assert_eq!(f.status, SendStatus::Expired);
        assert!(f.detail.unwrap().contains("grace window"));
    }

    #[test]
    fn a_row_whose_attempts_keep_dying_ends_failed() {
        assert!(before_delivery(&row(5), Millis(0), POLICY).is_none());
        let f = before_delivery(&row(6), Millis(0), POLICY).expect("exhausted");
        assert_eq!(f.status, SendStatus::Failed);
        assert!(f.detail.unwrap().starts_with("gave up after 5 started attempts"));
    }
}
