//! Firebase Cloud Messaging, HTTP v1 API: `POST
//! {endpoint}/v1/projects/{project_id}/messages:send` with an OAuth 2.0
//! access token.
//!
//! The token comes from the service-account JSON file the Firebase console
//! hands out, by the JWT bearer grant (RFC 7523): Herald signs an RS256
//! assertion with the account's private key and trades it at the file's
//! `token_uri` for an access token valid about an hour, cached until five
//! minutes before it expires. The legacy server-key API was shut down in
//! 2024, so there is no simpler credential to accept instead. Reading the
//! token endpoint from the file (as Google's own libraries do) is also what
//! lets a test point it at a local server.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::super::answer;
use super::jwt::{self, JwtKey};
use super::{DeviceOutcome, PushError, PushNotification, Urgency, classify};

/// The scope that allows `messages:send`.
const SCOPE: &str = "https://www.googleapis.com/auth/firebase.messaging";

/// How long the signed assertion is valid; Google accepts at most an hour.
const ASSERTION_LIFETIME: u64 = 3600;

/// An access token is replaced this long before it expires, so a request
/// never leaves with a token that expires on the way.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// The fields of a service-account file that matter here.
#[derive(Deserialize)]
struct ServiceAccount {
    project_id: String,
    private_key_id: Option<String>,
    private_key: String,
    client_email: String,
    token_uri: String,
}

#[derive(Serialize)]
struct GrantClaims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: u64,
}

pub struct Fcm {
    client: reqwest::Client,
    /// `{endpoint}/v1/projects/{project_id}/messages:send`.
    send_url: String,
    project_id: String,
    client_email: String,
    key_id: Option<String>,
    token_uri: String,
    signer: rsa::pkcs1v15::SigningKey<rsa::sha2::Sha256>,
    /// The access token and when to replace it. An async mutex held across
    /// the token request, so a burst of sends after expiry makes one grant,
    /// not one per device.
    token: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl Fcm {
    /// Reads `push.fcm.service_account_file`.
    pub fn from_file(path: &std::path::Path, endpoint: &str, timeout: Duration) -> Result<Fcm, PushError> {
        let text = std::fs::read_to_string(path).map_err(|e| PushError::Credential {
            what: format!("push.fcm.service_account_file ({})", path.display()),
            why: e.to_string(),
        })?;
        Fcm::from_json(&text, endpoint, timeout).map_err(|e| match e {
            PushError::Credential { why, .. } => {
                PushError::Credential { what: format!("push.fcm.service_account_file ({})", path.display()), why }
            }
            other => other,
        })
    }

    /// A service account's JSON; `endpoint` is `https://fcm.googleapis.com`
    /// in production.
    pub fn from_json(json: &str, endpoint: &str, timeout: Duration) -> Result<Fcm, PushError> {
        use rsa::pkcs8::DecodePrivateKey;
        let bad = |why: String| PushError::Credential { what: "the FCM service account".into(), why };
        let account: ServiceAccount =
            serde_json::from_str(json).map_err(|e| bad(format!("not a service-account JSON file ({e})")))?;
        let key = rsa::RsaPrivateKey::from_pkcs8_pem(&account.private_key)
            .map_err(|e| bad(format!("private_key is not a PKCS #8 RSA key ({e})")))?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client with timeouts builds");
        Ok(Fcm {
            client,
            send_url: format!("{}/v1/projects/{}/messages:send", endpoint.trim_end_matches('/'), account.project_id),
            project_id: account.project_id,
            client_email: account.client_email,
            key_id: account.private_key_id,
            token_uri: account.token_uri,
            signer: rsa::pkcs1v15::SigningKey::new(key),
            token: tokio::sync::Mutex::new(None),
        })
    }

    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    /// The cached access token, or a new one. `Err` is the outcome every
    /// device gets when there is none to be had.
    async fn access_token(&self) -> Result<String, DeviceOutcome> {
        let mut cached = self.token.lock().await;
        if let Some((token, refresh_at)) = cached.as_ref()
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let iat = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let claims = GrantClaims {
            iss: &self.client_email,
            scope: SCOPE,
            aud: &self.token_uri,
            iat,
            exp: iat + ASSERTION_LIFETIME,
        };
        let assertion = jwt::sign(JwtKey::Rs256(&self.signer), self.key_id.as_deref(), &claims);
        let form = [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", &assertion)];
        let response = self.client.post(&self.token_uri).form(&form).send().await.map_err(|e| {
            DeviceOutcome::Retry { after: None, reason: format!("could not reach the FCM token endpoint: {e}") }
        })?;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        if status != 200 {
            let reason = format!("the FCM token endpoint answered {status}: {}", answer::excerpt(&body));
            return Err(if status == 429 || status >= 500 {
                DeviceOutcome::Retry { after: None, reason }
            } else {
                DeviceOutcome::CredentialRejected { reason }
            });
        }
        let answer: TokenAnswer = serde_json::from_str(&body).map_err(|e| DeviceOutcome::Retry {
            after: None,
            reason: format!("the FCM token endpoint's answer is not a token ({e})"),
        })?;
        let refresh_at = Instant::now() + Duration::from_secs(answer.expires_in).saturating_sub(REFRESH_MARGIN);
        *cached = Some((answer.access_token.clone(), refresh_at));
        Ok(answer.access_token)
    }

    /// The `messages:send` body for one token.
    pub fn message(token: &str, n: &PushNotification) -> serde_json::Value {
        let key = n.collapse_key();
        let ttl = n.ttl.as_secs();
        // FCM's `data` is a map of strings: the trigger payload travels as
        // JSON text under "data", the rest as they are.
        let mut data = serde_json::Map::new();
        data.insert("id".into(), n.id.clone().into());
        if let Some(url) = &n.url {
            data.insert("url".into(), url.clone().into());
        }
        data.insert("data".into(), n.data.to_string().into());
        let mut notification = serde_json::Map::new();
        notification.insert("title".into(), n.title.clone().into());
        if let Some(body) = &n.body {
            notification.insert("body".into(), body.clone().into());
        }
        let mut webpush = json!({ "headers": { "TTL": ttl.to_string(), "Urgency": n.urgency.as_str(), "Topic": key } });
        // FCM accepts only an https link here.
        if let Some(url) = n.url.as_deref().filter(|u| u.starts_with("https://")) {
            webpush["fcm_options"] = json!({ "link": url });
        }
        let priority = if matches!(n.urgency, Urgency::High) { "HIGH" } else { "NORMAL" };
        json!({ "message": {
            "token": token,
            "notification": notification,
            "data": data,
            // `collapse_key` replaces a copy FCM still holds for an offline
            // phone; `notification.tag` replaces one already on the screen
            // (Android shows one notification per tag), so a retried row
            // shows once either way.
            "android": {
                "ttl": format!("{ttl}s"), "collapse_key": key, "priority": priority,
                "notification": { "tag": key },
            },
            "webpush": webpush,
            "apns": { "headers": { "apns-collapse-id": key } },
        }})
    }

    /// Sends one notification to one registration token.
    pub async fn send(&self, token: &str, n: &PushNotification) -> DeviceOutcome {
        if let Err(e) = n.payload() {
            return DeviceOutcome::TooLarge { reason: e.to_string() };
        }
        let message = Fcm::message(token, n);
        // A 401 means the access token was refused before its expiry
        // (revoked, the key rotated): drop it and try once more with a new
        // one, so that costs one request rather than a failed message. A
        // second 401 is the credential's fault.
        let mut refused_once = false;
        loop {
            let access = match self.access_token().await {
                Ok(t) => t,
                Err(outcome) => return outcome,
            };
            let response = match self.client.post(&self.send_url).bearer_auth(access).json(&message).send().await {
                Ok(r) => r,
                Err(e) => return DeviceOutcome::Retry { after: None, reason: format!("could not reach FCM: {e}") },
            };
            let reply = answer::read(response, None).await;
            if reply.status == 401 {
                *self.token.lock().await = None;
                if !refused_once {
                    refused_once = true;
                    continue;
                }
            }
            let body = reply.body.unwrap_or_default();
            let name = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_owned));
            return classify::fcm(reply.status, name.as_deref(), reply.after, &body);
        }
    }
}
