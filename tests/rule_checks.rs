//! What a rule is refused for at save, end to end through a
//! running server: a trigger type the trigger API would refuse, a
//! follow-up on webhook (which has no URL to go to), and the escalation
//! described as what the code does (`unless: read` is "unless read").
//! Each test here failed before its fix. The operator screen's editor
//! refuses the same values (`tests/ui.rs`).

mod common;

use common::Backend;
use common::app::App;
use herald::planning::rule::RuleInput;
use herald::store::RuleStore;
use reqwest::Method;
use serde_json::{Value, json};

fn template() -> Value {
    json!({"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}})
}

fn inbox_rule(trigger_type: &str, escalate: Option<Value>) -> Value {
    let mut rule = json!({
        "name": "r", "trigger_type": trigger_type, "channel": "inbox", "category": "news", "template": template(),
    });
    if let Some(e) = escalate {
        rule["escalate"] = e;
    }
    rule
}

fn escalate(channel: &str, unless: &str) -> Value {
    json!({"after": 600, "unless": unless, "channel": channel, "template": template()})
}

/// The messages of a 422's errors on `field`.
fn errors_on(problem: &Value, field: &str) -> Vec<String> {
    problem["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["field"] == field)
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A rule's `trigger_type` is checked as `POST /v1/triggers` checks `type`:
/// "order shipped" was saved and enabled, and no trigger could ever match it.
async fn a_trigger_type_the_trigger_api_refuses_is_refused_for_a_rule() {
    let app = App::start_on(Backend::Sqlite, |_| {}).await;
    for bad in ["order shipped", "order#shipped", "ordre.expédié", &"x".repeat(129)] {
        let (status, p) = app.post("/v1/rules", inbox_rule(bad, None)).await;
        let said = errors_on(&p, "trigger_type");
        assert_eq!((status, said.len()), (422, 1), "{bad:?}: {p}");
        assert!(said[0].contains("letters, digits and . _ - : /"), "{bad:?}: {said:?}");
        let (status, t) = app.post("/v1/triggers", json!({"type": bad, "user_id": "u1"})).await;
        assert_eq!(status, 422, "{bad:?}: {t}");
        let trigger_says = errors_on(&t, "type");
        assert_eq!(trigger_says[0].replacen("type", "trigger_type", 1), said[0], "one definition, one message");
    }
    let (status, p) = app.post("/v1/rules", inbox_rule("order.shipped:v2/eu-west_1", None)).await;
    assert_eq!(status, 201, "{p}");
    // PATCH too.
    let id = p["id"].as_str().unwrap().to_owned();
    let (status, p) = app.call(Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"trigger_type": "a b"}))).await;
    assert_eq!((status, errors_on(&p, "trigger_type").len()), (422, 1), "{p}");
    app.stop().await;
}

/// An inbox rule escalating to webhook was saved and enabled, and then
/// every follow-up failed "no webhook URL": the URL belongs to a rule
/// whose own channel is webhook. Refused when saved, naming the field.
async fn an_escalation_to_webhook_is_refused_when_saved() {
    let app = App::start_on(Backend::Sqlite, |_| {}).await;
    let (status, p) = app.post("/v1/rules", inbox_rule("invoice.due", Some(escalate("webhook", "read")))).await;
    let said = errors_on(&p, "escalate.channel");
    assert_eq!((status, said.len()), (422, 1), "{p}");
    assert!(said[0].contains("no webhook URL") && said[0].contains("\"email\""), "{said:?}");
    let (status, p) = app.post("/v1/rules", inbox_rule("invoice.due", Some(escalate("email", "read")))).await;
    assert_eq!(status, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_owned();
    let patch = json!({"escalate": escalate("webhook", "read")});
    let (status, p) = app.call(Method::PATCH, &format!("/v1/rules/{id}"), Some(patch)).await;
    assert_eq!((status, errors_on(&p, "escalate.channel").len()), (422, 1), "{p}");
    app.stop().await;
}

/// A rule saved before these checks (a trigger type with a space, a
/// webhook follow-up) can still be turned off and edited, but a webhook
/// follow-up cannot be turned on.
async fn a_rule_saved_before_the_checks_can_still_be_turned_off() {
    let app = App::start_on(Backend::Sqlite, |_| {}).await;
    let input: RuleInput = serde_json::from_value(inbox_rule("invoice.due", Some(escalate("email", "read")))).unwrap();
    let mut legacy = input.into_row(herald::clock::Millis(0), &Default::default()).unwrap();
    legacy.trigger_type = "invoice due".into();
    legacy.workflow.as_mut().unwrap()["escalate"]["channel"] = json!("webhook");
    legacy.enabled = true;
    app.db.store.insert_rule(&legacy).await.unwrap();
    let path = format!("/v1/rules/{}", legacy.id);
    let (status, p) = app.call(Method::PATCH, &path, Some(json!({"enabled": false}))).await;
    assert_eq!(status, 200, "{p}");
    let (status, p) = app.call(Method::PATCH, &path, Some(json!({"name": "renamed"}))).await;
    assert_eq!((status, p["rule"]["trigger_type"].as_str()), (200, Some("invoice due")), "{p}");
    let (status, p) = app.call(Method::PATCH, &path, Some(json!({"enabled": true}))).await;
    let said = errors_on(&p, "escalate.channel");
    assert_eq!((status, said.len()), (422, 1), "{p}");
    assert!(said[0].contains("no webhook URL"), "{said:?}");
    app.stop().await;
}

/// `unless: read` is cancelled only by reading, `unless: seen` by seeing or
/// reading (compose's `follow_up_decision`); the trigger's decision said
/// "unless seen or read" for both.
async fn the_decision_says_what_cancels_the_follow_up() {
    let app = App::start_on(Backend::Sqlite, |c| {
        c.email.transport = Some("file:///tmp/herald-rule-checks".into());
        c.email.from = Some("Herald <news@herald.test>".into());
    })
    .await;
    for (unless, says) in [("read", "unless read"), ("seen", "unless seen or read")] {
        let trigger_type = format!("invoice.{unless}");
        let mut rule = inbox_rule(&trigger_type, Some(escalate("email", unless)));
        rule["enabled"] = json!(true);
        let (status, p) = app.post("/v1/rules", rule).await;
        assert_eq!(status, 201, "{p}");
        let (status, t) = app.post("/v1/triggers", json!({"type": trigger_type, "user_id": "u1"})).await;
        assert_eq!(status, 202, "{t}");
        let detail = t["detail"].as_str().unwrap();
        assert!(detail.ends_with(says), "{unless}: {detail}");
    }
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        a_trigger_type_the_trigger_api_refuses_is_refused_for_a_rule,
        an_escalation_to_webhook_is_refused_when_saved,
        a_rule_saved_before_the_checks_can_still_be_turned_off,
        the_decision_says_what_cancels_the_follow_up,
    ])
}
