//! Amazon SES notifications delivered by SNS over HTTPS. The SNS envelope is
//! signed with RSA (SignatureVersion 1: SHA1withRSA, 2: SHA256withRSA) over a
//! canonical string of its fields, with the key in the certificate at
//! `SigningCertURL`. The certificate source is configurable
//! (`bounces.ses_certificate_file`), so tests, and deployments that pin a
//! certificate, verify without fetching; otherwise it is fetched once per
//! URL, only over https from `sns.<region>.amazonaws.com`.
//!
//! No timestamp window is enforced: SNS retries for hours, and a replayed
//! notification changes nothing (the bounce's fingerprint de-duplicates it).

use base64::Engine;
use rsa::RsaPublicKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::signature::Verifier;
use serde::Deserialize;
use x509_cert::Certificate;
use x509_cert::der::{DecodePem, Encode};

use super::{VerifyError, recipient};
use crate::feedback::bounce::{BounceKind, BounceRecipient};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Envelope {
    #[serde(rename = "Type")]
    pub kind: String,
    pub message_id: String,
    pub topic_arn: String,
    #[serde(default)]
    pub subject: Option<String>,
    pub message: String,
    pub timestamp: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(rename = "SubscribeURL", default)]
    pub subscribe_url: Option<String>,
    pub signature_version: String,
    pub signature: String,
    #[serde(rename = "SigningCertURL")]
    pub signing_cert_url: String,
}

pub fn parse(body: &[u8]) -> Result<Envelope, String> {
    serde_json::from_slice(body).map_err(|e| format!("not an SNS message: {e}"))
}

/// The exact string SNS signs, by message type.
pub fn string_to_sign(e: &Envelope) -> String {
    let mut s = String::new();
    let mut field = |name: &str, value: &str| {
        s.push_str(name);
        s.push('\n');
        s.push_str(value);
        s.push('\n');
    };
    field("Message", &e.message);
    field("MessageId", &e.message_id);
    if e.kind == "Notification" {
        if let Some(subject) = &e.subject {
            field("Subject", subject);
        }
    } else {
        field("SubscribeURL", e.subscribe_url.as_deref().unwrap_or(""));
    }
    field("Timestamp", &e.timestamp);
    if e.kind != "Notification" {
        field("Token", e.token.as_deref().unwrap_or(""));
    }
    field("TopicArn", &e.topic_arn);
    field("Type", &e.kind);
    s
}

/// The public key in a PEM certificate.
pub fn key_from_pem(pem: &str) -> Result<RsaPublicKey, String> {
    let cert = Certificate::from_pem(pem).map_err(|e| format!("not a PEM certificate: {e}"))?;
    let spki = cert.tbs_certificate.subject_public_key_info.to_der().map_err(|e| e.to_string())?;
    rsa::pkcs8::DecodePublicKey::from_public_key_der(&spki).map_err(|e| format!("not an RSA key: {e}"))
}

/// Whether a URL is https on an SNS endpoint, by AWS's own rule (the one
/// its SNS message validators apply): scheme `https`, port 443, no
/// credentials, and a host of exactly `sns.<region>.amazonaws.com` (or
/// `.amazonaws.com.cn`), the region being letters and digits in the
/// `us-east-1` / `us-gov-west-1` shape. Anything looser was fetched from: an
/// outside review had `https://sns.x.y.amazonaws.com:18099/x.pem` accepted.
pub fn trusted_sns_url(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else { return false };
    // The url crate drops a written default port, so `:443` reads as None.
    if u.scheme() != "https" || u.port().is_some() || !u.username().is_empty() || u.password().is_some() {
        return false;
    }
    let Some(url::Host::Domain(host)) = u.host() else { return false };
    let labels: Vec<&str> = host.split('.').collect();
    let suffix_ok = matches!(labels.as_slice(), ["sns", _, "amazonaws", "com"] | ["sns", _, "amazonaws", "com", "cn"]);
    suffix_ok && is_region(labels[1])
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`, `cn-north-1`: two letters,
/// one or more words of letters, a number, joined by dashes.
fn is_region(label: &str) -> bool {
    let parts: Vec<&str> = label.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && parts[1..parts.len() - 1].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].parse::<u8>().is_ok_and(|_| !parts[parts.len() - 1].starts_with('+'))
}

/// Whether a certificate URL is one SNS would use.
pub fn trusted_cert_url(url: &str) -> bool {
    trusted_sns_url(url) && reqwest::Url::parse(url).is_ok_and(|u| u.path().ends_with(".pem") && u.query().is_none())
}

/// The HTTP client for SNS (certificates, subscription confirmations):
/// direct connections only. `HTTP_PROXY`/`HTTPS_PROXY` are ignored, as for
/// webhooks, so an environment variable cannot route Herald's own requests
/// somewhere the URL checks above did not look; no redirects (SNS sends
/// none); a bounded wait.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .expect("a client with timeouts builds")
}

pub fn verify(e: &Envelope, key: &RsaPublicKey) -> Result<(), VerifyError> {
    let sig =
        base64::engine::general_purpose::STANDARD.decode(e.signature.trim()).map_err(|_| VerifyError::BadSignature)?;
    let sig = Signature::try_from(sig.as_slice()).map_err(|_| VerifyError::BadSignature)?;
    let text = string_to_sign(e);
    let ok = match e.signature_version.as_str() {
        "1" => VerifyingKey::<sha1::Sha1>::new(key.clone()).verify(text.as_bytes(), &sig).is_ok(),
        "2" => VerifyingKey::<rsa::sha2::Sha256>::new(key.clone()).verify(text.as_bytes(), &sig).is_ok(),
        _ => false,
    };
    if ok { Ok(()) } else { Err(VerifyError::BadSignature) }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Notification {
    #[serde(default)]
    notification_type: String,
    #[serde(default)]
    bounce: Option<Bounce>,
    #[serde(default)]
    complaint: Option<Complaint>,
    #[serde(default)]
    mail: Option<Mail>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bounce {
    #[serde(default)]
    bounce_type: String,
    #[serde(default)]
    bounced_recipients: Vec<Bounced>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bounced {
    email_address: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    diagnostic_code: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Complaint {
    #[serde(default)]
    complained_recipients: Vec<Complained>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Complained {
    email_address: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mail {
    #[serde(default)]
    common_headers: Option<CommonHeaders>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommonHeaders {
    #[serde(default)]
    message_id: Option<String>,
}

/// Bounce and complaint notifications; deliveries and others are ignored.
pub fn recipients(e: &Envelope) -> Result<Vec<BounceRecipient>, String> {
    let n: Notification =
        serde_json::from_str(&e.message).map_err(|err| format!("SNS Message is not an SES notification: {err}"))?;
    let message_id = n.mail.and_then(|m| m.common_headers).and_then(|h| h.message_id);
    Ok(match n.notification_type.as_str() {
        "Bounce" => {
            let b = n.bounce.unwrap_or(Bounce { bounce_type: String::new(), bounced_recipients: vec![] });
            b.bounced_recipients
                .into_iter()
                .map(|r| {
                    let status = r.status.clone();
                    let hard = b.bounce_type == "Permanent"
                        && !matches!(status.as_deref(), Some(s) if s.starts_with("5.7") || s.starts_with("4."));
                    let kind = if hard { BounceKind::Hard } else { BounceKind::Soft };
                    let diag = r.diagnostic_code.unwrap_or_default();
                    let code = diag.split_whitespace().find_map(|w| w.parse::<u16>().ok());
                    let reason = format!("ses {} bounce: {diag}", b.bounce_type);
                    recipient(&r.email_address, kind, status, code, reason, message_id.clone())
                })
                .collect()
        }
        "Complaint" => n
            .complaint
            .map(|c| c.complained_recipients)
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                recipient(
                    &r.email_address,
                    BounceKind::Complaint,
                    None,
                    None,
                    "ses complaint".into(),
                    message_id.clone(),
                )
            })
            .collect(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RsaPublicKey {
        key_from_pem(include_str!("../../../tests/data/webhooks/ses/test-sns-signing-cert.pem")).unwrap()
    }

    #[test]
    fn version_1_and_2_signatures_verify_and_the_tampered_one_does_not() {
        for (file, expect_ok) in [
            (&include_bytes!("../../../tests/data/webhooks/ses/sns-bounce-signed-v1.json")[..], true),
            (&include_bytes!("../../../tests/data/webhooks/ses/sns-bounce-signed-v2.json")[..], true),
            (&include_bytes!("../../../tests/data/webhooks/ses/sns-complaint-signed-v2-with-subject.json")[..], true),
            (
                &include_bytes!("../../../tests/data/webhooks/ses/sns-subscription-confirmation-signed-v1.json")[..],
                true,
            ),
            (&include_bytes!("../../../tests/data/webhooks/ses/sns-bounce-signed-v2-TAMPERED.json")[..], false),
        ] {
            let e = parse(file).unwrap();
            assert_eq!(verify(&e, &key()).is_ok(), expect_ok, "{} {}", e.kind, e.message_id);
        }
    }

    #[test]
    fn bounces_and_complaints_become_recipients() {
        let e = parse(include_bytes!("../../../tests/data/webhooks/ses/sns-bounce-signed-v1.json")).unwrap();
        let r = recipients(&e).unwrap();
        assert_eq!(
            (r[0].recipient.as_str(), r[0].kind, r[0].status.as_deref()),
            ("jane@example.com", BounceKind::Hard, Some("5.1.1"))
        );
        assert_eq!(r[0].original_message_id.as_deref(), Some("custom-message-ID"));
        let e = parse(include_bytes!("../../../tests/data/webhooks/ses/sns-complaint-signed-v2-with-subject.json"))
            .unwrap();
        assert_eq!(recipients(&e).unwrap()[0].kind, BounceKind::Complaint);
    }

    #[test]
    fn only_sns_certificate_urls_are_trusted() {
        assert!(trusted_cert_url("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem"));
        assert!(!trusted_cert_url("http://sns.us-east-1.amazonaws.com/x.pem"));
        assert!(!trusted_cert_url("https://sns.us-east-1.amazonaws.com.evil.example/x.pem"));
        assert!(!trusted_cert_url("https://example.com/sns.pem"));
        // Any port and extra labels were once accepted.
        assert!(!trusted_cert_url("https://sns.x.y.amazonaws.com:18099/x.pem"));
        assert!(!trusted_cert_url("https://sns.us-east-1.amazonaws.com:18099/x.pem"));
        assert!(!trusted_cert_url("https://sns.x.y.amazonaws.com/x.pem"));
        assert!(!trusted_cert_url("https://sns.evil.us-east-1.amazonaws.com/x.pem"));
        assert!(!trusted_cert_url("https://user@sns.us-east-1.amazonaws.com/x.pem"));
        assert!(!trusted_cert_url("https://sns.us-east-1.amazonaws.com/x.pem?x=1"));
        assert!(!trusted_cert_url("https://sns.useast1.amazonaws.com/x.pem"));
        assert!(trusted_cert_url("https://sns.us-east-1.amazonaws.com:443/SimpleNotificationService-abc.pem"));
        assert!(trusted_cert_url("https://sns.us-gov-west-1.amazonaws.com/SimpleNotificationService-abc.pem"));
        assert!(trusted_cert_url("https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem"));
        assert!(trusted_sns_url(
            "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn&Token=abc"
        ));
    }
}
