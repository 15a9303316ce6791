//! What a messaging provider's answer to one send means (Twilio, Kannel,
//! Slack), decided by pure functions in each transport's module so every
//! documented answer is tested without a network.
//!
//! One vocabulary for the three, rather than one enum per provider, because
//! the caller does the same few things whoever answered: record a provider
//! id, wait and retry, mark an address unusable, suppress an address whose
//! owner opted out at the provider, fail the one message, or report the
//! instance unhealthy. Rejected: returning [`super::Outcome`] directly. An
//! outcome cannot carry the provider's `Retry-After` or say "this
//! credential is dead" (a `/readyz` matter, not a row's), and the decisions
//! those lead to (a suppression, an invalid number) need the store, which a
//! transport does not hold.
//!
//! The provider's own words ride on every answer (Twilio's error code,
//! Slack's error word, Kannel's reply line): an operator reading "the number
//! is invalid" must be able to see that Twilio said 21211, not that Herald
//! guessed.
//!
//! The push providers judge their answers in their own vocabulary
//! ([`super::push::DeviceOutcome`]), but read them here too: [`read`],
//! [`retry_after`] and [`excerpt`] serve every transport, so none of them
//! reads a `Retry-After` or cuts a body differently.

use std::time::{Duration, SystemTime};

/// What became of one message handed to a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The provider took it. `provider_id` is its id for the message where
    /// it gives one (Twilio's `SM…` sid, Slack's `ts`); `detail` says what
    /// it answered, for the send log.
    Accepted { provider_id: Option<String>, detail: String },
    /// Worth trying again: a rate limit, the provider's own failure, or no
    /// answer at all. `after` is the provider's `Retry-After` when it sent
    /// one, to be honoured instead of the flat retry.
    Retry { after: Option<Duration>, reason: String },
    /// The address will never work (Twilio 21211/21614, Slack
    /// `user_not_found`): the channel's hard bounce. The caller marks the
    /// address invalid so the next message is not attempted.
    AddressInvalid { reason: String },
    /// The recipient told the provider to stop (Twilio 21610, a STOP the
    /// carrier or Twilio recorded): the caller suppresses the address for
    /// every non-transactional category, as an unsubscribe.
    OptedOut { reason: String },
    /// This message to this recipient was refused, and nothing is learnt
    /// about the address (a bad sender, an archived channel, a body the
    /// provider will not take).
    Failed { reason: String },
    /// The provider refused Herald's credential (Twilio 20003, Slack
    /// `invalid_auth`, Kannel's "Authorization failed"): every message
    /// through it fails until an operator acts, so it is an instance health
    /// matter (`/readyz`), and this message fails.
    CredentialRejected { reason: String },
}

impl Answer {
    /// Whether it was taken.
    pub fn accepted(&self) -> bool {
        matches!(self, Answer::Accepted { .. })
    }

    /// The words recorded with it.
    pub fn reason(&self) -> &str {
        match self {
            Answer::Accepted { detail, .. } => detail,
            Answer::Retry { reason, .. }
            | Answer::AddressInvalid { reason }
            | Answer::OptedOut { reason }
            | Answer::Failed { reason }
            | Answer::CredentialRejected { reason } => reason,
        }
    }

    /// No answer at all: the request did not reach the provider or its
    /// answer did not come back. Retried, because the provider may never
    /// have seen it. The URL is left out of the words: Kannel's carries the
    /// password in its query string.
    pub fn unreachable(provider: &str, error: reqwest::Error) -> Answer {
        let error = error.without_url();
        let mut words = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(s) = source {
            words.push_str(": ");
            words.push_str(&s.to_string());
            source = s.source();
        }
        let what = if error.is_timeout() { "did not answer in time" } else { "could not be reached" };
        Answer::Retry { after: None, reason: format!("{provider} {what}: {words}") }
    }
}

/// What a provider answered: the status, its `Retry-After` hint, the
/// header that carries its id for the message where it has one (Web
/// Push's `Location`, APNs' `apns-id`), and the body, or why it could not
/// be read.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub after: Option<Duration>,
    pub id: Option<String>,
    pub body: Result<String, reqwest::Error>,
}

/// Reads `response` into a [`Reply`], `id_header` naming the header to
/// keep. The body's error is kept rather than turned into an empty body
/// here: whether a status alone is enough is the caller's judgement.
pub async fn read(response: reqwest::Response, id_header: Option<&str>) -> Reply {
    let status = response.status().as_u16();
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let id = id_header.and_then(header);
    let after = retry_after(header("retry-after").as_deref(), SystemTime::now());
    Reply { status, after, id, body: response.text().await }
}

/// Sends `request` and reads the answer with `classify` (the status, the
/// `Retry-After` hint, the body); no answer at all, or a body that does
/// not arrive, is [`Answer::unreachable`]. One place for the exchange the
/// messaging transports make.
pub async fn exchange(
    provider: &str,
    request: reqwest::RequestBuilder,
    classify: impl FnOnce(u16, Option<Duration>, &str) -> Answer,
) -> Answer {
    let reply = match request.send().await {
        Ok(r) => read(r, None).await,
        Err(e) => return Answer::unreachable(provider, e),
    };
    match reply.body {
        Ok(body) => classify(reply.status, reply.after, &body),
        Err(e) => Answer::unreachable(provider, e),
    }
}

/// How much of a provider's body goes into a reason.
const EXCERPT: usize = 200;

/// A provider's body, without control characters and cut to what a send
/// log can hold.
pub fn excerpt(body: &str) -> String {
    let text: String = body.chars().filter(|c| !c.is_control()).take(EXCERPT).collect();
    text.trim().to_owned()
}

/// `Retry-After` as seconds (`120`) or an HTTP date (RFC 9110 §10.2.3),
/// the two forms the header has. Slack documents seconds and Twilio sends
/// them; a push service may send either. A date in the past means "now";
/// an unreadable value is no hint (the flat retry applies), rather than a
/// guess.
pub fn retry_after(value: Option<&str>, now: SystemTime) -> Option<Duration> {
    let value = value?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(retry_after(Some(" 120 "), now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(Some("Sun, 06 Nov 1994 08:50:37 GMT"), now), Some(Duration::from_secs(60)));
        assert_eq!(retry_after(Some("Sun, 06 Nov 1994 08:00:00 GMT"), now), Some(Duration::ZERO));
        assert_eq!(retry_after(Some("-1"), now), None);
        assert_eq!(retry_after(Some("soon"), now), None);
        assert_eq!(retry_after(None, now), None);
    }

    #[test]
    fn excerpts_drop_control_characters_and_stop_at_the_limit() {
        assert_eq!(excerpt(" a\nb\u{7} "), "ab");
        assert_eq!(excerpt(&"x".repeat(500)).len(), EXCERPT);
    }

    #[tokio::test]
    async fn an_unreachable_provider_is_retried_without_the_url() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let error = reqwest::Client::new()
            .get(format!("http://{closed}/cgi-bin/sendsms?password=hunter2"))
            .send()
            .await
            .unwrap_err();
        let answer = Answer::unreachable("Kannel", error);
        assert!(matches!(answer, Answer::Retry { after: None, .. }), "{answer:?}");
        assert!(answer.reason().starts_with("Kannel could not be reached"), "{answer:?}");
        assert!(!answer.reason().contains("hunter2"), "{answer:?}");
    }
}
