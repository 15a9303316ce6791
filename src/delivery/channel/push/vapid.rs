//! VAPID (RFC 8292): how a push service knows the application server sending
//! to a subscription is the one the browser subscribed with. The server
//! signs a short-lived ES256 JWT for the push service's origin and sends it
//! with its public key: `Authorization: vapid t=JWT, k=PUBLIC_KEY`.
//!
//! Keys are kept in the format `npx web-push generate-vapid-keys` prints
//! (the raw 32-byte private scalar and the 65-byte uncompressed public
//! point, both base64url), so a deployment moving from a Node server keeps
//! its subscriptions: a browser's subscription is bound to the public key
//! it was made with, and a new key would orphan every one of them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::PushError;
use super::jwt::{self, JwtKey};

/// How long a token is valid. RFC 8292 §2 caps `exp` at 24 hours ahead;
/// 12 hours (what the Node `web-push` library uses) leaves room for a push
/// service whose clock runs ahead of ours.
const TOKEN_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// A cached token is replaced once less than this is left of it, so a
/// token is never sent within an hour of its expiry (clock skew again).
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(3600);

/// At most this many origins' tokens are cached. Real deployments reach a
/// handful of push services (Google, Mozilla, Apple, Microsoft); the bound
/// keeps endpoints on arbitrary hosts from growing the map without limit.
const MAX_CACHED_ORIGINS: usize = 64;

/// The application server's VAPID identity.
pub struct VapidKey {
    signing: p256::ecdsa::SigningKey,
    /// The uncompressed public point, base64url: the `k=` of every request
    /// and the `applicationServerKey` a page subscribes with.
    public_key: String,
    /// A `mailto:` or `https:` contact for the push service's operators.
    subject: String,
    /// Signed tokens per push-service origin, with their expiry.
    cache: Mutex<HashMap<String, (String, SystemTime)>>,
}

#[derive(Serialize)]
struct Claims<'a> {
    aud: &'a str,
    exp: u64,
    sub: &'a str,
}

/// A new key pair as `(private, public)`, both base64url: the private key
/// for `push.vapid_private_key`, the public one for pages that subscribe.
pub fn generate_key_pair() -> (String, String) {
    let key = loop {
        // rand 0.9's generator, not p256's own `random` (which wants the
        // rand_core 0.6 traits): a uniformly random 32-byte string is a
        // valid scalar except with probability about 2^-32.
        let bytes: [u8; 32] = rand::random();
        if let Ok(k) = p256::ecdsa::SigningKey::from_slice(&bytes) {
            break k;
        }
    };
    let public = URL_SAFE_NO_PAD.encode(key.verifying_key().to_encoded_point(false).as_bytes());
    (URL_SAFE_NO_PAD.encode(key.to_bytes()), public)
}

impl VapidKey {
    /// Reads `push.vapid_private_key` (base64url, raw 32 bytes) and
    /// `push.vapid_subject`.
    pub fn new(private_key: &str, subject: &str) -> Result<VapidKey, PushError> {
        let bad = |why: String| PushError::Credential { what: "push.vapid_private_key".into(), why };
        let raw = URL_SAFE_NO_PAD
            .decode(private_key.trim().trim_end_matches('='))
            .map_err(|e| bad(format!("not base64url ({e})")))?;
        if raw.len() != 32 {
            return Err(bad(format!(
                "{} bytes; expected the raw 32-byte key `npx web-push generate-vapid-keys` prints",
                raw.len()
            )));
        }
        let signing =
            p256::ecdsa::SigningKey::from_slice(&raw).map_err(|_| bad("not a valid P-256 private key".into()))?;
        if !(subject.starts_with("mailto:") || subject.starts_with("https://")) {
            return Err(PushError::Credential {
                what: "push.vapid_subject".into(),
                why: format!("{subject:?}: expected a mailto: or https:// contact (RFC 8292 §2.1)"),
            });
        }
        let public_key = URL_SAFE_NO_PAD.encode(signing.verifying_key().to_encoded_point(false).as_bytes());
        Ok(VapidKey { signing, public_key, subject: subject.to_owned(), cache: Mutex::new(HashMap::new()) })
    }

    /// The base64url public key (`applicationServerKey`).
    pub fn public_key(&self) -> &str {
        &self.public_key
    }

    /// The `Authorization` header for a request to `origin`
    /// (`https://push.example.net`, no path): cached per origin and signed
    /// anew only when the cached token nears its expiry, so the common case
    /// costs a map lookup instead of an ECDSA signature.
    pub fn authorization(&self, origin: &str) -> String {
        let now = SystemTime::now();
        let mut cache = self.cache.lock().expect("the VAPID cache is never poisoned");
        if let Some((header, expires)) = cache.get(origin)
            && expires.duration_since(now).is_ok_and(|left| left > REFRESH_BEFORE_EXPIRY)
        {
            return header.clone();
        }
        let expires = now + TOKEN_LIFETIME;
        let header = self.sign(origin, expires);
        if cache.len() >= MAX_CACHED_ORIGINS {
            cache.clear();
        }
        cache.insert(origin.to_owned(), (header.clone(), expires));
        header
    }

    /// A fresh header for `origin`, valid until `expires`.
    pub fn sign(&self, origin: &str, expires: SystemTime) -> String {
        let exp = expires.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let claims = Claims { aud: origin, exp, sub: &self.subject };
        let token = jwt::sign(JwtKey::Es256(&self.signing), None, &claims);
        format!("vapid t={token}, k={}", self.public_key)
    }

    /// Forgets the cached tokens, after a push service refused one.
    pub fn forget_tokens(&self) {
        self.cache.lock().expect("the VAPID cache is never poisoned").clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_pair_round_trips_and_matches() {
        let (private, public) = generate_key_pair();
        let key = VapidKey::new(&private, "mailto:ops@example.com").unwrap();
        assert_eq!(key.public_key(), public);
        let point = URL_SAFE_NO_PAD.decode(&public).unwrap();
        assert_eq!(point.len(), 65);
        assert_eq!(point[0], 4, "uncompressed point");
    }

    #[test]
    fn bad_keys_and_subjects_name_their_setting() {
        let e = VapidKey::new("AAAA", "mailto:a@b").err().unwrap().to_string();
        assert!(e.starts_with("push.vapid_private_key: 3 bytes"), "{e}");
        let (private, _) = generate_key_pair();
        let e = VapidKey::new(&private, "ops@example.com").err().unwrap().to_string();
        assert!(e.starts_with("push.vapid_subject:"), "{e}");
    }

    #[test]
    fn tokens_are_cached_per_origin() {
        let (private, _) = generate_key_pair();
        let key = VapidKey::new(&private, "mailto:ops@example.com").unwrap();
        let a = key.authorization("https://push.example.net");
        assert_eq!(a, key.authorization("https://push.example.net"));
        assert_ne!(a, key.authorization("https://other.example.net"));
        key.forget_tokens();
        assert!(key.cache.lock().unwrap().is_empty());
    }
}
