//! The outbox: counts by status, the oldest due row, recent throughput, rows
//! filtered by status, rule and user, and each row with its attempts,
//! history and the retry and cancel buttons.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::{Page, Ui, UiError, ago, audit, describe, redirect_with};
use crate::domain::OutboxStatus;
use crate::http::AppState;
use crate::http::outbox::OutboxItem;
use crate::store::OutboxFilter;

const ACTIVE: &str = "/ui/outbox";
const PAGE_SIZE: u32 = 50;

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct OutboxQuery {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub rule: String,
    #[serde(default)]
    pub user: String,
    /// The last id of the previous page.
    #[serde(default)]
    pub before: String,
}

/// Send-log rows per status over a recent span.
#[derive(Debug, Serialize)]
struct Throughput {
    span: &'static str,
    total: i64,
    per_minute: String,
    by_status: Vec<(String, i64)>,
}

/// How many of the send-log rows counted by status are outcomes: a
/// delivery report (`delivered`, `undelivered`) is a later row for a message
/// already counted as `sent`, so it is left out of the total (and of the
/// rate), though still shown by status.
fn outcomes(by_status: &[(String, i64)]) -> i64 {
    let report = |s: &str| s.parse::<crate::domain::SendStatus>().is_ok_and(|s| s.is_report());
    by_status.iter().filter(|(s, _)| !report(s)).map(|(_, n)| n).sum()
}

async fn throughput(state: &AppState, span: &'static str, d: Duration) -> Result<Throughput, UiError> {
    let by_status = state.store.send_counts_since(ago(state, d)).await?;
    let total = outcomes(&by_status);
    let minutes = d.as_secs_f64() / 60.0;
    Ok(Throughput { span, total, per_minute: format!("{:.1}", total as f64 / minutes), by_status })
}

pub async fn list(Ui { state, op }: Ui, Query(q): Query<OutboxQuery>) -> Result<Response, UiError> {
    let now = state.clock.now();
    let summary = state.store.status_summary(now).await?;
    let rules = state.store.list_rules().await?;
    let rule_names: HashMap<&str, &str> = rules.iter().map(|r| (r.id.as_str(), r.name.as_str())).collect();
    let status = match q.status.as_str() {
        "" => None,
        s => Some(s.parse::<OutboxStatus>().map_err(|e| UiError::BadRequest(e.to_string()))?),
    };
    let some = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let filter = OutboxFilter {
        status,
        user_id: some(&q.user),
        rule_id: some(&q.rule),
        before: some(&q.before),
        limit: PAGE_SIZE,
    };
    let rows = state.store.list_outbox(&filter).await?;
    let older = (rows.len() as u32 == PAGE_SIZE).then(|| rows.last().map(|r| r.id.clone())).flatten();
    let items: Vec<serde_json::Value> = OutboxItem::list(&*state.store, &rows)
        .await?
        .into_iter()
        .map(|item| {
            let rule_name = item.rule_id.as_deref().and_then(|id| rule_names.get(id)).copied();
            let mut v = serde_json::to_value(item).unwrap_or_default();
            v["rule_name"] = rule_name.into();
            v
        })
        .collect();
    let throughput = vec![
        throughput(&state, "5 minutes", Duration::from_secs(300)).await?,
        throughput(&state, "hour", Duration::from_secs(3600)).await?,
    ];
    let statuses: Vec<&str> = OutboxStatus::ALL.iter().map(|s| s.as_str()).collect();
    let bulk_retry = status.is_some_and(|s| RETRYABLE.contains(&s)) && !rows.is_empty();
    Ok(Page::new(&op, ACTIVE, "outbox.html", "Outbox")
        .with(serde_json::json!({
            "summary": summary, "throughput": throughput, "rows": items, "q": q, "older": older,
            "statuses": statuses, "bulk_retry": bulk_retry, "bulk_limit": BULK_LIMIT, "rules": rules.iter().map(|r| serde_json::json!({"id": r.id, "name": r.name})).collect::<Vec<_>>(),
        }))
        .into_response())
}

/// The statuses "retry all matching" is offered for: the ends a retry can
/// undo (a `sent` row would be delivered twice; a `sending` one is in
/// flight; a `scheduled` one is already waiting).
const RETRYABLE: [OutboxStatus; 4] =
    [OutboxStatus::Failed, OutboxStatus::Expired, OutboxStatus::Cancelled, OutboxStatus::Suppressed];

/// Most rows one "retry all matching" schedules again; the page says when
/// more match, and the button can be pressed again.
const BULK_LIMIT: u32 = 1000;

/// Retries every row matching the list's filter (status, rule, user), up to
/// [`BULK_LIMIT`]: after a relay outage, "retry the 300 failed email rows" is
/// one click, not 300.
pub async fn retry_matching(Ui { state, op }: Ui, axum::Form(q): axum::Form<OutboxQuery>) -> Result<Response, UiError> {
    let back = format!("/ui/outbox?status={}&rule={}&user={}", enc(&q.status), enc(&q.rule), enc(&q.user));
    let status = match q.status.parse::<OutboxStatus>() {
        Ok(s) if RETRYABLE.contains(&s) => s,
        _ => {
            return Ok(redirect_with(
                &state,
                &back,
                "Not retried: pick a status of failed, expired, cancelled or suppressed first.",
            ));
        }
    };
    let some = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let filter = OutboxFilter {
        status: Some(status),
        user_id: some(&q.user),
        rule_id: some(&q.rule),
        before: None,
        limit: BULK_LIMIT,
    };
    let ids: Vec<String> = state.store.list_outbox(&filter).await?.into_iter().map(|r| r.id).collect();
    let retried = state.store.retry_many(&ids, state.clock.now()).await?;
    let scope = [("rule", &q.rule), ("user", &q.user)]
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!(", {k} {}", v.trim()))
        .collect::<String>();
    audit(
        &state,
        &op,
        "outbox.retry_many",
        status.as_str(),
        Some(format!("{retried} {status} row(s){scope}, due now")),
    )
    .await;
    let more = if ids.len() as u32 == BULK_LIMIT { " More may match: retry again for the next ones." } else { "" };
    Ok(redirect_with(&state, &back, format!("Scheduled {retried} {status} row(s) again, due now.{more}")))
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

pub async fn detail(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let row =
        state.store.get_outbox(&id).await?.ok_or_else(|| UiError::NotFound(format!("no outbox row with id {id:?}")))?;
    let history = state.store.sends_for_outbox(&id).await?;
    let rule = match &row.rule_id {
        Some(r) => state.store.get_rule(r).await?,
        None => None,
    };
    let trigger = match &row.trigger_id {
        Some(t) => state.store.get_trigger(t).await?,
        None => None,
    };
    let payload = serde_json::from_str::<serde_json::Value>(&row.payload)
        .map(|v| serde_json::to_string_pretty(&v).unwrap_or_default())
        .unwrap_or_else(|_| row.payload.clone());
    // The message itself: a rule row's template rendered for it (the outbox
    // keeps only the trigger's payload); a hand-enqueued row's payload is
    // the message and is shown as such.
    let message = match crate::headline::render_row(&*state.store, &row).await? {
        Some(Ok(m)) => serde_json::json!({
            "subject": m.subject, "text": m.text, "html": m.html, "url": m.url, "locale": m.locale,
        }),
        Some(Err(e)) => serde_json::json!({ "error": e }),
        None => serde_json::Value::Null,
    };
    let can_retry = !matches!(row.status, OutboxStatus::Sent | OutboxStatus::Sending);
    let can_cancel = row.status == OutboxStatus::Scheduled;
    Ok(Page::new(&op, ACTIVE, "outbox_row.html", format!("Outbox row {id}"))
        .with(serde_json::json!({
            "row": OutboxItem::list(&*state.store, std::slice::from_ref(&row)).await?.pop(), "history": history, "payload": payload,
            "rule": rule.map(|r| serde_json::json!({"id": r.id, "name": r.name})),
            "trigger": trigger, "can_retry": can_retry, "can_cancel": can_cancel, "message": message,
            "overdue": row.status == OutboxStatus::Scheduled && row.due_at <= state.clock.now(),
        }))
        .into_response())
}

pub async fn retry(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let action = state.store.retry_outbox(&id, state.clock.now()).await?;
    let to = format!("/ui/outbox/{id}");
    match crate::http::outbox::answer(&id, action, "retry") {
        Ok(item) => {
            audit(&state, &op, "outbox.retry", &id, Some(format!("was {}; scheduled again, due now", item.0.status)))
                .await;
            Ok(redirect_with(&state, &to, "Scheduled again, due now."))
        }
        Err(e) => Ok(redirect_with(&state, &to, format!("Not retried: {}", describe(&e)))),
    }
}

pub async fn cancel(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let detail = format!("cancelled from the operator screen by {}", op.email);
    let action = state.store.cancel_outbox(&id, &detail, state.clock.now()).await?;
    let to = format!("/ui/outbox/{id}");
    match crate::http::outbox::answer(&id, action, "cancel") {
        Ok(_) => {
            audit(&state, &op, "outbox.cancel", &id, None).await;
            Ok(redirect_with(&state, &to, "Cancelled."))
        }
        Err(e) => Ok(redirect_with(&state, &to, format!("Not cancelled: {}", describe(&e)))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn delivery_reports_are_not_counted_as_outcomes() {
        let counts = |pairs: &[(&str, i64)]| pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect::<Vec<_>>();
        let by_status = counts(&[("bounced", 1), ("delivered", 7), ("sent", 10), ("undelivered", 2)]);
        assert_eq!(super::outcomes(&by_status), 11);
        assert_eq!(super::outcomes(&counts(&[("sent", 3), ("failed", 1)])), 4);
    }
}
