//! Suppressions and bounces: the list, adding one, lifting one (with a
//! reason, kept with who lifted it), and the evidence behind an address:
//! its bounces with what arrived, its send log, its earlier lifts.

use axum::Form;
use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Page, Ui, UiError, audit, describe, redirect_with};
use crate::http::suppressions::{SuppressionInput, lift as lift_suppression, suppress};
use crate::store::{ALL_CATEGORIES, SuppressionReason};

const ACTIVE: &str = "/ui/suppressions";

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// An email address or a phone number to look up (hashed first).
    #[serde(default)]
    pub q: String,
}

pub async fn list(Ui { state, op }: Ui, Query(query): Query<ListQuery>) -> Result<Response, UiError> {
    let q = query.q.trim();
    let (hash, error) = match q {
        "" => (None, None),
        q => match state.keys.hash_either(q) {
            Ok((_, h)) => (Some(h), None),
            Err(why) => (None, Some(why)),
        },
    };
    if error.is_none() && !q.is_empty() {
        // Straight to the evidence for that address.
        return Ok(
            axum::response::Redirect::to(&format!("/ui/suppressions/{}", hash.unwrap_or_default())).into_response()
        );
    }
    let now = state.clock.now();
    let rows = state.store.list_suppressions(None, 200).await?;
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            v["active"] = s.expires_at.is_none_or(|t| t > now).into();
            v
        })
        .collect();
    let bounces = state.store.list_bounces(20).await?;
    let lifts = state.store.suppression_lifts(None, 20).await?;
    Ok(Page::new(&op, ACTIVE, "suppressions.html", "Suppressions and bounces")
        .with(serde_json::json!({ "q": q, "error": error, "rows": rows, "bounces": bounces, "lifts": lifts }))
        .into_response())
}

pub async fn evidence(Ui { state, op }: Ui, Path(hash): Path<String>) -> Result<Response, UiError> {
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(UiError::NotFound(format!("{hash:?} is not an address hash (64 hexadecimal characters)")));
    }
    let hash = hash.to_ascii_lowercase();
    let now = state.clock.now();
    let suppressions = state.store.list_suppressions(Some(&hash), 100).await?;
    let suppressions: Vec<serde_json::Value> = suppressions
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            v["active"] = s.expires_at.is_none_or(|t| t > now).into();
            v
        })
        .collect();
    let bounces = state.store.bounces_for_address(&hash, 50).await?;
    let sends = state.store.sends_for_address(&hash, 50).await?;
    let lifts = state.store.suppression_lifts(Some(&hash), 50).await?;
    Ok(Page::new(&op, ACTIVE, "suppression.html", "Address evidence")
        .with(serde_json::json!({
            "hash": hash, "suppressions": suppressions, "bounces": bounces, "sends": sends, "lifts": lifts,
        }))
        .into_response())
}

#[derive(Debug, Deserialize)]
pub struct AddForm {
    /// An email address, or a phone number with its country code (`+…`).
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub category: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub detail: String,
}

pub async fn add(Ui { state, op }: Ui, Form(f): Form<AddForm>) -> Result<Response, UiError> {
    let category =
        Some(f.category.trim().to_owned()).filter(|c| !c.is_empty()).unwrap_or_else(|| ALL_CATEGORIES.into());
    let reason = match f.reason.as_str() {
        "" => SuppressionReason::Manual,
        r => match SuppressionReason::parse(r) {
            Some(r) => r,
            None => return Ok(redirect_with(&state, ACTIVE, format!("Not suppressed: unknown reason {r:?}."))),
        },
    };
    let detail =
        Some(f.detail.trim().to_owned()).filter(|d| !d.is_empty()).or_else(|| Some(format!("added by {}", op.email)));
    // One box for both kinds, told apart as the lookup tells them.
    let address = f.email.trim().to_owned();
    let (email, phone) = if address.starts_with('+') { (None, Some(address)) } else { (Some(address), None) };
    let input = SuppressionInput {
        email,
        phone,
        reason: Some(reason),
        category: Some(category.clone()),
        detail,
        expires_at: None,
    };
    match suppress(&state, input).await {
        Ok((created, view)) => {
            let what = if created { "added" } else { "updated" };
            audit(
                &state,
                &op,
                "suppression.add",
                &view.address_hash,
                Some(format!("category {category}, reason {reason}, {what}")),
            )
            .await;
            Ok(redirect_with(
                &state,
                &format!("/ui/suppressions/{}", view.address_hash),
                format!("Suppression {what} (category {category})."),
            ))
        }
        Err(e) => Ok(redirect_with(&state, ACTIVE, format!("Not suppressed: {}", describe(&e)))),
    }
}

#[derive(Debug, Deserialize)]
pub struct LiftForm {
    #[serde(default)]
    pub address_hash: String,
    /// Empty: every category of the address.
    #[serde(default)]
    pub category: String,
    #[serde(default)]
    pub reason: String,
}

/// Lifting needs a reason on the screen (the API leaves it optional, for
/// scripts that already record theirs): the next operator to look at this
/// address should not have to guess why it is mailed again.
pub async fn lift(Ui { state, op }: Ui, Form(f): Form<LiftForm>) -> Result<Response, UiError> {
    let hash = f.address_hash.trim().to_ascii_lowercase();
    let back = format!("/ui/suppressions/{hash}");
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(UiError::BadRequest("address_hash: expected 64 hexadecimal characters".into()));
    }
    let reason = f.reason.trim();
    if reason.is_empty() {
        return Ok(redirect_with(
            &state,
            &back,
            "Not lifted: say why it is lifted (the reason is kept with the lift).",
        ));
    }
    let category = Some(f.category.trim()).filter(|c| !c.is_empty());
    // The audit row is written in the lift's own transaction.
    match lift_suppression(&state, &hash, category, Some(reason), &op.email, true).await {
        Ok(n) => Ok(redirect_with(
            &state,
            &back,
            format!("Lifted {n} suppression(s) (category {}).", category.unwrap_or("all")),
        )),
        Err(e) => Ok(redirect_with(&state, &back, format!("Not lifted: {}", describe(&e)))),
    }
}
