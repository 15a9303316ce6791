//! Slack: posting one message with `chat.postMessage`, what Slack's answers
//! mean, and the identifiers and Block Kit blocks a rule or recipient gives.
//!
//! A message to a user with a `slack_user_id` is a direct message: the
//! user's id (`U…`/`W…`) is the `channel`, and Slack opens the DM itself.
//! A rule may instead name a channel (`C…`, or `G…` for an older private
//! one). The request is `POST {slack.api_url}/chat.postMessage` with the
//! bot token as a bearer token and a JSON body `{channel, text, blocks?}`.
//!
//! Slack answers HTTP 200 for most failures, with `{"ok": false, "error":
//! "<word>"}`; only the rate limit is an HTTP status (429, `Retry-After` in
//! seconds):
//!
//! | Slack's answer                                      | [`Answer`]            |
//! |-----------------------------------------------------|-----------------------|
//! | `ok: true`                                          | `Accepted`, id = `ts` |
//! | 429, `ratelimited`                                  | `Retry`, after `Retry-After` |
//! | 5xx, `internal_error`, `fatal_error`, `service_unavailable`, `request_timeout` | `Retry` |
//! | `user_not_found`                                    | `AddressInvalid`      |
//! | `invalid_auth`, `token_revoked`, `token_expired`, `account_inactive`, `not_authed`, `missing_scope`, `not_allowed_token_type`, `team_access_not_granted` | `CredentialRejected` |
//! | `channel_not_found`, `is_archived`, `not_in_channel` and any other word | `Failed`, the word in the reason |
//!
//! `account_inactive` is the token's: Slack documents it as "the token is
//! for a deleted user or workspace", so it fails every message, not one
//! recipient's. `channel_not_found` is not taken as proof that a user is
//! gone: Slack also says it for a channel the bot cannot see, and an
//! address marked invalid on that guess would lose a live user's messages.
//!
//! Rejected: the `slack-morphism` crate, a full Web API and Socket Mode
//! client, for one method whose request and answer are three fields each.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::delivery::channel::answer::{Answer, excerpt, exchange};
use crate::domain::InvalidValue;

/// Checks the shape Slack's ids share: a prefix letter, then upper-case
/// letters and digits. Slack says not to rely on their length; the bound
/// only keeps a paste accident out of the database.
fn slack_id(field: &'static str, s: &str, prefixes: &[u8], expected: &'static str) -> Result<String, InvalidValue> {
    let b = s.as_bytes();
    let ok = (3..=32).contains(&b.len())
        && prefixes.contains(&b[0])
        && b[1..].iter().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if ok { Ok(s.to_owned()) } else { Err(InvalidValue::new(field, s, expected)) }
}

/// A Slack id type: a checked string whose first letter says what it names.
macro_rules! slack_id_type {
    ($(#[$doc:meta])* $name:ident, $prefixes:literal, $expected:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            pub const EXPECTED: &'static str = $expected;

            pub fn parse(field: &'static str, s: &str) -> Result<$name, InvalidValue> {
                slack_id(field, s, $prefixes, Self::EXPECTED).map($name)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}

slack_id_type!(
    /// A Slack user id: `U…`, or `W…` for an Enterprise Grid user.
    SlackUserId,
    b"UW",
    "a Slack user id: U or W then capital letters and digits (for example \"U024BE7LH\")"
);

slack_id_type!(
    /// A Slack conversation id a rule posts to: `C…` (a channel), `G…` (an
    /// older private channel) or `D…` (an existing direct-message or group
    /// DM conversation, say with an on-call team).
    SlackChannelId,
    b"CGD",
    "a Slack channel id: C, G or D then capital letters and digits (for example \"C024BE91L\")"
);

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackTarget {
    /// A direct message to this user.
    User(SlackUserId),
    /// A post in this channel.
    Channel(SlackChannelId),
}

impl SlackTarget {
    /// The `channel` field of `chat.postMessage`.
    pub fn channel(&self) -> &str {
        match self {
            SlackTarget::User(u) => u.as_str(),
            SlackTarget::Channel(c) => c.as_str(),
        }
    }
}

/// A Slack rule's `"slack": {"channel": "C…"}`: post every message of the
/// rule in this conversation instead of the user's DM (an alerts channel).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackOptions {
    /// `C…`, `G…` or `D…`: where the rule's messages are posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

impl SlackOptions {
    /// What is wrong with the options, naming the field.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let channel = self.channel.as_deref()?;
        SlackChannelId::parse("slack.channel", channel)
            .err()
            .map(|e| ("slack.channel", format!("{:?} is not accepted; expected {}", e.value, e.expected)))
    }

    /// The conversation, when one is set and valid.
    pub fn target(&self) -> Option<SlackTarget> {
        let channel = self.channel.as_deref()?;
        SlackChannelId::parse("slack.channel", channel).ok().map(SlackTarget::Channel)
    }
}

/// `slack.bot_token`: a bot token, `xoxb-…`. A user token (`xoxp-`) would
/// post as a person, which is not what a notification should do.
#[derive(Clone, PartialEq, Eq)]
pub struct BotToken(String);

impl BotToken {
    pub fn parse(s: &str) -> Result<BotToken, InvalidValue> {
        let s = s.trim();
        if s.len() > 5 && s.starts_with("xoxb-") && !s.contains(char::is_whitespace) {
            Ok(BotToken(s.to_owned()))
        } else {
            // The value is a secret: the error shows its shape, not it.
            Err(InvalidValue::new("slack.bot_token", "(hidden)", "a Slack bot token starting with \"xoxb-\""))
        }
    }
}

/// Never prints the token.
impl fmt::Debug for BotToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BotToken(xoxb-…)")
    }
}

/// Slack's limit on blocks in one message.
pub const MAX_BLOCKS: usize = 50;

/// Why a rendered `blocks` template is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlocksProblem {
    #[error("blocks must be a JSON array of block objects")]
    NotAnArray,
    #[error("blocks has {0} blocks; Slack takes at most {MAX_BLOCKS}")]
    TooMany(usize),
    #[error("block {0} is not an object with a \"type\"")]
    Untyped(usize),
}

/// Whether `blocks` is something Slack can take: an array of at most 50
/// objects, each with a string `type`. The blocks' own fields are Slack's
/// to judge (an `invalid_blocks` answer says which); this catches what a
/// template author gets wrong before any message is sent.
pub fn check_blocks(blocks: &serde_json::Value) -> Result<(), BlocksProblem> {
    let list = blocks.as_array().ok_or(BlocksProblem::NotAnArray)?;
    if list.len() > MAX_BLOCKS {
        return Err(BlocksProblem::TooMany(list.len()));
    }
    match list.iter().position(|b| b.get("type").and_then(|t| t.as_str()).is_none_or(str::is_empty)) {
        Some(i) => Err(BlocksProblem::Untyped(i)),
        None => Ok(()),
    }
}

/// The body of `chat.postMessage`.
#[derive(Debug, Serialize)]
struct PostMessage<'a> {
    channel: &'a str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    blocks: Option<&'a serde_json::Value>,
}

/// Posts messages as one bot.
#[derive(Debug, Clone)]
pub struct SlackClient {
    http: reqwest::Client,
    /// `https://slack.com/api`, or a local double's URL in tests.
    api_url: Url,
    token: BotToken,
}

impl SlackClient {
    /// `http` should have a timeout; it is shared with other transports.
    pub fn new(http: reqwest::Client, api_url: Url, token: BotToken) -> SlackClient {
        SlackClient { http, api_url, token }
    }

    /// `{api_url}/chat.postMessage`
    pub fn post_message_url(&self) -> Url {
        let mut url = self.api_url.clone();
        url.path_segments_mut().expect("an http(s) URL has path segments").pop_if_empty().push("chat.postMessage");
        url
    }

    /// Posts `text` (mrkdwn; also the notification's fallback when there
    /// are blocks) to `target` and says what Slack made of it.
    pub async fn post(&self, target: &SlackTarget, text: &str, blocks: Option<&serde_json::Value>) -> Answer {
        let body = PostMessage { channel: target.channel(), text, blocks };
        let request = self.http.post(self.post_message_url()).bearer_auth(&self.token.0).json(&body);
        exchange("Slack", request, classify).await
    }
}

/// The parts of Slack's answer Herald reads.
#[derive(Debug, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    ts: Option<String>,
}

const RETRY: [&str; 5] = ["ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"];
const CREDENTIAL: [&str; 8] = [
    "invalid_auth",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "not_authed",
    "missing_scope",
    "not_allowed_token_type",
    "team_access_not_granted",
];

/// What an answer to `chat.postMessage` means. Pure: the status, the
/// `Retry-After` hint and the body are all it needs.
pub fn classify(status: u16, after: Option<Duration>, body: &str) -> Answer {
    let reply: Option<Reply> = serde_json::from_str(body).ok();
    if status == 429 {
        return Answer::Retry { after, reason: "Slack answered 429: rate limited".into() };
    }
    let Some(reply) = reply else {
        let words = excerpt(body);
        let reason = format!(
            "Slack answered {status} without its JSON{}",
            if words.is_empty() { String::new() } else { format!(": {words}") }
        );
        return if status >= 500 { Answer::Retry { after, reason } } else { Answer::Failed { reason } };
    };
    if reply.ok && (200..300).contains(&status) {
        let ts = reply.ts;
        let detail = match (&reply.channel, &ts) {
            (Some(c), Some(t)) => format!("Slack posted it in {c} as {t}"),
            _ => "Slack posted it".into(),
        };
        return Answer::Accepted { provider_id: ts, detail };
    }
    let word = reply.error.as_deref().map(excerpt).unwrap_or_default();
    let reason = if word.is_empty() {
        format!("Slack answered {status} with no error word")
    } else {
        format!("Slack refused it: {word}")
    };
    if RETRY.contains(&word.as_str()) || status >= 500 {
        Answer::Retry { after, reason }
    } else if CREDENTIAL.contains(&word.as_str()) {
        Answer::CredentialRejected { reason }
    } else if word == "user_not_found" {
        Answer::AddressInvalid { reason }
    } else {
        Answer::Failed { reason }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn user_ids_are_u_or_w_then_capitals_and_digits() {
        for ok in ["U024BE7LH", "W012A3CDE", "U0123456789AB"] {
            assert_eq!(SlackUserId::parse("slack_user_id", ok).unwrap().as_str(), ok);
        }
        for bad in
            ["", "U", "u024be7lh", "C024BE91L", "U024 BE7LH", "@alice", "U024BE7LH\n", &format!("U{}", "1".repeat(40))]
        {
            let e = SlackUserId::parse("slack_user_id", bad).expect_err(bad);
            assert_eq!(e.field, "slack_user_id");
        }
        assert!(SlackChannelId::parse("slack.channel", "C024BE91L").is_ok());
        assert!(SlackChannelId::parse("slack.channel", "G024BE91L").is_ok());
        assert!(SlackChannelId::parse("slack.channel", "U024BE7LH").is_err());
    }

    #[test]
    fn bot_tokens_are_xoxb_and_never_shown() {
        let t = BotToken::parse("xoxb-1-2-secret").unwrap();
        assert!(!format!("{t:?}").contains("secret"));
        let e = BotToken::parse("xoxp-user-secret").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn blocks_must_be_an_array_of_typed_objects_at_most_fifty() {
        let section = json!({"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}});
        assert_eq!(check_blocks(&json!([section.clone()])), Ok(()));
        assert_eq!(check_blocks(&json!(vec![section.clone(); 50])), Ok(()));
        assert_eq!(check_blocks(&json!(vec![section.clone(); 51])), Err(BlocksProblem::TooMany(51)));
        assert_eq!(check_blocks(&json!({"type": "section"})), Err(BlocksProblem::NotAnArray));
        assert_eq!(check_blocks(&json!([section, {"text": "no type"}])), Err(BlocksProblem::Untyped(1)));
        assert_eq!(check_blocks(&json!(["section"])), Err(BlocksProblem::Untyped(0)));
        assert_eq!(check_blocks(&json!([{"type": ""}])), Err(BlocksProblem::Untyped(0)));
    }

    #[test]
    fn documented_answers_are_classified() {
        let refused = |word: &str| classify(200, None, &format!(r#"{{"ok": false, "error": "{word}"}}"#));
        assert_eq!(
            classify(429, Some(Duration::from_secs(30)), r#"{"ok": false, "error": "ratelimited"}"#),
            Answer::Retry { after: Some(Duration::from_secs(30)), reason: "Slack answered 429: rate limited".into() }
        );
        assert!(matches!(refused("ratelimited"), Answer::Retry { .. }));
        assert!(matches!(refused("internal_error"), Answer::Retry { .. }));
        for word in ["invalid_auth", "token_revoked", "account_inactive", "missing_scope"] {
            assert!(matches!(refused(word), Answer::CredentialRejected { .. }), "{word}");
        }
        assert!(matches!(refused("user_not_found"), Answer::AddressInvalid { .. }));
        for word in ["channel_not_found", "is_archived", "not_in_channel", "msg_too_long"] {
            assert_eq!(refused(word), Answer::Failed { reason: format!("Slack refused it: {word}") });
        }
        assert!(matches!(classify(502, None, "<html>bad gateway</html>"), Answer::Retry { .. }));
        assert!(matches!(classify(200, None, "not json"), Answer::Failed { .. }));
    }

    #[test]
    fn an_accepted_post_keeps_its_ts() {
        let body = r#"{"ok": true, "channel": "D024BE91L", "ts": "1503435956.000247", "message": {"text": "hi"}}"#;
        assert_eq!(
            classify(200, None, body),
            Answer::Accepted {
                provider_id: Some("1503435956.000247".into()),
                detail: "Slack posted it in D024BE91L as 1503435956.000247".into(),
            }
        );
    }

    #[test]
    fn the_method_url_follows_the_configured_api_url() {
        let client = |base: &str| {
            SlackClient::new(reqwest::Client::new(), Url::parse(base).unwrap(), BotToken::parse("xoxb-1").unwrap())
        };
        assert_eq!(
            client("https://slack.com/api").post_message_url().as_str(),
            "https://slack.com/api/chat.postMessage"
        );
        assert_eq!(
            client("http://127.0.0.1:9/api/").post_message_url().as_str(),
            "http://127.0.0.1:9/api/chat.postMessage"
        );
    }
}
