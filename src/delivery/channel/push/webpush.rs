//! The Web Push request (RFC 8030 §5): `POST` the encrypted payload to the
//! subscription's endpoint with
//! - `TTL`: how long the push service keeps it for an offline browser;
//! - `Urgency`: lets a phone on battery hold back what is not urgent;
//! - `Topic`: derived from the outbox id, so a retried row replaces its
//!   first copy on the push service instead of arriving twice (a push
//!   service replaces a stored message with the same Topic; one already
//!   delivered is not recalled);
//! - `Content-Encoding: aes128gcm` and `Authorization: vapid …`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::super::answer;
use super::super::public_address::{Target, check_public_url, describe_send_error, guarded_client};
use super::vapid::VapidKey;
use super::{DeviceOutcome, PushError, PushNotification, classify, ece};

/// A browser's `PushSubscription`, parsed: an endpoint that passed the
/// address guard, a point on P-256 and a 16-byte secret.
#[derive(Debug, Clone)]
pub struct WebSubscription {
    endpoint: reqwest::Url,
    p256dh: p256::PublicKey,
    auth: [u8; 16],
}

/// Which endpoints a deployment accepts.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointPolicy {
    /// `push.allow_private_networks`: accept `http://` and endpoints on
    /// loopback or private addresses (tests, a push service on the
    /// deployment's own network).
    pub allow_private_networks: bool,
}

impl EndpointPolicy {
    pub(crate) fn target(self) -> Target<'static> {
        Target {
            what: "Web Push endpoints",
            setting: "push.allow_private_networks",
            allow_http: false,
            allow_private_networks: self.allow_private_networks,
        }
    }
}

impl WebSubscription {
    /// Parses `PushSubscription.toJSON()`'s fields; an error names the field
    /// as the browser's JSON spells it.
    pub fn parse(endpoint: &str, p256dh: &str, auth: &str, policy: EndpointPolicy) -> Result<Self, PushError> {
        let invalid = |field, why: String| PushError::InvalidDevice { field, why };
        let endpoint = check_public_url(endpoint, policy.target()).map_err(|e| invalid("endpoint", e))?;
        let decode = |field, s: &str| {
            URL_SAFE_NO_PAD
                .decode(s.trim().trim_end_matches('='))
                .map_err(|e| invalid(field, format!("not base64url ({e})")))
        };
        let point = decode("keys.p256dh", p256dh)?;
        let p256dh = p256::PublicKey::from_sec1_bytes(&point)
            .map_err(|_| invalid("keys.p256dh", "not a P-256 public key (65-byte uncompressed point)".into()))?;
        let auth: [u8; 16] = decode("keys.auth", auth)?
            .try_into()
            .map_err(|v: Vec<u8>| invalid("keys.auth", format!("{} bytes; expected 16", v.len())))?;
        Ok(WebSubscription { endpoint, p256dh, auth })
    }

    pub fn endpoint(&self) -> &reqwest::Url {
        &self.endpoint
    }

    /// The endpoint's origin, the VAPID token's audience (RFC 8292 §2).
    pub fn origin(&self) -> String {
        self.endpoint.origin().ascii_serialization()
    }
}

/// The Web Push transport: one VAPID identity, one guarded HTTP client.
pub struct WebPush {
    client: reqwest::Client,
    vapid: Arc<VapidKey>,
    policy: EndpointPolicy,
}

/// The body a push service must accept (RFC 8030 §7.2): the encrypted
/// payload may be no larger.
pub const MAX_BODY: usize = 4096;

impl WebPush {
    pub fn new(vapid: Arc<VapidKey>, policy: EndpointPolicy, timeout: Duration) -> WebPush {
        let client = guarded_client(policy.allow_private_networks, timeout);
        WebPush { client, vapid, policy }
    }

    /// Speaks HTTP/2 without TLS from the first byte (prior knowledge), to
    /// a push service known to (the bench's local one). Over `https://`,
    /// which every real push service is, the client negotiates HTTP/2 by
    /// ALPN anyway; this makes a cleartext test service behave the same.
    pub fn over_http2(mut self, timeout: Duration) -> WebPush {
        self.client = super::super::public_address::guarded_client_builder(self.policy.allow_private_networks, timeout)
            .http2_prior_knowledge()
            .build()
            .expect("a client with a resolver and timeouts builds");
        self
    }

    pub fn vapid(&self) -> &VapidKey {
        &self.vapid
    }

    /// Encrypts and signs for one subscription, without sending: what
    /// [`WebPush::send`] posts, and what a benchmark measures.
    pub fn prepare(&self, sub: &WebSubscription, n: &PushNotification) -> Result<Prepared, PushError> {
        let payload = n.payload()?;
        let body = ece::encrypt(&payload, &sub.p256dh, &sub.auth);
        if body.len() > MAX_BODY {
            return Err(PushError::PayloadTooLarge {
                what: "the encrypted Web Push body",
                size: body.len(),
                limit: MAX_BODY,
            });
        }
        Ok(Prepared { body, authorization: self.vapid.authorization(&sub.origin()) })
    }

    /// Sends one notification to one subscription.
    pub async fn send(&self, sub: &WebSubscription, n: &PushNotification) -> DeviceOutcome {
        // Checked again at delivery: a subscription stored before the
        // deployment's policy tightened must not slip through.
        if let Err(e) = check_public_url(sub.endpoint.as_str(), self.policy.target()) {
            return DeviceOutcome::Refused { reason: e };
        }
        let prepared = match self.prepare(sub, n) {
            Ok(p) => p,
            Err(e) => return DeviceOutcome::TooLarge { reason: e.to_string() },
        };
        let response = self
            .client
            .post(sub.endpoint.clone())
            .header("ttl", n.ttl.as_secs().to_string())
            .header("urgency", n.urgency.as_str())
            .header("topic", n.collapse_key())
            .header("content-encoding", "aes128gcm")
            .header("content-type", "application/octet-stream")
            .header("authorization", &prepared.authorization)
            .body(prepared.body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                let (msg, refused) = describe_send_error(&e);
                return if refused {
                    DeviceOutcome::Refused { reason: format!("Web Push endpoint refused: {msg}") }
                } else {
                    DeviceOutcome::Retry { after: None, reason: format!("could not reach the push service: {msg}") }
                };
            }
        };
        let reply = answer::read(response, Some("location")).await;
        let body = reply.body.unwrap_or_default();
        let outcome = classify::web_push(reply.status, reply.id.as_deref(), reply.after, &body);
        if matches!(outcome, DeviceOutcome::CredentialRejected { .. }) {
            // A token refused once is not sent again: the next attempt signs
            // anew (after a key rotation, or a clock corrected).
            self.vapid.forget_tokens();
        }
        outcome
    }
}

/// One encrypted, signed request body and its `Authorization` header.
pub struct Prepared {
    pub body: Vec<u8>,
    pub authorization: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    #[test]
    fn a_subscription_is_parsed_or_its_field_named() {
        let strict = EndpointPolicy::default();
        let ok = WebSubscription::parse("https://fcm.googleapis.com/fcm/send/abc", P256DH, AUTH, strict).unwrap();
        assert_eq!(ok.origin(), "https://fcm.googleapis.com");
        let field = |r: Result<WebSubscription, PushError>| match r.unwrap_err() {
            PushError::InvalidDevice { field, .. } => field,
            other => panic!("{other}"),
        };
        assert_eq!(field(WebSubscription::parse("http://push.example.net/x", P256DH, AUTH, strict)), "endpoint");
        assert_eq!(field(WebSubscription::parse("https://127.0.0.1/x", P256DH, AUTH, strict)), "endpoint");
        assert_eq!(field(WebSubscription::parse("https://[::1]/x", P256DH, AUTH, strict)), "endpoint");
        assert_eq!(field(WebSubscription::parse("https://p.example/x", "BCVx", AUTH, strict)), "keys.p256dh");
        assert_eq!(field(WebSubscription::parse("https://p.example/x", "not*b64", AUTH, strict)), "keys.p256dh");
        assert_eq!(field(WebSubscription::parse("https://p.example/x", P256DH, "AAAA", strict)), "keys.auth");
        let open = EndpointPolicy { allow_private_networks: true };
        assert!(WebSubscription::parse("http://127.0.0.1:9/x", P256DH, AUTH, open).is_ok());
    }
}
