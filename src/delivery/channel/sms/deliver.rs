//! The `sms` channel: one text per outbox row, through the transport
//! `sms.transport` names (Twilio or Kannel).
//!
//! # Order of one delivery
//! Find the number (the recipient's `phone`, or `to` in a hand-enqueued
//! row's payload), hash it, refuse it if suppressed (no provider call is
//! made: a number that texted STOP costs nothing and gets nothing), wait
//! for the shared rate (`sms.rate`, see [`super::rate`]), send, and turn
//! the provider's [`Answer`] into the row's outcome.
//!
//! # What each answer does
//! | answer               | the row       | also                                          |
//! |----------------------|---------------|-----------------------------------------------|
//! | `Accepted`           | `sent`, the provider's id in the detail | the provider's credential is healthy again |
//! | `Retry { after }`    | retried after `after` (`Retry-After`), else the flat retry | |
//! | `AddressInvalid`     | `failed`      | the number suppressed for every category (`hard_bounce`, "invalid number") |
//! | `OptedOut`           | `suppressed`  | the number suppressed for every non-transactional category (`stop`) |
//! | `Failed`             | `failed`      |                                               |
//! | `CredentialRejected` | `failed`      | `/readyz` names `sms: Twilio` (or Kannel) until a text is accepted |
//!
//! An invalid number is a `hard_bounce` suppression, like a mailbox that
//! does not exist: it is the same fact (the address will never work) and
//! every screen and search that explains a bounce explains it. Rejected: a
//! reason of its own, which would be one more word for operators to learn
//! for the same remedy (fix the number, lift the suppression).
//!
//! A provider's opt-out (Twilio 21610) ends the row `suppressed` rather
//! than `failed`: the recipient asked not to be texted, which "why not"
//! answers like an unsubscribe, and the next message is suppressed before
//! any provider call, naming the same STOP.
//!
//! # STOP and transactional messages
//! A STOP suppression is stored for every category (`*`) with the reason
//! `stop`, and this channel lets a `transactional` row through it: a
//! login code is not marketing, and carriers' rules (CTIA) exempt it. Any
//! other suppression (an invalid number, an operator's) holds back
//! transactional texts too.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use url::Url;

use super::Text;
use super::kannel::KannelClient;
use super::phone::PhoneNumber;
use super::sender::Sender;
use super::transport::SmsTransport;
use super::twilio::TwilioClient;
use crate::address::{AddressKeys, AddressKind};
use crate::clock::Clock;
use crate::delivery::channel::answer::Answer;
use crate::delivery::channel::email::message::TRANSACTIONAL;
use crate::delivery::channel::{Channel, Delivery, Outcome, active_suppression, answered, suppressed_detail};
use crate::delivery::health::ChannelHealth;
use crate::domain::HoldReason;
use crate::store::{ALL_CATEGORIES, Store, SuppressionReason, SuppressionRow};

/// The reason a user without a phone number is not texted.
pub const NO_PHONE: &str = "no phone number for this user";

/// The path Twilio posts status callbacks to.
pub const TWILIO_STATUS_PATH: &str = "/v1/sms/status/twilio";
/// The path Kannel calls delivery reports back on.
pub const KANNEL_STATUS_PATH: &str = "/v1/sms/status/kannel";

/// One provider, as `sms.transport` names it.
#[derive(Debug, Clone)]
pub enum SmsProvider {
    Twilio(TwilioClient),
    Kannel(KannelClient),
}

impl SmsProvider {
    /// `http` should have a timeout.
    pub fn new(http: reqwest::Client, transport: &SmsTransport) -> SmsProvider {
        match transport {
            SmsTransport::Twilio(t) => SmsProvider::Twilio(TwilioClient::new(http, t.clone())),
            SmsTransport::Kannel(k) => SmsProvider::Kannel(KannelClient::new(http, k.clone())),
        }
    }

    /// The provider as `/readyz` and the send log's transport name it.
    pub fn name(&self) -> &'static str {
        match self {
            SmsProvider::Twilio(_) => "sms: Twilio",
            SmsProvider::Kannel(_) => "sms: Kannel",
        }
    }

    async fn send(&self, text: &Text<'_>) -> Answer {
        match self {
            SmsProvider::Twilio(c) => c.send(text).await,
            SmsProvider::Kannel(c) => c.send(text).await,
        }
    }

    /// Where the provider reports what became of the row `outbox_id`:
    /// Twilio's `StatusCallback` names the row in its query (Twilio signs
    /// the whole URL, so the row cannot be altered); Kannel's `dlr-url`
    /// carries a token Herald signed, since Kannel signs nothing.
    pub fn callback(&self, public_url: &Url, keys: &AddressKeys, outbox_id: &str) -> Url {
        let mut url = public_url.clone();
        match self {
            SmsProvider::Twilio(_) => {
                url.set_path(&join(public_url, TWILIO_STATUS_PATH));
                url.query_pairs_mut().clear().append_pair("outbox", outbox_id);
                url
            }
            SmsProvider::Kannel(_) => {
                url.set_path(&join(public_url, KANNEL_STATUS_PATH));
                url.set_query(None);
                super::kannel::status_callback(&url, keys, outbox_id)
            }
        }
    }
}

/// `public_url`'s path (Herald may be served under a prefix) and `path`.
fn join(public_url: &Url, path: &str) -> String {
    format!("{}{path}", public_url.path().trim_end_matches('/'))
}

/// The payload of a hand-enqueued SMS row (one no rule planned).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmsPayload {
    /// E.164, or a number with its country code that normalises to it.
    #[serde(default)]
    pub to: Option<String>,
    pub text: String,
    /// Default `transactional`.
    #[serde(default)]
    pub category: Option<String>,
}

/// What the channel needs, named so the call site reads.
pub struct SmsParts {
    pub store: Arc<dyn Store>,
    pub keys: AddressKeys,
    pub clock: Arc<dyn Clock>,
    pub health: ChannelHealth,
    pub provider: SmsProvider,
    pub from: Sender,
    /// `http.public_url`: with it, texts ask for delivery reports.
    pub public_url: Option<Url>,
    /// `sms.rate`, shared by every instance through the database.
    pub rate: Option<super::rate::SharedRate>,
}

pub struct SmsChannel {
    parts: SmsParts,
}

impl SmsChannel {
    pub fn new(parts: SmsParts) -> SmsChannel {
        SmsChannel { parts }
    }
}

/// The number, category and text of one delivery.
struct Addressed<'a> {
    phone: Option<String>,
    category: String,
    body: &'a str,
}

fn address<'a>(d: &'a Delivery, payload: &'a Option<SmsPayload>) -> Result<Addressed<'a>, String> {
    if let (Some(rule), Some(m)) = (&d.rule, &d.message) {
        let phone = d.recipient.as_ref().and_then(|r| r.phone.clone()).filter(|p| !p.trim().is_empty());
        return Ok(Addressed { phone, category: rule.category.clone(), body: &m.text });
    }
    let p = payload.as_ref().ok_or(
        "sms payload is not usable; expected a JSON object with \"text\" and optional \"to\" (a phone number \
         with its country code) and \"category\"",
    )?;
    let phone = p.to.clone().or_else(|| d.recipient.as_ref().and_then(|r| r.phone.clone()));
    Ok(Addressed { phone, category: p.category.clone().unwrap_or_else(|| TRANSACTIONAL.to_owned()), body: &p.text })
}

#[async_trait]
impl Channel for SmsChannel {
    async fn deliver(&self, d: &Delivery) -> Outcome {
        let p = &self.parts;
        let payload = if d.message.is_none() { serde_json::from_str::<SmsPayload>(&d.row.payload).ok() } else { None };
        let a = match address(d, &payload) {
            Ok(a) => a,
            Err(why) => return Outcome::terminal(why),
        };
        let Some(raw) = a.phone else {
            return Outcome::Suppressed { detail: NO_PHONE.into(), address_hash: None };
        };
        let phone = match PhoneNumber::parse("phone", &raw) {
            Ok(n) => n,
            Err(e) => return Outcome::terminal(format!("the recipient's phone number is not usable: {}", e.unnamed())),
        };
        let hash = p.keys.hash_phone(&phone);
        let h = Some(hash.clone());
        let now = p.clock.now();
        match active_suppression(p.store.as_ref(), &hash, &a.category, now).await {
            // A STOP holds back everything but transactional texts.
            Ok(Some(s)) if !(s.reason == SuppressionReason::Stop && a.category == TRANSACTIONAL) => {
                return Outcome::Suppressed { detail: suppressed_detail("phone number", &s), address_hash: h };
            }
            Ok(_) => {}
            Err(retry) => return retry,
        }
        if a.body.trim().is_empty() {
            return Outcome::Terminal { detail: "the text is empty".into(), address_hash: h };
        }
        if let Some(rate) = &p.rate {
            // The slot is stamped with the time it is taken, not the time
            // the delivery began: the suppression check's round trip
            // before it would otherwise let texts bunch past the rate.
            let now = p.clock.now();
            match rate.take(&d.row.id, now).await {
                Ok(None) => {}
                // Held, not retried: waiting for a slot is not an attempt,
                // so a burst longer than max_attempts slots still goes out.
                Ok(Some(wait)) => {
                    let until = now.plus(wait);
                    return Outcome::Held {
                        until,
                        expires_at: d.row.expires_at,
                        reason: HoldReason::SmsRate,
                        detail: format!(
                            "held by {} ({}/s shared by every instance) until {}",
                            HoldReason::SmsRate.words(),
                            rate.per_second(),
                            until.to_rfc3339()
                        ),
                    };
                }
                Err(e) => return Outcome::Retry { detail: e, address_hash: h, after: None },
            }
        }
        let callback = p.public_url.as_ref().map(|u| p.provider.callback(u, &p.keys, &d.row.id));
        let text = Text { to: &phone, from: &p.from, body: a.body, callback: callback.as_ref() };
        let answer = p.provider.send(&text).await;
        self.settle(answer, &hash, &phone).await
    }
}

impl SmsChannel {
    /// The row's outcome for the provider's answer, with what it does to
    /// the number and to `/readyz`.
    async fn settle(&self, answer: Answer, hash: &str, phone: &PhoneNumber) -> Outcome {
        let p = &self.parts;
        let provider = p.provider.name();
        let h = Some(hash.to_owned());
        match answered(answer, provider, &p.health, h.clone()) {
            Ok(outcome) => outcome,
            Err(Answer::AddressInvalid { reason }) => {
                self.suppress(hash, SuppressionReason::HardBounce, format!("invalid number: {reason}")).await;
                Outcome::Terminal { detail: format!("{reason}; the number is marked invalid"), address_hash: h }
            }
            Err(answer) => {
                let why = format!("{STOP_AT_PROVIDER}: {}", answer.reason());
                self.suppress(hash, SuppressionReason::Stop, why.clone()).await;
                tracing::info!(phone = %mask(phone), "the provider reports a STOP; the number is suppressed");
                Outcome::Suppressed { detail: why, address_hash: h }
            }
        }
    }

    async fn suppress(&self, hash: &str, reason: SuppressionReason, detail: String) {
        let s = SuppressionRow {
            address_hash: hash.to_owned(),
            address_kind: AddressKind::Phone,
            category: ALL_CATEGORIES.into(),
            reason,
            detail: Some(detail),
            created_at: self.parts.clock.now(),
            expires_at: None,
        };
        if let Err(e) = self.parts.store.suppress(&s).await {
            // The row's outcome still says what happened; the next text to
            // this number is refused by the provider again and retries this.
            tracing::error!(error = %e, "could not record an SMS suppression");
        }
    }
}

/// The detail of a STOP the provider reported (Twilio 21610).
pub const STOP_AT_PROVIDER: &str = "the recipient texted STOP (reported by the provider)";

/// `+1415…0101` → `+1…01`, for logs.
fn mask(phone: &PhoneNumber) -> String {
    let s = phone.as_str();
    let tail: String = s.chars().rev().take(2).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{}…{tail}", s.chars().take(2).collect::<String>())
}
