//! The `slack` channel end to end on each database: a rule, a trigger, the
//! serve instance's own worker and the `chat.postMessage` double
//! (`common::slack`): DMs with rendered blocks, a rule's channel, Slack's
//! error words, `Retry-After`, and a refused token on `/readyz`.

mod common;

use std::time::Duration;

use common::Backend;
use common::app::App;
use common::slack::{Received, TOKEN, double};
use serde_json::{Value, json};

async fn start(backend: Backend, token: &str) -> (App, Received) {
    let (api, received) = double().await;
    let token = token.to_owned();
    let app = App::start_on(backend, move |c| {
        c.worker.enabled = true;
        c.worker.poll = Duration::from_millis(50);
        c.slack.bot_token = Some(token);
        c.slack.api_url = api.to_string();
    })
    .await;
    (app, received)
}

async fn rule(app: &App, trigger_type: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"name": trigger_type, "trigger_type": trigger_type, "channel": "slack", "category": "ops",
                          "enabled": true,
                          "template": {"fallback_locale": "en", "locales": {"en": {
                              "text": "Order *{{ payload.order }}* shipped",
                              "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Order *{{ payload.order }}* \"shipped\""}}]}}}});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    app.post("/v1/rules", body).await
}

async fn dms_channels_and_slacks_answers(backend: Backend) {
    let (app, received) = start(backend, TOKEN).await;
    let (status, body) = rule(&app, "order.shipped", json!({})).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = rule(&app, "deploy.done", json!({"slack": {"channel": "C024BE91L"}})).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["slack"]["channel"], "C024BE91L");
    app.put_user("ada", json!({"slack_user_id": "U024BE7LH"})).await;
    app.put_user("gone", json!({"slack_user_id": "U0000GONE"})).await;
    app.put_user("nobody", json!({"email": "n@example.com"})).await;

    // A DM: the text and the blocks rendered, the payload's quote kept inside the JSON string.
    trigger(&app, "order.shipped", "ada").await;
    let m = app.settled("ada", 1).await;
    assert_eq!(m["status"], "sent", "{m}");
    assert_eq!(m["history"][0]["provider_id"], "1503435956.000247", "Slack's ts: {m}");
    let sent = received.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        sent,
        json!({"channel": "U024BE7LH", "text": "Order *42\"* shipped",
               "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Order *42\"* \"shipped\""}}]})
    );

    // The rule's channel wins over the DM, and needs no Slack id.
    trigger(&app, "deploy.done", "nobody").await;
    assert_eq!(app.settled("nobody", 1).await["status"], "sent");
    assert_eq!(received.lock().unwrap().last().unwrap()["channel"], "C024BE91L");

    // Without a Slack id (and no rule channel): suppressed, not attempted.
    let calls = received.lock().unwrap().len();
    trigger(&app, "order.shipped", "nobody").await;
    let m = app.settled("nobody", 2).await;
    assert_eq!(
        (m["status"].as_str(), m["detail"].as_str()),
        (Some("suppressed"), Some("no Slack user id for this user"))
    );
    assert_eq!(received.lock().unwrap().len(), calls);

    // user_not_found: failed with Slack's word.
    trigger(&app, "order.shipped", "gone").await;
    let m = app.settled("gone", 1).await;
    assert_eq!(m["status"], "failed", "{m}");
    assert!(m["detail"].as_str().unwrap().contains("user_not_found"), "{m}");

    // ratelimited with Retry-After: 7 is due seven seconds later.
    let (status, body) = rule(&app, "busy.thing", json!({"slack": {"channel": "C0000BUSY"}})).await;
    assert_eq!(status, 201, "{body}");
    let before = chrono::Utc::now();
    trigger(&app, "busy.thing", "ada").await;
    let m = app.settled("ada", 2).await;
    App::assert_retried_after(&m, before, 6_000..=12_000);
    app.stop().await;

    // A refused token: failed, and /readyz names slack.
    let (app, _received) = start(backend, "xoxb-not-the-token").await;
    let (status, body) = rule(&app, "order.shipped", json!({})).await;
    assert_eq!(status, 201, "{body}");
    app.put_user("ada", json!({"slack_user_id": "U024BE7LH"})).await;
    trigger(&app, "order.shipped", "ada").await;
    assert_eq!(app.settled("ada", 1).await["status"], "failed");
    let (status, body) = app.readyz().await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("slack") && body.contains("invalid_auth"), "{body}");
    app.stop().await;
}

async fn rules_check_the_slack_shape_and_options(backend: Backend) {
    let (app, _received) = start(backend, TOKEN).await;
    let refused = |body: &Value| -> Vec<String> {
        body["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect()
    };
    let (status, body) = rule(&app, "a.b", json!({"slack": {"channel": "#general"}})).await;
    assert_eq!((status, refused(&body)), (422, vec!["slack.channel".to_owned()]), "{body}");
    let too_many: Vec<Value> = (0..51).map(|_| json!({"type": "divider"})).collect();
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": "x", "trigger_type": "a.b", "channel": "slack", "category": "ops",
                   "template": {"fallback_locale": "en", "locales": {"en": {"text": "t", "blocks": too_many, "subject": "s"}}}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let fields = refused(&body);
    assert!(fields.contains(&"template.locales.en.blocks".to_owned()), "{body}");
    assert!(fields.contains(&"template.locales.en.subject".to_owned()), "{body}");
    // `slack` options on another channel are refused.
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": "x", "trigger_type": "a.b", "channel": "email", "category": "ops", "slack": {"channel": "C1AB"},
                   "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(refused(&body).contains(&"slack".to_owned()), "{body}");
    app.stop().await;
}

/// An unread inbox message escalates to Slack as to any channel: a DM to
/// the user's Slack id, the follow-up linked to its inbox message.
async fn an_unread_inbox_message_escalates_to_slack(backend: Backend) {
    let (app, received) = start(backend, TOKEN).await;
    let rule = json!({"name": "invoice", "trigger_type": "invoice.due", "channel": "inbox", "category": "billing",
        "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Invoice {{ payload.order }}", "text": "t"}}},
        "escalate": {"after": 1, "unless": "read", "channel": "slack",
            "template": {"fallback_locale": "en", "locales": {"en": {"text": "Invoice {{ payload.order }} is unread"}}}}});
    let (status, body) = app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{body}");
    app.put_user("ada", json!({"slack_user_id": "U024BE7LH"})).await;
    trigger(&app, "invoice.due", "ada").await;
    let follow_up = app.settled("ada", 2).await;
    assert_eq!((follow_up["channel"].as_str(), follow_up["status"].as_str()), (Some("slack"), Some("sent")));
    assert!(follow_up["follow_up_of"].is_string(), "{follow_up}");
    let sent = received.lock().unwrap().last().cloned().unwrap();
    assert_eq!(sent, json!({"channel": "U024BE7LH", "text": "Invoice 42\" is unread"}));
    app.stop().await;
}

async fn trigger(app: &App, trigger_type: &str, user_id: &str) {
    app.trigger(json!({"type": trigger_type, "user_id": user_id, "payload": {"order": "42\""}})).await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(per_backend_tests![
        dms_channels_and_slacks_answers,
        rules_check_the_slack_shape_and_options,
        an_unread_inbox_message_escalates_to_slack
    ])
}
