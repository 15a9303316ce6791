//! The Apple Push Notification service: `POST {endpoint}/3/device/{token}`
//! over HTTP/2 (APNs speaks nothing else), authenticated with a provider
//! token: an ES256 JWT signed with the `.p8` key from the Apple developer
//! account, naming the key (`kid`) and the team (`iss`).
//!
//! Token-based rather than certificate-based authentication: one key serves
//! every app of the team and does not expire each year, and it needs no
//! client certificate in the TLS stack. Apple refuses a token older than an
//! hour and one renewed more often than every 20 minutes
//! (`TooManyProviderTokenUpdates`), so a token is reused for 40 minutes.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::super::answer;
use super::jwt::{self, JwtKey};
use super::{DeviceOutcome, MAX_PAYLOAD, PushError, PushNotification, Urgency, classify};

/// How long one provider token is reused: inside Apple's 20-60 minute band.
const TOKEN_REUSE: Duration = Duration::from_secs(40 * 60);

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    iat: u64,
}

/// Where the `.p8` key and the ids come from (`[push.apns]`).
pub struct ApnsSettings<'a> {
    /// The `.p8` file's contents (PKCS #8 PEM).
    pub key_pem: &'a str,
    pub key_id: &'a str,
    pub team_id: &'a str,
    /// The app's bundle id: `apns-topic`.
    pub topic: &'a str,
    /// `https://api.push.apple.com` (or the sandbox); `http://` only for a
    /// local test server, spoken with HTTP/2 prior knowledge.
    pub endpoint: &'a str,
    pub timeout: Duration,
}

pub struct Apns {
    client: reqwest::Client,
    endpoint: String,
    key: p256::ecdsa::SigningKey,
    key_id: String,
    team_id: String,
    topic: String,
    /// The provider token and when it was made.
    token: Mutex<Option<(String, Instant)>>,
}

impl Apns {
    pub fn new(s: &ApnsSettings<'_>) -> Result<Apns, PushError> {
        use p256::pkcs8::DecodePrivateKey;
        let key = p256::ecdsa::SigningKey::from_pkcs8_pem(s.key_pem).map_err(|e| PushError::Credential {
            what: "push.apns.key_file".into(),
            why: format!("not a .p8 key (PKCS #8 PEM, P-256): {e}"),
        })?;
        for (name, value) in
            [("push.apns.key_id", s.key_id), ("push.apns.team_id", s.team_id), ("push.apns.topic", s.topic)]
        {
            if value.trim().is_empty() {
                return Err(PushError::Credential { what: name.into(), why: "must not be empty".into() });
            }
        }
        let client = reqwest::Client::builder()
            // HTTP/2 only: APNs refuses HTTP/1.1, and over TLS ALPN then
            // offers h2 alone.
            .http2_prior_knowledge()
            .timeout(s.timeout)
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client with timeouts builds");
        Ok(Apns {
            client,
            endpoint: s.endpoint.trim_end_matches('/').to_owned(),
            key,
            key_id: s.key_id.to_owned(),
            team_id: s.team_id.to_owned(),
            topic: s.topic.to_owned(),
            token: Mutex::new(None),
        })
    }

    /// The provider token, reused for [`TOKEN_REUSE`].
    fn provider_token(&self) -> String {
        let mut cached = self.token.lock().expect("the APNs token lock is never poisoned");
        if let Some((token, made)) = cached.as_ref()
            && made.elapsed() < TOKEN_REUSE
        {
            return token.clone();
        }
        let iat = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let token = jwt::sign(JwtKey::Es256(&self.key), Some(&self.key_id), &Claims { iss: &self.team_id, iat });
        *cached = Some((token.clone(), Instant::now()));
        token
    }

    /// The JSON body: Apple's `aps` dictionary beside the fields every
    /// provider carries, so the app reads `id`, `url` and `data` the same
    /// way whichever path the message took.
    pub fn body(n: &PushNotification) -> Result<Vec<u8>, PushError> {
        let mut body = serde_json::to_value(n).expect("a notification serialises");
        let mut alert = serde_json::Map::new();
        alert.insert("title".into(), n.title.clone().into());
        if let Some(text) = &n.body {
            alert.insert("body".into(), text.clone().into());
        }
        body["aps"] = serde_json::json!({ "alert": alert });
        let bytes = serde_json::to_vec(&body).expect("a body serialises");
        if bytes.len() > MAX_PAYLOAD {
            return Err(PushError::PayloadTooLarge { what: "the APNs body", size: bytes.len(), limit: MAX_PAYLOAD });
        }
        Ok(bytes)
    }

    /// Sends one notification to one device token (lowercase hex).
    pub async fn send(&self, token: &str, n: &PushNotification) -> DeviceOutcome {
        let body = match Apns::body(n) {
            Ok(b) => b,
            Err(e) => return DeviceOutcome::TooLarge { reason: e.to_string() },
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // 10 sends at once and wakes the device; 5 lets the system batch
        // for battery, what RFC 8030 calls low urgency.
        let priority = if matches!(n.urgency, Urgency::VeryLow | Urgency::Low) { "5" } else { "10" };
        let mut request = self
            .client
            .post(format!("{}/3/device/{token}", self.endpoint))
            .header("authorization", format!("bearer {}", self.provider_token()))
            .header("apns-topic", &self.topic)
            .header("apns-push-type", "alert")
            .header("apns-expiration", (now + n.ttl.as_secs()).to_string())
            .header("apns-collapse-id", n.collapse_key())
            .header("apns-priority", priority)
            .header("content-type", "application/json");
        // Apple takes a canonical UUID as the message's id; an outbox id is
        // one, and then the id Apple reports is the row's own.
        if let Ok(id) = uuid::Uuid::parse_str(&n.id) {
            request = request.header("apns-id", id.hyphenated().to_string());
        }
        let response = match request.body(body).send().await {
            Ok(r) => r,
            Err(e) => return DeviceOutcome::Retry { after: None, reason: format!("could not reach APNs: {e}") },
        };
        let reply = answer::read(response, Some("apns-id")).await;
        let body = reply.body.unwrap_or_default();
        let outcome = classify::apns(reply.status, reply.id.as_deref(), reply.after, &body);
        if reply.status == 403 {
            // ExpiredProviderToken or InvalidProviderToken: sign a new one
            // next time rather than repeat the refused one for 40 minutes.
            *self.token.lock().expect("the APNs token lock is never poisoned") = None;
        }
        outcome
    }
}
