//! `GET /v1/push/vapid-public-key`: the `applicationServerKey` a page passes
//! to `pushManager.subscribe`. Public, like the widget script: a VAPID
//! public key is meant to be handed to every browser, and a page asks for
//! it before it has any credential. Served from the configuration rather
//! than pasted into each page, so a key rotation reaches pages without a
//! deploy of the host application.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;

use super::AppState;
use super::problem::{ApiError, ApiJson, Problem};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VapidPublicKey {
    /// The uncompressed P-256 point, base64url without padding (87
    /// characters): what `pushManager.subscribe({applicationServerKey})`
    /// takes.
    pub public_key: String,
}

/// The Web Push public key, or `404` when Web Push is not configured.
#[utoipa::path(get, path = "/v1/push/vapid-public-key", tag = "push",
    responses(
        (status = 200, body = VapidPublicKey),
        (status = 404, description = "Web Push is not configured on this server (push.vapid_private_key)",
            body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn vapid_public_key(State(state): State<AppState>) -> impl IntoResponse {
    let answer = match state.vapid_public_key.clone() {
        Some(public_key) => ApiJson(VapidPublicKey { public_key }).into_response(),
        None => ApiError::NotFound(
            "Web Push is not configured on this server: its operator sets push.vapid_private_key and \
             push.vapid_subject (herald push vapid-keys makes a key)"
                .into(),
        )
        .into_response(),
    };
    // Pages on any origin may ask, and read the refusal too (the widget
    // shows no button then); a minute of caching spares a page load the
    // round trip without holding on to a rotated key for long.
    ([(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"), (header::CACHE_CONTROL, "public, max-age=60")], answer)
}
