//! `/v1/sms/…`: what SMS providers call back with. No API key: each call
//! proves itself instead, Twilio's by `X-Twilio-Signature` (HMAC-SHA1 of
//! the URL Herald gave it and the sorted form, keyed with the auth token),
//! Kannel's by a token Herald signed into the URL it gave Kannel. A call
//! that does not prove itself is answered `403` and changes nothing.
//!
//! - `POST /v1/sms/status/twilio?outbox=ID`: a status callback.
//! - `GET /v1/sms/status/kannel?token=…&type=%d…`: a delivery report.
//! - `POST /v1/sms/inbound/twilio`: a text to Herald's number.
//! - `GET /v1/sms/inbound/kannel?token=…&from=%p&text=%a`: Kannel's
//!   `sms-service` `get-url`, the same for a Kannel number.
//!
//! # Delivery reports
//! A report is history, not a new fate: the row stays `sent` (Herald handed
//! it over) and the report is kept as evidence beside bounces
//! (`GET /v1/bounces`, and "why not" by number). What the carrier says
//! became of the text adds a row to the message's send log, in the same
//! transaction as the evidence and only when the evidence is new (the same
//! report twice, a provider retrying its callback, is recorded once):
//!
//! - `delivered` when the handset got it (Twilio `delivered`, Kannel 1);
//! - `undelivered` when it did not (Twilio `undelivered` or `failed`,
//!   Kannel 2 and 16), its detail naming the provider, its word and the
//!   carrier's code (`Twilio: undelivered (30003 unreachable handset)`);
//! - `bounced` instead of `undelivered` when the code says the number can
//!   never take a text (Twilio's 30005 or 30006; Kannel's SMSC refusal is
//!   not proof of that), with the number suppressed (`hard_bounce`), as a
//!   bounce does for a mailbox. One row per report, never both: `bounced`
//!   says all `undelivered` would, and more (the number is now refused).
//!
//! Intermediate states (Twilio's `queued`, `sending`, `sent`, `accepted`;
//! Kannel's buffered and accepted by the SMSC) add no send-log row: they say
//! nothing about the handset. They are still kept as evidence, as before,
//! because a text that stays at "accepted by the SMSC" and never reports
//! again is worth seeing by number; the alternative, dropping them, saves a
//! row per text in a table retention already prunes.
//!
//! # STOP, START, HELP
//! STOP (and its synonyms, see [`keywords`]) suppresses the number for
//! every category with the reason `stop`, which the SMS channel applies to
//! every message but a `transactional` one. START lifts that suppression
//! and no other: a number an operator suppressed, or one marked invalid,
//! stays suppressed, and a STOP does not replace such a suppression (so a
//! START cannot lift it afterwards). HELP is answered with `sms.help_text`
//! (TwiML for Twilio, the body for Kannel).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::Digest;

use super::AppState;
use super::problem::ApiError;
use crate::address::AddressKind;
use crate::delivery::channel::answer::excerpt;
use crate::delivery::channel::sms::kannel::{DeliveryReport, DlrState};
use crate::delivery::channel::sms::keywords::{self, Keyword};
use crate::delivery::channel::sms::phone::PhoneNumber;
use crate::delivery::channel::sms::transport::SmsTransport;
use crate::delivery::channel::sms::twilio::{self, InboundMessage, StatusReport};
use crate::domain::SendStatus;
use crate::store::{ALL_CATEGORIES, Lift, MatchedSend, NewBounce, SuppressionReason, SuppressionRow};

/// The path of Kannel's `sms-service` `get-url`.
pub const KANNEL_INBOUND_PATH: &str = "/v1/sms/inbound/kannel";
/// What Kannel's inbound token signs: not a row, the inbound URL itself.
const KANNEL_INBOUND_LABEL: &str = "sms-inbound:kannel";

/// What the callbacks need from `[sms]` and `http.public_url`.
#[derive(Debug, Clone)]
pub struct SmsHooks {
    pub transport: SmsTransport,
    /// `http.public_url` without a trailing slash: the base of the URLs
    /// Twilio signs.
    pub public_url: Option<String>,
    pub help_text: Option<String>,
}

impl SmsHooks {
    /// From a configuration whose `[sms]` has a transport.
    pub fn from_config(config: &crate::config::Config) -> Option<Arc<SmsHooks>> {
        let checked = config.sms.check().ok()??;
        // As the channel builds its callback URLs (a parsed `Url`: host in
        // lower case, no default port), or Twilio signs one URL and Herald
        // checks another: `https://Herald.Example:443` refused every call.
        let public_url = config.public_url().ok().flatten().map(|u| match url::Url::parse(u) {
            Ok(parsed) => parsed.as_str().trim_end_matches('/').to_owned(),
            Err(_) => u.to_owned(),
        });
        Some(Arc::new(SmsHooks { transport: checked.transport, public_url, help_text: config.sms.help_text.clone() }))
    }
}

/// The `get-url` to give Kannel's `sms-service` (Kannel replaces `%p` with
/// the sender and `%a` with the text).
pub fn kannel_inbound_url(public_url: &str, keys: &crate::address::AddressKeys) -> String {
    format!(
        "{}{KANNEL_INBOUND_PATH}?token={}&from=%p&text=%a",
        public_url.trim_end_matches('/'),
        keys.sign_delivery_report(KANNEL_INBOUND_LABEL)
    )
}

fn forbidden(detail: impl Into<String>) -> ApiError {
    let detail = detail.into();
    tracing::warn!(%detail, "refused an SMS callback");
    ApiError::Rejected { status: StatusCode::FORBIDDEN, detail }
}

/// Nothing can prove a call to a provider Herald does not use: refused
/// like a forged one.
fn not_configured(provider: &str) -> ApiError {
    forbidden(format!("SMS through {provider} is not configured on this instance (sms.transport)"))
}

fn form(body: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    query.map(|q| form(q.as_bytes())).unwrap_or_default()
}

/// A call from Twilio, its signature checked: the URL Twilio signed is
/// `http.public_url`, the path it called and the query Herald gave it
/// (Herald serves from the root of `http.public_url`).
pub struct TwilioCall {
    pub query: Option<String>,
    pub params: Vec<(String, String)>,
    /// The form as it came, kept as evidence.
    pub body: String,
}

impl axum::extract::FromRequest<AppState> for TwilioCall {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &AppState) -> Result<TwilioCall, ApiError> {
        let path = match req.extensions().get::<axum::extract::OriginalUri>() {
            Some(original) => original.path().to_owned(),
            None => req.uri().path().to_owned(),
        };
        let query = req.uri().query().map(str::to_owned);
        let signature = req.headers().get("x-twilio-signature").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = Bytes::from_request(req, state).await.map_err(|e| ApiError::BadRequest(e.body_text()))?;
        let hooks = state.sms.as_ref().ok_or_else(|| not_configured("Twilio"))?;
        let SmsTransport::Twilio(endpoint) = &hooks.transport else { return Err(not_configured("Twilio")) };
        let Some(base) = &hooks.public_url else {
            return Err(forbidden("http.public_url is not set, so no Twilio signature can be checked"));
        };
        let url = match &query {
            Some(q) => format!("{base}{path}?{q}"),
            None => format!("{base}{path}"),
        };
        let params = form(&body);
        twilio::verify_callback(endpoint, &url, &params, signature.as_deref()).map_err(|e| forbidden(e.to_string()))?;
        Ok(TwilioCall { query, params, body: String::from_utf8_lossy(&body).into_owned() })
    }
}

/// Twilio's status callback.
#[utoipa::path(post, path = "/v1/sms/status/twilio", tag = "sms",
    params(("outbox" = Option<String>, Query, description = "The row, as Herald put it in StatusCallback")),
    request_body(content = TwilioStatusForm, content_type = "application/x-www-form-urlencoded", description = "Twilio's status callback form"),
    responses(
        (status = 204, description = "Recorded (or already recorded)"),
        (status = 400, description = "Signed, but without MessageSid or MessageStatus"),
        (status = 403, description = "Not signed by Twilio for this account: nothing changed"),
    ))]
pub async fn twilio_status(State(state): State<AppState>, call: TwilioCall) -> Result<StatusCode, ApiError> {
    let TwilioCall { query, params, body } = call;
    let report = StatusReport::parse(&params).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let outbox = pairs(query.as_deref()).into_iter().find(|(k, _)| k == "outbox").map(|(_, v)| v);
    let send_status = report.send_log_status();
    let row = match &outbox {
        Some(id) => report_row(&state, id, send_status).await?,
        None => None,
    };
    let to = params.iter().find(|(k, _)| k == "To").and_then(|(_, v)| PhoneNumber::parse("To", v).ok());
    let evidence = Report {
        provider: "twilio",
        outbox,
        row,
        address_hash: to.map(|p| state.keys.hash_phone(&p)),
        status: report.status.clone(),
        code: report.error_code.map(i64::from),
        detail: report.describe(),
        provider_id: Some(report.message_sid.clone()),
        raw: body,
        send_status,
    };
    record(&state, evidence).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Kannel's delivery report (its `dlr-url`).
#[utoipa::path(get, path = "/v1/sms/status/kannel", tag = "sms",
    params(("token" = String, Query, description = "Signed by Herald into the dlr-url"),
           ("type" = String, Query, description = "Kannel's %d: 1, 2, 4, 8 or 16")),
    responses(
        (status = 204, description = "Recorded (or already recorded)"),
        (status = 400, description = "Signed, but the type is not Kannel's"),
        (status = 403, description = "No token, or one Herald did not sign: nothing changed"),
    ))]
pub async fn kannel_status(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<StatusCode, ApiError> {
    let pairs = pairs(query.as_deref());
    let report = DeliveryReport::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), &state.keys).map_err(
        |e| match e {
            crate::delivery::channel::sms::kannel::BadReport::Forged => forbidden(e.to_string()),
            other => ApiError::BadRequest(other.to_string()),
        },
    )?;
    // Kannel's reports carry no code Herald can read as "the number is
    // invalid" (an SMSC's `err:` is its own), so none is ever `bounced`.
    let send_status = match report.state {
        DlrState::Delivered => Some(SendStatus::Delivered),
        DlrState::Undelivered | DlrState::Failed => Some(SendStatus::Undelivered),
        DlrState::Buffered | DlrState::SmscAccepted => None,
    };
    let row = report_row(&state, &report.outbox_id, send_status).await?;
    // The number the text went to, as its send-log row hashed it (the
    // user's phone may have changed since, or a hand-enqueued row named
    // its own `to`).
    let address_hash = match &row {
        Some(r) => state.store.sends_for_outbox(&r.id).await?.into_iter().find_map(|s| s.address_hash),
        None => None,
    };
    let reply = report.smsc_reply.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
    let evidence = Report {
        provider: "kannel",
        outbox: Some(report.outbox_id.clone()),
        row,
        address_hash,
        status: report.state.as_str().to_owned(),
        code: None,
        detail: format!("Kannel: {}{reply}", report.state.as_str()),
        provider_id: report.smsc_id.clone(),
        raw: query.unwrap_or_default(),
        send_status,
    };
    record(&state, evidence).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Longest a delivery report waits for the outcome it reports on.
const REPORT_WAITS_FOR_OUTCOME: std::time::Duration = std::time::Duration::from_secs(5);

/// The outbox row `id` a report is about. A report that adds a send-log
/// row (`send_status`) waits for the row's outcome first: it can overtake
/// it, since an SMSC (Kannel's fake one always) reports within milliseconds
/// of accepting the text while the worker's outcome waits for its flush.
/// Filed then, the report found no send-log row to take the number's hash
/// from, and its `delivered` row stood before `sent` in the message's
/// history (a test failed on it one run in six). So such a report for a
/// row still `sending` waits, up to [`REPORT_WAITS_FOR_OUTCOME`], for the
/// outcome; a row still `sending` after that (its instance died mid-send)
/// is filed as it is. A state that adds no row (Twilio's `queued` and
/// `sent`, which come as the text is handed over) does not wait: it would
/// hold the callback and poll the database for nothing. Rejected:
/// answering 503 to be called again, which needs the gateway to retry its
/// callback (Kannel's smsbox does not) and loses the report when it does
/// not.
async fn report_row(
    state: &AppState,
    id: &str,
    send_status: Option<SendStatus>,
) -> Result<Option<crate::store::OutboxRow>, ApiError> {
    let deadline = std::time::Instant::now() + REPORT_WAITS_FOR_OUTCOME;
    loop {
        let row = state.store.get_outbox(id).await?;
        match &row {
            Some(r)
                if send_status.is_some()
                    && r.status == crate::domain::OutboxStatus::Sending
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            _ => return Ok(row),
        }
    }
}

/// One delivery report, as evidence.
struct Report {
    provider: &'static str,
    outbox: Option<String>,
    /// The row `outbox` names, read once by the caller.
    row: Option<crate::store::OutboxRow>,
    /// The texted number's hash.
    address_hash: Option<String>,
    /// The provider's own word for the state.
    status: String,
    code: Option<i64>,
    /// The send log's words: provider, state, carrier code.
    detail: String,
    /// Twilio's SM… sid, or the SMSC's id Kannel passed on.
    provider_id: Option<String>,
    raw: String,
    /// The row the send log gains (see the module doc); `Bounced` also
    /// marks the number invalid.
    send_status: Option<SendStatus>,
}

async fn record(state: &AppState, r: Report) -> Result<(), ApiError> {
    let now = state.clock.now();
    let (row, address_hash) = (r.row, r.address_hash);
    let number_invalid = r.send_status == Some(SendStatus::Bounced);
    let mut fp = sha2::Sha256::new();
    for part in [r.provider, r.outbox.as_deref().unwrap_or(""), r.provider_id.as_deref().unwrap_or(""), &r.detail] {
        fp.update(part.as_bytes());
        fp.update([0u8]);
    }
    let suppress = match (&address_hash, number_invalid) {
        (Some(hash), true) => Some(SuppressionRow {
            address_hash: hash.clone(),
            address_kind: AddressKind::Phone,
            category: ALL_CATEGORIES.into(),
            reason: SuppressionReason::HardBounce,
            detail: Some(format!("invalid number: {}", r.detail)),
            created_at: now,
            expires_at: None,
        }),
        _ => None,
    };
    let bounce = NewBounce {
        fingerprint: hex::encode(fp.finalize()),
        provider: r.provider.into(),
        kind: "delivery_report".into(),
        address_hash,
        status: Some(r.status),
        reply_code: r.code,
        detail: r.detail,
        raw_excerpt: crate::domain::storable_text(&excerpt(&r.raw)).into_owned(),
        matched: row.as_ref().map(|row| MatchedSend {
            outbox_id: row.id.clone(),
            rule_id: row.rule_id.clone(),
            trigger_id: row.trigger_id.clone(),
            user_id: row.user_id.clone(),
            channel: row.channel.clone(),
            matched_by: "callback",
        }),
        send_status: r.send_status.map(SendStatus::as_str),
        provider_id: r.provider_id,
        suppress,
    };
    state.store.record_bounce(&bounce, now).await?;
    Ok(())
}

/// The fields of Twilio's inbound message form that Herald reads (Twilio
/// sends more, all covered by its signature). For the OpenAPI document: the
/// handler checks the signature over the raw form first.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct TwilioInboundForm {
    /// The sender's number, E.164.
    #[serde(rename = "From")]
    from: String,
    /// Herald's number it was sent to.
    #[serde(rename = "To")]
    to: Option<String>,
    /// The text: STOP, START, HELP and their synonyms are acted on.
    #[serde(rename = "Body")]
    body: String,
    #[serde(rename = "MessageSid")]
    message_sid: Option<String>,
}

/// The fields of Twilio's status callback form that Herald reads.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct TwilioStatusForm {
    #[serde(rename = "MessageSid")]
    message_sid: String,
    /// `queued`, `sent`, `delivered`, `undelivered`, `failed`, …
    #[serde(rename = "MessageStatus")]
    message_status: String,
    /// The carrier's error code with `undelivered` or `failed` (30005, 30006, …).
    #[serde(rename = "ErrorCode")]
    error_code: Option<String>,
}

/// A text to the number, from Twilio.
#[utoipa::path(post, path = "/v1/sms/inbound/twilio", tag = "sms",
    request_body(content = TwilioInboundForm, content_type = "application/x-www-form-urlencoded", description = "Twilio's inbound message form"),
    responses(
        (status = 200, description = "TwiML: the HELP answer, or nothing", content_type = "text/xml"),
        (status = 403, description = "Not signed by Twilio for this account: nothing changed"),
    ))]
pub async fn twilio_inbound(State(state): State<AppState>, call: TwilioCall) -> Result<Response, ApiError> {
    let message = InboundMessage::parse(&call.params).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let answer = act(&state, &message.from, message.keyword, &message.body, "Twilio").await?;
    let twiml = match answer {
        Some(text) => format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Message>{}</Message></Response>",
            xml_escape(&text)
        ),
        None => "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response/>".to_owned(),
    };
    Ok(([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], twiml).into_response())
}

/// A text to the number, from Kannel's `sms-service`.
#[utoipa::path(get, path = "/v1/sms/inbound/kannel", tag = "sms",
    params(("token" = String, Query, description = "Herald's token for this URL (see docs/channels/sms.md)"),
           ("from" = String, Query, description = "Kannel's %p"), ("text" = String, Query, description = "Kannel's %a")),
    responses(
        (status = 200, description = "The HELP answer, or an empty body (set omit-empty = true)", content_type = "text/plain"),
        (status = 403, description = "No token, or one Herald did not sign: nothing changed"),
    ))]
pub async fn kannel_inbound(State(state): State<AppState>, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let pairs = pairs(query.as_deref());
    let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let signed = get("token").and_then(|t| state.keys.verify_delivery_report(t));
    if signed.as_deref() != Some(KANNEL_INBOUND_LABEL) {
        return Err(forbidden("the inbound URL's token is missing or not signed by this deployment"));
    }
    let from = get("from").and_then(|f| PhoneNumber::parse("from", f).ok());
    let Some(from) = from else { return Err(ApiError::BadRequest("from is not a phone number".into())) };
    let text = get("text").unwrap_or_default();
    let answer = act(&state, &from, keywords::keyword(text), text, "Kannel").await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], answer.unwrap_or_default()).into_response())
}

/// Does what an inbound keyword asks; the text to answer with, if any.
async fn act(
    state: &AppState,
    from: &PhoneNumber,
    keyword: Option<Keyword>,
    body: &str,
    provider: &str,
) -> Result<Option<String>, ApiError> {
    let hash = state.keys.hash_phone(from);
    let now = state.clock.now();
    let word = excerpt(body);
    match keyword {
        Some(Keyword::Stop) => {
            let existing = state.store.active_suppression(&hash, None, now).await?;
            // Another reason in force (an operator's, an invalid number)
            // stays: replacing it with `stop` would let a START lift it.
            if existing.as_ref().is_none_or(|s| s.reason == SuppressionReason::Stop) {
                state
                    .store
                    .suppress(&SuppressionRow {
                        address_hash: hash,
                        address_kind: AddressKind::Phone,
                        category: ALL_CATEGORIES.into(),
                        reason: SuppressionReason::Stop,
                        detail: Some(format!("texted {word:?} via {provider} on {}", now.to_rfc3339())),
                        created_at: now,
                        expires_at: None,
                    })
                    .await?;
            }
            Ok(None)
        }
        Some(Keyword::Start) => {
            let existing = state.store.active_suppression(&hash, None, now).await?;
            if existing.is_some_and(|s| s.reason == SuppressionReason::Stop) {
                let why = format!("texted {word:?} via {provider}");
                let lift = Lift { reason: Some(&why), by: "the number's owner (SMS)", audit: false };
                state.store.lift_suppression(&hash, Some(ALL_CATEGORIES), &lift, now).await?;
            }
            Ok(None)
        }
        Some(Keyword::Help) => Ok(state.sms.as_ref().and_then(|h| h.help_text.clone())),
        None => Ok(None),
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}
