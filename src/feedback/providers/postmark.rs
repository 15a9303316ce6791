//! Postmark's bounce and spam-complaint webhooks. Postmark signs nothing, so
//! the webhook URL carries HTTP basic auth credentials that Herald checks
//! (configure them in Postmark as `https://USER:PASS@herald…/v1/bounces/postmark`).

use base64::Engine;
use hmac::{KeyInit, Mac};
use serde::Deserialize;

use super::{VerifyError, enhanced_status, recipient};
use crate::feedback::bounce::{BounceKind, BounceRecipient};

/// Compares `Authorization: Basic …` with the configured credentials, in
/// constant time (through an HMAC of both sides).
pub fn verify(header: Option<&str>, user: &str, password: &str) -> Result<(), VerifyError> {
    let given = header
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
        .ok_or(VerifyError::Missing("Authorization: Basic credentials"))?;
    let expected = format!("{user}:{password}");
    let digest = |bytes: &[u8]| {
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"postmark-basic-auth").expect("any key");
        m.update(bytes);
        m.finalize().into_bytes()
    };
    if digest(&given) == digest(expected.as_bytes()) { Ok(()) } else { Err(VerifyError::BadSignature) }
}

#[derive(Debug, Deserialize)]
struct Record {
    #[serde(default, rename = "RecordType")]
    record_type: String,
    #[serde(default, rename = "Type")]
    kind: String,
    #[serde(default, rename = "Email")]
    email: String,
    #[serde(default, rename = "Description")]
    description: String,
    #[serde(default, rename = "Details")]
    details: String,
}

pub fn recipients(body: &[u8]) -> Result<Vec<BounceRecipient>, String> {
    let r: Record = serde_json::from_slice(body).map_err(|e| format!("not a Postmark webhook body: {e}"))?;
    let text = format!("{} {}", r.description, r.details);
    let kind = match (r.record_type.as_str(), r.kind.as_str()) {
        ("SpamComplaint", _) | (_, "SpamComplaint") => BounceKind::Complaint,
        ("Bounce", "HardBounce" | "BadEmailAddress" | "ManuallyDeactivated") => BounceKind::Hard,
        ("Bounce", _) => BounceKind::Soft,
        _ => return Ok(Vec::new()),
    };
    let reason = format!("postmark {}: {}", r.kind, text.trim());
    Ok(vec![recipient(&r.email, kind, enhanced_status(&text), None, reason, None)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_must_match_exactly() {
        let good = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("hook:s3cret"));
        let bad = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("hook:s3cre"));
        assert_eq!(verify(Some(&good), "hook", "s3cret"), Ok(()));
        assert_eq!(verify(Some(&bad), "hook", "s3cret"), Err(VerifyError::BadSignature));
        assert!(verify(None, "hook", "s3cret").is_err());
    }

    #[test]
    fn bounces_and_complaints_become_recipients() {
        let r = recipients(include_bytes!("../../../tests/data/webhooks/postmark/bounce.json")).unwrap();
        assert_eq!((r[0].recipient.as_str(), r[0].kind), ("john@example.com", BounceKind::Hard));
        let r = recipients(include_bytes!("../../../tests/data/webhooks/postmark/spam-complaint.json")).unwrap();
        assert_eq!(r[0].kind, BounceKind::Complaint);
    }
}
