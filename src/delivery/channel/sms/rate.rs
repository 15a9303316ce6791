//! `sms.rate`: at most so many texts per second through the transport,
//! counted across every instance.
//!
//! Built on the frequency caps' slots ([`crate::store::ThrottleStore`]):
//! a rate of `r` per second is `max(1, round(r))` slots per
//! `slots / r` seconds in one bucket for the transport, so 50/s is 50
//! slots a second and 0.5/s one slot every two seconds. The slots are
//! taken in the database, so two instances share them and together stay
//! within the rate. A text with no free slot is not sent and not failed:
//! its row is held until the oldest slot frees ([`crate::delivery::channel::Outcome::Held`],
//! [`crate::domain::HoldReason::SmsRate`]), which gives back the attempt its
//! claim counted, so a burst of any length goes out at the rate rather than
//! failing after `worker.max_attempts` rounds. Every held row wakes at that
//! moment and all but the rate's worth are held again: a long burst costs
//! a transaction per waiting row per window (a local queue in front of the
//! slots would avoid that; not built). Rejected: a limiter in each process (the email channel's), which
//! lets N instances send N times the rate a carrier allows a long code;
//! and a token-bucket row of its own, which would be a second mechanism
//! doing what the slots already do on three databases.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Millis;
use crate::store::{SlotAnswer, SlotRequest, Store, throttle_bucket};

/// One transport's rate, shared through the database.
#[derive(Clone)]
pub struct SharedRate {
    store: Arc<dyn Store>,
    bucket: String,
    limit: u32,
    per_ms: i64,
    per_second: f64,
}

impl SharedRate {
    /// `per_second` was checked to be above 0 (`SmsSettings::check`);
    /// `transport` names the bucket (the provider, so a change of provider
    /// starts afresh).
    pub fn new(store: Arc<dyn Store>, per_second: f64, transport: &str) -> SharedRate {
        let (limit, per_ms) = slots(per_second);
        SharedRate { store, bucket: throttle_bucket("sms.rate", transport, ""), limit, per_ms, per_second }
    }

    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// Takes a slot for the row `outbox_id`: `Ok(None)` to send now,
    /// `Ok(Some(wait))` to try again after `wait`.
    pub async fn take(&self, outbox_id: &str, now: Millis) -> Result<Option<Duration>, String> {
        let request = SlotRequest {
            bucket: self.bucket.clone(),
            limit: self.limit,
            per_ms: self.per_ms,
            outbox_id: outbox_id.into(),
        };
        let answers = self
            .store
            .take_throttle_slots(&[request], now)
            .await
            .map_err(|e| format!("could not take a slot of sms.rate: {e}"))?;
        Ok(match answers.first() {
            Some(SlotAnswer::Capped { next_free, .. }) => {
                Some(Duration::from_millis(u64::try_from(next_free.0 - now.0).unwrap_or(0).max(1)))
            }
            _ => None,
        })
    }
}

/// The slots and window for a rate: `(max(1, round(r)), slots / r` in
/// milliseconds`)`.
fn slots(per_second: f64) -> (u32, i64) {
    let limit = per_second.round().clamp(1.0, 100_000.0) as u32;
    let per_ms = (f64::from(limit) * 1000.0 / per_second).round().max(1.0) as i64;
    (limit, per_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_become_slots_per_window() {
        assert_eq!(slots(1.0), (1, 1000));
        assert_eq!(slots(50.0), (50, 1000));
        assert_eq!(slots(0.5), (1, 2000));
        assert_eq!(slots(2.5), (3, 1200));
    }
}
