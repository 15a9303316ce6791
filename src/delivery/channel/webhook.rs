//! The `webhook` channel: POSTs a JSON event to the rule's URL, signed per the
//! Standard Webhooks scheme (<https://www.standardwebhooks.com/>), so any of its
//! reference libraries can verify it.
//!
//! A rule's URL is operator input that makes this server send requests, so it
//! must not become a way to reach internal services: URLs whose host is, or
//! resolves to, a loopback, private, link-local (cloud metadata) or otherwise
//! non-public address are refused unless the deployment allows them. The check
//! runs when the rule is saved (IP literals and `localhost`) and again inside
//! the HTTP client's resolver on every delivery, so a DNS name that later
//! points inward (rebinding) is caught where it matters; both live in
//! [`super::public_address`], shared with the Web Push endpoints.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

pub use super::public_address::is_non_public;
use super::public_address::{Target, check_public_url, describe_send_error, guarded_client};

pub use super::signing::{SecretList, SigningSecret, SigningSecrets};
use super::{Channel, Delivery, Outcome};

/// Which target addresses a deployment allows.
#[derive(Debug, Clone, Copy, Default)]
pub struct WebhookPolicy {
    /// Allow loopback and private ranges (tests, or a deployment whose
    /// receivers live on its own network).
    pub allow_private_networks: bool,
}

impl WebhookPolicy {
    /// Checks a rule's URL when it is saved. Names are resolved at delivery.
    pub fn check_url(&self, raw: &str) -> Result<reqwest::Url, String> {
        check_public_url(
            raw,
            Target {
                what: "webhooks",
                setting: "webhook.allow_private_networks",
                allow_http: true,
                allow_private_networks: self.allow_private_networks,
            },
        )
    }
}

/// The JSON body posted for one message.
#[derive(Debug, Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: EventData<'a>,
}

#[derive(Debug, Serialize)]
struct EventData<'a> {
    outbox_id: &'a str,
    user_id: &'a str,
    rule_id: Option<&'a str>,
    trigger_id: Option<&'a str>,
    trigger_type: Option<&'a str>,
    subject: Option<&'a str>,
    text: Option<&'a str>,
    html: Option<&'a str>,
    payload: serde_json::Value,
}

/// How much of a refusing receiver's body goes into the detail.
const BODY_EXCERPT: usize = 200;

pub struct WebhookChannel {
    client: reqwest::Client,
    /// Each delivery is signed with every one (see `channel::signing`).
    secrets: SigningSecrets,
    policy: WebhookPolicy,
}

impl WebhookChannel {
    pub fn new(secrets: impl Into<SigningSecrets>, policy: WebhookPolicy, timeout: Duration) -> WebhookChannel {
        let secrets = secrets.into();
        let client = guarded_client(policy.allow_private_networks, timeout);
        WebhookChannel { client, secrets, policy }
    }
}

#[async_trait]
impl Channel for WebhookChannel {
    async fn deliver(&self, d: &Delivery) -> Outcome {
        let row = &d.row;
        let Some(raw_url) = d.rule.as_ref().and_then(|r| r.webhook_url.as_deref()) else {
            return Outcome::terminal("no webhook URL: webhook rows must come from a rule with webhook_url set");
        };
        let url = match self.policy.check_url(raw_url) {
            Ok(u) => u,
            Err(e) => return Outcome::terminal(e),
        };
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
        let now = chrono::Utc::now();
        let event = Event {
            kind: "message.created",
            timestamp: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            data: EventData {
                outbox_id: &row.id,
                user_id: &row.user_id,
                rule_id: row.rule_id.as_deref(),
                trigger_id: row.trigger_id.as_deref(),
                trigger_type: d.rule.as_ref().map(|r| r.trigger_type.as_str()),
                subject: d.message.as_ref().map(|m| m.subject.as_str()),
                text: d.message.as_ref().map(|m| m.text.as_str()),
                html: d.message.as_ref().and_then(|m| m.html.as_deref()),
                payload,
            },
        };
        let body = serde_json::to_vec(&event).expect("events serialise");
        // Stable per outbox row, so a receiver can drop a redelivery.
        let id = format!("msg_{}", row.id);
        let timestamp = now.timestamp();
        let response = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", self.secrets.sign(&id, timestamp, &body))
            .body(body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => return classify_error(&e),
        };
        let status = response.status();
        if status.is_success() {
            return Outcome::Sent {
                transport: "webhook".into(),
                detail: Some(format!("{status}")),
                address_hash: None,
                provider_id: None,
            };
        }
        // The body is kept (an excerpt) only from a receiver known to be
        // public, or when the deployment allows internal receivers: an
        // answer from anything else is recorded by its status line alone,
        // so the send log can never carry an internal service's reply.
        let after = super::answer::retry_after(
            response.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            std::time::SystemTime::now(),
        );
        let public_peer = response.remote_addr().is_some_and(|a| !is_non_public(a.ip()));
        let excerpt =
            if public_peer || self.policy.allow_private_networks { excerpt(response).await } else { String::new() };
        let detail = format!("the receiver answered {status}{excerpt}");
        if status.as_u16() == 429 || status.is_server_error() {
            Outcome::Retry { detail, address_hash: None, after }
        } else if status.is_redirection() {
            Outcome::terminal(format!("{detail} (redirects are not followed: configure the final URL)"))
        } else {
            Outcome::terminal(detail)
        }
    }
}

fn classify_error(e: &reqwest::Error) -> Outcome {
    let (msg, refused) = describe_send_error(e);
    if refused {
        // Refused by policy: will be refused next time too.
        return Outcome::terminal(format!("webhook target refused: {msg}"));
    }
    if e.is_timeout() {
        return Outcome::retry(format!("the receiver did not answer in time: {msg}"));
    }
    Outcome::retry(format!("could not reach the receiver: {msg}"))
}

async fn excerpt(response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let text: String = text.chars().filter(|c| !c.is_control()).take(BODY_EXCERPT).collect();
    if text.trim().is_empty() { String::new() } else { format!(": {}", text.trim()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_are_refused_with_the_reason() {
        let err = WebhookPolicy::default().check_url("https://user:secret@hooks.example.com/in").unwrap_err();
        assert_eq!(err, "credentials in the URL are not accepted; the request is signed instead");
    }

    #[test]
    fn private_loopback_and_metadata_addresses_are_refused() {
        let p = WebhookPolicy::default();
        for bad in [
            "http://127.0.0.1/x",
            "http://10.1.2.3/",
            "http://172.20.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:10.0.0.1]/",
            // IPv6 forms that embed an inward IPv4 address (once let through).
            "http://[::127.0.0.1]/",
            "http://[::ffff:0:127.0.0.1]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:7f00:1::]/",
            "http://[2002:a00:1::1]/",
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "http://[fec0::1]/",
            "http://[64:ff9b:1::1]/",
            "http://localhost:8080/",
            "http://db.internal/",
            "http://100.64.0.1/",
            "ftp://example.com/",
            "https://user:pw@example.com/",
        ] {
            assert!(p.check_url(bad).is_err(), "{bad} must be refused");
        }
        assert!(p.check_url("https://hooks.example.com/herald").is_ok());
        assert!(p.check_url("https://93.184.216.34/x").is_ok());
        // The same forms around a public IPv4 address, and ordinary global IPv6.
        assert!(p.check_url("https://[64:ff9b::5db8:d822]/x").is_ok());
        assert!(p.check_url("https://[2002:5db8:d822::1]/x").is_ok());
        assert!(p.check_url("https://[2606:2800:220:1:248:1893:25c8:1946]/x").is_ok());
        let open = WebhookPolicy { allow_private_networks: true };
        assert!(open.check_url("http://127.0.0.1:9000/").is_ok());
    }
}
