//! Twilio's Messages API: sending one text, what its answers mean, the
//! `X-Twilio-Signature` that proves a status callback or an inbound message
//! came from Twilio, and what those callbacks say.
//!
//! A send is `POST /2010-04-01/Accounts/{AccountSid}/Messages.json` with
//! HTTP Basic auth (account SID, auth token) and a form: `To`, `From` (or
//! `MessagingServiceSid`), `Body`, `StatusCallback`. Twilio answers `201`
//! with the message (`sid` `SM…`, `status` `queued`), or an error body
//! `{"code": 21211, "message": …, "more_info": …, "status": 400}`.
//!
//! | Twilio's answer                              | [`Answer`]            |
//! |----------------------------------------------|-----------------------|
//! | 2xx                                          | `Accepted`, id = `sid` |
//! | 21211 (invalid `To`), 21614 (not a mobile number) | `AddressInvalid` |
//! | 21610 (the recipient replied STOP)           | `OptedOut`            |
//! | 20429 or HTTP 429 (too many requests), any 5xx | `Retry`, with `Retry-After` |
//! | 20003 or HTTP 401 (authentication failed)    | `CredentialRejected`  |
//! | any other error                              | `Failed`, with Twilio's code and message |
//!
//! The client is the `reqwest` one the transport is given, so a test points
//! it at a local server with `twilio+http://`. Rejected: Twilio's own SDKs
//! (none is maintained for Rust) and a generated OpenAPI client, which
//! would bring hundreds of endpoints for one.

use std::fmt;
use std::time::Duration;

use hmac012::{Hmac, Mac};
use serde::Deserialize;
use sha1::Sha1;
use url::Url;

use super::Text;
use super::sender::Sender;
use crate::delivery::channel::answer::{Answer, excerpt, exchange};

/// Where Twilio is, and the credentials for it (from `sms.transport`).
#[derive(Clone, PartialEq, Eq)]
pub struct TwilioEndpoint {
    /// `https://api.twilio.com/`, or a local double's `http://` base.
    pub base: Url,
    pub account_sid: String,
    pub auth_token: String,
}

/// Never prints the token.
impl fmt::Debug for TwilioEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::redacted(f, "TwilioEndpoint", &self.base, ("account_sid", &self.account_sid))
    }
}

impl TwilioEndpoint {
    /// `{base}/2010-04-01/Accounts/{sid}/Messages.json`
    pub fn messages_url(&self) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().expect("an http(s) base has path segments").clear().extend([
            "2010-04-01",
            "Accounts",
            &self.account_sid,
            "Messages.json",
        ]);
        url
    }
}

/// Sends texts through one Twilio account.
#[derive(Debug, Clone)]
pub struct TwilioClient {
    http: reqwest::Client,
    endpoint: TwilioEndpoint,
}

/// The form fields of one send, in the order Twilio documents them.
pub fn form(text: &Text<'_>) -> Vec<(&'static str, String)> {
    let mut fields = vec![("To", text.to.as_str().to_owned())];
    match text.from {
        Sender::MessagingService(sid) => fields.push(("MessagingServiceSid", sid.clone())),
        other => fields.push(("From", other.as_str().to_owned())),
    }
    fields.push(("Body", text.body.to_owned()));
    if let Some(callback) = text.callback {
        fields.push(("StatusCallback", callback.to_string()));
    }
    fields
}

impl TwilioClient {
    /// `http` should have a timeout; it is shared with other transports.
    pub fn new(http: reqwest::Client, endpoint: TwilioEndpoint) -> TwilioClient {
        TwilioClient { http, endpoint }
    }

    pub fn endpoint(&self) -> &TwilioEndpoint {
        &self.endpoint
    }

    /// Hands one text to Twilio and says what Twilio made of it.
    pub async fn send(&self, text: &Text<'_>) -> Answer {
        let request = self
            .http
            .post(self.endpoint.messages_url())
            .basic_auth(&self.endpoint.account_sid, Some(&self.endpoint.auth_token))
            .form(&form(text));
        exchange("Twilio", request, classify).await
    }
}

/// The parts of Twilio's answers Herald reads: `sid` and `status` of an
/// accepted message, `code` and `message` of an error.
#[derive(Debug, Default, Deserialize)]
struct Body {
    sid: Option<String>,
    /// A message's state (`"queued"`), or in an error body the HTTP
    /// status again (a number).
    status: Option<serde_json::Value>,
    code: Option<u32>,
    message: Option<String>,
}

/// Twilio error codes with a meaning of their own
/// (<https://www.twilio.com/docs/api/errors>).
pub mod codes {
    /// Authentication failed: a wrong account SID or auth token.
    pub const AUTHENTICATION: u32 = 20003;
    /// Too many requests.
    pub const TOO_MANY_REQUESTS: u32 = 20429;
    /// The `To` number is not a valid phone number.
    pub const INVALID_TO: u32 = 21211;
    /// The recipient replied STOP: Twilio refuses to send to them.
    pub const UNSUBSCRIBED: u32 = 21610;
    /// The `To` number is not a mobile number (a landline cannot get SMS).
    pub const NOT_MOBILE: u32 = 21614;
}

/// What an answer from the Messages API means. Pure: the status, the
/// `Retry-After` hint and the body are all it needs.
pub fn classify(status: u16, after: Option<Duration>, body: &str) -> Answer {
    let parsed: Body = serde_json::from_str(body).unwrap_or_default();
    if (200..300).contains(&status) {
        let state = parsed.status.as_ref().and_then(|s| s.as_str()).unwrap_or("accepted");
        let detail = match &parsed.sid {
            Some(sid) => format!("Twilio took it as {sid} ({state})"),
            None => format!("Twilio answered {status} without a message sid"),
        };
        return Answer::Accepted { provider_id: parsed.sid, detail };
    }
    let reason = match (parsed.code, parsed.message.as_deref()) {
        (Some(code), Some(message)) => format!("Twilio answered {status}, error {code}: {}", excerpt(message)),
        (Some(code), None) => format!("Twilio answered {status}, error {code}"),
        _ if excerpt(body).is_empty() => format!("Twilio answered {status}"),
        _ => format!("Twilio answered {status}: {}", excerpt(body)),
    };
    match parsed.code {
        Some(codes::INVALID_TO | codes::NOT_MOBILE) => Answer::AddressInvalid { reason },
        Some(codes::UNSUBSCRIBED) => Answer::OptedOut { reason },
        Some(codes::AUTHENTICATION) => Answer::CredentialRejected { reason },
        Some(codes::TOO_MANY_REQUESTS) => Answer::Retry { after, reason },
        _ if status == 429 || status >= 500 => Answer::Retry { after, reason },
        _ if status == 401 => Answer::CredentialRejected { reason },
        _ => Answer::Failed { reason },
    }
}

/// The string Twilio signs: the full URL it called, then every POST
/// parameter as name and value with nothing between, sorted by name; a
/// name given several times contributes each distinct value, sorted
/// (what Twilio's own validators compute).
fn signed_text(url: &str, params: &[(String, String)]) -> String {
    let mut pairs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    pairs.sort_unstable();
    pairs.dedup();
    let mut text = String::from(url);
    for (name, value) in pairs {
        text.push_str(name);
        text.push_str(value);
    }
    text
}

fn mac(auth_token: &str, url: &str, params: &[(String, String)]) -> Hmac<Sha1> {
    let mut mac = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(signed_text(url, params).as_bytes());
    mac
}

/// `X-Twilio-Signature` for a request to `url` with form `params`:
/// base64 of HMAC-SHA1 keyed with the auth token.
pub fn signature(auth_token: &str, url: &str, params: &[(String, String)]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(mac(auth_token, url, params).finalize().into_bytes())
}

/// Whether `header` is Twilio's signature of this request. The comparison
/// is constant-time (on the MAC bytes), so a forger learns nothing from how
/// long a refusal takes. `url` must be the URL exactly as Twilio called it
/// (the one Herald gave it, query string included).
pub fn verify_signature(auth_token: &str, url: &str, params: &[(String, String)], header: &str) -> bool {
    use base64::Engine;
    let Ok(given) = base64::engine::general_purpose::STANDARD.decode(header.trim()) else { return false };
    mac(auth_token, url, params).verify_slice(&given).is_ok()
}

/// A form Twilio posted to Herald (a status callback or an inbound
/// message), once its signature and account are checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCallback {
    /// No `X-Twilio-Signature`, one that does not verify with the auth
    /// token, or another account's: answered 403, nothing recorded.
    #[error("the request is not signed by Twilio for this account")]
    Forged,
    /// Signed, but without a field Herald needs (answered 400).
    #[error("Twilio's request has no {0}")]
    Missing(&'static str),
}

fn field<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
}

/// Checks a callback's signature against the URL Herald gave Twilio, and
/// that it is about this account (`AccountSid`): a valid signature from
/// another Twilio account that shares the URL proves nothing here.
pub fn verify_callback(
    endpoint: &TwilioEndpoint,
    url: &str,
    params: &[(String, String)],
    header: Option<&str>,
) -> Result<(), BadCallback> {
    let signed = header.is_some_and(|h| verify_signature(&endpoint.auth_token, url, params, h));
    if !signed || field(params, "AccountSid") != Some(endpoint.account_sid.as_str()) {
        return Err(BadCallback::Forged);
    }
    Ok(())
}

/// Carrier error codes in an `undelivered` or `failed` status that say the
/// number itself will never take a text: 30005 (unknown destination
/// handset) and 30006 (a landline, or a carrier that cannot be reached).
/// Others (30003 unreachable handset, 30007 carrier filtering) are about
/// this message or this moment, so the number is left alone.
pub const PERMANENT_CARRIER_CODES: [u32; 2] = [30005, 30006];

/// What a carrier error code in a status callback means, in Twilio's words
/// shortened (<https://www.twilio.com/docs/api/errors>): the send log's
/// detail names the code and this, so an operator need not look it up.
/// `None` for a code not listed here; the detail then gives the number
/// alone.
pub fn carrier_code_description(code: u32) -> Option<&'static str> {
    Some(match code {
        30001 => "queue overflow",
        30002 => "account suspended",
        30003 => "unreachable handset",
        30004 => "message blocked",
        30005 => "unknown destination handset",
        30006 => "landline or unreachable carrier",
        30007 => "filtered by the carrier",
        30008 => "unknown error",
        30009 => "missing segment",
        30010 => "price exceeds the max price",
        _ => return None,
    })
}

/// A status callback (`StatusCallback`): what became of a message after
/// Twilio took it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReport {
    /// The `SM…` sid Herald recorded as the provider's id.
    pub message_sid: String,
    /// Twilio's word: `queued`, `sent`, `delivered`, `undelivered`,
    /// `failed`, …
    pub status: String,
    /// The carrier's or Twilio's error code, for `undelivered` and `failed`.
    pub error_code: Option<u32>,
}

impl StatusReport {
    /// Reads a checked callback's form (see [`verify_callback`]).
    pub fn parse(params: &[(String, String)]) -> Result<StatusReport, BadCallback> {
        let message_sid = field(params, "MessageSid").ok_or(BadCallback::Missing("MessageSid"))?;
        let status = field(params, "MessageStatus").ok_or(BadCallback::Missing("MessageStatus"))?;
        Ok(StatusReport {
            message_sid: message_sid.to_owned(),
            status: status.to_owned(),
            error_code: field(params, "ErrorCode").and_then(|c| c.parse().ok()),
        })
    }

    /// Whether the carrier reports the handset did not get it (Twilio's
    /// `undelivered`, or `failed`: either way it is not on the handset).
    pub fn not_delivered(&self) -> bool {
        matches!(self.status.as_str(), "undelivered" | "failed")
    }

    /// The send log's words for the report: `Twilio: undelivered (30003
    /// unreachable handset)`, or `Twilio: delivered`.
    pub fn describe(&self) -> String {
        match self.error_code {
            Some(code) => match carrier_code_description(code) {
                Some(what) => format!("Twilio: {} ({code} {what})", self.status),
                None => format!("Twilio: {} (error {code})", self.status),
            },
            None => format!("Twilio: {}", self.status),
        }
    }

    /// The send-log row the report adds: `delivered`, `undelivered`, or
    /// `bounced` when the number can never take a text (it is then marked
    /// invalid); `None` for a state that says nothing about the handset
    /// (`queued`, `sent`, …).
    pub fn send_log_status(&self) -> Option<crate::domain::SendStatus> {
        use crate::domain::SendStatus;
        if self.number_invalid() {
            Some(SendStatus::Bounced)
        } else if self.not_delivered() {
            Some(SendStatus::Undelivered)
        } else {
            (self.status == "delivered").then_some(SendStatus::Delivered)
        }
    }

    /// Whether the report says the number can never take a text, so it is
    /// to be marked invalid.
    pub fn number_invalid(&self) -> bool {
        self.not_delivered() && self.error_code.is_some_and(|c| PERMANENT_CARRIER_CODES.contains(&c))
    }
}

/// An inbound message (the number's messaging webhook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    pub from: super::phone::PhoneNumber,
    pub body: String,
    /// STOP, START or HELP, when the whole message is one.
    pub keyword: Option<super::keywords::Keyword>,
}

impl InboundMessage {
    /// Reads a checked inbound message's form (see [`verify_callback`]).
    pub fn parse(params: &[(String, String)]) -> Result<InboundMessage, BadCallback> {
        let from = field(params, "From").ok_or(BadCallback::Missing("From"))?;
        let from =
            super::phone::PhoneNumber::parse("From", from).map_err(|_| BadCallback::Missing("phone number in From"))?;
        let body = params.iter().find(|(k, _)| k == "Body").map(|(_, v)| v.clone()).unwrap_or_default();
        let keyword = super::keywords::keyword(&body);
        Ok(InboundMessage { from, body, keyword })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The example of Twilio's request-validation documentation (and of
    /// its SDKs' tests).
    const DOC_URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const DOC_SIGNATURE: &str = "RSOYDt4T1cUTdK1PDd93/VVr8B8=";

    fn doc_params() -> Vec<(String, String)> {
        // Deliberately not in sorted order.
        p(&[
            ("From", "+14158675309"),
            ("Digits", "1234"),
            ("To", "+18005551212"),
            ("Caller", "+14158675309"),
            ("CallSid", "CA1234567890ABCDE"),
        ])
    }

    fn endpoint() -> TwilioEndpoint {
        TwilioEndpoint {
            base: Url::parse("https://api.twilio.com/").unwrap(),
            account_sid: "AC1".into(),
            auth_token: "tok".into(),
        }
    }

    #[test]
    fn callbacks_are_taken_only_signed_and_for_this_account() {
        let url = "https://herald.example/v1/sms/status/twilio";
        let params = p(&[
            ("AccountSid", "AC1"),
            ("MessageSid", "SM9"),
            ("MessageStatus", "undelivered"),
            ("ErrorCode", "30005"),
        ]);
        let sig = signature("tok", url, &params);
        assert_eq!(verify_callback(&endpoint(), url, &params, Some(&sig)), Ok(()));
        assert_eq!(verify_callback(&endpoint(), url, &params, None), Err(BadCallback::Forged));
        assert_eq!(
            verify_callback(&endpoint(), url, &params, Some(&signature("other", url, &params))),
            Err(BadCallback::Forged)
        );
        // Signed correctly, but about another account.
        let theirs = p(&[("AccountSid", "AC2"), ("MessageSid", "SM9"), ("MessageStatus", "delivered")]);
        assert_eq!(
            verify_callback(&endpoint(), url, &theirs, Some(&signature("tok", url, &theirs))),
            Err(BadCallback::Forged)
        );
        let report = StatusReport::parse(&params).unwrap();
        assert_eq!(
            (report.message_sid.as_str(), report.status.as_str(), report.error_code),
            ("SM9", "undelivered", Some(30005))
        );
        assert!(report.number_invalid());
    }

    #[test]
    fn only_permanent_carrier_codes_mark_a_number_invalid() {
        let report = |status: &str, code: Option<&str>| {
            let mut params = p(&[("MessageSid", "SM9"), ("MessageStatus", status)]);
            if let Some(c) = code {
                params.push(("ErrorCode".into(), c.into()));
            }
            StatusReport::parse(&params).unwrap()
        };
        assert!(report("undelivered", Some("30006")).number_invalid());
        assert!(report("failed", Some("30005")).number_invalid());
        assert!(!report("undelivered", Some("30003")).number_invalid());
        assert!(!report("delivered", None).number_invalid());
        assert!(!report("delivered", Some("30005")).number_invalid());
        assert_eq!(report("undelivered", Some("30003")).describe(), "Twilio: undelivered (30003 unreachable handset)");
        assert_eq!(report("failed", Some("39999")).describe(), "Twilio: failed (error 39999)");
        assert_eq!(report("delivered", None).describe(), "Twilio: delivered");
        assert!(report("failed", None).not_delivered() && !report("sent", None).not_delivered());
        use crate::domain::SendStatus::{Bounced, Delivered, Undelivered};
        assert_eq!(report("delivered", None).send_log_status(), Some(Delivered));
        assert_eq!(report("failed", Some("30008")).send_log_status(), Some(Undelivered));
        assert_eq!(report("undelivered", Some("30005")).send_log_status(), Some(Bounced));
        assert_eq!(report("sent", None).send_log_status(), None);
        assert_eq!(StatusReport::parse(&p(&[("MessageSid", "SM9")])), Err(BadCallback::Missing("MessageStatus")));
    }

    #[test]
    fn an_inbound_message_names_its_number_and_keyword() {
        let m = InboundMessage::parse(&p(&[("From", "+14155550101"), ("Body", " stop ")])).unwrap();
        assert_eq!((m.from.as_str(), m.keyword), ("+14155550101", Some(super::super::keywords::Keyword::Stop)));
        let m = InboundMessage::parse(&p(&[("From", "+14155550101"), ("Body", "stop please")])).unwrap();
        assert_eq!(m.keyword, None);
        assert_eq!(InboundMessage::parse(&p(&[("Body", "STOP")])), Err(BadCallback::Missing("From")));
    }

    #[test]
    fn the_signature_matches_twilios_documented_example() {
        assert_eq!(signature("12345", DOC_URL, &doc_params()), DOC_SIGNATURE);
        assert!(verify_signature("12345", DOC_URL, &doc_params(), DOC_SIGNATURE));
    }

    #[test]
    fn repeated_names_sign_each_distinct_value_in_order() {
        // Twilio's validators' vector for a repeated parameter.
        let params =
            p(&[("Sid", "CA123"), ("SidAccount", "AC123"), ("Digits", "5678"), ("Digits", "1234"), ("Digits", "1234")]);
        assert_eq!(signature("12345", DOC_URL, &params), "IK+Dwps556ElfBT0I3Rgjkr1wJU=");
    }

    #[test]
    fn any_change_breaks_the_signature() {
        let mut tampered = doc_params();
        tampered[1].1 = "9999".into();
        assert!(!verify_signature("12345", DOC_URL, &tampered, DOC_SIGNATURE));
        assert!(!verify_signature("12345", &format!("{DOC_URL}&x=1"), &doc_params(), DOC_SIGNATURE));
        assert!(!verify_signature("54321", DOC_URL, &doc_params(), DOC_SIGNATURE));
        assert!(!verify_signature("12345", DOC_URL, &doc_params(), ""));
        assert!(!verify_signature("12345", DOC_URL, &doc_params(), "not base64 at all!"));
        assert!(!verify_signature("12345", DOC_URL, &doc_params(), &DOC_SIGNATURE[..20]));
    }

    #[test]
    fn documented_errors_are_classified() {
        let err = |code: u32, status: u16| {
            classify(
                status,
                Some(Duration::from_secs(7)),
                &format!(
                    r#"{{"code": {code}, "message": "words for {code}", "more_info": "https://www.twilio.com/docs/errors/{code}", "status": {status}}}"#
                ),
            )
        };
        assert!(matches!(err(21211, 400), Answer::AddressInvalid { .. }));
        assert!(matches!(err(21614, 400), Answer::AddressInvalid { .. }));
        assert!(matches!(err(21610, 400), Answer::OptedOut { .. }));
        assert!(matches!(err(20003, 401), Answer::CredentialRejected { .. }));
        assert_eq!(
            err(20429, 429),
            Answer::Retry {
                after: Some(Duration::from_secs(7)),
                reason: "Twilio answered 429, error 20429: words for 20429".into()
            }
        );
        assert!(matches!(err(20500, 500), Answer::Retry { after: Some(_), .. }));
        let other = err(21606, 400);
        assert_eq!(other, Answer::Failed { reason: "Twilio answered 400, error 21606: words for 21606".into() });
        // Without a Twilio body: by status alone.
        assert!(matches!(classify(503, None, "<html>busy</html>"), Answer::Retry { after: None, .. }));
        assert!(matches!(classify(401, None, ""), Answer::CredentialRejected { .. }));
        assert_eq!(classify(404, None, ""), Answer::Failed { reason: "Twilio answered 404".into() });
    }

    #[test]
    fn an_accepted_message_keeps_its_sid() {
        let body = r#"{"sid": "SM1234567890abcdef1234567890abcdef", "status": "queued", "num_segments": "1"}"#;
        assert_eq!(
            classify(201, None, body),
            Answer::Accepted {
                provider_id: Some("SM1234567890abcdef1234567890abcdef".into()),
                detail: "Twilio took it as SM1234567890abcdef1234567890abcdef (queued)".into(),
            }
        );
    }

    #[test]
    fn the_form_uses_from_or_the_messaging_service() {
        use super::super::phone::PhoneNumber;
        let to = PhoneNumber::parse("phone", "+14155550101").unwrap();
        let from = Sender::parse("+14155550100").unwrap();
        let callback = Url::parse("https://herald.example/v1/sms/status/twilio").unwrap();
        let text = Text { to: &to, from: &from, body: "hi", callback: Some(&callback) };
        assert_eq!(
            form(&text),
            vec![
                ("To", "+14155550101".to_owned()),
                ("From", "+14155550100".to_owned()),
                ("Body", "hi".to_owned()),
                ("StatusCallback", "https://herald.example/v1/sms/status/twilio".to_owned()),
            ]
        );
        let service = Sender::parse(&format!("messaging_service_sid=MG{}", "0".repeat(32))).unwrap();
        let text = Text { from: &service, callback: None, ..text };
        assert_eq!(form(&text)[1], ("MessagingServiceSid", format!("MG{}", "0".repeat(32))));
        assert_eq!(form(&text).len(), 3);
    }

    #[test]
    fn the_messages_url_and_debug_hide_nothing_but_the_token() {
        let e = TwilioEndpoint {
            base: Url::parse("http://127.0.0.1:9/").unwrap(),
            account_sid: "AC1".into(),
            auth_token: "secret-token".into(),
        };
        assert_eq!(e.messages_url().as_str(), "http://127.0.0.1:9/2010-04-01/Accounts/AC1/Messages.json");
        assert!(!format!("{e:?}").contains("secret-token"));
    }
}
