//! SendGrid's Event Webhook: a JSON array of events, signed with ECDSA P-256
//! over `timestamp || body` (headers `X-Twilio-Email-Event-Webhook-Signature`,
//! base64 DER, and `-Timestamp`); the public key is shown in SendGrid's
//! settings as base64 DER (SubjectPublicKeyInfo).

use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use serde::Deserialize;

use super::{VerifyError, enhanced_status, fresh, kind_for_status, recipient};
use crate::clock::Millis;
use crate::feedback::bounce::{BounceKind, BounceRecipient};

#[derive(Clone)]
pub struct SendGridKey(VerifyingKey);

impl SendGridKey {
    pub fn parse(b64: &str) -> Result<SendGridKey, String> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("not base64 ({e}); paste the verification key SendGrid shows"))?;
        VerifyingKey::from_public_key_der(&der).map(SendGridKey).map_err(|e| format!("not a P-256 public key ({e})"))
    }
}

/// Checks the signature; `now` bounds the timestamp unless `check_age` is
/// false (test vectors carry old timestamps).
pub fn verify(
    key: &SendGridKey,
    signature_b64: Option<&str>,
    timestamp: Option<&str>,
    body: &[u8],
    now: Millis,
    check_age: bool,
) -> Result<(), VerifyError> {
    let sig = signature_b64.ok_or(VerifyError::Missing("X-Twilio-Email-Event-Webhook-Signature"))?;
    let ts = timestamp.ok_or(VerifyError::Missing("X-Twilio-Email-Event-Webhook-Timestamp"))?;
    let der = base64::engine::general_purpose::STANDARD.decode(sig.trim()).map_err(|_| VerifyError::BadSignature)?;
    let sig = Signature::from_der(&der).map_err(|_| VerifyError::BadSignature)?;
    let mut signed = ts.as_bytes().to_vec();
    signed.extend_from_slice(body);
    key.0.verify(&signed, &sig).map_err(|_| VerifyError::BadSignature)?;
    if check_age {
        fresh(ts, now)?;
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(default)]
    email: String,
    #[serde(default)]
    event: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default, rename = "type")]
    bounce_type: Option<String>,
    #[serde(default, rename = "smtp-id")]
    smtp_id: Option<String>,
}

/// The bounce, block and spam-report events; the rest (delivered, opens,
/// deferrals, unsubscribes handled by SendGrid itself) are not ours to act on.
pub fn recipients(body: &[u8]) -> Result<Vec<BounceRecipient>, String> {
    let events: Vec<Event> = serde_json::from_slice(body).map_err(|e| format!("not a SendGrid event array: {e}"))?;
    Ok(events
        .into_iter()
        .filter_map(|e| {
            let reason = e.reason.clone().unwrap_or_default();
            let status = e.status.clone().filter(|s| !s.is_empty()).or_else(|| enhanced_status(&reason));
            let kind = match (e.event.as_str(), e.bounce_type.as_deref()) {
                ("spamreport", _) => BounceKind::Complaint,
                ("bounce", Some("blocked")) | ("blocked", _) => BounceKind::Soft,
                ("bounce", _) => match kind_for_status(status.as_deref(), true) {
                    // SendGrid's "bounce" is permanent by definition; the
                    // status decides whether the mailbox is gone.
                    BounceKind::Hard => BounceKind::Hard,
                    _ if reason.to_ascii_lowercase().contains("unknown") => BounceKind::Hard,
                    other => other,
                },
                _ => return None,
            };
            let code = reason.split_whitespace().next().and_then(|c| c.parse::<u16>().ok());
            Some(recipient(&e.email, kind, status, code, format!("sendgrid {}: {reason}", e.event), e.smtp_id))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector every official SendGrid SDK tests against.
    #[test]
    fn the_official_test_vector_verifies_and_a_changed_timestamp_does_not() {
        let v: serde_json::Value = serde_json::from_str(include_str!(
            "../../../tests/data/webhooks/sendgrid/signed-webhook-official-test-vector.json"
        ))
        .unwrap();
        let key = SendGridKey::parse(v["public_key"].as_str().unwrap()).unwrap();
        let body = v["payload"].as_str().unwrap().as_bytes();
        let sig = v["signature"].as_str();
        assert_eq!(verify(&key, sig, v["timestamp"].as_str(), body, Millis(0), false), Ok(()));
        assert_eq!(verify(&key, sig, Some("1388788367"), body, Millis(0), false), Err(VerifyError::BadSignature));
        assert_eq!(
            verify(&key, None, v["timestamp"].as_str(), body, Millis(0), false),
            Err(VerifyError::Missing("X-Twilio-Email-Event-Webhook-Signature"))
        );
    }

    #[test]
    fn bounces_and_spam_reports_become_recipients() {
        let r = recipients(include_bytes!("../../../tests/data/webhooks/sendgrid/bounce.json")).unwrap();
        assert_eq!(
            (r[0].recipient.as_str(), r[0].kind, r[0].status.as_deref()),
            ("alex@example.com", BounceKind::Hard, Some("5.0.0"))
        );
        let r = recipients(include_bytes!("../../../tests/data/webhooks/sendgrid/spamreport.json")).unwrap();
        assert_eq!(r[0].kind, BounceKind::Complaint);
        assert!(recipients(b"not json").is_err());
    }

    /// `engagement_bounces.status` holds codes (`VARCHAR(16)` on MariaDB):
    /// SendGrid's own string is reduced to the code in it, or dropped.
    #[test]
    fn a_status_that_is_not_a_code_is_reduced_to_one_or_dropped() {
        let body = br#"[{"email":"a@example.com","event":"bounce","status":"5.1.1 (mailbox unavailable, and more)"},
                        {"email":"b@example.com","event":"bounce","status":"permanently unavailable"}]"#;
        let r = recipients(body).unwrap();
        assert_eq!(r[0].status.as_deref(), Some("5.1.1"));
        assert_eq!(r[1].status, None);
    }
}
