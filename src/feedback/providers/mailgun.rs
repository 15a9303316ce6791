//! Mailgun's webhooks: `{"signature": {timestamp, token, signature},
//! "event-data": {…}}`, signed with hex HMAC-SHA256(signing key,
//! `timestamp || token`). A token is accepted once (the caller records it).

use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::{VerifyError, enhanced_status, fresh, recipient};
use crate::clock::Millis;
use crate::feedback::bounce::{BounceKind, BounceRecipient};

#[derive(Debug, Deserialize)]
pub struct Payload {
    pub signature: Signature,
    #[serde(rename = "event-data")]
    pub event: EventData,
}

#[derive(Debug, Deserialize)]
pub struct Signature {
    pub timestamp: String,
    pub token: String,
    pub signature: String,
}

#[derive(Debug, Deserialize)]
pub struct EventData {
    #[serde(default)]
    pub event: String,
    #[serde(default)]
    pub severity: Option<String>,
    #[serde(default)]
    pub recipient: String,
    #[serde(default, rename = "delivery-status")]
    pub delivery_status: Option<DeliveryStatus>,
    #[serde(default)]
    pub message: Option<Message>,
}

#[derive(Debug, Deserialize)]
pub struct DeliveryStatus {
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    #[serde(default)]
    pub headers: serde_json::Map<String, serde_json::Value>,
}

pub fn parse(body: &[u8]) -> Result<Payload, String> {
    serde_json::from_slice(body).map_err(|e| format!("not a Mailgun webhook body: {e}"))
}

/// Checks the HMAC and the timestamp; the caller then makes sure the token
/// was not seen before.
pub fn verify(key: &str, sig: &Signature, now: Millis, check_age: bool) -> Result<(), VerifyError> {
    let expected = hex::decode(sig.signature.trim()).map_err(|_| VerifyError::BadSignature)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    mac.update(sig.timestamp.as_bytes());
    mac.update(sig.token.as_bytes());
    mac.verify_slice(&expected).map_err(|_| VerifyError::BadSignature)?;
    if check_age {
        fresh(&sig.timestamp, now)?;
    }
    Ok(())
}

/// Permanent failures and complaints; temporary failures are soft.
pub fn recipients(p: &Payload) -> Vec<BounceRecipient> {
    let e = &p.event;
    let ds = e.delivery_status.as_ref();
    let text = ds
        .map(|d| format!("{} {}", d.message.clone().unwrap_or_default(), d.description.clone().unwrap_or_default()))
        .unwrap_or_default();
    let status = enhanced_status(&text);
    let kind = match (e.event.as_str(), e.severity.as_deref()) {
        ("complained", _) => BounceKind::Complaint,
        ("failed", Some("permanent")) => {
            let code = ds.and_then(|d| d.code);
            // 605: Mailgun did not try, because the address bounced before.
            if matches!(status.as_deref(), Some("5.1.1" | "5.1.2" | "5.1.6" | "5.1.10"))
                || matches!(code, Some(550 | 605))
                || text.to_ascii_lowercase().contains("does not exist")
            {
                BounceKind::Hard
            } else {
                BounceKind::Soft
            }
        }
        ("failed", _) => BounceKind::Soft,
        _ => return Vec::new(),
    };
    let message_id =
        e.message.as_ref().and_then(|m| m.headers.get("message-id")).and_then(|v| v.as_str()).map(str::to_owned);
    let reason = format!("mailgun {}: {}", e.event, text.trim());
    vec![recipient(&e.recipient, kind, status, ds.and_then(|d| d.code), reason, message_id)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_vector_verifies_and_a_changed_token_does_not() {
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/data/webhooks/mailgun/signature-test-vector.json"))
                .unwrap();
        let key = v["signing_key"].as_str().unwrap();
        let mut sig = Signature {
            timestamp: v["timestamp"].as_str().unwrap().into(),
            token: v["token"].as_str().unwrap().into(),
            signature: v["signature"].as_str().unwrap().into(),
        };
        assert_eq!(verify(key, &sig, Millis(0), false), Ok(()));
        assert_eq!(verify(key, &sig, Millis(1_700_000_000_000 + 3_600_000), true), Err(VerifyError::Stale));
        sig.token.push('0');
        assert_eq!(verify(key, &sig, Millis(0), false), Err(VerifyError::BadSignature));
    }

    #[test]
    fn permanent_failures_and_complaints_become_recipients() {
        let p = parse(include_bytes!("../../../tests/data/webhooks/mailgun/failed-permanent.json")).unwrap();
        let r = recipients(&p);
        assert_eq!((r[0].recipient.as_str(), r[0].kind), ("alice@example.com", BounceKind::Hard));
        let p = parse(include_bytes!("../../../tests/data/webhooks/mailgun/complained.json")).unwrap();
        assert_eq!(recipients(&p)[0].kind, BounceKind::Complaint);
    }
}
