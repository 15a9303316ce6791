//! Kannel's `sendsms` HTTP interface: sending one text through a
//! self-hosted gateway, what its answers mean, and the delivery reports it
//! fetches back from the `dlr-url` Herald gives it.
//!
//! Kannel (in Debian) speaks SMPP, EMI/UCP and the rest to operators' SMS
//! centres, so a self-hoster needs no SaaS. Its smsbox takes
//! `GET /cgi-bin/sendsms?username=…&password=…&from=…&to=…&text=…` and
//! answers (Kannel user guide, "SMS Push reply codes"):
//!
//! | Kannel's answer                         | [`Answer`]           |
//! |-----------------------------------------|----------------------|
//! | 202 `0: Accepted for delivery`          | `Accepted`           |
//! | 202 `3: Queued for later delivery`      | `Accepted` (Kannel stored it and delivers it when its SMSC link is back) |
//! | 403 `Authorization failed for sendsms`, or another 401/403 | `CredentialRejected` |
//! | 503 `Temporal failure, try again later.`, any 5xx | `Retry`      |
//! | any other 4xx (a missing or refused number, a sender not allowed) | `Failed`, with Kannel's words |
//!
//! Kannel gives no message id when it accepts: the row's own id travels in
//! the `dlr-url`, signed (see [`status_callback`]), and the SMSC's id comes
//! back in the report (`%F`).
//!
//! A text that needs UCS-2 is sent with `coding=2&charset=UTF-8` (Kannel
//! would otherwise read the text as UTF-16BE); GSM-7 text goes with
//! `charset=UTF-8` and Kannel encodes it. A text longer than one segment is
//! split by Kannel only up to the `max-messages` of its `sendsms-user`
//! group (default 1, which cuts the text): set it to `sms.max_segments`.
//!
//! The password travels in the query string, as Kannel's interface has
//! it; Herald never logs the URL (see [`Answer::unreachable`]), and a
//! Kannel on another host should be reached over `kannel+https://`.
//!
//! Rejected: Herald speaking SMPP to an operator itself, which would make
//! it hold SMSC sessions, windowing, throttling and reconnection, all of
//! which Kannel already does and operators already run. Rejected for the
//! reports: a shared secret in the `dlr-url` (one leaked report URL would
//! let anyone write history on every row), where a token per row can only
//! ever speak about that row.

use std::fmt;

use url::Url;

use super::Text;
use super::segments::{Encoding, measure};
use super::sender::Sender;
use crate::address::AddressKeys;
use crate::delivery::channel::answer::{Answer, excerpt, exchange};

/// Where Kannel's smsbox is, and its `sendsms-user` (from `sms.transport`).
#[derive(Clone, PartialEq, Eq)]
pub struct KannelEndpoint {
    /// `http://HOST:13013/`.
    pub base: Url,
    pub username: String,
    pub password: String,
}

/// Never prints the password.
impl fmt::Debug for KannelEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        super::redacted(f, "KannelEndpoint", &self.base, ("username", &self.username))
    }
}

/// The reports asked for: delivered to the phone (1), not delivered to the
/// phone (2), refused by the SMSC (16). Not "queued on the SMSC" (4) nor
/// "accepted by the SMSC" (8): neither changes what an operator does, and
/// together they would double the callbacks.
pub const DLR_MASK: u8 = 1 | 2 | 16;

/// The query Herald adds to the `dlr-url`: Kannel replaces `%d` with the
/// report's type, `%A` with the SMSC's reply, `%F` with the SMSC's message
/// id and `%T` with the time, each URL-encoded. Written raw, not through a
/// URL builder, which would escape the `%`.
const DLR_PLACEHOLDERS: &str = "type=%d&reply=%A&smsc_id=%F&at=%T";

/// The `sendsms` request for one text.
pub fn sendsms_url(endpoint: &KannelEndpoint, text: &Text<'_>) -> Url {
    let mut url = endpoint.base.clone();
    url.set_path("/cgi-bin/sendsms");
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("username", &endpoint.username)
            .append_pair("password", &endpoint.password)
            .append_pair("from", text.from.as_str())
            .append_pair("to", text.to.as_str())
            .append_pair("text", text.body)
            .append_pair("charset", "UTF-8");
        if measure(text.body).encoding == Encoding::Ucs2 {
            q.append_pair("coding", "2");
        }
        if let Some(callback) = text.callback {
            let sep = if callback.query().is_some() { '&' } else { '?' };
            q.append_pair("dlr-mask", &DLR_MASK.to_string())
                .append_pair("dlr-url", &format!("{callback}{sep}{DLR_PLACEHOLDERS}"));
        }
    }
    url
}

/// Sends texts through one Kannel smsbox.
#[derive(Debug, Clone)]
pub struct KannelClient {
    http: reqwest::Client,
    endpoint: KannelEndpoint,
}

impl KannelClient {
    /// `http` should have a timeout; it is shared with other transports.
    pub fn new(http: reqwest::Client, endpoint: KannelEndpoint) -> KannelClient {
        KannelClient { http, endpoint }
    }

    /// Hands one text to Kannel and says what Kannel made of it.
    pub async fn send(&self, text: &Text<'_>) -> Answer {
        if let Sender::MessagingService(_) = text.from {
            return Answer::Failed {
                reason: "sms.from is a Twilio Messaging Service, which Kannel cannot send from; \
                         give it a number or an alphanumeric sender ID"
                    .into(),
            };
        }
        let request = self.http.get(sendsms_url(&self.endpoint, text));
        exchange("Kannel", request, |status, _, body| classify(status, body)).await
    }
}

/// What a `sendsms` answer means. Pure: the status and the body line.
pub fn classify(status: u16, body: &str) -> Answer {
    let words = excerpt(body);
    let said = if words.is_empty() {
        format!("Kannel answered {status}")
    } else {
        format!("Kannel answered {status}: {words}")
    };
    match status {
        200..=299 if words.starts_with("3:") => Answer::Accepted {
            provider_id: None,
            detail: format!("{said} (no SMSC link now: Kannel stored it and sends it when one is back)"),
        },
        200..=299 => Answer::Accepted { provider_id: None, detail: said },
        401 | 403 => Answer::CredentialRejected { reason: said },
        500..=599 => Answer::Retry { after: None, reason: said },
        _ => Answer::Failed { reason: said },
    }
}

/// The `dlr-url` for one outbox row: Herald's status endpoint (built from
/// `http.public_url`, e.g. `…/v1/sms/status/kannel`) with a token that
/// names the row, signed with the deployment's address keys. Kannel calls
/// it back without any signature of its own, so the token is what proves a
/// report is about a message Herald sent: a forged or altered one names no
/// row.
pub fn status_callback(status_url: &Url, keys: &AddressKeys, outbox_id: &str) -> Url {
    let mut url = status_url.clone();
    url.query_pairs_mut().append_pair("token", &keys.sign_delivery_report(outbox_id));
    url
}

/// What a delivery report says happened (Kannel's `%d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DlrState {
    /// 1: on the handset.
    Delivered,
    /// 2: the SMSC gave up on reaching the handset.
    Undelivered,
    /// 4: queued on the SMSC (not asked for; recorded if it comes).
    Buffered,
    /// 8: accepted by the SMSC (not asked for; recorded if it comes).
    SmscAccepted,
    /// 16: the SMSC refused it.
    Failed,
}

impl DlrState {
    fn from_code(code: u8) -> Option<DlrState> {
        Some(match code {
            1 => DlrState::Delivered,
            2 => DlrState::Undelivered,
            4 => DlrState::Buffered,
            8 => DlrState::SmscAccepted,
            16 => DlrState::Failed,
            _ => return None,
        })
    }

    /// The word the send log uses.
    pub fn as_str(self) -> &'static str {
        match self {
            DlrState::Delivered => "delivered",
            DlrState::Undelivered => "undelivered",
            DlrState::Buffered => "buffered",
            DlrState::SmscAccepted => "accepted by the SMSC",
            DlrState::Failed => "failed",
        }
    }
}

/// One delivery report, its token checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryReport {
    /// The row the signed token names.
    pub outbox_id: String,
    pub state: DlrState,
    /// The SMSC's own words (`%A`), e.g. `id:… stat:UNDELIV err:001`,
    /// where an SMPP SMSC puts its error code.
    pub smsc_reply: Option<String>,
    /// The SMSC's id for the message (`%F`).
    pub smsc_id: Option<String>,
}

/// A delivery report Herald will not record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadReport {
    /// No token, or one whose signature does not hold: not from a message
    /// Herald sent (answered 403).
    #[error("the delivery report's token is missing or not signed by this deployment")]
    Forged,
    /// A signed token but a `type` that is not one of Kannel's (answered
    /// 400).
    #[error("the delivery report's type {0:?} is not one of Kannel's (1, 2, 4, 8, 16)")]
    UnknownType(String),
}

impl DeliveryReport {
    /// Reads the query of a call to the `dlr-url` (decoded pairs). The
    /// token is checked first, so an unsigned caller learns nothing about
    /// what else it got wrong.
    pub fn parse<'a>(
        query: impl IntoIterator<Item = (&'a str, &'a str)>,
        keys: &AddressKeys,
    ) -> Result<DeliveryReport, BadReport> {
        let (mut token, mut kind, mut reply, mut smsc_id) = (None, None, None, None);
        for (k, v) in query {
            match k {
                "token" => token = Some(v),
                "type" => kind = Some(v),
                "reply" => reply = Some(v),
                "smsc_id" => smsc_id = Some(v),
                _ => {}
            }
        }
        let outbox_id = token.and_then(|t| keys.verify_delivery_report(t)).ok_or(BadReport::Forged)?;
        let kind = kind.unwrap_or_default();
        let state = kind
            .trim()
            .parse()
            .ok()
            .and_then(DlrState::from_code)
            .ok_or_else(|| BadReport::UnknownType(excerpt(kind)))?;
        let kept = |v: Option<&str>| v.map(excerpt).filter(|v| !v.is_empty());
        Ok(DeliveryReport { outbox_id, state, smsc_reply: kept(reply), smsc_id: kept(smsc_id) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::phone::PhoneNumber;
    use super::*;

    fn endpoint() -> KannelEndpoint {
        KannelEndpoint {
            base: Url::parse("http://127.0.0.1:13013/").unwrap(),
            username: "herald".into(),
            password: "p&ss word".into(),
        }
    }

    fn query(url: &Url) -> Vec<(String, String)> {
        url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
    }

    #[test]
    fn a_gsm7_text_goes_as_utf8_with_its_report_url() {
        let to = PhoneNumber::parse("phone", "+14155550101").unwrap();
        let from = Sender::parse("Herald").unwrap();
        let callback = Url::parse("https://herald.example/v1/sms/status/kannel?token=abc.def").unwrap();
        let url = sendsms_url(
            &endpoint(),
            &Text { to: &to, from: &from, body: "Price: 5€ & more", callback: Some(&callback) },
        );
        assert_eq!(url.path(), "/cgi-bin/sendsms");
        let q = query(&url);
        let pairs: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            vec![
                ("username", "herald"),
                ("password", "p&ss word"),
                ("from", "Herald"),
                ("to", "+14155550101"),
                ("text", "Price: 5€ & more"),
                ("charset", "UTF-8"),
                ("dlr-mask", "19"),
                (
                    "dlr-url",
                    "https://herald.example/v1/sms/status/kannel?token=abc.def&type=%d&reply=%A&smsc_id=%F&at=%T"
                ),
            ]
        );
    }

    #[test]
    fn a_ucs2_text_says_so_and_no_callback_asks_no_report() {
        let to = PhoneNumber::parse("phone", "+14155550101").unwrap();
        let from = Sender::parse("+14155550100").unwrap();
        let url = sendsms_url(&endpoint(), &Text { to: &to, from: &from, body: "Привет 🙂", callback: None });
        let q = query(&url);
        assert!(q.contains(&("coding".into(), "2".into())), "{q:?}");
        assert!(q.contains(&("charset".into(), "UTF-8".into())), "{q:?}");
        assert!(!q.iter().any(|(k, _)| k.starts_with("dlr")), "{q:?}");
    }

    #[test]
    fn documented_answers_are_classified() {
        assert_eq!(
            classify(202, "0: Accepted for delivery"),
            Answer::Accepted { provider_id: None, detail: "Kannel answered 202: 0: Accepted for delivery".into() }
        );
        let queued = classify(202, "3: Queued for later delivery");
        assert!(queued.accepted() && queued.reason().contains("stored it"), "{queued:?}");
        assert!(matches!(classify(403, "Authorization failed for sendsms"), Answer::CredentialRejected { .. }));
        assert!(matches!(classify(503, "Temporal failure, try again later."), Answer::Retry { after: None, .. }));
        assert_eq!(
            classify(400, "Empty receiver number not allowed, rejected"),
            Answer::Failed { reason: "Kannel answered 400: Empty receiver number not allowed, rejected".into() }
        );
    }

    #[test]
    fn reports_are_read_only_with_a_token_this_deployment_signed() {
        let keys = AddressKeys::from_secret(b"deployment");
        let status = Url::parse("https://herald.example/v1/sms/status/kannel").unwrap();
        let callback = status_callback(&status, &keys, "row-1");
        let token = callback.query_pairs().find(|(k, _)| k == "token").unwrap().1.into_owned();
        let report = DeliveryReport::parse(
            [
                ("token", token.as_str()),
                ("type", "2"),
                ("reply", "id:7 stat:UNDELIV err:001"),
                ("smsc_id", "7"),
                ("at", "1"),
            ],
            &keys,
        )
        .unwrap();
        assert_eq!(
            report,
            DeliveryReport {
                outbox_id: "row-1".into(),
                state: DlrState::Undelivered,
                smsc_reply: Some("id:7 stat:UNDELIV err:001".into()),
                smsc_id: Some("7".into()),
            }
        );
        let other = AddressKeys::from_secret(b"another");
        assert_eq!(DeliveryReport::parse([("token", token.as_str()), ("type", "1")], &other), Err(BadReport::Forged));
        assert_eq!(DeliveryReport::parse([("type", "1")], &keys), Err(BadReport::Forged));
        assert_eq!(
            DeliveryReport::parse([("token", token.as_str()), ("type", "%d")], &keys),
            Err(BadReport::UnknownType("%d".into()))
        );
        let delivered =
            DeliveryReport::parse([("token", token.as_str()), ("type", "1"), ("reply", "")], &keys).unwrap();
        assert_eq!((delivered.state.as_str(), delivered.smsc_reply), ("delivered", None));
    }

    #[test]
    fn debug_never_shows_the_password() {
        assert!(!format!("{:?}", endpoint()).contains("p&ss"));
    }
}
