//! Escalation follow-ups, planned when they fall due.
//!
//! An inbox message of an escalating rule carries when its follow-up falls
//! due (`follow_up_at`, set by the planner). Once that time has passed,
//! any instance plans the follow-up row here: due at that time, its dedupe
//! key naming the message, so two instances doing it at once plan one. The
//! follow-up then goes through the lanes like any row, and composing it
//! decides whether it goes (see `compose::follow_up_decision`: held until
//! `after` past the inbox delivery, cancelled if the message was read, or
//! for `unless: seen` seen or read, by then).
//!
//! Planning the follow-up with the message, as the first version did,
//! wrote a second outbox row for every trigger at intake (with its nine
//! index entries), for a follow-up that is most often cancelled; it cost
//! a fifth of the pipeline's rate. The price of planning late: the send
//! log shows the follow-up only from when it fell due (the trigger's
//! decision says when it will), and a rule deleted or no longer escalating
//! by then plans none.
//!
//! A chain ("push after 30 min, then email after 2 h") is planned whole
//! when its FIRST step falls due: one row per step in the same transaction,
//! step `n` due `after_n - after_1` later than the first, its dedupe key
//! naming the original and the step (`escalate:<id>` for step 1, the key a
//! single follow-up always had; `escalate:<id>:2`, `escalate:<id>:3`).
//! Each row is then decided on its own when it falls due, exactly as a
//! single follow-up: held until its own `after` past the inbox delivery,
//! cancelled once the message is read (seen). Still nothing at intake.
//! The alternative, planning each step when it falls due, writes no fewer
//! rows (a step whose message was read by then must still be planned, to
//! be recorded as cancelled in the send log), but needs the original to
//! remember which step is next (a column and a migration on three
//! databases, and a planning pass per step); planning the chain at once
//! also lets "did user X get it" show the later steps, held and saying
//! until when, from the moment the first is due. Its price: a rule edited
//! between the steps has the later rows already planned; composing one
//! checks the rule's current steps and cancels a step the rule no longer
//! has (see `compose`).

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Worker;
use crate::domain::{ChannelName, UserId};
use crate::planning::workflow::{RuleWorkflow, follow_up_key};
use crate::store::{NewOutboxRow, StoreError, new_id};

/// How often each instance looks for follow-ups that fell due: one
/// indexed read that finds nothing most of the time.
pub(super) const FOLLOW_UP_EVERY: Duration = Duration::from_secs(1);

impl Worker {
    /// Plans up to a batch of follow-ups that fell due; how many.
    pub(super) async fn plan_follow_ups(&self) -> Result<usize, StoreError> {
        let inner = &self.inner;
        let now = inner.clock.now();
        let due = inner.store.due_follow_ups(now, inner.config.batch).await?;
        if due.is_empty() {
            return Ok(0);
        }
        // Each rule's follow-ups (channel, seconds after) as the rule says now.
        let mut steps_of: HashMap<String, Option<Vec<(ChannelName, i64)>>> = HashMap::new();
        for (row, _) in &due {
            let Some(id) = &row.rule_id else { continue };
            if steps_of.contains_key(id) {
                continue;
            }
            let steps = inner.store.get_rule(id).await?.and_then(|rule| {
                let escalate = RuleWorkflow::from_stored(rule.workflow.as_ref()).ok()?.escalate?;
                let steps: Vec<(ChannelName, i64)> = escalate
                    .steps
                    .iter()
                    .map(|s| ChannelName::parse("escalate.channel", &s.channel).ok().map(|c| (c, s.after_seconds)))
                    .collect::<Option<_>>()?;
                Some(steps).filter(|s| !s.is_empty())
            });
            steps_of.insert(id.clone(), steps);
        }
        let mut rows = Vec::with_capacity(due.len());
        for (row, at) in &due {
            let Some(steps) = row.rule_id.as_ref().and_then(|id| steps_of.get(id).and_then(Option::as_ref)) else {
                tracing::info!(outbox = %row.id, "the rule was deleted or no longer escalates: no follow-up");
                continue;
            };
            let Ok(user_id) = UserId::parse("user_id", &row.user_id) else {
                tracing::warn!(outbox = %row.id, user = %row.user_id, "a stored user id is not valid: no follow-up");
                continue;
            };
            let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or(serde_json::Value::Null);
            let first_after = steps[0].1;
            for (i, (channel, after)) in steps.iter().enumerate() {
                let later = Duration::from_secs((after - first_after).max(0) as u64);
                rows.push(NewOutboxRow {
                    id: new_id(),
                    dedupe_key: follow_up_key(&row.id, i + 1),
                    rule_id: row.rule_id.clone(),
                    trigger_id: row.trigger_id.clone(),
                    user_id: user_id.clone(),
                    channel: channel.clone(),
                    payload: payload.clone(),
                    due_at: at.plus(later),
                    expires_at: None,
                    follow_up_at: None,
                });
            }
        }
        let originals: Vec<&str> = due.iter().map(|(row, _)| row.id.as_str()).collect();
        // Two instances planning the same follow-ups is a race one loses
        // (a deadlock on MariaDB, a certification failure on Galera): the
        // loser tries again and finds them planned.
        crate::store::race::retry_lost_race("plan follow-ups", || inner.store.plan_follow_ups(&rows, &originals, now))
            .await?;
        for lane in &inner.lanes {
            if rows.iter().any(|r| r.channel.as_str() == lane.channel) {
                lane.wake.notify_one();
            }
        }
        Ok(rows.len())
    }

    /// Plans follow-ups as they fall due until `shutdown`.
    pub(super) async fn run_follow_ups(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            if self.may_start()
                && let Err(e) = self.plan_follow_ups().await
            {
                tracing::warn!(error = %e, "could not plan the escalation follow-ups that fell due; trying again");
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_UP_EVERY) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }
}
