//! The send log: "did they get it, and if not, why", by user id or by email
//! address. An address is hashed before anything is searched (the send log
//! holds only hashes), with the same deployment key the email channel uses.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::session::Operator;
use super::{Page, UiError};
use crate::domain::UserId;
use crate::http::AppState;
use crate::http::users::timeline;

const ACTIVE: &str = "/ui/sends";
const LIMIT: u32 = 200;

#[derive(Debug, Default, Deserialize)]
pub struct SendsQuery {
    /// A user id, or an email address.
    #[serde(default)]
    pub q: String,
}

pub async fn search(
    State(state): State<AppState>,
    Extension(op): Extension<Operator>,
    Query(query): Query<SendsQuery>,
) -> Result<Response, UiError> {
    let q = query.q.trim();
    let page = Page::new(&op, ACTIVE, "sends.html", "Send log");
    if q.is_empty() {
        return Ok(page.with(serde_json::json!({ "q": "" })).into_response());
    }
    if q.contains('@') {
        let Some(hash) = state.keys.hash(q) else {
            return Ok(page
                .with(serde_json::json!({ "q": q, "error": format!("{q:?} is not an email address (expected local@domain)") }))
                .into_response());
        };
        let sends = state.store.sends_for_address(&hash, LIMIT).await?;
        let subjects = crate::headline::for_sends(&*state.store, &sends).await?;
        let suppressions = state.store.list_suppressions(Some(&hash), 100).await?;
        let lifts = state.store.suppression_lifts(Some(&hash), 20).await?;
        return Ok(page
            .with(serde_json::json!({
                "q": q, "mode": "address", "address_hash": hash, "sends": sends, "subjects": subjects,
                "suppressions": suppressions, "lifts": lifts,
            }))
            .into_response());
    }
    let user = match UserId::parse("user id", q) {
        Ok(u) => u,
        Err(e) => return Ok(page.with(serde_json::json!({ "q": q, "error": e.to_string() })).into_response()),
    };
    let timeline = timeline(&state, &user).await?;
    let recipient = state.store.get_recipient(&user).await?;
    // What stops mail to this user now, if anything: their address's suppressions.
    let suppressions = match recipient.as_ref().and_then(|r| r.email.as_deref()).and_then(|e| state.keys.hash(e)) {
        Some(h) => state.store.list_suppressions(Some(&h), 100).await?,
        None => Vec::new(),
    };
    let preference_changes = state.store.audit_for_target(&format!("user:{user}"), 50).await?;
    let rules = state.store.list_rules().await?;
    let rule_names: std::collections::HashMap<String, String> = rules.into_iter().map(|r| (r.id, r.name)).collect();
    Ok(page
        .with(serde_json::json!({
            "q": q, "mode": "user", "timeline": timeline, "recipient": recipient,
            "suppressions": suppressions, "rule_names": rule_names, "preference_changes": preference_changes,
        }))
        .into_response())
}
