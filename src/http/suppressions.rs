//! `/v1/suppressions`: addresses Herald will not mail or text. The API
//! takes email addresses or phone numbers and stores only their hashes
//! (a phone's is the hash of its E.164 form, `AddressKeys::hash_phone`);
//! it answers with hashes, and says which kind each is of.

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::problem::{ApiError, ApiJson, ApiQuery};
use super::responses::{BadRequest, Invalid, NotFound, NotJson, Unauthorized};
use crate::address::{AddressKeys, AddressKind};
use crate::clock::Millis;
use crate::delivery::channel::sms::phone::PhoneNumber;
use crate::planning::rule::FieldError;
use crate::store::{ALL_CATEGORIES, Lift, SuppressionReason, SuppressionRow};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SuppressionView {
    /// HMAC-SHA256 of the normalised address under the deployment secret.
    pub address_hash: String,
    /// Whether the hash is of an email address or a phone number.
    pub address_kind: AddressKind,
    /// The category it covers, or `*` for every category.
    pub category: String,
    pub reason: SuppressionReason,
    pub detail: Option<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    /// False once `expires_at` has passed.
    pub active: bool,
}

impl SuppressionView {
    fn new(s: &SuppressionRow, now: Millis) -> SuppressionView {
        SuppressionView {
            address_hash: s.address_hash.clone(),
            address_kind: s.address_kind,
            category: s.category.clone(),
            reason: s.reason,
            detail: s.detail.clone(),
            created_at: s.created_at.to_rfc3339(),
            expires_at: s.expires_at.map(|t| t.to_rfc3339()),
            active: s.expires_at.is_none_or(|t| t > now),
        }
    }
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuppressionInput {
    /// The email address to suppress; only its hash is stored. This or
    /// `phone`.
    #[serde(default)]
    pub email: Option<String>,
    /// Or the phone number to suppress, with its country code
    /// (`+14155550101`); the hash of its E.164 form is stored.
    #[serde(default)]
    pub phone: Option<String>,
    /// hard_bounce, complaint, unsubscribe or manual [default: manual]
    #[serde(default)]
    pub reason: Option<SuppressionReason>,
    /// A category, or `*` for every category [default: `*`]
    #[serde(default)]
    pub category: Option<String>,
    /// Why, for the operator who reads it later.
    #[serde(default)]
    pub detail: Option<String>,
    /// RFC 3339; after this the suppression no longer applies.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// Both routes' parameters as the handlers read them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuppressionQuery {
    /// An email address (hashed before lookup)
    pub email: Option<String>,
    /// Or a phone number with its country code (hashed before lookup)
    pub phone: Option<String>,
    /// Or its hash, as the send log shows it
    pub address_hash: Option<String>,
    /// DELETE only: lift this category alone (default: every suppression of the address)
    pub category: Option<String>,
    /// GET only: 1 to 500 [default: 100]
    pub limit: Option<u32>,
    /// DELETE only: why it is lifted (kept with who lifted it), at most 1000 characters
    pub reason: Option<String>,
}

/// `GET /v1/suppressions`'s parameters, as the document states them: the
/// handlers read both routes' through [`SuppressionQuery`] and refuse
/// another route's parameter by name, but one shared list in the document
/// offered `category` and `reason` on `GET`, which then answered 422, and
/// `limit` on `DELETE`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SuppressionListParams {
    /// An email address (hashed before lookup)
    email: Option<String>,
    /// Or a phone number with its country code, such as +14155550101 (hashed before lookup)
    phone: Option<String>,
    /// Or its hash, as the send log shows it (64 hexadecimal characters)
    #[param(pattern = "^[0-9a-fA-F]{64}$")]
    address_hash: Option<String>,
    /// 1 to 500 [default: 100]
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// `DELETE /v1/suppressions`'s parameters (see [`SuppressionListParams`]).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SuppressionLiftParams {
    /// An email address (hashed before lookup); this, `phone` or `address_hash` is required
    email: Option<String>,
    /// Or a phone number with its country code, such as +14155550101 (hashed before lookup)
    phone: Option<String>,
    /// Or its hash, as the send log shows it (64 hexadecimal characters)
    #[param(pattern = "^[0-9a-fA-F]{64}$")]
    address_hash: Option<String>,
    /// Lift this category alone (default: every suppression of the address)
    #[param(min_length = 1, max_length = 64)]
    category: Option<String>,
    /// Why it is lifted (kept with who lifted it), at most 1000 characters
    #[param(max_length = 1000)]
    reason: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SuppressionList {
    pub suppressions: Vec<SuppressionView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Lifted {
    pub address_hash: String,
    pub lifted: u64,
}

fn hash_with(keys: &AddressKeys, field: &str, email: &str) -> Result<String, ApiError> {
    keys.hash(email).ok_or_else(|| ApiError::field(field, "not an email address (expected local@domain)"))
}

fn phone_hash_with(keys: &AddressKeys, field: &'static str, phone: &str) -> Result<String, ApiError> {
    let phone = PhoneNumber::parse(field, phone).map_err(|e| ApiError::field(field, e.unnamed()))?;
    Ok(keys.hash_phone(&phone))
}

/// A 422 naming both `email` and `phone`.
fn both_fields(message: &str) -> ApiError {
    ApiError::Invalid(vec![FieldError::new("email", message), FieldError::new("phone", message)])
}

/// The hash and kind of the address given as `email` or as `phone`, `None`
/// when neither is; both is a 422 naming the two fields.
fn either_address(
    keys: &AddressKeys,
    email: Option<&str>,
    phone: Option<&str>,
) -> Result<Option<(AddressKind, String)>, ApiError> {
    match (email, phone) {
        (Some(_), Some(_)) => Err(both_fields("give email or phone, not both")),
        (Some(e), None) => Ok(Some((AddressKind::Email, hash_with(keys, "email", e)?))),
        (None, Some(p)) => Ok(Some((AddressKind::Phone, phone_hash_with(keys, "phone", p)?))),
        (None, None) => Ok(None),
    }
}

/// Everything `POST /v1/suppressions` checks, and the row it would store.
/// Public so the fuzz targets ([`crate::tooling::fuzzing`]) run exactly the
/// handler's checks, not a copy.
pub fn validate(keys: &AddressKeys, input: SuppressionInput, now: Millis) -> Result<SuppressionRow, ApiError> {
    let (address_kind, hash) = either_address(keys, input.email.as_deref(), input.phone.as_deref())?
        .ok_or_else(|| both_fields("give email or phone (one of the two)"))?;
    let category = input.category.unwrap_or_else(|| ALL_CATEGORIES.to_owned());
    check_category("category", &category)?;
    if input.detail.as_ref().is_some_and(|d| d.len() > 1000) {
        return Err(ApiError::field("detail", "at most 1000 characters"));
    }
    if input.detail.as_ref().is_some_and(|d| d.contains('\0')) {
        return Err(ApiError::field("detail", crate::domain::NUL_REFUSED));
    }
    let expires_at = match &input.expires_at {
        Some(t) => Some(Millis::from_datetime(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|e| ApiError::field("expires_at", format!("expected an RFC 3339 time: {e}")))?
                .to_utc(),
        )),
        None => None,
    };
    Ok(SuppressionRow {
        address_hash: hash,
        address_kind,
        category,
        reason: input.reason.unwrap_or(SuppressionReason::Manual),
        detail: input.detail,
        created_at: now,
        expires_at,
    })
}

fn address_of(state: &AppState, q: &SuppressionQuery) -> Result<Option<String>, ApiError> {
    let given = either_address(&state.keys, q.email.as_deref(), q.phone.as_deref())?;
    match (given, &q.address_hash) {
        (Some((kind, _)), Some(_)) => {
            Err(ApiError::field(kind.as_str(), format!("give {kind} or address_hash, not both")))
        }
        (Some((_, hash)), None) => Ok(Some(hash)),
        (None, Some(h)) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Some(h.to_ascii_lowercase()))
        }
        (None, Some(_)) => Err(ApiError::field("address_hash", "expected 64 hexadecimal characters")),
        (None, None) => Ok(None),
    }
}

/// A category name (see [`crate::planning::category`]), or `*` for every
/// category.
fn check_category(field: &str, c: &str) -> Result<(), ApiError> {
    if c == ALL_CATEGORIES {
        return Ok(());
    }
    crate::planning::category::check(field, c)
        .map_err(|e| ApiError::field(field, format!("{}, or * for every category", e.message)))
}

/// Lists suppressions, newest first, or those of one address.
#[utoipa::path(get, path = "/v1/suppressions", tag = "suppressions", params(SuppressionListParams),
    responses((status = 200, body = SuppressionList), BadRequest, Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<SuppressionQuery>,
) -> Result<ApiJson<SuppressionList>, ApiError> {
    let limit = ApiError::page_limit(q.limit, 100, 500)?;
    if q.category.is_some() {
        return Err(ApiError::field("category", "only DELETE takes a category"));
    }
    if q.reason.is_some() {
        return Err(ApiError::field("reason", "only DELETE takes a reason"));
    }
    let hash = address_of(&state, &q)?;
    let rows = state.store.list_suppressions(hash.as_deref(), limit).await?;
    let now = state.clock.now();
    Ok(ApiJson(SuppressionList { suppressions: rows.iter().map(|s| SuppressionView::new(s, now)).collect() }))
}

/// Suppresses an address: Herald will record `suppressed` instead of
/// sending to it. Repeating it updates reason, detail and expiry.
#[utoipa::path(post, path = "/v1/suppressions", tag = "suppressions", request_body = SuppressionInput,
    responses(
        (status = 201, description = "Created", body = SuppressionView),
        (status = 200, description = "Already suppressed; updated", body = SuppressionView),
        BadRequest, Unauthorized, NotJson, Invalid,
    ),
    security(("api_key" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(input): ApiJson<SuppressionInput>,
) -> Result<(StatusCode, ApiJson<SuppressionView>), ApiError> {
    let (created, view) = suppress(&state, input).await?;
    let detail = format!("{} (category {}){}", view.reason, view.category, if created { "" } else { ", updated" });
    super::audit_api(&state, &caller, "suppression.add", &view.address_hash, Some(detail)).await;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, ApiJson(view)))
}

/// Validates and stores a suppression; whether it is new, and how it reads
/// now. Shared by the API and the operator screen.
pub async fn suppress(state: &AppState, input: SuppressionInput) -> Result<(bool, SuppressionView), ApiError> {
    let now = state.clock.now();
    let row = validate(&state.keys, input, now)?;
    let created = state.store.suppress(&row).await?;
    let stored = state
        .store
        .list_suppressions(Some(&row.address_hash), 500)
        .await?
        .into_iter()
        .find(|s| s.category == row.category)
        .unwrap_or(row);
    Ok((created, SuppressionView::new(&stored, now)))
}

/// Lifts the suppressions of one address (or one category of it).
#[utoipa::path(delete, path = "/v1/suppressions", tag = "suppressions", params(SuppressionLiftParams),
    responses((status = 200, body = Lifted), BadRequest, Unauthorized, NotFound, Invalid),
    security(("api_key" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<SuppressionQuery>,
) -> Result<ApiJson<Lifted>, ApiError> {
    let hash = address_of(&state, &q)?.ok_or_else(|| ApiError::field("email", "give email, phone or address_hash"))?;
    // Audited like the screen's lifts, in the lift's own transaction.
    let lifted = lift(&state, &hash, q.category.as_deref(), q.reason.as_deref(), &caller.audit_name(), true).await?;
    Ok(ApiJson(Lifted { address_hash: hash, lifted }))
}

/// Checks and lifts; 404 when there was nothing to lift. `audit`: also
/// write the audit log (the operator screen), in the lift's transaction.
pub async fn lift(
    state: &AppState,
    hash: &str,
    category: Option<&str>,
    reason: Option<&str>,
    by: &str,
    audit: bool,
) -> Result<u64, ApiError> {
    if let Some(c) = category {
        check_category("category", c)?;
    }
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.len() > 1000 || r.chars().any(char::is_control)) {
        return Err(ApiError::field("reason", "at most 1000 characters, without control characters"));
    }
    let lift = Lift { reason, by, audit };
    let lifted = state.store.lift_suppression(hash, category, &lift, state.clock.now()).await?;
    if lifted == 0 {
        return Err(ApiError::NotFound("that address has no suppression to lift".into()));
    }
    tracing::info!(address_hash = %hash, lifted, by, reason, "suppression lifted");
    Ok(lifted)
}
