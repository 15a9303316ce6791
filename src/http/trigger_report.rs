//! `GET /v1/triggers/{id}` and `POST /v1/triggers/{id}/cancel`: one
//! trigger and what became of its whole audience, in one answer.
//!
//! "How did the announcement to 40,000 watchers go?" is one question, so it
//! is one request: the trigger, its expansion, and its messages counted by
//! status, by channel, and by why not. The counts are read from the outbox
//! (one `GROUP BY` over the trigger's rows, through their trigger index),
//! not kept as counters beside it: a counter is one more write per message
//! on the hot path, and one more thing that can disagree with the rows.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::State;
use serde::Serialize;

use super::AppState;
use super::auth::Caller;
use super::extract::ApiPath;
use super::problem::{ApiError, ApiJson};
use super::responses::{NotFound, Unauthorized};
use crate::store::{CANCEL_CHUNK, CancelScope, FanOutRow, OutcomeCount, Store, StoreError};

/// A trigger and its audience's messages.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TriggerReport {
    pub id: String,
    #[serde(rename = "type")]
    pub trigger_type: String,
    /// `user`, `users` or `topic`.
    pub audience: &'static str,
    /// The one user, for `user`.
    pub user_id: Option<String>,
    pub topic: Option<String>,
    pub actor_id: Option<String>,
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    pub idempotency_key: Option<String>,
    /// RFC 3339.
    pub occurred_at: String,
    /// RFC 3339: nothing of it is due before then.
    pub send_at: Option<String>,
    pub created_at: String,
    /// `expanding` (its audience is being planned), `planned`, `cancelled`,
    /// or `waiting` (a trigger a host inserted, not yet planned).
    pub state: &'static str,
    /// Recipients in all (for a topic: its subscribers when the trigger
    /// was recorded, the actor left out); known once expansion starts.
    pub audience_size: Option<i64>,
    /// Recipients planned so far.
    pub expanded: i64,
    /// Messages by status (`sent`, `scheduled`, `suppressed`, …).
    pub counts: BTreeMap<String, i64>,
    /// Messages by channel, then status.
    pub by_channel: BTreeMap<String, BTreeMap<String, i64>>,
    /// Messages that did not go, by why: `opted_out`, `muted` (the user
    /// muted the topic), `capped`, `no_address`, `suppressed` (a
    /// suppression list, a bounce), `cancelled`, `expired`, `failed`.
    pub why_not: BTreeMap<String, i64>,
    /// What the planner made of it, in words.
    pub detail: Option<String>,
    pub cancelled_at: Option<String>,
    pub cancelled_by: Option<String>,
}

impl TriggerReport {
    pub fn new(t: &FanOutRow, outcomes: &[OutcomeCount]) -> TriggerReport {
        let (mut counts, mut by_channel, mut why_not) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for o in outcomes {
            *counts.entry(o.status.clone()).or_insert(0) += o.count;
            *by_channel.entry(o.channel.clone()).or_insert_with(BTreeMap::new).entry(o.status.clone()).or_insert(0) +=
                o.count;
            if !o.reason.is_empty() {
                *why_not.entry(o.reason.clone()).or_insert(0) += o.count;
            }
        }
        let one = t.audience.is_none();
        let state = match (t.cancelled_at, t.planned_at) {
            (Some(_), _) => "cancelled",
            (None, Some(_)) => "planned",
            (None, None) if one => "waiting",
            (None, None) => "expanding",
        };
        let single_size = i64::from(t.actor_id.as_deref() != Some(t.user_id.as_str()));
        TriggerReport {
            id: t.id.clone(),
            trigger_type: t.trigger_type.clone(),
            audience: match t.audience.as_deref() {
                None => "user",
                Some("topic") => "topic",
                Some(_) => "users",
            },
            user_id: one.then(|| t.user_id.clone()),
            topic: t.topic_key.clone(),
            actor_id: t.actor_id.clone(),
            payload: t.payload.clone(),
            idempotency_key: t.idempotency_key.clone(),
            occurred_at: t.occurred_at.to_rfc3339(),
            send_at: t.send_at.map(|s| s.to_rfc3339()),
            created_at: t.created_at.to_rfc3339(),
            state,
            audience_size: if one { Some(single_size) } else { t.audience_size },
            expanded: if one { single_size * i64::from(t.planned_at.is_some()) } else { t.expanded_count },
            counts,
            by_channel,
            why_not,
            detail: t.plan_detail.clone(),
            cancelled_at: t.cancelled_at.map(|c| c.to_rfc3339()),
            cancelled_by: t.cancelled_by.clone(),
        }
    }

    /// The report of trigger `id`, if it exists.
    pub async fn read(store: &dyn Store, id: &str) -> Result<Option<TriggerReport>, StoreError> {
        let Some(trigger) = store.fan_out_state(id).await? else { return Ok(None) };
        let outcomes = store.trigger_outcomes(id).await?;
        Ok(Some(TriggerReport::new(&trigger, &outcomes)))
    }
}

impl TriggerReport {
    /// Where its audience stands, in words, as the command line and the
    /// operator screen both say it: "expanding 40,000 of 120,000",
    /// "planned for 3 recipients", "cancelled … through …", "waiting for
    /// the planner".
    pub fn progress(&self) -> String {
        let size = self.audience_size.map(thousands).unwrap_or_else(|| "?".to_owned());
        let planned = thousands(self.expanded);
        match self.state {
            "expanding" if self.audience_size.is_none() => "expanding: not started yet".to_owned(),
            "expanding" => format!("expanding {planned} of {size}"),
            "planned" => format!("planned for {planned} of {size} recipient(s)"),
            "cancelled" => format!(
                "cancelled {} through {}, after {planned} of {size} recipient(s) were planned",
                self.cancelled_at.as_deref().unwrap_or("?"),
                self.cancelled_by.as_deref().unwrap_or("?")
            ),
            _ => "waiting for the planner".to_owned(),
        }
    }
}

/// `120000` as `120,000`: audiences run to six figures, read at a glance.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a cancel did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TriggerCancelled {
    /// Messages this request cancelled (rows already being sent finish).
    pub cancelled: u64,
    pub trigger: TriggerReport,
}

/// One trigger, its expansion and its audience's messages.
#[utoipa::path(get, path = "/v1/triggers/{id}", tag = "triggers", params(("id" = String, Path)),
    responses((status = 200, body = TriggerReport), Unauthorized, NotFound),
    security(("api_key" = [])))]
pub async fn get(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<ApiJson<TriggerReport>, ApiError> {
    match TriggerReport::read(state.store.as_ref(), &id).await? {
        Some(report) => Ok(ApiJson(report)),
        None => Err(ApiError::NotFound(format!("no trigger {id:?}"))),
    }
}

/// Cancels everything of a trigger not yet sent, and the rest of its
/// expansion: each row `cancelled`, its send-log row naming the API key.
#[utoipa::path(post, path = "/v1/triggers/{id}/cancel", tag = "triggers", params(("id" = String, Path)),
    responses((status = 200, body = TriggerCancelled), Unauthorized, NotFound),
    security(("api_key" = [])))]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<ApiJson<TriggerCancelled>, ApiError> {
    let by = format!("the API by key \"{}\"", caller.key_name);
    let cancelled = cancel_trigger(state.store.as_ref(), &id, &by, state.clock.now()).await?;
    let Some(trigger) = TriggerReport::read(state.store.as_ref(), &id).await? else {
        return Err(ApiError::NotFound(format!("no trigger {id:?}")));
    };
    super::audit_api(&state, &caller, "trigger.cancel", &id, Some(format!("{cancelled} message(s) cancelled"))).await;
    Ok(ApiJson(TriggerCancelled { cancelled, trigger }))
}

/// Marks the trigger cancelled (its expansion stops before its next chunk)
/// and cancels its scheduled rows a chunk per transaction. `by` says who,
/// for each row's send-log detail. Answers how many rows it cancelled.
pub async fn cancel_trigger(
    store: &dyn Store,
    id: &str,
    by: &str,
    now: crate::clock::Millis,
) -> Result<u64, StoreError> {
    store.mark_trigger_cancelled(id, by, now).await?;
    let detail = format!("trigger {id} cancelled through {by}");
    let mut cancelled = 0;
    loop {
        let n = store.cancel_scheduled(CancelScope::Trigger(id), &detail, now).await?;
        cancelled += n;
        if n < CANCEL_CHUNK as u64 {
            return Ok(cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped_by_three() {
        let cases = [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (40_000, "40,000"),
            (1_234_567, "1,234,567"),
            (-1_000, "-1,000"),
        ];
        for (n, said) in cases {
            assert_eq!(super::thousands(n), said);
        }
    }
}
