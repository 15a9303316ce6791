//! Push transports: one notification to one device, over Web Push (a
//! browser's push service), Firebase Cloud Messaging (Android, and web apps
//! that use Firebase) or the Apple Push Notification service. Each answer is
//! read into a [`DeviceOutcome`], so the channel that fans a row out to a
//! user's devices decides per device without knowing which provider spoke.
//!
//! # Layout
//! - [`vapid`]: the application server's key pair and the RFC 8292 JWT a
//!   push service checks.
//! - [`ece`]: RFC 8291 `aes128gcm` payload encryption, what lets a push
//!   service carry the message without reading it.
//! - [`webpush`]: the RFC 8030 request (`TTL`, `Urgency`, `Topic`).
//! - [`jwt`]: the compact JWS shared by VAPID, APNs (ES256) and the FCM
//!   OAuth grant (RS256).
//! - [`fcm`]: the FCM HTTP v1 API with a service-account access token.
//! - [`apns`]: APNs over HTTP/2 with a `.p8` provider token.
//! - [`classify`]: every provider's answer as a [`DeviceOutcome`].
//!
//! # Choices, and what was rejected
//! - **Cryptography from RustCrypto primitives** (`p256` for keys and
//!   ES256, `aes-gcm`, `hkdf`, `rsa` for RS256), assembled here, rather than
//!   a Web Push crate. `web-push` binds OpenSSL, which the static release
//!   build cannot link. `web-push-native` is pure Rust, but its VAPID half
//!   brings `jwt-simple` (a second JWT implementation and a dozen curve
//!   crates beside the one APNs and FCM need anyway), and without it the
//!   crate offers little more than the 60 lines of [`ece`].
//!   Interoperability is not taken on trust: the tests decrypt with
//!   Python's `http_ece` and verify the JWT with `cryptography`, and
//!   `web-push-testing` (what the Node `web-push` ecosystem tests against)
//!   decrypts like a browser.
//! - **`ring` for the one hot operation**, the per-message ephemeral key and
//!   ECDH of [`ece`]: measured with optimised code on this project's
//!   2-core machine, a Web Push message (encryption, VAPID token cached) costs
//!   about 75 µs of CPU with `ring` against 410 µs with `p256`, whose
//!   portable field arithmetic does the two scalar multiplications five
//!   times slower. `ring` is no new dependency (rustls already links it)
//!   and builds statically. The ES256 signatures stay on `p256`: a VAPID
//!   token is signed once per push service every 11 hours, an APNs token
//!   every 40 minutes, so their 225 µs does not count.
//! - **No JWT crate**: the three tokens are only signed, never verified,
//!   and their claims are fixed, so they are a dozen lines over the signers
//!   the project already has ([`jwt`]); `jsonwebtoken` or `jwt-simple` would
//!   add a second layer of key parsing (and `jwt-simple` its own curves)
//!   for none of the verification they exist for.
//! - **reqwest for all three** (rustls; HTTP/2 only for APNs, which over
//!   TLS offers only `h2` in ALPN and lets a test speak cleartext HTTP/2 to
//!   a local server) rather than a
//!   dedicated APNs or FCM client: one TLS stack and one connection pool
//!   type for every channel.
//! - **The SSRF guard of the webhook channel** ([`super::public_address`])
//!   for Web Push endpoints: a browser can be made to hand over any URL as
//!   its endpoint, exactly as an operator can type any URL into a webhook
//!   rule. FCM and APNs endpoints come from the operator's configuration
//!   and are not guarded.

pub mod apns;
pub mod classify;
pub mod deliver;
pub mod ece;
pub mod fcm;
pub mod jwt;
pub mod vapid;
pub mod webpush;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use sha2::Digest;

pub use classify::DeviceOutcome;

/// The largest notification payload Herald sends, in bytes of JSON: what
/// APNs and FCM accept (4 KB). A Web Push service need accept no more than
/// 4,096 bytes of *encrypted* body (RFC 8030 §7.2), which [`webpush`]
/// checks separately after encryption.
pub const MAX_PAYLOAD: usize = 4096;

/// A failure to set up a transport, or input that cannot be sent: each names
/// the field or file at fault, so a configuration error and a 422 say what
/// to fix.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// A device as registered cannot be used.
    #[error("{field}: {why}")]
    InvalidDevice { field: &'static str, why: String },
    /// The message is too large for the provider.
    #[error("{what} is {size} bytes, over the {limit}-byte limit")]
    PayloadTooLarge { what: &'static str, size: usize, limit: usize },
    /// A key or credential file could not be read or parsed.
    #[error("{what}: {why}")]
    Credential { what: String, why: String },
}

/// How soon a notification matters, as RFC 8030 §5.3 names it. Mapped onto
/// APNs `apns-priority` and FCM's Android priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Urgency {
    VeryLow,
    Low,
    #[default]
    Normal,
    High,
}

impl Urgency {
    pub fn as_str(self) -> &'static str {
        match self {
            Urgency::VeryLow => "very-low",
            Urgency::Low => "low",
            Urgency::Normal => "normal",
            Urgency::High => "high",
        }
    }
}

/// The longest TTL a rule may set, and the default without a grace
/// window: 28 days, FCM's maximum (`android.ttl`); a Web Push service
/// or APNs may keep a message for less and says nothing.
pub const MAX_TTL: Duration = Duration::from_secs(28 * 24 * 3600);

/// A push rule's `"push": {"ttl": SECONDS, "urgency": …}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushOptions {
    /// Seconds a provider keeps trying an offline device, 0 to 2,419,200
    /// (28 days). Default: the rule's grace window, else 28 days: a
    /// message the outbox would expire is not worth showing later either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    /// `very-low`, `low`, `normal` (default) or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urgency: Option<Urgency>,
}

impl PushOptions {
    /// The TTL to send with: the rule's, else its grace window, else
    /// [`MAX_TTL`], never more than [`MAX_TTL`].
    pub fn ttl(&self, grace_seconds: Option<i64>) -> Duration {
        let seconds = self.ttl.or_else(|| grace_seconds.and_then(|g| u64::try_from(g).ok()));
        seconds.map_or(MAX_TTL, Duration::from_secs).min(MAX_TTL)
    }

    /// What is wrong with the options, naming the field.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        match self.ttl {
            Some(t) if t > MAX_TTL.as_secs() => {
                Some(("push.ttl", format!("must be 0 to {} seconds (28 days), got {t}", MAX_TTL.as_secs())))
            }
            _ => None,
        }
    }
}

/// What to send: the payload every provider carries as JSON
/// `{"id", "title", "body", "url", "data"}`, plus how long it stays worth
/// delivering and how urgent it is.
#[derive(Debug, Clone, Serialize)]
pub struct PushNotification {
    /// The outbox row's id: the service worker and the app can drop a
    /// second copy, and every provider's collapse key derives from it.
    pub id: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The trigger's payload.
    pub data: serde_json::Value,
    /// How long a provider should keep trying an offline device.
    #[serde(skip)]
    pub ttl: Duration,
    #[serde(skip)]
    pub urgency: Urgency,
}

impl PushNotification {
    /// The notification a rendered push template makes for the row `id`:
    /// its title (the renderer's one-line field), its body unless empty,
    /// its url, and the trigger's payload as `data`. The channel sends
    /// this; the rule editor measures it.
    pub fn from_rendered(
        id: String,
        r: &crate::planning::template::Rendered,
        data: serde_json::Value,
        options: PushOptions,
        grace_seconds: Option<i64>,
    ) -> PushNotification {
        PushNotification {
            id,
            title: r.subject.clone(),
            body: Some(r.text.clone()).filter(|t| !t.is_empty()),
            url: r.url.clone(),
            data,
            ttl: options.ttl(grace_seconds),
            urgency: options.urgency.unwrap_or_default(),
        }
    }

    /// The payload as JSON, refused before anything is sent when it is over
    /// [`MAX_PAYLOAD`]: a provider would refuse it anyway, after a round
    /// trip and with less helpful words.
    pub fn payload(&self) -> Result<Vec<u8>, PushError> {
        let json = serde_json::to_vec(self).expect("a notification serialises");
        if json.len() > MAX_PAYLOAD {
            return Err(PushError::PayloadTooLarge { what: "the push payload", size: json.len(), limit: MAX_PAYLOAD });
        }
        Ok(json)
    }

    /// The key that makes a retried message replace its first copy rather
    /// than show twice: Web Push `Topic`, `apns-collapse-id` and FCM's
    /// `collapse_key`. RFC 8030 allows a Topic of at most 32 base64url
    /// characters, which an outbox id (a UUID with hyphens, 36) is not, so
    /// the key is the first 32 characters of the id's SHA-256 in base64url
    /// (192 bits). Hashing every id, rather than shortening the ones that
    /// happen to be UUIDs, gives one rule for ids of any shape.
    pub fn collapse_key(&self) -> String {
        let digest = sha2::Sha256::digest(self.id.as_bytes());
        let mut key = URL_SAFE_NO_PAD.encode(digest);
        key.truncate(32);
        key
    }
}

/// A device to push to, parsed once where it is registered: the rest of the
/// code cannot hold an endpoint that is not https or a key that is not a
/// point on the curve.
#[derive(Debug, Clone)]
pub enum PushDevice {
    /// A browser's `PushSubscription`.
    Web(webpush::WebSubscription),
    /// An FCM registration token.
    Fcm { token: String },
    /// An APNs device token, lowercase hex.
    Apns { token: String },
}

impl PushDevice {
    pub fn fcm(token: &str) -> Result<PushDevice, PushError> {
        let token = token.trim();
        if token.is_empty() || token.len() > 4096 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(PushError::InvalidDevice {
                field: "fcm_token",
                why: "an FCM registration token is a non-empty string without spaces".into(),
            });
        }
        Ok(PushDevice::Fcm { token: token.to_owned() })
    }

    pub fn apns(token: &str) -> Result<PushDevice, PushError> {
        let token = token.trim();
        // Device tokens are 32 bytes today; Apple says they may grow, so
        // only the shape is checked.
        if token.is_empty() || !token.len().is_multiple_of(2) || token.len() > 200 || hex::decode(token).is_err() {
            return Err(PushError::InvalidDevice {
                field: "apns_token",
                why: "an APNs device token is a non-empty even-length hex string".into(),
            });
        }
        Ok(PushDevice::Apns { token: token.to_ascii_lowercase() })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            PushDevice::Web(_) => "web",
            PushDevice::Fcm { .. } => "fcm",
            PushDevice::Apns { .. } => "apns",
        }
    }
}

/// The transports this deployment has configured, each optional: a device
/// whose provider is not configured gets [`DeviceOutcome::Failed`] saying
/// so, rather than a silent skip.
#[derive(Default)]
pub struct Transports {
    pub web: Option<webpush::WebPush>,
    pub fcm: Option<fcm::Fcm>,
    pub apns: Option<apns::Apns>,
}

impl Transports {
    /// Sends one notification to one device.
    pub async fn send(&self, device: &PushDevice, n: &PushNotification) -> DeviceOutcome {
        let missing = |what: &str| DeviceOutcome::Failed {
            reason: format!("{what} is not configured on this instance; nothing was sent to this device"),
        };
        match device {
            PushDevice::Web(sub) => match &self.web {
                Some(t) => t.send(sub, n).await,
                None => missing("Web Push (push.vapid_private_key)"),
            },
            PushDevice::Fcm { token } => match &self.fcm {
                Some(t) => t.send(token, n).await,
                None => missing("FCM (push.fcm.service_account_file)"),
            },
            PushDevice::Apns { token } => match &self.apns {
                Some(t) => t.send(token, n).await,
                None => missing("APNs (push.apns.key_file)"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(id: &str) -> PushNotification {
        PushNotification {
            id: id.into(),
            title: "Export ready".into(),
            body: None,
            url: None,
            data: serde_json::json!({}),
            ttl: Duration::from_secs(60),
            urgency: Urgency::Normal,
        }
    }

    #[test]
    fn the_collapse_key_is_a_valid_topic_and_stable_per_id() {
        let a = note("0192f7a0-1c2d-7e3f-8a9b-0c1d2e3f4a5b").collapse_key();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{a}");
        assert_eq!(a, note("0192f7a0-1c2d-7e3f-8a9b-0c1d2e3f4a5b").collapse_key());
        assert_ne!(a, note("0192f7a0-1c2d-7e3f-8a9b-0c1d2e3f4a5c").collapse_key());
    }

    #[test]
    fn a_payload_over_the_limit_is_refused_with_its_size() {
        let mut n = note("x");
        n.body = Some("é".repeat(2100));
        let err = n.payload().unwrap_err().to_string();
        assert!(err.contains("4096-byte limit"), "{err}");
        let size = serde_json::to_vec(&n).unwrap().len();
        assert!(err.contains(&format!("{size} bytes")), "{err}");
        n.body = Some("short".into());
        let json: serde_json::Value = serde_json::from_slice(&n.payload().unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"id": "x", "title": "Export ready", "body": "short", "data": {}}));
    }

    #[test]
    fn device_tokens_are_checked_and_name_their_field() {
        assert!(PushDevice::apns("A1b2").is_ok());
        for bad in ["", "abc", "zz", "  "] {
            let e = PushDevice::apns(bad).unwrap_err().to_string();
            assert!(e.starts_with("apns_token:"), "{e}");
        }
        assert!(matches!(PushDevice::apns("ABCD").unwrap(), PushDevice::Apns { token } if token == "abcd"));
        assert!(PushDevice::fcm("fcm:token-1").is_ok());
        assert!(PushDevice::fcm(" ").unwrap_err().to_string().starts_with("fcm_token:"));
        assert!(PushDevice::fcm("a b").is_err());
    }
}
