//! A Web Push service for `herald bench --channel push`: it checks each
//! request as a push service and a browser together would, and counts.
//!
//! Per request: the RFC 8030 headers (`TTL` a number, `Urgency` one of the
//! four, `Topic` at most 32 base64url characters), `Content-Encoding:
//! aes128gcm`, and the RFC 8292 `Authorization: vapid t=…, k=…` (`k` the
//! configured public key; the JWT's ES256 signature verified with it, `aud`
//! this server's origin, `exp` in the future and within 24 hours, `sub` a
//! `mailto:` or `https:` contact). Then the body is decrypted as RFC 8291
//! says a browser does (ECDH with the device's private key, HKDF with its
//! auth secret, AES-128-GCM) and the plaintext must be the JSON
//! notification, `id` and `title` present. A request that fails any check
//! is answered `400` and counted with its reason; the bench reports them.
//!
//! Two economies, neither skipping a check:
//! - A VAPID token is verified once and then recognised: Herald signs one
//!   per origin every 11 hours, so every request of a run carries the same
//!   token, and an ECDSA verification per request would measure the
//!   receiver, not Herald.
//! - Each device's private key is a `ring` ephemeral key, used for the one
//!   message the bench sends it (one message per user, one device per
//!   user). `ring` does the ECDH several times faster than `p256` but only
//!   with a key it generated and uses once; with `p256` (about 600 µs an
//!   ECDH on this machine) the receiver alone would take more than the two
//!   cores. A second message to the same device fails as "already used",
//!   which the bench counts as an error.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hkdf::Hkdf;
use p256::ecdsa::signature::Verifier;
use ring::agreement::{ECDH_P256, EphemeralPrivateKey, UnparsedPublicKey, agree_ephemeral};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

/// A device the receiver can decrypt for, as a browser's
/// `PushSubscription.toJSON()` would give it.
#[derive(Debug, Clone)]
pub struct BenchDevice {
    pub endpoint: String,
    pub p256dh: String,
    pub auth: String,
}

impl BenchDevice {
    /// The device as Herald files it.
    pub fn registration(&self) -> crate::store::NewPushDevice {
        crate::store::NewPushDevice {
            kind: "web".into(),
            address: self.endpoint.clone(),
            p256dh: Some(self.p256dh.clone()),
            auth: Some(self.auth.clone()),
            label: None,
        }
    }
}

/// A device's private key: `ring`'s, for one message (the bench), or
/// `p256`'s, for any number (a test that counts what arrives twice).
enum DeviceKey {
    Once(Mutex<Option<EphemeralPrivateKey>>),
    Reusable(p256::SecretKey),
}

struct Device {
    key: DeviceKey,
    public: Vec<u8>,
    auth: [u8; 16],
    /// Notifications that passed every check, and their `Topic`s.
    deliveries: AtomicU64,
    topics: Mutex<Vec<String>>,
}

/// One notification as the device saw it, for tests to check field by
/// field (the first [`KEPT`] of a run).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub device: usize,
    pub ttl: u64,
    pub urgency: String,
    pub topic: String,
    pub payload: serde_json::Value,
}

/// Notifications kept for [`PushReceiver::received`]; a bench's hundred
/// thousand are counted, not kept.
const KEPT: usize = 1000;

struct Shared {
    devices: Vec<Device>,
    received: Mutex<Vec<Received>>,
    vapid_public_key: String,
    origin: String,
    verified_tokens: Mutex<HashSet<String>>,
    accepted: AtomicU64,
    refused: AtomicU64,
    first_refusal: Mutex<Option<String>>,
}

/// The running receiver; stops when dropped.
pub struct PushReceiver {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for PushReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl PushReceiver {
    /// Starts on 127.0.0.1 with `devices` fresh devices that accept VAPID
    /// tokens signed for `vapid_public_key`, each decrypting one message.
    pub async fn start(devices: usize, vapid_public_key: &str) -> anyhow::Result<(PushReceiver, Vec<BenchDevice>)> {
        PushReceiver::start_with(devices, vapid_public_key, false).await
    }

    /// Like [`start`](Self::start), with devices that decrypt any number of
    /// messages (slower: `p256`'s ECDH): for counting duplicates.
    pub async fn start_reusable(
        devices: usize,
        vapid_public_key: &str,
    ) -> anyhow::Result<(PushReceiver, Vec<BenchDevice>)> {
        PushReceiver::start_with(devices, vapid_public_key, true).await
    }

    async fn start_with(
        devices: usize,
        vapid_public_key: &str,
        reusable: bool,
    ) -> anyhow::Result<(PushReceiver, Vec<BenchDevice>)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let origin = format!("http://{}", listener.local_addr()?);
        let rng = ring::rand::SystemRandom::new();
        let mut made = Vec::with_capacity(devices);
        let mut subscriptions = Vec::with_capacity(devices);
        for n in 0..devices {
            let (key, public) = if reusable {
                let key = p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
                let public = p256::EncodedPoint::from(key.public_key()).as_bytes().to_vec();
                (DeviceKey::Reusable(key), public)
            } else {
                let key = EphemeralPrivateKey::generate(&ECDH_P256, &rng).map_err(|_| anyhow::anyhow!("no random"))?;
                let public = key.compute_public_key().map_err(|_| anyhow::anyhow!("no public key"))?.as_ref().to_vec();
                (DeviceKey::Once(Mutex::new(Some(key))), public)
            };
            let auth: [u8; 16] = rand::random();
            subscriptions.push(BenchDevice {
                endpoint: format!("{origin}/push/{n}"),
                p256dh: URL_SAFE_NO_PAD.encode(&public),
                auth: URL_SAFE_NO_PAD.encode(auth),
            });
            made.push(Device { key, public, auth, deliveries: AtomicU64::new(0), topics: Mutex::new(Vec::new()) });
        }
        let shared = Arc::new(Shared {
            devices: made,
            received: Mutex::new(Vec::new()),
            vapid_public_key: vapid_public_key.to_owned(),
            origin,
            verified_tokens: Mutex::new(HashSet::new()),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            first_refusal: Mutex::new(None),
        });
        let app = axum::Router::new().route("/push/{n}", post(receive)).with_state(shared.clone());
        let stop = CancellationToken::new();
        let until = stop.clone();
        // Herald's own server: HTTP/1.1 and HTTP/2 (prior knowledge) both,
        // as a push service speaks HTTP/2.
        let limits = crate::http::server::ServerLimits {
            header_read_timeout: std::time::Duration::from_secs(10),
            max_connections: 1024,
        };
        tokio::spawn(crate::http::server::serve(listener, app, limits, until));
        Ok((PushReceiver { shared, stop }, subscriptions))
    }

    /// Notifications that passed every check.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Per device, in order: how many notifications arrived, and with which
    /// `Topic`s (a push service replaces a queued message by its Topic).
    pub fn per_device(&self) -> Vec<(u64, Vec<String>)> {
        self.shared
            .devices
            .iter()
            .map(|d| {
                let topics = d.topics.lock().unwrap_or_else(PoisonError::into_inner).clone();
                (d.deliveries.load(Ordering::Relaxed), topics)
            })
            .collect()
    }

    /// The first notifications received, decrypted.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Requests refused, and the first one's reason.
    pub fn refused(&self) -> (u64, Option<String>) {
        let first = self.shared.first_refusal.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (self.shared.refused.load(Ordering::Relaxed), first)
    }
}

async fn receive(
    State(shared): State<Arc<Shared>>,
    Path(n): Path<usize>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, String) {
    match check(&shared, n, &headers, &body) {
        Ok(()) => {
            shared.accepted.fetch_add(1, Ordering::Relaxed);
            (StatusCode::CREATED, String::new())
        }
        Err(why) => {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            shared.first_refusal.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert_with(|| why.clone());
            (StatusCode::BAD_REQUEST, why)
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, String> {
    headers.get(name).and_then(|v| v.to_str().ok()).ok_or_else(|| format!("no {name} header"))
}

fn check(shared: &Shared, n: usize, headers: &HeaderMap, body: &[u8]) -> Result<(), String> {
    let ttl = header(headers, "ttl")?.parse::<u64>().map_err(|_| "TTL is not a number".to_owned())?;
    let urgency = header(headers, "urgency")?;
    if !["very-low", "low", "normal", "high"].contains(&urgency) {
        return Err(format!("Urgency {urgency:?} is not one of RFC 8030's"));
    }
    let topic = header(headers, "topic")?;
    if topic.len() > 32 || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(format!("Topic {topic:?} is not at most 32 base64url characters"));
    }
    if header(headers, "content-encoding")? != "aes128gcm" {
        return Err("Content-Encoding is not aes128gcm".into());
    }
    check_vapid(shared, header(headers, "authorization")?)?;
    let device = shared.devices.get(n).ok_or_else(|| format!("no device {n}"))?;
    let plaintext = decrypt(device, body)?;
    let json: serde_json::Value =
        serde_json::from_slice(&plaintext).map_err(|e| format!("the plaintext is not JSON: {e}"))?;
    for field in ["id", "title"] {
        if !json.get(field).is_some_and(serde_json::Value::is_string) {
            return Err(format!("the notification has no {field}"));
        }
    }
    device.deliveries.fetch_add(1, Ordering::Relaxed);
    if matches!(device.key, DeviceKey::Reusable(_)) {
        device.topics.lock().unwrap_or_else(PoisonError::into_inner).push(topic.to_owned());
    }
    let mut received = shared.received.lock().unwrap_or_else(PoisonError::into_inner);
    if received.len() < KEPT {
        received.push(Received { device: n, ttl, urgency: urgency.to_owned(), topic: topic.to_owned(), payload: json });
    }
    Ok(())
}

/// RFC 8292 §3: `vapid t=JWT, k=PUBLIC_KEY`.
fn check_vapid(shared: &Shared, authorization: &str) -> Result<(), String> {
    let rest = authorization.strip_prefix("vapid ").ok_or("Authorization is not vapid")?;
    let (mut token, mut key) = (None, None);
    for part in rest.split(',').map(str::trim) {
        if let Some(t) = part.strip_prefix("t=") {
            token = Some(t);
        } else if let Some(k) = part.strip_prefix("k=") {
            key = Some(k);
        }
    }
    let (token, key) = (token.ok_or("no t= in Authorization")?, key.ok_or("no k= in Authorization")?);
    if key != shared.vapid_public_key {
        return Err("k= is not the configured VAPID public key".into());
    }
    if shared.verified_tokens.lock().unwrap_or_else(PoisonError::into_inner).contains(token) {
        return Ok(());
    }
    verify_jwt(token, key, &shared.origin)?;
    shared.verified_tokens.lock().unwrap_or_else(PoisonError::into_inner).insert(token.to_owned());
    Ok(())
}

fn verify_jwt(token: &str, key: &str, origin: &str) -> Result<(), String> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else { return Err("the JWT does not have three parts".into()) };
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|e| format!("JWT part is not base64url: {e}"));
    let header: serde_json::Value = serde_json::from_slice(&decode(header)?).map_err(|e| e.to_string())?;
    if header["alg"] != "ES256" {
        return Err(format!("JWT alg is {}, not ES256", header["alg"]));
    }
    let public = p256::PublicKey::from_sec1_bytes(&decode(key)?).map_err(|_| "k= is not a P-256 point")?;
    let signature =
        p256::ecdsa::Signature::from_slice(&decode(signature)?).map_err(|_| "the JWT signature is not r||s")?;
    let signed = &token[..token.rfind('.').unwrap_or(0)];
    p256::ecdsa::VerifyingKey::from(public)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| "the JWT signature does not verify with k=")?;
    let claims: serde_json::Value = serde_json::from_slice(&decode(claims)?).map_err(|e| e.to_string())?;
    if claims["aud"] != origin {
        return Err(format!("aud is {}, not this push service's origin {origin}", claims["aud"]));
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let exp = claims["exp"].as_u64().ok_or("no exp")?;
    if exp <= now || exp > now + 24 * 3600 {
        return Err(format!("exp {exp} is not within the next 24 hours"));
    }
    let sub = claims["sub"].as_str().unwrap_or_default();
    if !(sub.starts_with("mailto:") || sub.starts_with("https:")) {
        return Err(format!("sub {sub:?} is not a mailto: or https: contact"));
    }
    Ok(())
}

/// RFC 8291 §3.4 and RFC 8188, the receiving side, for a one-record body.
fn decrypt(device: &Device, body: &[u8]) -> Result<Vec<u8>, String> {
    if body.len() < 21 {
        return Err("the body is shorter than the aes128gcm header".into());
    }
    let (salt, rest) = body.split_at(16);
    let id_len = usize::from(rest[4]);
    let rest = &rest[5..];
    if rest.len() < id_len {
        return Err("the key id is longer than the body".into());
    }
    let (as_public, sealed) = rest.split_at(id_len);
    let derive = |shared: &[u8]| {
        let mut info = Vec::with_capacity(14 + 65 + 65);
        info.extend_from_slice(b"WebPush: info\0");
        info.extend_from_slice(&device.public);
        info.extend_from_slice(as_public);
        let mut ikm = [0u8; 32];
        Hkdf::<Sha256>::new(Some(&device.auth), shared).expand(&info, &mut ikm).map(|()| ikm)
    };
    let ikm = match &device.key {
        DeviceKey::Once(key) => {
            let key = key.lock().unwrap_or_else(PoisonError::into_inner).take().ok_or("this device's key was used")?;
            let peer = UnparsedPublicKey::new(&ECDH_P256, as_public);
            agree_ephemeral(key, &peer, |shared| derive(shared)).map_err(|_| "the key id is not a P-256 point")?
        }
        DeviceKey::Reusable(key) => {
            let peer = p256::PublicKey::from_sec1_bytes(as_public).map_err(|_| "the key id is not a P-256 point")?;
            let shared = p256::ecdh::diffie_hellman(key.to_nonzero_scalar(), peer.as_affine());
            derive(shared.raw_secret_bytes())
        }
    }
    .map_err(|_| "HKDF failed")?;
    let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
    let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).map_err(|_| "HKDF failed")?;
    prk.expand(b"Content-Encoding: nonce\0", &mut nonce).map_err(|_| "HKDF failed")?;
    let cipher = Aes128Gcm::new_from_slice(&cek).map_err(|_| "bad key length")?;
    let mut record =
        cipher.decrypt(Nonce::from_slice(&nonce), sealed).map_err(|_| "AES-GCM: the body does not decrypt")?;
    // The last record ends with 0x02 and zero padding.
    while record.last() == Some(&0) {
        record.pop();
    }
    if record.pop() != Some(2) {
        return Err("the record does not end with the last-record delimiter".into());
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::channel::push::vapid::{VapidKey, generate_key_pair};
    use crate::delivery::channel::push::webpush::{EndpointPolicy, WebPush, WebSubscription};
    use crate::delivery::channel::push::{DeviceOutcome, PushNotification, Urgency};

    fn note(id: &str) -> PushNotification {
        PushNotification {
            id: id.into(),
            title: "t".into(),
            body: None,
            url: None,
            data: serde_json::json!({}),
            ttl: std::time::Duration::from_secs(60),
            urgency: Urgency::Normal,
        }
    }

    #[tokio::test]
    async fn accepts_what_herald_sends_once_and_refuses_a_replay_or_a_foreign_key() {
        let (private, public) = generate_key_pair();
        let vapid = Arc::new(VapidKey::new(&private, "mailto:ops@example.com").unwrap());
        let (receiver, devices) = PushReceiver::start(2, &public).await.unwrap();
        let policy = EndpointPolicy { allow_private_networks: true };
        let push = WebPush::new(vapid, policy, std::time::Duration::from_secs(5));
        let sub = |d: &BenchDevice| WebSubscription::parse(&d.endpoint, &d.p256dh, &d.auth, policy).unwrap();

        let first = push.send(&sub(&devices[0]), &note("a")).await;
        assert!(matches!(first, DeviceOutcome::Accepted { .. }), "{first:?}");
        assert_eq!(receiver.accepted(), 1);
        // The same device again: its one-use key is gone.
        let again = push.send(&sub(&devices[0]), &note("b")).await;
        assert!(matches!(again, DeviceOutcome::Failed { .. }), "{again:?}");

        // Signed with another key pair: refused before decryption.
        let (other, _) = generate_key_pair();
        let stranger = WebPush::new(
            Arc::new(VapidKey::new(&other, "mailto:x@example.com").unwrap()),
            policy,
            std::time::Duration::from_secs(5),
        );
        let foreign = stranger.send(&sub(&devices[1]), &note("c")).await;
        assert!(matches!(foreign, DeviceOutcome::Failed { .. }), "{foreign:?}");
        let (refused, first) = receiver.refused();
        assert_eq!((refused, receiver.accepted()), (2, 1));
        assert_eq!(first.as_deref(), Some("this device's key was used"));
    }
}
