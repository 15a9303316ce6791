//! `/u/{token}`: one-click unsubscribe (RFC 8058), without login.
//!
//! `GET` only shows a page with a button: link scanners and mail previews
//! fetch URLs, and a GET that unsubscribed would unsubscribe people who never
//! clicked. `POST` with `List-Unsubscribe=One-Click` (what a mail client
//! sends from the List-Unsubscribe-Post header, and what the page's button
//! sends) unsubscribes and answers 200 with no redirect.
//!
//! # What unsubscribing does
//! It adds a suppression (reason `unsubscribe`) for the token's address hash
//! and category, rather than setting the user's preference. The promise made
//! in the header is about the address the message went to: a host
//! application that later replaces the user's preferences through
//! `PUT /v1/users/…` (a routine sync) would silently undo a preference, but
//! cannot undo a suppression; and the suppression still holds if the same
//! address comes back under another user id. Lifting it is an operator's act
//! (`DELETE /v1/suppressions`), as re-subscribing should be.
//!
//! The token is `base64url(payload).base64url(HMAC)` under a key derived
//! from the deployment secret (see [`crate::address`]); a forged or altered
//! one is refused with 400 and changes nothing.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;

use super::AppState;
use super::problem::{ApiError, ApiPath, Problem};
use crate::address::UnsubscribeToken;
use crate::store::{SuppressionReason, SuppressionRow};

/// The page before (`done` false: a button) or after unsubscribing (see
/// `ui/templates/hosted_unsubscribe.html`).
fn page(category: &str, done: bool) -> Response {
    crate::http::ui::hosted_page("hosted_unsubscribe.html", serde_json::json!({ "category": category, "done": done }))
}

fn verify(state: &AppState, token: &str) -> Result<UnsubscribeToken, ApiError> {
    state.keys.verify_unsubscribe(token).ok_or_else(|| {
        ApiError::BadRequest(
            "this unsubscribe link is not valid: it was altered or was not issued by this server; \
             nothing was changed"
                .into(),
        )
    })
}

/// Shows what the link would do, with a button. Changes nothing.
#[utoipa::path(get, path = "/u/{token}", tag = "unsubscribe", params(("token" = String, Path)),
    responses(
        (status = 200, description = "A confirmation page", content_type = "text/html"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn show(State(state): State<AppState>, ApiPath(token): ApiPath<String>) -> Result<Response, ApiError> {
    let t = verify(&state, &token)?;
    Ok(page(&t.category, false))
}

/// Unsubscribes the token's address from its category. Idempotent.
#[utoipa::path(post, path = "/u/{token}", tag = "unsubscribe", operation_id = "unsubscribe_one_click", params(("token" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`List-Unsubscribe=One-Click`"),
    responses(
        (status = 200, description = "Unsubscribed (also when already unsubscribed)", content_type = "text/html"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn unsubscribe(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let t = verify(&state, &token)?;
    // RFC 8058 allows urlencoded or multipart/form-data; both carry these
    // two words, and nothing else this endpoint would accept does.
    let text = String::from_utf8_lossy(&body);
    if !(text.contains("List-Unsubscribe") && text.contains("One-Click")) {
        return Err(ApiError::BadRequest("expected the form body List-Unsubscribe=One-Click (RFC 8058)".into()));
    }
    if t.category == crate::store::ALL_CATEGORIES {
        // Only a rule saved before `*` was reserved can have issued this
        // link; honouring it would stop transactional mail too.
        tracing::warn!(address_hash = %t.address_hash, "an unsubscribe link for category \"*\" was refused");
        return Err(ApiError::BadRequest(
            "this unsubscribe link names no single category (a misconfigured rule issued it); nothing was changed, \
             ask the sender to unsubscribe you"
                .into(),
        ));
    }
    let row = SuppressionRow {
        address_hash: t.address_hash.clone(),
        address_kind: crate::address::AddressKind::Email,
        category: t.category.clone(),
        reason: SuppressionReason::Unsubscribe,
        detail: Some(format!("one-click unsubscribe (user {})", t.user_id)),
        created_at: state.clock.now(),
        expires_at: None,
    };
    let created = state.store.suppress(&row).await?;
    if created {
        tracing::info!(address_hash = %t.address_hash, category = %t.category, "unsubscribed");
    }
    Ok(page(&t.category, true))
}
