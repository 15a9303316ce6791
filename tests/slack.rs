//! The Slack transport against a local double of `chat.postMessage` that
//! checks what Slack checks (the bot token as a bearer token, a JSON body
//! with `channel` and `text`) and answers as Slack's documentation says:
//! HTTP 200 with `{"ok": true, "ts": …}` or `{"ok": false, "error": …}`,
//! and 429 with `Retry-After` when rate limited.
//!
//! The blocks the double receives are read back with Slack's own Block Kit
//! models (the `slack_sdk` PyPI package), which must parse, validate and
//! re-serialise them unchanged.

mod common;

use common::slack::{TOKEN, double};

use std::time::Duration;

use herald::delivery::channel::answer::Answer;
use herald::delivery::channel::slack::{BotToken, SlackChannelId, SlackClient, SlackTarget, SlackUserId, check_blocks};
use serde_json::json;
use url::Url;

fn client(api: &Url, token: &str) -> SlackClient {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    SlackClient::new(http, api.clone(), BotToken::parse(token).unwrap())
}

fn user(id: &str) -> SlackTarget {
    SlackTarget::User(SlackUserId::parse("slack_user_id", id).unwrap())
}

fn channel(id: &str) -> SlackTarget {
    SlackTarget::Channel(SlackChannelId::parse("slack.channel", id).unwrap())
}

/// Reads the blocks as JSON; prints "ok" when slack_sdk's models parse
/// and validate every block and serialise them back unchanged.
const BLOCK_KIT: &str = r#"
import json, sys
from slack_sdk.models.blocks import Block
blocks = json.load(sys.stdin)
parsed = Block.parse_all(blocks)
for b in parsed:
    b.validate_json()
again = [b.to_dict() for b in parsed]
print("ok" if again == blocks else "changed: " + json.dumps(again))
"#;

async fn a_direct_message_with_blocks_keeps_its_ts() {
    let (api, received) = double().await;
    let blocks = json!([
        {"type": "header", "text": {"type": "plain_text", "text": "Order shipped"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*Order 42* left the warehouse."}},
        {"type": "divider"},
    ]);
    check_blocks(&blocks).unwrap();
    let answer = client(&api, TOKEN).post(&user("U024BE7LH"), "Order 42 shipped", Some(&blocks)).await;
    assert_eq!(
        answer,
        Answer::Accepted {
            provider_id: Some("1503435956.000247".into()),
            detail: "Slack posted it in D0000DM01 as 1503435956.000247".into(),
        }
    );
    let sent = received.lock().unwrap().pop().unwrap();
    assert_eq!(sent, json!({"channel": "U024BE7LH", "text": "Order 42 shipped", "blocks": blocks}));
    let verdict = common::python::run("slack_sdk", "slack-sdk", BLOCK_KIT, &sent["blocks"].to_string());
    assert_eq!(verdict.trim(), "ok");

    // A channel post without blocks sends no "blocks" key at all.
    let answer = client(&api, TOKEN).post(&channel("C024BE91L"), "Deploy finished", None).await;
    assert!(answer.accepted(), "{answer:?}");
    let sent = received.lock().unwrap().pop().unwrap();
    assert_eq!(sent, json!({"channel": "C024BE91L", "text": "Deploy finished"}));
}

async fn slacks_error_words_become_the_documented_answers() {
    let (api, _received) = double().await;
    let c = client(&api, TOKEN);
    let gone = c.post(&user("U0000GONE"), "hi", None).await;
    assert_eq!(gone, Answer::AddressInvalid { reason: "Slack refused it: user_not_found".into() });
    for (id, word) in [("C0000NONE", "channel_not_found"), ("C0000OLD1", "is_archived")] {
        let answer = c.post(&channel(id), "hi", None).await;
        assert_eq!(answer, Answer::Failed { reason: format!("Slack refused it: {word}") });
    }
    let busy = c.post(&channel("C0000BUSY"), "hi", None).await;
    assert_eq!(
        busy,
        Answer::Retry { after: Some(Duration::from_secs(7)), reason: "Slack answered 429: rate limited".into() }
    );
    let revoked = client(&api, "xoxb-not-the-token").post(&user("U024BE7LH"), "hi", None).await;
    assert_eq!(revoked, Answer::CredentialRejected { reason: "Slack refused it: invalid_auth".into() });
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        a_direct_message_with_blocks_keeps_its_ts,
        slacks_error_words_become_the_documented_answers,
    ])
}
