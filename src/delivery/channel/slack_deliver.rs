//! The `slack` channel: one `chat.postMessage` per outbox row.
//!
//! Where it goes: the rule's `"slack": {"channel": "C…"}` when it has one
//! (every message of the rule in that conversation), else a direct message
//! to the recipient's `slack_user_id`. A user with neither ends
//! `suppressed`, "no Slack user id for this user", so "why not" answers it
//! like an opt-out; nothing was attempted.
//!
//! | Slack's answer ([`Answer`](super::answer::Answer)) | the row   | also                          |
//! |------------------------------|-----------|-------------------------------|
//! | `Accepted` (`ts`)            | `sent`, `ts` in the detail | `slack` healthy again |
//! | `Retry { after }` (429, `ratelimited`, 5xx) | retried after `Retry-After`, else the flat retry | |
//! | `AddressInvalid` (`user_not_found`) | `failed`, Slack's word in the detail | |
//! | `Failed` (`channel_not_found`, `is_archived`, `not_in_channel`, …) | `failed`, Slack's word | |
//! | `CredentialRejected` (`invalid_auth`, `token_revoked`, `account_inactive`, …) | `failed` | `/readyz` names `slack` |
//!
//! A Slack user id is not suppressed on `user_not_found`: there is no
//! address hash to suppress (Slack ids are not personal data Herald hashes),
//! and a user re-added to the workspace gets a new id that the host sends
//! with `PUT /v1/users/{id}` anyway.

use async_trait::async_trait;
use serde::Deserialize;

use super::slack::{SlackChannelId, SlackClient, SlackOptions, SlackTarget, SlackUserId};
use super::{Channel, Delivery, Outcome, answered};
use crate::delivery::health::ChannelHealth;

/// The reason a user without a Slack id (on a rule without a channel) is
/// not sent to.
pub const NO_SLACK_USER: &str = "no Slack user id for this user";

/// What `/readyz` names when Slack refuses the token.
pub const PROVIDER: &str = "slack";

/// The payload of a hand-enqueued Slack row (one no rule planned).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackPayload {
    /// `C…`/`G…`/`D…`; without it, the user's DM.
    #[serde(default)]
    pub channel: Option<String>,
    pub text: String,
    #[serde(default)]
    pub blocks: Option<serde_json::Value>,
}

pub struct SlackChannel {
    client: SlackClient,
    health: ChannelHealth,
}

impl SlackChannel {
    pub fn new(client: SlackClient, health: ChannelHealth) -> SlackChannel {
        SlackChannel { client, health }
    }
}

/// Where a row goes, and what it says.
struct Message {
    target: SlackTarget,
    text: String,
    blocks: Option<serde_json::Value>,
}

/// The rule's conversation, else the user's DM; `Ok(None)` when neither
/// is known.
fn message(d: &Delivery) -> Result<Option<Message>, String> {
    let user = || d.recipient.as_ref().and_then(|r| r.slack_user_id.as_deref());
    let dm = |id: &str| {
        SlackUserId::parse("slack_user_id", id)
            .map(SlackTarget::User)
            .map_err(|e| format!("the recipient's slack_user_id {:?} is not usable; expected {}", e.value, e.expected))
    };
    if let (Some(_), Some(m)) = (&d.rule, &d.message) {
        let options: SlackOptions = d.rule_options("slack");
        let target = match (options.target(), user()) {
            (Some(t), _) => t,
            (None, Some(id)) => dm(id)?,
            (None, None) => return Ok(None),
        };
        return Ok(Some(Message { target, text: m.text.clone(), blocks: m.blocks.clone() }));
    }
    let p: SlackPayload = serde_json::from_str(&d.row.payload).map_err(|e| {
        format!(
            "slack payload is not usable: {e}; expected a JSON object with \"text\" and optional \"channel\" \
             (C…, G… or D…) and \"blocks\""
        )
    })?;
    let target = match (p.channel.as_deref(), user()) {
        (Some(c), _) => SlackChannelId::parse("channel", c)
            .map(SlackTarget::Channel)
            .map_err(|e| format!("the payload's channel {:?} is not usable; expected {}", e.value, e.expected))?,
        (None, Some(id)) => dm(id)?,
        (None, None) => return Ok(None),
    };
    Ok(Some(Message { target, text: p.text, blocks: p.blocks }))
}

#[async_trait]
impl Channel for SlackChannel {
    async fn deliver(&self, d: &Delivery) -> Outcome {
        let m = match message(d) {
            Ok(Some(m)) => m,
            Ok(None) => return Outcome::Suppressed { detail: NO_SLACK_USER.into(), address_hash: None },
            Err(why) => return Outcome::terminal(why),
        };
        if m.text.trim().is_empty() {
            return Outcome::terminal("the message's text is empty");
        }
        let answer = self.client.post(&m.target, &m.text, m.blocks.as_ref()).await;
        // Slack learns nothing about an address Herald could mark: a gone
        // user (`user_not_found`) fails this message only.
        answered(answer, PROVIDER, &self.health, None).unwrap_or_else(|other| Outcome::terminal(other.reason()))
    }
}
