//! The audit log: every operator action, newest first, in pages; and the
//! recent login attempts, refused ones included.

use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Page, Ui, UiError};

const PAGE_SIZE: u32 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct AuditQuery {
    /// The last id of the previous page.
    #[serde(default)]
    pub before: String,
}

pub async fn list(Ui { state, op }: Ui, Query(q): Query<AuditQuery>) -> Result<Response, UiError> {
    let before = Some(q.before.as_str()).filter(|b| !b.is_empty());
    let rows = state.store.audit_log(before, PAGE_SIZE).await?;
    let older = (rows.len() as u32 == PAGE_SIZE).then(|| rows.last().map(|r| r.id.clone())).flatten();
    // Only the first page shows login attempts; they are not what paging is for.
    let attempts = if before.is_none() { state.store.recent_login_attempts(20).await? } else { Vec::new() };
    Ok(Page::new(&op, "/ui/audit", "audit.html", "Audit log")
        .with(serde_json::json!({ "rows": rows, "older": older, "attempts": attempts, "paged": before.is_some() }))
        .into_response())
}
