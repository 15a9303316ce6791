//! Push subscriptions: the browsers and phones a user is pushed to.
//!
//! The same three routes twice: under `/v1/users/{user_id}/push-subscriptions`
//! with the API key (the host's backend registers an app's FCM or APNs
//! token), and under `/v1/inbox/push-subscriptions` with the user's inbox
//! token (a page registers its own browser; the widget's "Turn on
//! notifications" posts `PushSubscription.toJSON()` there). One handler
//! body serves both, with the user taken from the path or from the token:
//! a user token reaches only its own devices (another user's id is `404`,
//! as for inbox messages).
//!
//! Everything is checked here, before the store sees it
//! ([`crate::store::NewPushDevice`] is "already validated"): the endpoint is
//! `https://` and public (its name resolved now, and again at every
//! delivery by the channel's guarded resolver), the keys are a P-256 point
//! and a 16-byte secret, a token is not empty. Each refusal is a `422`
//! naming the field as the browser's JSON spells it (`keys.p256dh`).
//!
//! Registering a known endpoint or token again answers `200` with the same
//! id, and gives the device to the caller's user: the provider's address
//! is the device, so whoever registered it last is who it belongs to (see
//! `store::push_devices`). Rejected: refusing a device registered to
//! another user with `409`, which would leave a phone that changed hands
//! pushing the first owner's messages until they deleted it themselves.

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::problem::{ApiError, ApiJson, ApiPath, Problem};
use super::user_auth::InboxUser;
use super::users::user;
use crate::delivery::channel::public_address::check_resolved_host;
use crate::delivery::channel::push::webpush::{EndpointPolicy, WebSubscription};
use crate::delivery::channel::push::{PushDevice, PushError};
use crate::domain::UserId;
use crate::planning::rule::FieldError;
use crate::store::{NewPushDevice, PushDeviceRow, Registered};

/// The longest `label`, in characters.
pub const MAX_LABEL_CHARS: usize = 200;

/// The three identifiers, for the "exactly one" message.
const ONE_OF: &str = "give exactly one of `endpoint` (with `keys`, a browser's PushSubscription.toJSON()), \
                      `fcm_token` or `apns_token`";

/// A device to register: a browser's `PushSubscription.toJSON()` as it
/// is, or an FCM registration token, or an APNs device token (hex), with
/// an optional label.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushSubscriptionInput {
    /// The Web Push endpoint: an `https://` URL on a public address.
    pub endpoint: Option<String>,
    /// The browser's keys, with `endpoint`.
    pub keys: Option<WebPushKeys>,
    /// Part of `PushSubscription.toJSON()`; accepted and ignored (a push
    /// service that expires a subscription answers 404 or 410, and the
    /// device is removed then).
    #[serde(rename = "expirationTime")]
    #[schema(value_type = Option<f64>)]
    pub expiration_time: Option<serde_json::Value>,
    /// An FCM registration token.
    pub fcm_token: Option<String>,
    /// An APNs device token, hex.
    pub apns_token: Option<String>,
    /// What the user calls the device ("Ada's Pixel"), up to 200
    /// characters; registering again without one keeps the one it has.
    #[schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub label: Option<String>,
}

/// `PushSubscription.toJSON().keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebPushKeys {
    /// The browser's P-256 public key, an uncompressed point (65 bytes),
    /// base64url.
    pub p256dh: Option<String>,
    /// The 16-byte authentication secret, base64url.
    pub auth: Option<String>,
}

/// A registered device, as the API shows it (never its endpoint, token or
/// keys: they are the device's credentials with its provider).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PushSubscriptionView {
    pub id: String,
    /// `web`, `fcm` or `apns`.
    pub kind: String,
    pub label: Option<String>,
    pub created_at: String,
    /// The last time a provider accepted a notification for it.
    pub last_success_at: Option<String>,
}

impl From<&PushDeviceRow> for PushSubscriptionView {
    fn from(d: &PushDeviceRow) -> Self {
        PushSubscriptionView {
            id: d.id.clone(),
            kind: d.kind.clone(),
            label: d.label.clone(),
            created_at: d.created_at.to_rfc3339(),
            last_success_at: d.last_success_at.map(|t| t.to_rfc3339()),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PushSubscriptionList {
    /// The user's devices, oldest first (removed ones are not listed).
    pub items: Vec<PushSubscriptionView>,
}

/// What a registration answers, in the OpenAPI document (both routes).
#[allow(dead_code)] // Only its derive is used: it documents, the handlers answer.
#[derive(utoipa::IntoResponses)]
enum RegisterAnswers {
    #[response(status = 200, description = "A device Herald knew (now this user's)")]
    Known(PushSubscriptionView),
    #[response(status = 201, description = "A new device")]
    Created(PushSubscriptionView),
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    #[response(status = 415, content_type = "application/problem+json")]
    NotJson(Problem),
    #[response(
        status = 422,
        description = "`errors` names each field refused",
        content_type = "application/problem+json"
    )]
    Invalid(Problem),
}

/// What a list answers, in the OpenAPI document (both routes).
#[allow(dead_code)]
#[derive(utoipa::IntoResponses)]
enum ListAnswers {
    #[response(status = 200)]
    Listed(PushSubscriptionList),
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
}

/// What a removal answers, in the OpenAPI document (both routes).
#[allow(dead_code)]
#[derive(utoipa::IntoResponses)]
enum RemoveAnswers {
    #[response(status = 204, description = "Removed")]
    Removed,
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    #[response(status = 404, description = "No such device for this user", content_type = "application/problem+json")]
    NotFound(Problem),
}

fn refused(e: PushError) -> FieldError {
    match e {
        PushError::InvalidDevice { field, why } => FieldError::new(field, why),
        other => FieldError::new("endpoint", other.to_string()),
    }
}

/// The Web Push half of [`validate`]: every field it lacks or refuses.
fn web_device(input: &PushSubscriptionInput, policy: EndpointPolicy) -> Result<NewPushDevice, Vec<FieldError>> {
    let endpoint = input.endpoint.as_deref().unwrap_or_default();
    let keys = input.keys.as_ref();
    let p256dh = keys.and_then(|k| k.p256dh.as_deref());
    let auth = keys.and_then(|k| k.auth.as_deref());
    let mut missing = Vec::new();
    for (field, value) in [("endpoint", input.endpoint.as_deref()), ("keys.p256dh", p256dh), ("keys.auth", auth)] {
        if value.is_none_or(|v| v.trim().is_empty()) {
            missing.push(FieldError::new(field, "required for a Web Push subscription"));
        }
    }
    if !missing.is_empty() {
        return Err(missing);
    }
    let (p256dh, auth) = (p256dh.unwrap_or_default(), auth.unwrap_or_default());
    let sub = WebSubscription::parse(endpoint, p256dh, auth, policy).map_err(|e| vec![refused(e)])?;
    // `parse` takes a compressed point too; browsers send the uncompressed
    // one, which is what RFC 8291's key derivation is specified over.
    if URL_SAFE_NO_PAD.decode(p256dh.trim().trim_end_matches('=')).map(|b| b.len()).ok() != Some(65) {
        return Err(vec![FieldError::new("keys.p256dh", "not an uncompressed P-256 point (65 bytes, base64url)")]);
    }
    Ok(NewPushDevice {
        kind: "web".into(),
        address: sub.endpoint().as_str().to_owned(),
        p256dh: Some(p256dh.trim().trim_end_matches('=').to_owned()),
        auth: Some(auth.trim().trim_end_matches('=').to_owned()),
        label: None,
    })
}

/// Checks a registration, without the network: exactly one kind of
/// device, each of its fields well-formed, the label's length. Every
/// field at fault is named.
pub fn validate(input: &PushSubscriptionInput, policy: EndpointPolicy) -> Result<NewPushDevice, Vec<FieldError>> {
    let web = input.endpoint.is_some() || input.keys.is_some();
    let given: Vec<&str> =
        [("endpoint", web), ("fcm_token", input.fcm_token.is_some()), ("apns_token", input.apns_token.is_some())]
            .into_iter()
            .filter_map(|(field, present)| present.then_some(field))
            .collect();
    let mut errors = Vec::new();
    let label = input.label.as_deref().map(str::trim).filter(|l| !l.is_empty());
    if label.is_some_and(|l| l.chars().count() > MAX_LABEL_CHARS || l.chars().any(char::is_control)) {
        errors.push(FieldError::new("label", format!("at most {MAX_LABEL_CHARS} characters, no control characters")));
    }
    let device = match given.as_slice() {
        [] => Err(vec![FieldError::new("endpoint", ONE_OF)]),
        ["endpoint"] => web_device(input, policy),
        ["fcm_token"] => token_device(PushDevice::fcm(input.fcm_token.as_deref().unwrap_or_default())),
        ["apns_token"] => token_device(PushDevice::apns(input.apns_token.as_deref().unwrap_or_default())),
        several => Err(several.iter().map(|f| FieldError::new(*f, ONE_OF)).collect()),
    };
    match device {
        Ok(mut device) if errors.is_empty() => {
            device.label = label.map(str::to_owned);
            Ok(device)
        }
        Ok(_) => Err(errors),
        Err(mut refused) => {
            refused.append(&mut errors);
            Err(refused)
        }
    }
}

fn token_device(device: Result<PushDevice, PushError>) -> Result<NewPushDevice, Vec<FieldError>> {
    let device = device.map_err(|e| vec![refused(e)])?;
    let (kind, token) = match &device {
        PushDevice::Fcm { token } | PushDevice::Apns { token } => (device.kind(), token.clone()),
        PushDevice::Web(_) => unreachable!("only tokens come through here"),
    };
    Ok(NewPushDevice { kind: kind.into(), address: token, p256dh: None, auth: None, label: None })
}

/// Validates, resolves a Web Push endpoint's name, and files the device
/// for `user`: `201` when new, `200` with the same id when known (moved to
/// `user` if it was someone else's, which the audit log records).
async fn register(
    state: &AppState,
    user: &UserId,
    input: PushSubscriptionInput,
    who: &str,
) -> Result<(StatusCode, ApiJson<PushSubscriptionView>), ApiError> {
    let policy = state.push_endpoints;
    let device = validate(&input, policy).map_err(ApiError::Invalid)?;
    if device.kind == "web" {
        let url = reqwest::Url::parse(&device.address).map_err(|e| ApiError::field("endpoint", e.to_string()))?;
        check_resolved_host(&url, policy.target()).await.map_err(|why| ApiError::field("endpoint", why))?;
    }
    let now = state.clock.now();
    match state.store.register_push_device(user.as_str(), &device, now).await? {
        Registered::Created(row) => Ok((StatusCode::CREATED, ApiJson(PushSubscriptionView::from(&row)))),
        Registered::Existing { device: row, moved_from } => {
            if let Some(from) = moved_from {
                let entry = crate::store::AuditEntry {
                    operator_email: who.to_owned(),
                    action: "push_device.moved".into(),
                    target: format!("user:{from}"),
                    detail: Some(format!(
                        "{} device {} registered again by user {:?}; it is theirs now",
                        row.kind,
                        row.id,
                        user.as_str()
                    )),
                };
                if let Err(e) = state.store.append_audit(&entry, now).await {
                    tracing::error!(error = %e, device = %row.id, "could not write the audit log");
                }
            }
            Ok((StatusCode::OK, ApiJson(PushSubscriptionView::from(&row))))
        }
    }
}

async fn list(state: &AppState, user: &UserId) -> Result<ApiJson<PushSubscriptionList>, ApiError> {
    let devices = state.store.push_devices(user.as_str(), false).await?;
    Ok(ApiJson(PushSubscriptionList { items: devices.iter().map(PushSubscriptionView::from).collect() }))
}

async fn remove(state: &AppState, user: &UserId, id: &str, by: &str, reason: &str) -> Result<StatusCode, ApiError> {
    if state.store.remove_push_device(user.as_str(), id, by, reason, state.clock.now()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no push subscription {id:?} for this user")))
    }
}

/// Registers a device for a user (the host's backend: an app's FCM or
/// APNs token, or a browser subscription it was handed).
#[utoipa::path(post, path = "/v1/users/{user_id}/push-subscriptions", tag = "push",
    operation_id = "push_subscriptions_create", params(("user_id" = String, Path)),
    request_body = PushSubscriptionInput,
    responses(RegisterAnswers),
    security(("api_key" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<super::auth::Caller>,
    ApiPath(user_id): ApiPath<String>,
    ApiJson(input): ApiJson<PushSubscriptionInput>,
) -> Result<(StatusCode, ApiJson<PushSubscriptionView>), ApiError> {
    register(&state, &user(&user_id)?, input, &caller.audit_name()).await
}

/// A user's devices, oldest first.
#[utoipa::path(get, path = "/v1/users/{user_id}/push-subscriptions", tag = "push",
    operation_id = "push_subscriptions_list", params(("user_id" = String, Path)),
    responses(ListAnswers, (status = 422, body = Problem, content_type = "application/problem+json")),
    security(("api_key" = [])))]
pub async fn index(
    State(state): State<AppState>,
    ApiPath(user_id): ApiPath<String>,
) -> Result<ApiJson<PushSubscriptionList>, ApiError> {
    list(&state, &user(&user_id)?).await
}

/// Removes one of a user's devices (kept as removed "deleted through the
/// API", with an audit row; registering it again brings it back).
#[utoipa::path(delete, path = "/v1/users/{user_id}/push-subscriptions/{id}", tag = "push",
    operation_id = "push_subscriptions_delete",
    params(("user_id" = String, Path), ("id" = String, Path)),
    responses(RemoveAnswers, (status = 422, body = Problem, content_type = "application/problem+json")),
    security(("api_key" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    ApiPath((user_id, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    remove(&state, &user(&user_id)?, &id, "api", "deleted through the API").await
}

/// Registers the token's user's browser or phone (the widget posts
/// `PushSubscription.toJSON()` here).
#[utoipa::path(post, path = "/v1/inbox/push-subscriptions", tag = "inbox",
    operation_id = "inbox_push_subscriptions_create",
    request_body = PushSubscriptionInput,
    responses(RegisterAnswers),
    security(("user_token" = [])))]
pub async fn inbox_create(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
    ApiJson(input): ApiJson<PushSubscriptionInput>,
) -> Result<(StatusCode, ApiJson<PushSubscriptionView>), ApiError> {
    register(&state, &user, input, "user").await
}

/// The token's user's devices, oldest first.
#[utoipa::path(get, path = "/v1/inbox/push-subscriptions", tag = "inbox",
    operation_id = "inbox_push_subscriptions_list",
    responses(ListAnswers),
    security(("user_token" = [])))]
pub async fn inbox_index(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
) -> Result<ApiJson<PushSubscriptionList>, ApiError> {
    list(&state, &user).await
}

/// Removes one of the token's user's devices ("the user turned
/// notifications off"); another user's device is `404`.
#[utoipa::path(delete, path = "/v1/inbox/push-subscriptions/{id}", tag = "inbox",
    operation_id = "inbox_push_subscriptions_delete", params(("id" = String, Path)),
    responses(RemoveAnswers),
    security(("user_token" = [])))]
pub async fn inbox_delete(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    remove(&state, &user, &id, "user", "the user turned notifications off").await
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 8291's example subscription (§5).
    const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    fn input(v: serde_json::Value) -> PushSubscriptionInput {
        serde_json::from_value(v).unwrap()
    }

    fn fields(v: serde_json::Value) -> Vec<String> {
        validate(&input(v), EndpointPolicy::default()).unwrap_err().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_browser_subscription_is_taken_as_to_json_gives_it() {
        let d = validate(
            &input(serde_json::json!({"endpoint": "https://push.example.net/x", "expirationTime": null,
                "keys": {"p256dh": P256DH, "auth": AUTH}, "label": " Ada's laptop "})),
            EndpointPolicy::default(),
        )
        .unwrap();
        assert_eq!((d.kind.as_str(), d.address.as_str()), ("web", "https://push.example.net/x"));
        assert_eq!(d.label.as_deref(), Some("Ada's laptop"));
    }

    #[test]
    fn every_refusal_names_its_field() {
        let keys = serde_json::json!({"p256dh": P256DH, "auth": AUTH});
        assert_eq!(fields(serde_json::json!({})), ["endpoint"]);
        assert_eq!(fields(serde_json::json!({"fcm_token": "a", "apns_token": "ab"})), ["fcm_token", "apns_token"]);
        assert_eq!(fields(serde_json::json!({"endpoint": "http://push.example.net/x", "keys": keys})), ["endpoint"]);
        assert_eq!(fields(serde_json::json!({"endpoint": "https://push.example.net/x"})), ["keys.p256dh", "keys.auth"]);
        let short_auth = serde_json::json!({"p256dh": P256DH, "auth": "AAAA"});
        assert_eq!(fields(serde_json::json!({"endpoint": "https://a.example/x", "keys": short_auth})), ["keys.auth"]);
        let not_a_point = serde_json::json!({"p256dh": AUTH, "auth": AUTH});
        assert_eq!(
            fields(serde_json::json!({"endpoint": "https://a.example/x", "keys": not_a_point})),
            ["keys.p256dh"]
        );
        assert_eq!(fields(serde_json::json!({"fcm_token": " "})), ["fcm_token"]);
        assert_eq!(fields(serde_json::json!({"apns_token": "xyz"})), ["apns_token"]);
        assert_eq!(fields(serde_json::json!({"fcm_token": "t", "label": "x".repeat(201)})), ["label"]);
        assert!(
            validate(
                &input(serde_json::json!({"fcm_token": "t", "label": "x".repeat(200)})),
                EndpointPolicy::default()
            )
            .is_ok()
        );
    }
}
