//! What each provider's answer means for one device, decided in pure
//! functions over the status, the `Retry-After` header and the body, so
//! every documented answer is tested without a network.
//!
//! The provider's own words ride on every outcome: an operator reading "the
//! device was removed" must be able to see that Apple said `Unregistered`,
//! not that Herald guessed. The body's excerpt and the `Retry-After` hint
//! are read as the messaging transports read them
//! ([`crate::delivery::channel::answer`]).

use std::time::Duration;

use serde::Deserialize;

use crate::delivery::channel::answer::excerpt;

/// What became of one notification to one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceOutcome {
    /// The provider took it. `message_id` is its id for the message where
    /// it gives one (Web Push `Location`, FCM `name`, APNs `apns-id`).
    Accepted { message_id: Option<String> },
    /// The subscription or token will never work again (Web Push 404/410,
    /// FCM `UNREGISTERED` or an invalid token, APNs 410, `BadDeviceToken`,
    /// `Unregistered`): the device is to be removed, like a hard bounce.
    DeviceGone { reason: String },
    /// Worth trying again: a rate limit or the provider's own failure.
    /// `after` is the provider's `Retry-After`, when it sent one.
    Retry { after: Option<Duration>, reason: String },
    /// The message is over the provider's size limit; the reason names it.
    TooLarge { reason: String },
    /// The provider refused Herald's credential (a wrong VAPID key, an
    /// expired or revoked service account or `.p8` key): every device of
    /// that provider fails until an operator acts, so it is an instance
    /// health matter, not a device's.
    CredentialRejected { reason: String },
    /// Not attempted: the endpoint points at a loopback, private or
    /// link-local address. Its own case because "we declined to send" and
    /// "we sent and were refused" send an operator to different places.
    Refused { reason: String },
    /// Refused for any other reason.
    Failed { reason: String },
}

/// "`provider` answered `status`", with an excerpt of `words` when there
/// are any.
fn said(provider: &str, status: u16, words: &str) -> String {
    let words = excerpt(words);
    if words.is_empty() {
        format!("{provider} answered {status}")
    } else {
        format!("{provider} answered {status}: {words}")
    }
}

/// Retry for 429 and 5xx, with the hint; `None` for other statuses.
fn retry(status: u16, after: Option<Duration>, reason: &str) -> Option<DeviceOutcome> {
    (status == 429 || (500..600).contains(&status)).then(|| DeviceOutcome::Retry { after, reason: reason.to_owned() })
}

/// A Web Push service's answer (RFC 8030 §5, RFC 8292 §4.1).
pub fn web_push(status: u16, location: Option<&str>, after: Option<Duration>, body: &str) -> DeviceOutcome {
    let reason = said("the push service", status, body);
    if (200..300).contains(&status) {
        return DeviceOutcome::Accepted { message_id: location.map(str::to_owned) };
    }
    if let Some(r) = retry(status, after, &reason) {
        return r;
    }
    match status {
        404 | 410 => DeviceOutcome::DeviceGone { reason },
        413 => DeviceOutcome::TooLarge { reason },
        401 | 403 => DeviceOutcome::CredentialRejected { reason },
        _ => DeviceOutcome::Failed { reason },
    }
}

/// FCM's error body (`google.rpc.Status`, with an `FcmError` detail).
#[derive(Debug, Default, Deserialize)]
struct FcmErrorBody {
    #[serde(default)]
    error: FcmStatus,
}

#[derive(Debug, Default, Deserialize)]
struct FcmStatus {
    #[serde(default)]
    status: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    details: Vec<FcmDetail>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FcmDetail {
    #[serde(default)]
    error_code: Option<String>,
    #[serde(default)]
    field_violations: Vec<FieldViolation>,
}

#[derive(Debug, Default, Deserialize)]
struct FieldViolation {
    #[serde(default)]
    field: String,
}

/// An FCM HTTP v1 answer to `messages:send`. `UNREGISTERED` (404) means
/// the app was uninstalled or the token expired; `INVALID_ARGUMENT` (400)
/// removes the device only when it is the token that is invalid (a field
/// violation on `message.token`, or the message says so), since the same
/// code also reports a malformed message, which no device is to blame for.
/// `SENDER_ID_MISMATCH` (403) is read as a credential problem, not a dead
/// device: when every token says it, the service account belongs to the
/// wrong project, and removing every device would make that mistake
/// permanent.
pub fn fcm(status: u16, name: Option<&str>, after: Option<Duration>, body: &str) -> DeviceOutcome {
    if status == 200 {
        return DeviceOutcome::Accepted { message_id: name.map(str::to_owned) };
    }
    let parsed: FcmErrorBody = serde_json::from_str(body).unwrap_or_default();
    let code = parsed.error.details.iter().find_map(|d| d.error_code.clone()).unwrap_or_default();
    let words = match (code.as_str(), parsed.error.message.as_str()) {
        ("", "") => excerpt(body),
        ("", m) => format!("{} {}", parsed.error.status, excerpt(m)),
        (c, m) => format!("{c} {}", excerpt(m)),
    };
    let reason = said("FCM", status, &words);
    let on_token = parsed.error.details.iter().flat_map(|d| &d.field_violations).any(|v| v.field == "message.token")
        || parsed.error.message.to_ascii_lowercase().contains("registration token");
    match (code.as_str(), status) {
        ("UNREGISTERED", _) => DeviceOutcome::DeviceGone { reason },
        ("INVALID_ARGUMENT", _) | ("", 400) if on_token => DeviceOutcome::DeviceGone { reason },
        ("QUOTA_EXCEEDED" | "UNAVAILABLE" | "INTERNAL", _) => DeviceOutcome::Retry { after, reason },
        ("THIRD_PARTY_AUTH_ERROR" | "SENDER_ID_MISMATCH", _) | (_, 401 | 403) => {
            DeviceOutcome::CredentialRejected { reason }
        }
        (_, 413) => DeviceOutcome::TooLarge { reason },
        _ if parsed.error.message.contains("too big") => DeviceOutcome::TooLarge { reason },
        _ => retry(status, after, &reason).unwrap_or(DeviceOutcome::Failed { reason }),
    }
}

#[derive(Debug, Default, Deserialize)]
struct ApnsErrorBody {
    #[serde(default)]
    reason: String,
}

/// An APNs answer (Apple's "Handling notification responses from APNs").
/// 410 and `BadDeviceToken` remove the device. `DeviceTokenNotForTopic`
/// does not: it is what every token says when `apns-topic` is set to the
/// wrong bundle id, and removing devices would make an operator's typo
/// permanent. `ExpiredProviderToken` and `InvalidProviderToken` (403) are
/// credential problems.
pub fn apns(status: u16, apns_id: Option<&str>, after: Option<Duration>, body: &str) -> DeviceOutcome {
    if status == 200 {
        return DeviceOutcome::Accepted { message_id: apns_id.map(str::to_owned) };
    }
    let parsed: ApnsErrorBody = serde_json::from_str(body).unwrap_or_default();
    let reason = said("APNs", status, if parsed.reason.is_empty() { body } else { &parsed.reason });
    match (parsed.reason.as_str(), status) {
        (_, 410) | ("BadDeviceToken" | "Unregistered", _) => DeviceOutcome::DeviceGone { reason },
        ("PayloadTooLarge", _) | (_, 413) => DeviceOutcome::TooLarge { reason },
        (_, 403) => DeviceOutcome::CredentialRejected { reason },
        _ => retry(status, after, &reason).unwrap_or(DeviceOutcome::Failed { reason }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone(o: &DeviceOutcome) -> bool {
        matches!(o, DeviceOutcome::DeviceGone { .. })
    }

    #[test]
    fn web_push_answers() {
        let a = web_push(201, Some("https://push.example.net/m/1"), None, "");
        assert_eq!(a, DeviceOutcome::Accepted { message_id: Some("https://push.example.net/m/1".into()) });
        assert!(gone(&web_push(410, None, None, "push subscription has unsubscribed or expired")));
        assert!(gone(&web_push(404, None, None, "")));
        let r = web_push(429, None, Some(Duration::from_secs(1)), "slow down");
        assert_eq!(
            r,
            DeviceOutcome::Retry {
                after: Some(Duration::from_secs(1)),
                reason: "the push service answered 429: slow down".into()
            }
        );
        assert!(matches!(web_push(503, None, None, ""), DeviceOutcome::Retry { after: None, .. }));
        assert!(matches!(web_push(413, None, None, ""), DeviceOutcome::TooLarge { .. }));
        assert!(
            matches!(web_push(403, None, None, "bad jwt"), DeviceOutcome::CredentialRejected { reason } if reason.contains("bad jwt"))
        );
        assert!(matches!(web_push(400, None, None, ""), DeviceOutcome::Failed { .. }));
    }

    fn fcm_error(code: u16, status: &str, message: &str, error_code: &str) -> String {
        serde_json::json!({"error": {"code": code, "message": message, "status": status, "details": [
            {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": error_code}]}})
        .to_string()
    }

    #[test]
    fn fcm_answers() {
        assert_eq!(
            fcm(200, Some("projects/p/messages/1"), None, "{}"),
            DeviceOutcome::Accepted { message_id: Some("projects/p/messages/1".into()) }
        );
        let unregistered =
            fcm(404, None, None, &fcm_error(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED"));
        assert!(
            matches!(&unregistered, DeviceOutcome::DeviceGone { reason } if reason == "FCM answered 404: UNREGISTERED Requested entity was not found."),
            "{unregistered:?}"
        );
        let bad_token = fcm(
            400,
            None,
            None,
            &fcm_error(
                400,
                "INVALID_ARGUMENT",
                "The registration token is not a valid FCM registration token",
                "INVALID_ARGUMENT",
            ),
        );
        assert!(gone(&bad_token), "{bad_token:?}");
        let bad_message = fcm(
            400,
            None,
            None,
            &fcm_error(400, "INVALID_ARGUMENT", "Invalid value at 'message.android.ttl'", "INVALID_ARGUMENT"),
        );
        assert!(matches!(bad_message, DeviceOutcome::Failed { .. }), "{bad_message:?}");
        let quota = fcm(
            429,
            None,
            Some(Duration::from_secs(30)),
            &fcm_error(429, "RESOURCE_EXHAUSTED", "quota", "QUOTA_EXCEEDED"),
        );
        assert!(matches!(quota, DeviceOutcome::Retry { after: Some(d), .. } if d == Duration::from_secs(30)));
        assert!(matches!(fcm(503, None, None, "<html>"), DeviceOutcome::Retry { .. }));
        let mismatch =
            fcm(403, None, None, &fcm_error(403, "PERMISSION_DENIED", "SenderId mismatch", "SENDER_ID_MISMATCH"));
        assert!(matches!(mismatch, DeviceOutcome::CredentialRejected { .. }));
        assert!(matches!(fcm(401, None, None, "{}"), DeviceOutcome::CredentialRejected { .. }));
    }

    #[test]
    fn apns_answers() {
        assert_eq!(apns(200, Some("ID-1"), None, ""), DeviceOutcome::Accepted { message_id: Some("ID-1".into()) });
        assert!(gone(&apns(410, None, None, r#"{"reason":"Unregistered","timestamp":1700000000000}"#)));
        let bad = apns(400, None, None, r#"{"reason":"BadDeviceToken"}"#);
        assert_eq!(bad, DeviceOutcome::DeviceGone { reason: "APNs answered 400: BadDeviceToken".into() });
        assert!(matches!(
            apns(400, None, None, r#"{"reason":"DeviceTokenNotForTopic"}"#),
            DeviceOutcome::Failed { .. }
        ));
        assert!(matches!(apns(413, None, None, r#"{"reason":"PayloadTooLarge"}"#), DeviceOutcome::TooLarge { .. }));
        assert!(matches!(
            apns(403, None, None, r#"{"reason":"ExpiredProviderToken"}"#),
            DeviceOutcome::CredentialRejected { .. }
        ));
        assert!(matches!(apns(429, None, None, r#"{"reason":"TooManyRequests"}"#), DeviceOutcome::Retry { .. }));
        assert!(matches!(apns(503, None, None, r#"{"reason":"ServiceUnavailable"}"#), DeviceOutcome::Retry { .. }));
    }
}
