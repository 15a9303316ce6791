//! A trigger's page: its whole audience at a glance (progress, messages by
//! status and by channel, why the rest did not go), reached from the send
//! log, with the button that cancels what it has not sent yet.
//!
//! It shows [`TriggerReport`], the answer of `GET /v1/triggers/{id}`, and
//! cancels through [`cancel_trigger`] as the API does, so the screen, the
//! API and `herald trigger show` never disagree on a count. The cancel asks
//! first on a page of its own, as deleting a rule does: the screen runs no
//! script, so a confirmation is a page.

use axum::extract::Path;
use axum::response::{IntoResponse, Response};

use super::{Page, Ui, UiError, audit, redirect_with};
use crate::http::AppState;
use crate::http::trigger_report::{TriggerReport, cancel_trigger, thousands};

/// The send log's entry is highlighted: a trigger is reached from there.
const ACTIVE: &str = "/ui/sends";

async fn report(state: &AppState, id: &str) -> Result<TriggerReport, UiError> {
    TriggerReport::read(&*state.store, id).await?.ok_or_else(|| UiError::NotFound(format!("no trigger with id {id:?}")))
}

/// The report and what the template adds to it: the progress in words and
/// the totals, grouped for reading.
fn context(r: &TriggerReport) -> serde_json::Value {
    let total: i64 = r.counts.values().sum();
    let scheduled = r.counts.get("scheduled").copied().unwrap_or(0);
    serde_json::json!({
        "t": r, "progress": r.progress(), "total": thousands(total), "scheduled": thousands(scheduled),
        "can_cancel": r.state != "cancelled",
        "payload": serde_json::to_string_pretty(&r.payload).unwrap_or_default(),
    })
}

pub async fn show(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let r = report(&state, &id).await?;
    Ok(Page::new(&op, ACTIVE, "trigger.html", format!("Trigger {}", r.trigger_type)).with(context(&r)).into_response())
}

pub async fn confirm_cancel(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let r = report(&state, &id).await?;
    let mut ctx = context(&r);
    // A cancelled trigger has nothing left to cancel: its page, no question.
    ctx["confirm"] = (r.state != "cancelled").into();
    Ok(Page::new(&op, ACTIVE, "trigger.html", format!("Cancel trigger {}?", r.trigger_type)).with(ctx).into_response())
}

/// Cancels the rest of the trigger, each message's send log and the audit
/// log naming the operator.
pub async fn cancel(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    report(&state, &id).await?;
    let by = format!("the operator screen ({})", op.email);
    let cancelled = cancel_trigger(&*state.store, &id, &by, state.clock.now()).await?;
    audit(&state, &op, "trigger.cancel", &id, Some(format!("{cancelled} message(s) cancelled"))).await;
    let to = format!("/ui/triggers/{id}");
    Ok(redirect_with(&state, &to, format!("Trigger cancelled: {} message(s) cancelled.", thousands(cancelled as i64))))
}
