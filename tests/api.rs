//! The v1 HTTP API as a host application uses it: a server on port 0 over a
//! fresh SQLite database per test, driven with reqwest.

mod common;

use std::time::Duration;

use common::app::App;
use common::app::inbox_rule as rule;
use common::sse::Events;
use herald::clock::{Clock, SystemClock};
use herald::store::{BounceStore, RecipientStore, Store, SuppressionStore};
use serde_json::{Value, json};

async fn assert_problem(resp: reqwest::Response, status: u16) -> Value {
    assert_eq!(resp.status().as_u16(), status);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    resp.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_v1_route_needs_a_key_and_says_so() {
    let app = App::start().await;
    for (method, path) in [
        (reqwest::Method::POST, "/v1/triggers"),
        (reqwest::Method::GET, "/v1/rules"),
        (reqwest::Method::GET, "/v1/users/u1/sends"),
        (reqwest::Method::GET, "/v1/outbox"),
    ] {
        let resp = app.http.request(method.clone(), app.url(path)).send().await.unwrap();
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        let p = assert_problem(resp, 401).await;
        assert!(p["detail"].as_str().unwrap().contains("Authorization: Bearer"), "{p}");
        let resp = app.http.request(method, app.url(path)).bearer_auth("hrld_wrong").send().await.unwrap();
        let p = assert_problem(resp, 401).await;
        assert_eq!(p["detail"], "API key not recognised");
    }
    // Health and the API description stay public.
    assert_eq!(app.http.get(app.url("/healthz")).send().await.unwrap().status(), 200);
    let doc: Value = app.http.get(app.url("/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert!(doc["paths"]["/v1/triggers"]["post"].is_object());
    // A revoked key stops working.
    let keys = app.db.store.list_api_keys().await.unwrap();
    app.db.store.revoke_api_key(&keys[0].id, SystemClock.now()).await.unwrap();
    let (status, p) = app.get("/v1/rules").await;
    assert_eq!((status, p["detail"].as_str()), (401, Some("this API key was revoked")));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_is_planned_by_enabled_rules_only_and_idempotent() {
    let app = App::start().await;
    let (status, body) = app.post("/v1/triggers", json!({"type": "export.ready", "user_id": "u1"})).await;
    assert_eq!(status, 202);
    assert_eq!(body["planned"], json!([]));
    assert_eq!(body["detail"], "no enabled rule matches trigger type \"export.ready\"");

    let (status, created) = app.post("/v1/rules", rule("export.ready", false)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["enabled"], false, "rules start disabled");
    let (_, body) = app.post("/v1/triggers", json!({"type": "export.ready", "user_id": "u1"})).await;
    assert_eq!(body["planned"], json!([]), "a disabled rule plans nothing");

    let id = created["id"].as_str().unwrap();
    let (status, _) =
        app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"enabled": true, "delay": 60}))).await;
    assert_eq!(status, 200);
    let fire = json!({
        "type": "export.ready", "user_id": "u1", "payload": {"name": "q4"},
        "idempotency_key": "evt-1", "occurred_at": "2020-01-01T00:00:00Z"
    });
    let (status, first) = app.post("/v1/triggers", fire.clone()).await;
    assert_eq!(status, 202, "{first}");
    let planned = first["planned"].as_array().unwrap();
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0]["rule_id"], id);
    assert_eq!(planned[0]["channel"], "inbox");
    assert_eq!(planned[0]["due_at"], "2020-01-01T00:01:00.000Z", "occurred_at + delay");
    assert_eq!(first["replayed"], false);

    let (status, again) = app.post("/v1/triggers", fire.clone()).await;
    assert_eq!(status, 202);
    assert_eq!(again["trigger_id"], first["trigger_id"]);
    assert_eq!(again["planned"], first["planned"], "the first result, nothing new");
    assert_eq!(again["replayed"], true);
    let (_, page) = app.get("/v1/outbox?user_id=u1").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);

    let mut changed = fire.clone();
    changed["payload"] = json!({"name": "q3"});
    let (status, p) = app.post("/v1/triggers", changed).await;
    assert_eq!(status, 409);
    assert!(p["detail"].as_str().unwrap().contains("evt-1"), "{p}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_the_field() {
    let app = App::start().await;
    let (status, p) = app
        .post("/v1/triggers", json!({"type": "has space", "user_id": "", "payload": [1], "occurred_at": "yesterday"}))
        .await;
    assert_eq!(status, 422);
    let fields: Vec<&str> = p["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, vec!["type", "user_id", "payload", "occurred_at"]);

    // JSON of the wrong shape is a 422 naming the field, like any other
    // refusal, never a 400 with serde's position in the text.
    let (status, p) = app.post("/v1/triggers", json!({"type": "x", "user_id": 7})).await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(p["errors"][0]["field"], "user_id", "{p}");
    assert_eq!(p["errors"][0]["message"], "invalid type: integer `7`, expected a string", "{p}");
    let (status, p) = app.post("/v1/triggers", json!({"type": "x", "user_id": "u", "colour": "red"})).await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(p["errors"][0]["field"], "colour", "{p}");
    let mut no_category = rule("x", false);
    no_category.as_object_mut().unwrap().remove("category");
    let (status, p) = app.post("/v1/rules", no_category).await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(
        (p["errors"][0]["field"].as_str(), p["errors"][0]["message"].as_str()),
        (Some("category"), Some("missing field `category`")),
        "{p}"
    );
    assert_eq!(p["detail"], "invalid field(s): category");
    let mut bad_subject = rule("x", false);
    bad_subject["template"]["locales"]["en"]["subject"] = json!(["not", "text"]);
    let (status, p) = app.post("/v1/rules", bad_subject).await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("template.locales.en.subject")), "{p}");

    let resp = app
        .http
        .post(app.url("/v1/triggers"))
        .bearer_auth(&app.key)
        .body("{not json")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 400).await;
    let resp = app.http.post(app.url("/v1/triggers")).bearer_auth(&app.key).body("type=x").send().await.unwrap();
    assert_problem(resp, 415).await;
    let big = json!({"type": "x", "user_id": "u", "payload": {"blob": "x".repeat(10_000)}});
    let resp = app.http.post(app.url("/v1/triggers")).bearer_auth(&app.key).json(&big).send().await.unwrap();
    assert_problem(resp, 413).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_must_name_a_channel_herald_has_and_is_turned_on_only_where_it_can_deliver() {
    let app = App::start().await;
    // A typo is refused when the rule is saved, listing the channels there are.
    let mut typo = rule("x", false);
    typo["channel"] = json!("emial");
    let (status, p) = app.post("/v1/rules", typo).await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(p["errors"][0]["field"], "channel");
    assert_eq!(
        p["errors"][0]["message"],
        "unknown channel \"emial\"; Herald's channels are email, inbox, push, slack, sms, webhook"
    );

    // Webhooks without a signing secret: cannot be turned on, and the
    // refusal names the setting that would change that.
    let mut hook = rule("x", true);
    hook["channel"] = json!("webhook");
    hook["webhook_url"] = json!("https://hooks.example.com/h");
    let (status, p) = app.post("/v1/rules", hook.clone()).await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(p["errors"][0]["field"], "channel");
    let msg = p["errors"][0]["message"].as_str().unwrap();
    assert!(msg.contains("not configured on this instance") && msg.contains("set webhook.signing_secret"), "{msg}");
    // Saved off, it is kept, with a warning on every view of it.
    hook["enabled"] = json!(false);
    let (status, created) = app.post("/v1/rules", hook).await;
    assert_eq!(status, 201, "{created}");
    assert!(created["warnings"][0].as_str().unwrap().contains("webhook.signing_secret"), "{created}");
    let id = created["id"].as_str().unwrap();
    let (_, list) = app.get("/v1/rules").await;
    assert!(list["rules"][0]["warnings"][0].as_str().unwrap().contains("cannot be turned on"), "{list}");
    let (status, p) =
        app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"enabled": true}))).await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("channel")), "{p}");
    // Moved to the inbox, which always delivers, it turns on and the warning goes.
    let patch = json!({"enabled": true, "channel": "inbox", "webhook_url": null});
    let (status, p) = app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(patch)).await;
    assert_eq!(status, 200, "{p}");
    assert!(p["rule"].get("warnings").is_none(), "{p}");
    app.stop().await;

    // With the secret set, the same webhook rule turns on.
    let app =
        App::start_with(|c| c.webhook.signing_secret = Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into())).await;
    let mut hook = rule("x", true);
    hook["channel"] = json!("webhook");
    hook["webhook_url"] = json!("https://hooks.example.com/h");
    let (status, p) = app.post("/v1/rules", hook).await;
    assert_eq!(status, 201, "{p}");
    assert!(p.get("warnings").is_none(), "{p}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_does_not_compile_is_refused_with_line_and_column() {
    let app = App::start().await;
    let mut bad = rule("x", false);
    bad["template"]["locales"]["de"]["text"] = json!("Hallo\n{{ payload.name ");
    bad["condition"] = json!("payload.n >");
    let (status, p) = app.post("/v1/rules", bad).await;
    assert_eq!(status, 422, "{p}");
    let errors = p["errors"].as_array().unwrap();
    let text = errors.iter().find(|e| e["field"] == "template.locales.de.text").expect("the template field");
    assert_eq!((text["line"].as_u64(), text["column"].as_u64()), (Some(2), Some(12)), "{text}");
    assert!(errors.iter().any(|e| e["field"] == "condition"), "{p}");
    let (_, list) = app.get("/v1/rules").await;
    assert_eq!(list["rules"], json!([]), "nothing was saved");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_renders_per_locale_respects_opt_outs_and_answers_did_they_get_it() {
    let app = App::start().await;
    let (_, r) = app.post("/v1/rules", rule("export.ready", true)).await;
    let rule_id = r["id"].as_str().unwrap().to_owned();
    let (status, _) = app
        .call(
            reqwest::Method::PUT,
            "/v1/users/ada",
            Some(json!({"email": "ada@example.com", "name": "Ada", "locale": "de-AT"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, _) = app
        .call(reqwest::Method::PUT, "/v1/users/bob", Some(json!({"preferences": {"categories": {"exports": false}}})))
        .await;
    assert_eq!(status, 201);
    for user in ["ada", "bob"] {
        app.post("/v1/triggers", json!({"type": "export.ready", "user_id": user, "payload": {"name": "q4"}})).await;
    }
    app.post("/v1/triggers", json!({"type": "nobody.listens", "user_id": "ada"})).await;
    let report = app.deliver().await;
    assert_eq!((report.sent, report.suppressed), (1, 1), "{report:?}");

    let inbox = app.db.store.inbox_for_user(&common::user("ada"), 10).await.unwrap();
    assert_eq!(inbox[0].title, "Export q4 fertig", "de-AT falls back to de");

    let (status, sends) = app.get("/v1/users/bob/sends").await;
    assert_eq!(status, 200);
    let m = &sends["messages"][0];
    assert_eq!((m["status"].as_str(), m["rule_id"].as_str()), (Some("suppressed"), Some(rule_id.as_str())));
    let why = m["history"][0]["detail"].as_str().unwrap();
    assert!(why.contains("opted out of category \"exports\""), "{why}");

    let (_, sends) = app.get("/v1/users/ada/sends").await;
    assert_eq!(sends["messages"][0]["status"], "sent");
    assert_eq!(sends["messages"][0]["history"][0]["status"], "sent");
    let quiet = &sends["triggers_without_messages"][0];
    assert_eq!(quiet["type"], "nobody.listens");
    assert_eq!(quiet["detail"], "no enabled rule matches trigger type \"nobody.listens\"");

    // Deleting a user erases address and inbox; the log stays, addressless.
    let (status, erased) = app.call(reqwest::Method::DELETE, "/v1/users/ada", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        erased,
        json!({"recipient_deleted": true, "inbox_messages_deleted": 1, "scheduled_cancelled": 0, "push_devices_deleted": 0,
            "topic_subscriptions_deleted": 0})
    );
    assert_eq!(app.get("/v1/users/ada").await.0, 404);
    assert!(app.db.store.inbox_for_user(&common::user("ada"), 10).await.unwrap().is_empty());
    let log = app.db.store.sends_for_user(&common::user("ada"), 10).await.unwrap();
    assert_eq!(log.len(), 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_fails_at_render_time_ends_terminal_with_the_error() {
    let app = App::start().await;
    let mut r = rule("export.ready", true);
    r["template"]["locales"]["en"]["subject"] = json!("Export {{ payload.missing }}");
    app.post("/v1/rules", r).await;
    app.post("/v1/triggers", json!({"type": "export.ready", "user_id": "u1"})).await;
    let report = app.deliver().await;
    assert_eq!(report.failed, 1, "{report:?}");
    let (_, sends) = app.get("/v1/users/u1/sends").await;
    let detail = sends["messages"][0]["history"][0]["detail"].as_str().unwrap();
    assert!(detail.starts_with("template failed to render"), "{detail}");
    assert!(detail.contains("payload.missing"), "{detail}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_or_deleting_a_rule_cancels_what_it_scheduled() {
    let app = App::start().await;
    let (_, r) = app.post("/v1/rules", rule("later", true)).await;
    let id = r["id"].as_str().unwrap().to_owned();
    app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"delay": 3600}))).await;
    for i in 0..3 {
        app.post("/v1/triggers", json!({"type": "later", "user_id": format!("u{i}")})).await;
    }
    let (status, changed) =
        app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"enabled": false}))).await;
    assert_eq!(status, 200);
    assert_eq!(changed["cancelled"], 3);
    let (_, sends) = app.get("/v1/users/u1/sends").await;
    assert_eq!(sends["messages"][0]["status"], "cancelled");
    assert_eq!(sends["messages"][0]["history"][0]["detail"], "rule disabled");

    app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"enabled": true}))).await;
    app.post("/v1/triggers", json!({"type": "later", "user_id": "u9"})).await;
    let (status, deleted) = app.call(reqwest::Method::DELETE, &format!("/v1/rules/{id}"), None).await;
    assert_eq!((status, deleted["cancelled"].as_u64()), (200, Some(1)));
    let (_, sends) = app.get("/v1/users/u9/sends").await;
    assert_eq!(sends["messages"][0]["history"][0]["detail"], "rule deleted");
    assert_eq!(app.get(&format!("/v1/rules/{id}")).await.0, 404);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_shows_what_enabling_would_plan() {
    let app = App::start().await;
    for rows in [0, 5, 10] {
        app.post(
            "/v1/triggers",
            json!({"type": "export.ready", "user_id": "u1", "payload": {"name": "x", "rows": rows}}),
        )
        .await;
    }
    let mut r = rule("export.ready", false);
    r["condition"] = json!("payload.rows > 1");
    let (_, created) = app.post("/v1/rules", r).await;
    let (status, preview) = app.get(&format!("/v1/rules/{}/preview", created["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!((preview["triggers_considered"].as_u64(), preview["would_plan"].as_u64()), (Some(3), Some(2)));
    let refused: Vec<_> = preview["results"].as_array().unwrap().iter().filter(|r| r["planned"] == false).collect();
    assert!(refused[0]["reason"].as_str().unwrap().contains("is false"));
    let (_, page) = app.get("/v1/outbox").await;
    assert_eq!(page["items"], json!([]), "a preview plans nothing");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_lists_pages_retries_and_cancels() {
    let app = App::start().await;
    // Due in 30 days: scheduled until a retry makes one due now. (Not by a
    // future occurred_at: the API refuses one more than 5 minutes ahead.)
    let mut later = rule("page", true);
    later["delay"] = json!(30 * 86_400);
    let (_, r) = app.post("/v1/rules", later).await;
    for i in 0..5 {
        app.post("/v1/triggers", json!({"type": "page", "user_id": format!("p{i}"), "payload": {"name": "n"}})).await;
    }
    let (_, first) = app.get("/v1/outbox?status=scheduled&limit=2").await;
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, second) = app.get(&format!("/v1/outbox?status=scheduled&limit=2&cursor={cursor}")).await;
    let (_, third) = app.get(&format!("/v1/outbox?limit=2&cursor={}", second["next_cursor"].as_str().unwrap())).await;
    let ids: Vec<String> = [&first, &second, &third]
        .iter()
        .flat_map(|p| p["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()))
        .collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!((ids.len(), unique.len()), (5, 5));
    assert!(third["next_cursor"].is_null());
    let (status, p) = app.get("/v1/outbox?status=bounced").await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("status")));
    let (_, by_rule) = app.get(&format!("/v1/outbox?rule_id={}", r["id"].as_str().unwrap())).await;
    assert_eq!(by_rule["items"].as_array().unwrap().len(), 5);
    // Each row says what it is about: its rule's subject, rendered for it
    // (the recipient p0 is unknown, so the fallback locale), and a row
    // enqueued by hand its payload's title.
    assert_eq!(by_rule["items"][0]["subject"], "Export n ready", "{by_rule}");
    let hand = herald::store::NewOutboxRow {
        id: herald::store::new_id(),
        dedupe_key: "hand:1".into(),
        rule_id: None,
        trigger_id: None,
        user_id: herald::domain::UserId::parse("user_id", "p0").unwrap(),
        channel: herald::domain::ChannelName::parse("channel", "inbox").unwrap(),
        payload: json!({"title": "Maintenance tonight\n at 22:00"}),
        due_at: SystemClock.now().plus(Duration::from_secs(3600)),
        expires_at: None,
        follow_up_at: None,
    };
    app.db.store.enqueue(std::slice::from_ref(&hand), SystemClock.now()).await.unwrap();
    let (_, mine) = app.get("/v1/outbox?user_id=p0").await;
    let item = mine["items"].as_array().unwrap().iter().find(|i| i["id"] == hand.id.as_str()).unwrap();
    assert_eq!(item["subject"], "Maintenance tonight at 22:00", "{mine}");
    let (_, sends) = app.get("/v1/users/p0/sends").await;
    let subjects: Vec<&str> =
        sends["messages"].as_array().unwrap().iter().filter_map(|m| m["subject"].as_str()).collect();
    assert_eq!(subjects, vec!["Maintenance tonight at 22:00", "Export n ready"], "{sends}");

    let (status, cancelled) = app.post(&format!("/v1/outbox/{}/cancel", ids[0]), json!({})).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")));
    let (status, _) = app.post(&format!("/v1/outbox/{}/cancel", ids[0]), json!({})).await;
    assert_eq!(status, 409, "only scheduled rows can be cancelled");
    let (status, retried) = app.post(&format!("/v1/outbox/{}/retry", ids[0]), json!({})).await;
    assert_eq!((status, retried["status"].as_str()), (200, Some("scheduled")));
    let report = app.deliver().await;
    let log = app.db.store.sends_for_outbox(&ids[0]).await.unwrap();
    assert_eq!(report.sent, 1, "retried means due now: {report:?} {log:?}");
    let (status, p) = app.post(&format!("/v1/outbox/{}/retry", ids[0]), json!({})).await;
    assert_eq!(status, 409);
    assert!(p["detail"].as_str().unwrap().contains("twice"));
    assert_eq!(app.post("/v1/outbox/nope/retry", json!({})).await.0, 404);
    let log = app.db.store.sends_for_outbox(&ids[0]).await.unwrap();
    let statuses: Vec<&str> = log.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, vec!["cancelled", "sent"]);
    assert!(log[0].detail.as_deref().unwrap().contains("by key \"tests\""));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipients_round_trip_and_refuse_bad_fields() {
    let app = App::start().await;
    let body = json!({"email": "a@example.com", "locale": "pt-BR", "timezone": "America/Sao_Paulo",
                      "preferences": {"channels": {"email": false}}});
    let (status, created) = app.call(reqwest::Method::PUT, "/v1/users/ana", Some(body.clone())).await;
    assert_eq!(status, 201);
    let (status, _) = app.call(reqwest::Method::PUT, "/v1/users/ana", Some(body)).await;
    assert_eq!(status, 200, "second PUT replaces");
    let (_, got) = app.get("/v1/users/ana").await;
    assert_eq!(got["preferences"]["channels"]["email"], false);
    assert_eq!(got["created_at"], created["created_at"]);
    let (status, p) = app.call(reqwest::Method::PUT, "/v1/users/ana", Some(json!({"email": "nope"}))).await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("email")));
    app.stop().await;
}

// ---- The end users' inbox API ----------------------------------------------

impl App {
    async fn token(&self, user: &str) -> String {
        let (status, body) = self.post(&format!("/v1/users/{user}/token"), json!({})).await;
        assert_eq!(status, 200, "{body}");
        body["token"].as_str().unwrap().to_owned()
    }

    async fn as_user(&self, token: &str, method: reqwest::Method, path: &str) -> (u16, Value) {
        let resp = self.http.request(method, self.url(path)).bearer_auth(token).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// A message Herald sent to `email` for `user` (a finished `sent` row
    /// carrying the address hash), so a bounce has something to match.
    async fn sent_email(&self, user: &str, email: &str) -> String {
        let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
        let now = SystemClock.now();
        let row = common::row(user, "email", now);
        self.db.store.enqueue(std::slice::from_ref(&row), now).await.unwrap();
        let token = herald::store::new_id();
        let mut claimed = self.db.store.claim_channel("email", now, 100, &token).await.unwrap();
        let claimed = claimed.iter_mut().find(|r| r.id == row.id).unwrap().clone();
        let f = herald::store::Finish {
            status: herald::domain::SendStatus::Sent,
            detail: None,
            transport: Some("smtp".into()),
            address_hash: keys.hash(email),
            provider_id: None,
        };
        assert!(self.db.store.finish(&claimed, &token, &f, now).await.unwrap());
        row.id
    }

    /// The send-log statuses of one message, oldest first.
    async fn history(&self, outbox_id: &str) -> Vec<String> {
        self.db.store.sends_for_outbox(outbox_id).await.unwrap().into_iter().map(|s| s.status).collect()
    }

    /// Enqueues and delivers `n` inbox messages to `user`.
    async fn send_inbox(&self, user: &str, titles: &[&str]) {
        let now = SystemClock.now();
        let rows: Vec<_> = titles
            .iter()
            .map(|t| {
                let mut r = common::row(user, "inbox", now);
                r.payload = json!({"title": t});
                r
            })
            .collect();
        self.db.store.enqueue(&rows, now).await.unwrap();
        assert_eq!(self.deliver().await.sent, titles.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_token_reaches_only_that_users_inbox() {
    let app = App::start().await;
    app.send_inbox("ada", &["a1"]).await;
    app.send_inbox("ada", &["a2"]).await;
    app.send_inbox("bob", &["b1"]).await;
    let ada = app.token("ada").await;
    let bob = app.token("bob").await;

    let (status, page) = app.as_user(&ada, reqwest::Method::GET, "/v1/inbox").await;
    assert_eq!(status, 200);
    let titles: Vec<&str> = page["items"].as_array().unwrap().iter().map(|i| i["title"].as_str().unwrap()).collect();
    assert_eq!(titles, vec!["a2", "a1"], "newest first, and only ada's");
    let (_, bobs) = app.as_user(&bob, reqwest::Method::GET, "/v1/inbox").await;
    let bob_msg = bobs["items"][0]["id"].as_str().unwrap().to_owned();

    // Every way ada could touch bob's message is a 404, and nothing changes.
    for action in ["seen", "read", "unread", "archive"] {
        let (status, _) = app.as_user(&ada, reqwest::Method::POST, &format!("/v1/inbox/{bob_msg}/{action}")).await;
        assert_eq!(status, 404, "{action}");
    }
    app.as_user(&ada, reqwest::Method::POST, "/v1/inbox/read-all").await;
    let (_, bob_count) = app.as_user(&bob, reqwest::Method::GET, "/v1/inbox/count").await;
    assert_eq!(bob_count, json!({"unseen": 1, "unread": 1}), "ada's read-all leaves bob's inbox alone");
    let (_, ada_count) = app.as_user(&ada, reqwest::Method::GET, "/v1/inbox/count").await;
    assert_eq!(ada_count, json!({"unseen": 0, "unread": 0}));

    // Tokens are not API keys and API keys are not tokens.
    assert_eq!(app.as_user(&ada, reqwest::Method::GET, "/v1/rules").await.0, 401);
    assert_eq!(app.as_user(&app.key, reqwest::Method::GET, "/v1/inbox").await.0, 401);
    // A forged token (bob's claims under ada's signature) and garbage are refused.
    let (ada_claims, ada_sig) = ada.split_once('.').unwrap();
    let (bob_claims, _) = bob.split_once('.').unwrap();
    assert_ne!(ada_claims, bob_claims);
    let (status, p) = app.as_user(&format!("{bob_claims}.{ada_sig}"), reqwest::Method::GET, "/v1/inbox").await;
    assert_eq!((status, p["detail"].as_str()), (401, Some("token signature does not match")));
    for path in ["/v1/inbox", "/v1/inbox/count", "/v1/inbox/stream"] {
        let resp = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path} without a token");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refused() {
    let app = App::start().await;
    let key = herald::http::user_auth::TokenKey::new(b"not the server's key, but shaped right!!");
    let user = common::user("ada");
    let expired = key.issue(&user, herald::clock::Millis(SystemClock.now().0 - 1000));
    let (status, _) = app.as_user(&expired, reqwest::Method::GET, "/v1/inbox").await;
    assert_eq!(status, 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_read_archive_and_filters_move_the_counts() {
    let app = App::start().await;
    app.send_inbox("ada", &["one", "two", "three"]).await;
    let t = app.token("ada").await;
    let count = || async { app.as_user(&t, reqwest::Method::GET, "/v1/inbox/count").await.1 };
    assert_eq!(count().await, json!({"unseen": 3, "unread": 3}));
    let (_, page) = app.as_user(&t, reqwest::Method::GET, "/v1/inbox").await;
    let ids: Vec<String> =
        page["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect();
    app.as_user(&t, reqwest::Method::POST, &format!("/v1/inbox/{}/seen", ids[0])).await;
    assert_eq!(count().await, json!({"unseen": 2, "unread": 3}));
    let (_, read) = app.as_user(&t, reqwest::Method::POST, &format!("/v1/inbox/{}/read", ids[1])).await;
    assert!(read["read_at"].is_string() && read["seen_at"].is_string(), "reading is also seeing: {read}");
    assert_eq!(count().await, json!({"unseen": 1, "unread": 2}));
    app.as_user(&t, reqwest::Method::POST, &format!("/v1/inbox/{}/unread", ids[1])).await;
    assert_eq!(count().await, json!({"unseen": 1, "unread": 3}));
    app.as_user(&t, reqwest::Method::POST, &format!("/v1/inbox/{}/archive", ids[2])).await;
    assert_eq!(count().await, json!({"unseen": 0, "unread": 2}), "archived messages do not count");
    let (_, archived) = app.as_user(&t, reqwest::Method::GET, "/v1/inbox?filter=archived").await;
    assert_eq!(archived["items"].as_array().unwrap().len(), 1);
    let (_, unread) = app.as_user(&t, reqwest::Method::GET, "/v1/inbox?filter=unread").await;
    assert_eq!(unread["items"].as_array().unwrap().len(), 2);
    let (_, page) = app.as_user(&t, reqwest::Method::GET, "/v1/inbox?limit=1").await;
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, next) = app.as_user(&t, reqwest::Method::GET, &format!("/v1/inbox?limit=1&cursor={cursor}")).await;
    assert_ne!(next["items"][0]["id"], page["items"][0]["id"]);
    let (_, done) = app.as_user(&t, reqwest::Method::POST, "/v1/inbox/read-all").await;
    assert_eq!(done["marked"], 2);
    assert_eq!(count().await, json!({"unseen": 0, "unread": 0}));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_pushes_new_messages_and_resumes_without_loss() {
    let app = App::start().await;
    app.send_inbox("ada", &["before"]).await;
    let t = app.token("ada").await;
    let open = |last: Option<String>| {
        let mut req = app.http.get(app.url("/v1/inbox/stream")).bearer_auth(&t);
        if let Some(id) = last {
            req = req.header("Last-Event-ID", id);
        }
        async move { Events::new(req.send().await.unwrap()) }
    };
    let mut events = open(None).await;
    let count = events.next_of("count", Duration::from_secs(5)).await.expect("counts on connect");
    assert_eq!(serde_json::from_str::<Value>(&count.data).unwrap(), json!({"unseen": 1, "unread": 1}));

    app.send_inbox("bob", &["not for ada"]).await;
    app.send_inbox("ada", &["live"]).await;
    let msg = events.next_of("message", Duration::from_secs(5)).await.expect("a message planned after connecting");
    let item: Value = serde_json::from_str(&msg.data).unwrap();
    assert_eq!(item["title"], "live", "only ada's, and nothing from before the stream started");
    let count = events.next_of("count", Duration::from_secs(5)).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&count.data).unwrap(), json!({"unseen": 2, "unread": 2}));
    drop(events); // the connection drops

    app.send_inbox("ada", &["missed 1", "missed 2"]).await;
    let mut resumed = open(msg.id.clone()).await;
    let first = resumed.next_of("message", Duration::from_secs(5)).await.expect("missed messages on resume");
    let second = resumed.next_of("message", Duration::from_secs(5)).await.expect("both of them");
    let mut titles: Vec<String> = [&first, &second]
        .iter()
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap()["title"].as_str().unwrap().to_owned())
        .collect();
    assert!(first.position() < second.position(), "in commit order");
    titles.sort();
    assert_eq!(titles, vec!["missed 1", "missed 2"], "without loss or repeats");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_events_stream_in_order_and_resume_without_loss() {
    let app = App::start().await;
    app.send_inbox("ada", &["before the stream"]).await;
    let open = |last: Option<String>| {
        let mut req = app.http.get(app.url("/v1/events/stream")).bearer_auth(&app.key);
        if let Some(id) = last {
            req = req.header("Last-Event-ID", id);
        }
        async move { Events::new(req.send().await.unwrap()) }
    };
    let mut events = open(None).await;
    events.next_of("ready", Duration::from_secs(5)).await.expect("the stream says where it starts");
    app.send_inbox("ada", &["live"]).await;
    let outcome = events.next_of("outcome", Duration::from_secs(5)).await.expect("an outcome event");
    let data: Value = serde_json::from_str(&outcome.data).unwrap();
    assert_eq!((data["user_id"].as_str(), data["data"]["status"].as_str()), (Some("ada"), Some("sent")));
    assert_eq!(data["data"]["channel"], "inbox");
    let (status, _) = app.post("/v1/suppressions", json!({"email": "ada@example.com", "reason": "complaint"})).await;
    assert_eq!(status, 201);
    let suppression = events.next_of("suppression", Duration::from_secs(5)).await.expect("a suppression event");
    let data: Value = serde_json::from_str(&suppression.data).unwrap();
    assert_eq!(data["data"]["reason"], "complaint");
    assert_eq!(data["data"]["address_hash"].as_str().unwrap().len(), 64, "the hash, never the address");
    assert!(!suppression.data.contains("ada@example.com"));
    drop(events);

    app.send_inbox("bob", &["while away"]).await;
    let mut resumed = open(suppression.id.clone()).await;
    let missed = resumed.next_of("outcome", Duration::from_secs(5)).await.expect("the missed outcome");
    let data: Value = serde_json::from_str(&missed.data).unwrap();
    assert_eq!(data["user_id"], "bob");
    assert!(missed.position() > suppression.position(), "in commit order");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounce_message_is_kept_matched_to_its_send_and_suppresses_the_address() {
    use herald::store::Finish;
    let app = App::start().await;
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    // Herald mailed userunknown@example.co.jp (row u1) earlier.
    let now = SystemClock.now();
    let sent = common::row("u1", "email", now);
    app.db.store.enqueue(std::slice::from_ref(&sent), now).await.unwrap();
    let claimed = app.db.store.claim_channel("email", now, 1, "t").await.unwrap().remove(0);
    let hash = keys.hash("userunknown@example.co.jp").unwrap();
    let f = Finish {
        status: herald::domain::SendStatus::Sent,
        detail: None,
        transport: Some("smtp".into()),
        address_hash: Some(hash.clone()),
        provider_id: None,
    };
    app.db.store.finish(&claimed, "t", &f, now).await.unwrap();

    let raw =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/bounces/eml/lhost-postfix-02.eml")).unwrap();
    let post = || {
        app.http
            .post(app.url("/v1/bounces/mail"))
            .bearer_auth(&app.key)
            .header("content-type", "message/rfc822")
            .body(raw.clone())
            .send()
    };
    let report: Value = post().await.unwrap().json().await.unwrap();
    assert_eq!((report["recipients"].as_u64(), report["recorded"].as_u64()), (Some(2), Some(2)), "{report}");
    assert_eq!((report["matched"].as_u64(), report["suppressed"].as_u64()), (Some(1), Some(2)), "{report}");
    let matched: Vec<&Value> =
        report["items"].as_array().unwrap().iter().filter(|i| i["outbox_id"] == sent.id).collect();
    assert_eq!(matched[0]["matched_by"], "address_hash");

    // The send log answers "did u1 get it": sent, then bounced, with the reason.
    let log = app.db.store.sends_for_outbox(&sent.id).await.unwrap();
    let statuses: Vec<&str> = log.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, vec!["sent", "bounced"]);
    assert!(log[1].detail.as_deref().unwrap().contains("5.1.1"), "{log:?}");
    let active = app.db.store.active_suppression(&hash, Some("news"), SystemClock.now()).await.unwrap().unwrap();
    assert_eq!(active.reason.as_str(), "hard_bounce");

    // The same message again changes nothing.
    let again: Value = post().await.unwrap().json().await.unwrap();
    assert_eq!((again["recorded"].as_u64(), again["duplicates"].as_u64()), (Some(0), Some(2)));
    assert_eq!(app.db.store.sends_for_outbox(&sent.id).await.unwrap().len(), 2);
    let (_, list) = app.get("/v1/bounces").await;
    assert_eq!(list["bounces"].as_array().unwrap().len(), 2);
    assert_eq!(list["bounces"].as_array().unwrap().iter().filter(|b| b["outbox_id"] == sent.id).count(), 1);

    let resp = app.http.post(app.url("/v1/bounces/mail")).bearer_auth(&app.key).body("").send().await.unwrap();
    let p = assert_problem(resp, 422).await;
    assert!(p["errors"][0]["message"].as_str().unwrap().contains("empty"), "{p}");
    app.stop().await;
}

// ---- Provider bounce webhooks ----------------------------------------------

const SENDGRID_VECTOR: &str = include_str!("data/webhooks/sendgrid/signed-webhook-generated-bounce-vector.json");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendgrid_events_are_accepted_only_with_a_valid_signature() {
    use base64::Engine;
    use p256::ecdsa::signature::Signer;
    use p256::pkcs8::DecodePrivateKey;
    let v: Value = serde_json::from_str(SENDGRID_VECTOR).unwrap();
    let public = v["public_key"].as_str().unwrap().to_owned();
    let app = App::start_with(|c| c.bounces.sendgrid_public_key = Some(public)).await;
    let der =
        base64::engine::general_purpose::STANDARD.decode(v["private_key_pkcs8_der_b64"].as_str().unwrap()).unwrap();
    let signer = p256::ecdsa::SigningKey::from_pkcs8_der(&der).unwrap();
    let body = include_bytes!("data/webhooks/sendgrid/bounce.json").to_vec();
    let ts = (SystemClock.now().0 / 1000).to_string();
    let sign = |ts: &str, body: &[u8]| {
        let mut m = ts.as_bytes().to_vec();
        m.extend_from_slice(body);
        let sig: p256::ecdsa::Signature = signer.sign(&m);
        base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
    };
    let post = |sig: Option<String>, ts: &str, body: Vec<u8>| {
        let mut req = app.http.post(app.url("/v1/bounces/sendgrid")).body(body);
        if let Some(sig) = sig {
            req = req.header("X-Twilio-Email-Event-Webhook-Signature", sig);
        }
        req.header("X-Twilio-Email-Event-Webhook-Timestamp", ts.to_owned()).send()
    };
    // Unsigned, tampered, and stale requests are refused and change nothing.
    assert_problem(post(None, &ts, body.clone()).await.unwrap(), 401).await;
    let mut tampered = body.clone();
    tampered[20] ^= 1;
    assert_problem(post(Some(sign(&ts, &body)), &ts, tampered).await.unwrap(), 401).await;
    let old = v["timestamp"].as_str().unwrap();
    assert_problem(post(Some(sign(old, &body)), old, body.clone()).await.unwrap(), 401).await;
    assert!(app.db.store.list_bounces(10).await.unwrap().is_empty());

    let to_alex = app.sent_email("alex", "alex@example.com").await;
    let resp = post(Some(sign(&ts, &body)), &ts, body.clone()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let report: Value = resp.json().await.unwrap();
    assert_eq!((report["recorded"].as_u64(), report["suppressed"].as_u64()), (Some(1), Some(1)), "{report}");
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let hash = keys.hash("alex@example.com").unwrap();
    let s = app.db.store.active_suppression(&hash, None, SystemClock.now()).await.unwrap().expect("suppressed");
    assert_eq!(s.reason.as_str(), "hard_bounce");
    assert_eq!(app.history(&to_alex).await, vec!["sent", "bounced"]);
    let spam = include_bytes!("data/webhooks/sendgrid/spamreport.json").to_vec();
    let report: Value = post(Some(sign(&ts, &spam)), &ts, spam).await.unwrap().json().await.unwrap();
    assert_eq!(report["items"][0]["kind"], "complaint");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailgun_events_need_a_valid_fresh_signature_and_a_token_used_once() {
    use hmac::{KeyInit, Mac};
    let app =
        App::start_with(|c| c.bounces.mailgun_signing_key = Some("test-webhook-signing-key-NOT-REAL".into())).await;
    let signed = |file: &str, token: &str, key: &str| {
        let mut body: Value = serde_json::from_str(file).unwrap();
        let ts = (SystemClock.now().0 / 1000).to_string();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
        mac.update(ts.as_bytes());
        mac.update(token.as_bytes());
        body["signature"] =
            json!({"timestamp": ts, "token": token, "signature": hex::encode(mac.finalize().into_bytes())});
        body
    };
    let failed = include_str!("data/webhooks/mailgun/failed-permanent.json");
    let key = "test-webhook-signing-key-NOT-REAL";
    let (status, _) = app.post("/v1/bounces/mailgun", signed(failed, "t1", "wrong-key")).await;
    assert_eq!(status, 401, "a bad signature changes nothing");
    let to_alice = app.sent_email("alice", "alice@example.com").await;
    let (status, report) = app.post("/v1/bounces/mailgun", signed(failed, "t2", key)).await;
    assert_eq!((status, report["suppressed"].as_u64()), (200, Some(1)), "{report}");
    assert_eq!(app.history(&to_alice).await, vec!["sent", "bounced"]);
    let (status, p) = app.post("/v1/bounces/mailgun", signed(failed, "t2", key)).await;
    assert_eq!(status, 401);
    assert!(p["detail"].as_str().unwrap().contains("replay"), "{p}");
    let (status, report) =
        app.post("/v1/bounces/mailgun", signed(include_str!("data/webhooks/mailgun/complained.json"), "t3", key)).await;
    assert_eq!(status, 200);
    assert_eq!(report["items"][0]["kind"], "complaint");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postmark_needs_its_basic_auth_and_unconfigured_providers_refuse_everything() {
    let app = App::start_with(|c| {
        c.bounces.postmark_user = Some("hook".into());
        c.bounces.postmark_password = Some("s3cret".into());
    })
    .await;
    let bounce = include_bytes!("data/webhooks/postmark/bounce.json").to_vec();
    let post = |user: &str, pass: &str, body: Vec<u8>| {
        app.http.post(app.url("/v1/bounces/postmark")).basic_auth(user, Some(pass)).body(body).send()
    };
    assert_problem(post("hook", "guess", bounce.clone()).await.unwrap(), 401).await;
    let to_john = app.sent_email("john", "john@example.com").await;
    let report: Value = post("hook", "s3cret", bounce).await.unwrap().json().await.unwrap();
    assert_eq!((report["recorded"].as_u64(), report["suppressed"].as_u64()), (Some(1), Some(1)), "{report}");
    assert_eq!(app.history(&to_john).await, vec!["sent", "bounced"]);
    let complaint = include_bytes!("data/webhooks/postmark/spam-complaint.json").to_vec();
    let report: Value = post("hook", "s3cret", complaint).await.unwrap().json().await.unwrap();
    assert_eq!(report["items"][0]["kind"], "complaint");
    assert_eq!(app.history(&to_john).await, vec!["sent", "bounced", "complained"]);
    // SendGrid and Mailgun are not configured here: refused whatever is sent.
    let resp = app.http.post(app.url("/v1/bounces/mailgun")).body("{}").send().await.unwrap();
    assert_problem(resp, 401).await;
    let resp = app.http.post(app.url("/v1/bounces/sendgrid")).body("[]").send().await.unwrap();
    assert_problem(resp, 401).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_bounces_suppress_for_a_while_once_they_add_up() {
    let app = App::start_with(|c| {
        c.bounces.postmark_user = Some("hook".into());
        c.bounces.postmark_password = Some("s3cret".into());
        c.bounces.soft_bounce_limit = 2;
        c.bounces.soft_bounce_window = Duration::from_secs(3600);
    })
    .await;
    let soft = |n: u32| {
        let mut v: Value = serde_json::from_slice(include_bytes!("data/webhooks/postmark/bounce.json")).unwrap();
        v["Type"] = json!("SoftBounce");
        v["Details"] = json!(format!("452 4.2.2 mailbox full (attempt {n})"));
        serde_json::to_vec(&v).unwrap()
    };
    let post = |body: Vec<u8>| {
        app.http.post(app.url("/v1/bounces/postmark")).basic_auth("hook", Some("s3cret")).body(body).send()
    };
    let first: Value = post(soft(1)).await.unwrap().json().await.unwrap();
    assert_eq!((first["recorded"].as_u64(), first["suppressed"].as_u64()), (Some(1), Some(0)), "{first}");
    assert_eq!(first["items"][0]["action"], "kept as evidence");
    let second: Value = post(soft(2)).await.unwrap().json().await.unwrap();
    assert_eq!(second["suppressed"], 1, "{second}");
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let hash = keys.hash("john@example.com").unwrap();
    let s = app.db.store.active_suppression(&hash, None, SystemClock.now()).await.unwrap().expect("suppressed");
    assert_eq!(s.reason.as_str(), "soft_bounce");
    let expires = s.expires_at.expect("a soft-bounce suppression expires");
    assert!(expires.0 > SystemClock.now().0 + 3_500_000, "for the window: {expires:?}");
    assert!(s.detail.unwrap().starts_with("2 soft bounces within 1h"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ses_notifications_need_a_valid_sns_signature_from_a_configured_topic() {
    let cert = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/webhooks/ses/test-sns-signing-cert.pem");
    let app = App::start_with(|c| {
        c.bounces.ses_topic_arns = vec!["arn:aws:sns:us-east-1:123456789012:ses-bounces".into()];
        c.bounces.ses_certificate_file = Some(cert.into());
        c.bounces.ses_confirm_subscriptions = false;
    })
    .await;
    let to_jane = app.sent_email("jane", "jane@example.com").await;
    let to_richard = app.sent_email("richard", "richard@example.com").await;
    let post = |body: &'static [u8]| app.http.post(app.url("/v1/bounces/ses")).body(body).send();
    let tampered = include_bytes!("data/webhooks/ses/sns-bounce-signed-v2-TAMPERED.json");
    assert_problem(post(tampered).await.unwrap(), 401).await;
    assert!(app.db.store.list_bounces(10).await.unwrap().is_empty(), "a refused request changes nothing");

    for (file, kind) in [
        (&include_bytes!("data/webhooks/ses/sns-bounce-signed-v1.json")[..], "hard"),
        (&include_bytes!("data/webhooks/ses/sns-bounce-signed-v2.json")[..], "hard"),
        (&include_bytes!("data/webhooks/ses/sns-complaint-signed-v2-with-subject.json")[..], "complaint"),
    ] {
        let resp = post(file).await.unwrap();
        assert_eq!(resp.status(), 200);
        let report: Value = resp.json().await.unwrap();
        assert_eq!(report["items"][0]["kind"], kind, "{report}");
    }
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let jane = keys.hash("jane@example.com").unwrap();
    assert_eq!(
        app.db.store.active_suppression(&jane, None, SystemClock.now()).await.unwrap().unwrap().reason.as_str(),
        "hard_bounce"
    );
    assert_eq!(app.history(&to_jane).await, vec!["sent", "bounced"], "v1 and v2 bounce: recorded once each");
    assert_eq!(app.history(&to_richard).await, vec!["sent", "complained"]);
    let confirm = include_bytes!("data/webhooks/ses/sns-subscription-confirmation-signed-v1.json");
    assert_eq!(post(confirm).await.unwrap().status(), 200, "a signed subscription confirmation is accepted");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ses_notifications_from_another_topic_are_refused() {
    let cert = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/webhooks/ses/test-sns-signing-cert.pem");
    let app = App::start_with(|c| {
        c.bounces.ses_topic_arns = vec!["arn:aws:sns:eu-west-1:999999999999:mine".into()];
        c.bounces.ses_certificate_file = Some(cert.into());
    })
    .await;
    let body = include_bytes!("data/webhooks/ses/sns-bounce-signed-v1.json");
    let resp = app.http.post(app.url("/v1/bounces/ses")).body(&body[..]).send().await.unwrap();
    assert_problem(resp, 401).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_route_takes_a_limit_within_its_range_and_names_it_otherwise() {
    let app = App::start().await;
    let (status, body) = app.post("/v1/rules", rule("export.ready", false)).await;
    assert_eq!(status, 201, "{body}");
    let rule_id = body["id"].as_str().unwrap().to_owned();
    let preview = format!("/v1/rules/{rule_id}/preview");
    for (path, max) in [("/v1/outbox", 500), ("/v1/bounces", 500), ("/v1/suppressions", 500), (preview.as_str(), 500)] {
        for bad in [0, max + 1] {
            let (status, body) = app.get(&format!("{path}?limit={bad}")).await;
            assert_eq!(status, 422, "{path}?limit={bad}: {body}");
            assert_eq!(body["errors"][0]["field"], "limit", "{body}");
            assert_eq!(body["errors"][0]["message"], format!("must be 1 to {max}"), "{body}");
        }
        let (status, body) = app.get(&format!("{path}?limit={max}")).await;
        assert_eq!(status, 200, "{path}?limit={max}: {body}");
    }
    app.stop().await;
}

/// `GET /v1/push/vapid-public-key` needs no credential and answers the
/// configured key's public half, which a page passes to
/// `pushManager.subscribe`; without Web Push it is a 404 naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vapid_public_key_is_public_and_a_404_names_the_setting_when_web_push_is_off() {
    let (private, public) = herald::delivery::channel::push::vapid::generate_key_pair();
    let app = App::start_with(|c| {
        c.push.vapid_private_key = Some(private.clone());
        c.push.vapid_subject = Some("mailto:ops@example.com".into());
    })
    .await;
    let resp = app.http.get(app.url("/v1/push/vapid-public-key")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "*", "pages on any origin ask for it");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body, json!({ "public_key": public }));
    // The private key is never served, whatever is asked.
    let doc = app.http.get(app.url("/v1/openapi.json")).send().await.unwrap().text().await.unwrap();
    assert!(!doc.contains(&private));
    let op = &serde_json::from_str::<Value>(&doc).unwrap()["paths"]["/v1/push/vapid-public-key"]["get"];
    assert!(op["responses"]["200"].is_object() && op["responses"]["404"].is_object(), "{op}");
    app.stop().await;

    let app = App::start().await;
    let resp = app.http.get(app.url("/v1/push/vapid-public-key")).send().await.unwrap();
    assert_eq!(resp.headers()["access-control-allow-origin"], "*", "the refusal is readable cross-origin too");
    let p = assert_problem(resp, 404).await;
    assert!(p["detail"].as_str().unwrap().contains("push.vapid_private_key"), "{p}");

    // The service worker a host copies is served beside the widget.
    let resp = app.http.get(app.url("/widget/push-sw.js")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    assert!(resp.text().await.unwrap().contains("notificationclick"));
    app.stop().await;
}
