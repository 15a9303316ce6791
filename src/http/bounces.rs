//! `/v1/bounces`: bounce and complaint messages in, evidence out.

use axum::body::Bytes;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::problem::{ApiError, ApiJson, ApiQuery, Problem};
use super::responses::{BadRequest, Invalid, TooLarge, Unauthorized};
use crate::feedback::ingest::{IngestError, IngestReport, ingest_mail};
use crate::store::BounceRow;

/// Raw messages can be large (some bounces attach the whole original).
pub const MAX_MAIL_BYTES: usize = crate::feedback::bounce::MAX_INPUT_BYTES;

/// Takes one raw message as received on the return path (for a mailbox
/// forwarder): records each recipient it reports on, appends `bounced` or
/// `complained` to the matched message's send log and suppresses hard-bounced
/// and complaining addresses. Sending the same message again changes nothing.
#[utoipa::path(post, path = "/v1/bounces/mail", tag = "bounces",
    request_body(content = String, content_type = "application/octet-stream", description = "The raw message, as received on the return path (any content type is accepted; message/rfc822 is the usual one)"),
    responses(
        (status = 200, body = IngestReport),
        (status = 422, description = "Not a message Herald can read", body = Problem, content_type = "application/problem+json"),
        Unauthorized, TooLarge,
    ),
    security(("api_key" = [])))]
pub async fn mail(State(state): State<AppState>, body: Bytes) -> Result<ApiJson<IngestReport>, ApiError> {
    match ingest_mail(state.store.as_ref(), &state.keys, state.soft_bounces, &body, "mail", state.clock.now()).await {
        Ok(report) => Ok(ApiJson(report)),
        Err(IngestError::Parse(e)) => Err(ApiError::field("body", e.to_string())),
        Err(IngestError::Store(e)) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BounceQuery {
    /// 1 to 500 [default: 50]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BounceList {
    pub bounces: Vec<BounceRow>,
}

/// Recorded bounces and complaints, newest first.
#[utoipa::path(get, path = "/v1/bounces", tag = "bounces", params(BounceQuery),
    responses((status = 200, body = BounceList), BadRequest, Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<BounceQuery>,
) -> Result<ApiJson<BounceList>, ApiError> {
    let limit = ApiError::page_limit(q.limit, 50, 500)?;
    Ok(ApiJson(BounceList { bounces: state.store.list_bounces(limit).await? }))
}

/// The provider credentials this deployment configured.
#[derive(Clone, Default)]
pub struct ProviderKeys {
    pub sendgrid: Option<crate::feedback::providers::sendgrid::SendGridKey>,
    pub mailgun: Option<String>,
    pub postmark: Option<(String, String)>,
    pub ses: Option<std::sync::Arc<SesKeys>>,
}

/// SES/SNS: the topics accepted, and the certificates' keys by URL.
#[derive(Default)]
pub struct SesKeys {
    pub topics: Vec<String>,
    pub pinned: Option<rsa::RsaPublicKey>,
    pub confirm: bool,
    /// A plain mutex, held only to read or insert: never across the fetch,
    /// so one slow (or hanging) certificate download cannot stall every
    /// other SES request behind it. Two requests for a new URL may both
    /// fetch it; the second insert is harmless.
    fetched: std::sync::Mutex<std::collections::HashMap<String, rsa::RsaPublicKey>>,
}

impl SesKeys {
    async fn key_for(&self, url: &str) -> Result<rsa::RsaPublicKey, String> {
        if let Some(k) = &self.pinned {
            return Ok(k.clone());
        }
        if !crate::feedback::providers::ses::trusted_cert_url(url) {
            return Err(format!("SigningCertURL {url:?} is not an SNS certificate URL"));
        }
        if let Some(k) = self.cached(url) {
            return Ok(k);
        }
        let pem = crate::feedback::providers::ses::client()
            .get(url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| e.to_string())?;
        let key = crate::feedback::providers::ses::key_from_pem(&pem.text().await.map_err(|e| e.to_string())?)?;
        self.fetched.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(url.to_owned(), key.clone());
        Ok(key)
    }

    fn cached(&self, url: &str) -> Option<rsa::RsaPublicKey> {
        self.fetched.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(url).cloned()
    }
}

impl ProviderKeys {
    pub fn from_config(c: &crate::config::BounceSettings) -> ProviderKeys {
        ProviderKeys {
            // Validated at load.
            sendgrid: c
                .sendgrid_public_key
                .as_deref()
                .and_then(|k| crate::feedback::providers::sendgrid::SendGridKey::parse(k).ok()),
            mailgun: c.mailgun_signing_key.clone(),
            postmark: c.postmark_user.clone().zip(c.postmark_password.clone()),
            ses: (!c.ses_topic_arns.is_empty()).then(|| {
                std::sync::Arc::new(SesKeys {
                    topics: c.ses_topic_arns.clone(),
                    pinned: c.ses_certificate_file.as_ref().and_then(|p| {
                        std::fs::read_to_string(p)
                            .ok()
                            .and_then(|pem| crate::feedback::providers::ses::key_from_pem(&pem).ok())
                    }),
                    confirm: c.ses_confirm_subscriptions,
                    fetched: Default::default(),
                })
            }),
        }
    }
}

fn refused(provider: &str, e: crate::feedback::providers::VerifyError) -> ApiError {
    tracing::warn!(provider, reason = %e, "refused a bounce webhook");
    ApiError::Unauthorized { detail: format!("{provider} webhook refused: {e}") }
}

async fn record(
    state: &AppState,
    provider: &str,
    recipients: Result<Vec<crate::feedback::bounce::BounceRecipient>, String>,
    body: &[u8],
) -> Result<ApiJson<IngestReport>, ApiError> {
    let recipients = recipients.map_err(|e| ApiError::field("body", e))?;
    let report = crate::feedback::ingest::record(
        state.store.as_ref(),
        &state.keys,
        state.soft_bounces,
        &recipients,
        provider,
        None,
        body,
        state.clock.now(),
    )
    .await?;
    Ok(ApiJson(report))
}

// What every provider webhook answers, in the OpenAPI document, but its
// 401, whose description says what that provider's check refused. (No doc
// comments on the variants: utoipa would take them as descriptions, which
// `openapi::Conventions` gives.)
#[allow(dead_code)] // Only its derive is used: it documents, the handlers answer.
#[derive(utoipa::IntoResponses)]
enum WebhookAnswers {
    #[response(status = 200)]
    Recorded(IngestReport),
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    #[response(status = 422, content_type = "application/problem+json")]
    Invalid(Problem),
}

/// SendGrid's Event Webhook (signed with ECDSA). Bounces, blocks and spam
/// reports are recorded; other events are accepted and ignored.
#[utoipa::path(post, path = "/v1/bounces/sendgrid", tag = "bounces",
    request_body(content = String, content_type = "application/json", description = "SendGrid's event array, as signed"),
    responses(WebhookAnswers, (status = 401, description = "Unsigned or badly signed: nothing changed", body = Problem, content_type = "application/problem+json")))]
pub async fn sendgrid(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<ApiJson<IngestReport>, ApiError> {
    use crate::feedback::providers::{VerifyError, sendgrid};
    let key =
        state.providers.sendgrid.as_ref().ok_or_else(|| refused("sendgrid", VerifyError::NotConfigured("SendGrid")))?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    sendgrid::verify(
        key,
        header("x-twilio-email-event-webhook-signature"),
        header("x-twilio-email-event-webhook-timestamp"),
        &body,
        state.clock.now(),
        true,
    )
    .map_err(|e| refused("sendgrid", e))?;
    record(&state, "sendgrid", sendgrid::recipients(&body), &body).await
}

/// Mailgun's webhooks (HMAC-signed; each token accepted once).
#[utoipa::path(post, path = "/v1/bounces/mailgun", tag = "bounces",
    request_body(content = String, content_type = "application/json", description = "Mailgun's signed event"),
    responses(WebhookAnswers, (status = 401, description = "Unsigned, badly signed or replayed: nothing changed", body = Problem, content_type = "application/problem+json")))]
pub async fn mailgun(State(state): State<AppState>, body: Bytes) -> Result<ApiJson<IngestReport>, ApiError> {
    use crate::feedback::providers::{VerifyError, mailgun};
    let key =
        state.providers.mailgun.as_ref().ok_or_else(|| refused("mailgun", VerifyError::NotConfigured("Mailgun")))?;
    let payload = mailgun::parse(&body).map_err(|_| refused("mailgun", VerifyError::Missing("a signature block")))?;
    mailgun::verify(key, &payload.signature, state.clock.now(), true).map_err(|e| refused("mailgun", e))?;
    if !state.store.remember_token(&format!("mailgun:{}", payload.signature.token), state.clock.now()).await? {
        return Err(refused("mailgun", VerifyError::Replayed));
    }
    record(&state, "mailgun", Ok(mailgun::recipients(&payload)), &body).await
}

/// Postmark's bounce and spam-complaint webhooks (HTTP basic auth).
#[utoipa::path(post, path = "/v1/bounces/postmark", tag = "bounces",
    request_body(content = String, content_type = "application/json", description = "Postmark's bounce or complaint record"),
    responses(WebhookAnswers, (status = 401, description = "Missing or wrong credentials: nothing changed", body = Problem, content_type = "application/problem+json")))]
pub async fn postmark(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<ApiJson<IngestReport>, ApiError> {
    use crate::feedback::providers::{VerifyError, postmark};
    let (user, pass) =
        state.providers.postmark.as_ref().ok_or_else(|| refused("postmark", VerifyError::NotConfigured("Postmark")))?;
    let auth = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    postmark::verify(auth, user, pass).map_err(|e| refused("postmark", e))?;
    record(&state, "postmark", postmark::recipients(&body), &body).await
}

/// Amazon SES notifications through SNS (signature versions 1 and 2, topic
/// pinned); subscription confirmations are verified and then confirmed.
#[utoipa::path(post, path = "/v1/bounces/ses", tag = "bounces",
    request_body(content = Object, content_type = "application/json", description = "The SNS message (a JSON object), as SNS posts it (SNS sends it as text/plain; any content type is accepted)"),
    responses(WebhookAnswers, (status = 401, description = "Unsigned, badly signed or from another topic: nothing changed", body = Problem, content_type = "application/problem+json")))]
pub async fn ses(State(state): State<AppState>, body: Bytes) -> Result<ApiJson<IngestReport>, ApiError> {
    use crate::feedback::providers::{VerifyError, ses};
    let keys = state.providers.ses.clone().ok_or_else(|| refused("ses", VerifyError::NotConfigured("SES")))?;
    let envelope = ses::parse(&body).map_err(|_| refused("ses", VerifyError::Missing("an SNS envelope")))?;
    if !keys.topics.iter().any(|t| t == &envelope.topic_arn) {
        return Err(refused("ses", VerifyError::Missing("a configured TopicArn (bounces.ses_topic_arns)")));
    }
    let key = keys.key_for(&envelope.signing_cert_url).await.map_err(|e| {
        tracing::warn!(error = %e, "SNS certificate unavailable");
        refused("ses", VerifyError::BadSignature)
    })?;
    ses::verify(&envelope, &key).map_err(|e| refused("ses", e))?;
    match envelope.kind.as_str() {
        // The SES notification inside is the evidence and the fingerprint:
        // the same event through another topic or a retry is one bounce.
        "Notification" => record(&state, "ses", ses::recipients(&envelope), envelope.message.as_bytes()).await,
        "SubscriptionConfirmation" => {
            let url = envelope.subscribe_url.clone().unwrap_or_default();
            if keys.confirm && ses::trusted_sns_url(&url) {
                match ses::client().get(&url).send().await.and_then(|r| r.error_for_status()) {
                    Ok(_) => tracing::info!(topic = %envelope.topic_arn, "confirmed the SNS subscription"),
                    Err(e) => {
                        tracing::error!(error = %e, url = %url, "could not confirm the SNS subscription; visit the URL")
                    }
                }
            } else {
                tracing::warn!(topic = %envelope.topic_arn, url = %url, "SNS subscription to confirm: visit this URL");
            }
            Ok(ApiJson(IngestReport::default()))
        }
        _ => Ok(ApiJson(IngestReport::default())),
    }
}
