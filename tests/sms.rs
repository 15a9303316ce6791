//! The `sms` channel end to end on each database: a rule, a trigger, the
//! serve instance's own worker, the Twilio double (`common::twilio`), the
//! send log, and the callbacks Twilio makes (status reports, inbound
//! STOP/START/HELP), signed as Twilio signs them or forged.

mod common;

use std::time::Duration;

use common::Backend;
use common::app::App;
use common::twilio::{Received, SID, TOKEN, double};
use herald::delivery::channel::sms::twilio::signature;
use serde_json::{Value, json};

/// What Herald is told its public URL is: the base of every URL Twilio
/// signs (the test calls the server directly, as a proxy would).
const PUBLIC: &str = "https://herald.example";

async fn start(backend: Backend, token: &str) -> (App, Received) {
    let (addr, received) = double().await;
    let transport = format!("twilio+http://{SID}:{token}@{addr}");
    let app = App::start_on(backend, |c| {
        c.worker.enabled = true;
        c.worker.poll = Duration::from_millis(50);
        c.sms.transport = Some(transport);
        c.sms.from = Some("+14155550100".into());
        c.sms.help_text = Some("Herald alerts. Reply STOP to stop.".into());
        c.http.public_url = Some(PUBLIC.into());
    })
    .await;
    (app, received)
}

async fn sms_rule(app: &App, category: &str) {
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": format!("sms {category}"), "trigger_type": format!("{category}.happened"),
                   "channel": "sms", "category": category, "enabled": true,
                   "template": {"fallback_locale": "en", "locales": {"en": {"text": "Code {{ payload.n }}"}}}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// A form posted to `path?query` as Twilio posts it: signed with `token`.
async fn twilio_post(app: &App, path_and_query: &str, params: &[(&str, &str)], token: &str) -> reqwest::Response {
    let owned: Vec<(String, String)> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let sig = signature(token, &format!("{PUBLIC}{path_and_query}"), &owned);
    app.http.post(app.url(path_and_query)).header("x-twilio-signature", sig).form(&owned).send().await.unwrap()
}

async fn trigger(app: &App, category: &str, user_id: &str) {
    app.trigger(json!({"type": format!("{category}.happened"), "user_id": user_id, "payload": {"n": 42}})).await;
}

/// The suppressions the API lists (an answer other than 200 fails the
/// test, so "none" cannot stand for "the list did not load").
async fn suppressions(app: &App) -> Vec<Value> {
    let (status, body) = app.get("/v1/suppressions").await;
    assert_eq!(status, 200, "{body}");
    body["suppressions"].as_array().cloned().expect("a list of suppressions")
}

async fn a_text_goes_through_twilio_and_stop_start_and_reports_come_back(backend: Backend) {
    let (app, received) = start(backend, TOKEN).await;
    sms_rule(&app, "news").await;
    app.put_user("ada", json!({"phone": "+1 (415) 555-0101"})).await;
    app.put_user("nophone", json!({"email": "n@example.com"})).await;

    // Sent, with Twilio's SID, the documented fields and a signed-URL callback.
    trigger(&app, "news", "ada").await;
    let m = app.settled("ada", 1).await;
    assert_eq!(m["status"], "sent", "{m}");
    let detail = m["history"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("SM0123456789abcdef0123456789abcdef"), "{detail}");
    assert_eq!(m["history"][0]["transport"], "sms: Twilio");
    assert_eq!(m["history"][0]["provider_id"], "SM0123456789abcdef0123456789abcdef", "the sid, for Twilio's console");
    let form = received.lock().unwrap().last().cloned().unwrap();
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
    assert_eq!(
        (field("To"), field("From"), field("Body")),
        ("+14155550101".into(), "+14155550100".into(), "Code 42".into())
    );
    let outbox = m["outbox_id"].as_str().unwrap().to_owned();
    assert_eq!(field("StatusCallback"), format!("{PUBLIC}/v1/sms/status/twilio?outbox={outbox}"));

    // No phone: suppressed, nothing sent.
    trigger(&app, "news", "nophone").await;
    let m = app.settled("nophone", 1).await;
    assert_eq!(
        (m["status"].as_str(), m["detail"].as_str()),
        (Some("suppressed"), Some("no phone number for this user"))
    );
    assert_eq!(received.lock().unwrap().len(), 1);

    // A forged status callback: 403, nothing recorded.
    let path = format!("/v1/sms/status/twilio?outbox={outbox}");
    let report = [
        ("AccountSid", SID),
        ("MessageSid", "SM0123456789abcdef0123456789abcdef"),
        ("MessageStatus", "delivered"),
        ("To", "+14155550101"),
    ];
    assert_eq!(twilio_post(&app, &path, &report, "forged-token").await.status(), 403);
    let (_, bounces) = app.get("/v1/bounces").await;
    assert_eq!(bounces["bounces"].as_array().unwrap().len(), 0, "{bounces}");
    // A signed one is kept as evidence; the row stays sent.
    assert_eq!(twilio_post(&app, &path, &report, TOKEN).await.status(), 204);
    assert_eq!(twilio_post(&app, &path, &report, TOKEN).await.status(), 204, "a repeat is harmless");
    let (_, bounces) = app.get("/v1/bounces").await;
    let kept = bounces["bounces"].as_array().unwrap();
    assert_eq!(kept.len(), 1, "{bounces}");
    assert_eq!((kept[0]["status"].as_str(), kept[0]["outbox_id"].as_str()), (Some("delivered"), Some(outbox.as_str())));
    assert_eq!(app.settled("ada", 1).await["status"], "sent");

    // STOP, forged: nothing changes. Signed: the number is suppressed.
    let stop = [("AccountSid", SID), ("From", "+14155550101"), ("To", "+14155550100"), ("Body", " stop ")];
    assert_eq!(twilio_post(&app, "/v1/sms/inbound/twilio", &stop, "forged-token").await.status(), 403);
    assert!(suppressions(&app).await.is_empty());
    let resp = twilio_post(&app, "/v1/sms/inbound/twilio", &stop, TOKEN).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("<Response/>"));
    let s = suppressions(&app).await;
    assert_eq!((s.len(), s[0]["reason"].as_str(), s[0]["address_kind"].as_str()), (1, Some("stop"), Some("phone")));

    // The next trigger is suppressed naming the STOP, with no provider call.
    trigger(&app, "news", "ada").await;
    let m = app.settled("ada", 2).await;
    assert_eq!(m["status"], "suppressed", "{m}");
    let why = m["detail"].as_str().unwrap();
    assert!(why.contains("stop") && why.contains("texted \"stop\""), "{why}");
    assert_eq!(received.lock().unwrap().len(), 1, "no provider call for a STOPped number");

    // HELP is answered in TwiML.
    let help = [("AccountSid", SID), ("From", "+14155550101"), ("To", "+14155550100"), ("Body", "HELP")];
    let body = twilio_post(&app, "/v1/sms/inbound/twilio", &help, TOKEN).await.text().await.unwrap();
    assert!(body.contains("<Message>Herald alerts. Reply STOP to stop.</Message>"), "{body}");

    // START lifts it; the next trigger is sent.
    let start = [("AccountSid", SID), ("From", "+14155550101"), ("To", "+14155550100"), ("Body", "Start")];
    assert_eq!(twilio_post(&app, "/v1/sms/inbound/twilio", &start, TOKEN).await.status(), 200);
    assert!(suppressions(&app).await.is_empty());
    trigger(&app, "news", "ada").await;
    assert_eq!(app.settled("ada", 3).await["status"], "sent");
    assert_eq!(received.lock().unwrap().len(), 2);

    // An undelivered report with a permanent carrier code marks the number
    // invalid and adds "bounced" to the send log; START does not lift it.
    let m = app.settled("ada", 3).await;
    let path = format!("/v1/sms/status/twilio?outbox={}", m["outbox_id"].as_str().unwrap());
    let undelivered = [
        ("AccountSid", SID),
        ("MessageSid", "SM0123456789abcdef0123456789abcdef"),
        ("MessageStatus", "undelivered"),
        ("ErrorCode", "30005"),
        ("To", "+14155550101"),
    ];
    assert_eq!(twilio_post(&app, &path, &undelivered, TOKEN).await.status(), 204);
    let m = app.settled("ada", 3).await;
    let statuses: Vec<&str> = m["history"].as_array().unwrap().iter().map(|h| h["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["sent", "bounced"], "{m}");
    assert_eq!(suppressions(&app).await[0]["reason"], "hard_bounce");
    assert_eq!(twilio_post(&app, "/v1/sms/inbound/twilio", &start, TOKEN).await.status(), 200);
    assert_eq!(suppressions(&app).await.len(), 1, "START lifts only a STOP");
    app.stop().await;
}

/// The statuses of `user_id`'s one message's send log, oldest first, and
/// the message itself.
async fn history(app: &App, user_id: &str) -> (Vec<String>, Value) {
    let m = app.settled(user_id, 1).await;
    let statuses = m["history"].as_array().unwrap().iter().map(|h| h["status"].as_str().unwrap().to_owned()).collect();
    (statuses, m)
}

/// Twilio's status callbacks become send-log rows for the message (issue
/// 30), while the message stays `sent`: `delivered`; `undelivered` for
/// Twilio's `undelivered` and `failed` with the carrier code in words; a
/// permanent code `bounced` alone, with the number suppressed. Intermediate
/// states add nothing; a callback posted twice adds one row; a forged one
/// none.
async fn delivery_reports_are_rows_in_the_send_log(backend: Backend) {
    let (app, _received) = start(backend, TOKEN).await;
    sms_rule(&app, "news").await;
    let users = [("ada", "+14155550101"), ("bob", "+14155550102"), ("cy", "+14155550103"), ("dee", "+14155550104")];
    for (user, phone) in users {
        app.put_user(user, json!({"phone": phone})).await;
        trigger(&app, "news", user).await;
    }
    let mut outbox = std::collections::HashMap::new();
    for (user, _) in users {
        let (statuses, m) = history(&app, user).await;
        assert_eq!(statuses, ["sent"], "{m}");
        outbox.insert(user, m["outbox_id"].as_str().unwrap().to_owned());
    }
    const SM: &str = "SM0123456789abcdef0123456789abcdef";
    let report = |user: &str, status: &'static str, code: Option<&'static str>| {
        let phone = users.iter().find(|(u, _)| *u == user).unwrap().1;
        let mut form = vec![("AccountSid", SID), ("MessageSid", SM), ("MessageStatus", status), ("To", phone)];
        form.extend(code.map(|c| ("ErrorCode", c)));
        (format!("/v1/sms/status/twilio?outbox={}", outbox[user]), form)
    };

    // Delivered: forged, nothing; signed twice, one row; the message stays sent.
    let (path, form) = report("ada", "delivered", None);
    assert_eq!(twilio_post(&app, &path, &form, "forged-token").await.status(), 403);
    assert_eq!(history(&app, "ada").await.0, ["sent"], "a forged report adds nothing");
    // An intermediate state is evidence only.
    let (path, sent) = report("ada", "sent", None);
    assert_eq!(twilio_post(&app, &path, &sent, TOKEN).await.status(), 204);
    assert_eq!(history(&app, "ada").await.0, ["sent"], "Twilio's `sent` says nothing of the handset");
    assert_eq!(twilio_post(&app, &path, &form, TOKEN).await.status(), 204);
    assert_eq!(twilio_post(&app, &path, &form, TOKEN).await.status(), 204, "Twilio retrying its callback");
    let (statuses, m) = history(&app, "ada").await;
    assert_eq!(statuses, ["sent", "delivered"], "{m}");
    assert_eq!(m["status"], "sent", "the message's own status does not change: {m}");
    let delivered = &m["history"][1];
    assert_eq!(
        (delivered["detail"].as_str(), delivered["provider_id"].as_str()),
        (Some("Twilio: delivered"), Some(SM))
    );
    assert_eq!(delivered["transport"], "twilio");

    // Undelivered with a passing carrier code: the code in words, the number left alone.
    let (path, form) = report("bob", "undelivered", Some("30003"));
    assert_eq!(twilio_post(&app, &path, &form, TOKEN).await.status(), 204);
    let (statuses, m) = history(&app, "bob").await;
    assert_eq!((statuses, m["status"].as_str()), (vec!["sent".to_owned(), "undelivered".into()], Some("sent")), "{m}");
    assert_eq!(m["history"][1]["detail"], "Twilio: undelivered (30003 unreachable handset)");

    // Twilio's `failed` is undelivered too, in its own word.
    let (path, form) = report("cy", "failed", Some("30008"));
    assert_eq!(twilio_post(&app, &path, &form, TOKEN).await.status(), 204);
    let (statuses, m) = history(&app, "cy").await;
    assert_eq!(statuses, ["sent", "undelivered"], "{m}");
    assert_eq!(m["history"][1]["detail"], "Twilio: failed (30008 unknown error)");
    assert!(suppressions(&app).await.is_empty(), "neither code says the number is invalid");

    // A permanent code: `bounced` and nothing else, once, and the number suppressed.
    let (path, form) = report("dee", "undelivered", Some("30005"));
    assert_eq!(twilio_post(&app, &path, &form, TOKEN).await.status(), 204);
    assert_eq!(twilio_post(&app, &path, &form, TOKEN).await.status(), 204);
    let (statuses, m) = history(&app, "dee").await;
    assert_eq!((statuses, m["status"].as_str()), (vec!["sent".to_owned(), "bounced".into()], Some("sent")), "{m}");
    assert_eq!(m["history"][1]["detail"], "Twilio: undelivered (30005 unknown destination handset)");
    let s = suppressions(&app).await;
    assert_eq!(
        (s.len(), s[0]["reason"].as_str(), s[0]["address_kind"].as_str()),
        (1, Some("hard_bounce"), Some("phone"))
    );

    // Every report, the intermediate one too, is kept as evidence once.
    let (_, bounces) = app.get("/v1/bounces").await;
    assert_eq!(bounces["bounces"].as_array().unwrap().len(), 5, "{bounces}");
    app.stop().await;
}

async fn twilio_answers_become_outcomes_retry_after_and_readyz(backend: Backend) {
    let (app, received) = start(backend, TOKEN).await;
    sms_rule(&app, "news").await;
    sms_rule(&app, "transactional").await;
    app.put_user("optout", json!({"phone": "+14155550110"})).await;
    app.put_user("invalid", json!({"phone": "+14155550111"})).await;
    app.put_user("busy", json!({"phone": "+14155550112"})).await;

    // 21610 at the provider: suppressed, and the number suppressed as a STOP.
    trigger(&app, "news", "optout").await;
    let m = app.settled("optout", 1).await;
    assert_eq!(m["status"], "suppressed", "{m}");
    assert!(m["detail"].as_str().unwrap().contains("21610"), "{m}");
    assert_eq!(suppressions(&app).await[0]["reason"], "stop");
    // A transactional text still goes to a STOPped number (Twilio refuses it again here).
    trigger(&app, "transactional", "optout").await;
    app.settled("optout", 2).await;
    assert_eq!(received.lock().unwrap().len(), 2, "the transactional text was attempted");

    // 21211: failed, the number marked invalid.
    trigger(&app, "news", "invalid").await;
    let m = app.settled("invalid", 1).await;
    assert_eq!(m["status"], "failed", "{m}");
    assert!(m["detail"].as_str().unwrap().contains("21211"), "{m}");
    assert!(suppressions(&app).await.iter().any(|s| s["reason"] == "hard_bounce"));

    // 429 with Retry-After: 3 is retried three seconds later, not after the flat five minutes.
    let before = chrono::Utc::now();
    trigger(&app, "news", "busy").await;
    let m = app.settled("busy", 1).await;
    App::assert_retried_after(&m, before, 2_000..=8_000);
    app.stop().await;

    // A refused auth token: failed, and /readyz names the provider.
    let (app, _received) = start(backend, "not-the-token").await;
    sms_rule(&app, "news").await;
    app.put_user("ada", json!({"phone": "+14155550101"})).await;
    assert_eq!(app.readyz().await.0, 200);
    trigger(&app, "news", "ada").await;
    let m = app.settled("ada", 1).await;
    assert_eq!(m["status"], "failed", "{m}");
    let (status, body) = app.readyz().await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("sms: Twilio") && body.contains("20003"), "{body}");
    app.stop().await;
}

/// Without `[sms]` or `[slack]`, a rule on either can be saved off (with
/// a warning naming the setting) but not turned on.
async fn an_unconfigured_channel_keeps_its_rules_off() {
    let app = App::start().await;
    for (channel, setting, locale) in
        [("sms", "sms.transport", json!({"text": "t"})), ("slack", "slack.bot_token", json!({"text": "t"}))]
    {
        let rule = |enabled: bool| {
            json!({"name": channel, "trigger_type": "a.b", "channel": channel, "category": "news", "enabled": enabled,
                   "template": {"fallback_locale": "en", "locales": {"en": locale.clone()}}})
        };
        let (status, body) = app.post("/v1/rules", rule(true)).await;
        assert_eq!(status, 422, "{body}");
        let e = &body["errors"][0];
        assert_eq!(e["field"], "channel", "{body}");
        assert!(e["message"].as_str().unwrap().contains(setting), "{body}");
        let (status, body) = app.post("/v1/rules", rule(false)).await;
        assert_eq!(status, 201, "{body}");
        assert!(body["warnings"][0].as_str().unwrap().contains(setting), "{body}");
    }
    app.stop().await;
}

/// The SMS rule checks: a text over `sms.max_segments` with an empty
/// payload is refused at save, and the API's dry run names each text's
/// encoding and segments.
async fn sms_rules_are_measured_in_segments(backend: Backend) {
    let (app, _received) = start(backend, TOKEN).await;
    // 250 × € is 500 septets (€ counts double in GSM-7): four segments of 153.
    let long = "€".repeat(250);
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": "long", "trigger_type": "a.b", "channel": "sms", "category": "news",
                   "template": {"fallback_locale": "en", "locales": {"en": {"text": long}}}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let e = &body["errors"][0];
    assert_eq!(e["field"], "template.locales.en.text", "{body}");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("4 segments of GSM-7") && message.contains("sms.max_segments"), "{body}");
    // So is an inbox rule's SMS follow-up, named by its step.
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": "long follow-up", "trigger_type": "a.b", "channel": "inbox", "category": "news",
                   "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}},
                   "escalate": [{"after": 60, "unless": "read", "channel": "sms",
                                 "template": {"fallback_locale": "en", "locales": {"en": {"text": long}}}}]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["field"], "escalate[0].template.locales.en.text", "{body}");

    // The API's dry run measures each text as the worker would render it.
    let (status, rule) = app
        .post(
            "/v1/rules",
            json!({"name": "hello", "trigger_type": "greet.happened", "channel": "sms", "category": "news",
                   "template": {"fallback_locale": "en", "locales": {"en": {"text": "Hi {{ payload.name }}"}}}}),
        )
        .await;
    assert_eq!(status, 201, "{rule}");
    // An emoji is two UTF-16 units and forces UCS-2: 3 + 2 + 70 = 75 units,
    // over 70, so two segments of 67.
    let wide = format!("😀{}", "a".repeat(70));
    for (user, name) in [("plain", "Ada"), ("wide", wide.as_str())] {
        app.trigger(json!({"type": "greet.happened", "user_id": user, "payload": {"name": name}})).await;
    }
    let (status, preview) = app.get(&format!("/v1/rules/{}/preview", rule["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{preview}");
    let cost = |user: &str| {
        let item = preview["results"].as_array().unwrap().iter().find(|r| r["user_id"] == user).cloned();
        item.unwrap_or_else(|| panic!("no preview for {user}: {preview}"))["sms"].clone()
    };
    assert_eq!(cost("plain"), json!({"encoding": "GSM-7", "segments": 1, "units": 6, "within_max_segments": true}));
    assert_eq!(cost("wide"), json!({"encoding": "UCS-2", "segments": 2, "units": 75, "within_max_segments": true}));
    app.stop().await;
}

/// `sms.rate` is shared through the database: two instances at 2/s hand
/// out two texts a second between them, and tell the third when to come
/// back.
async fn the_rate_is_shared_by_instances(backend: Backend) {
    use herald::clock::Millis;
    use herald::delivery::channel::sms::rate::SharedRate;
    let db = common::TestDb::new(backend).await;
    let other: std::sync::Arc<dyn herald::store::Store> = std::sync::Arc::new(db.another_instance().await);
    let one = SharedRate::new(db.arc(), 2.0, "sms: Twilio");
    let two = SharedRate::new(other, 2.0, "sms: Twilio");
    let now = Millis(1_800_000_000_000);
    assert_eq!(one.take("row-1", now).await.unwrap(), None);
    assert_eq!(two.take("row-2", Millis(now.0 + 10)).await.unwrap(), None);
    let wait = two.take("row-3", Millis(now.0 + 20)).await.unwrap().expect("the third waits");
    // A slot is free once its last use is more than the window ago.
    assert_eq!(wait, Duration::from_millis(981), "until the first slot frees, a second after it was taken");
    assert_eq!(one.take("row-3", Millis(now.0 + 1_001)).await.unwrap(), None, "and then it goes");
    db.cleanup().await;
}

/// A burst longer than `worker.max_attempts` windows of `sms.rate` goes
/// out at the rate, every text sent: a text waiting for a slot is held,
/// which is not an attempt, rather than retried until it gives up.
async fn a_burst_over_the_rate_is_held_not_failed(backend: Backend) {
    use herald::clock::{Clock, ManualClock, SystemClock};
    use herald::delivery::worker::WorkerConfig;
    let db = common::TestDb::new(backend).await;
    let (addr, received) = double().await;
    let mut config = herald::config::Config::default();
    config.sms.transport = Some(format!("twilio+http://{SID}:{TOKEN}@{addr}"));
    config.sms.from = Some("+14155550100".into());
    config.sms.rate = Some(1.0);
    let clock = ManualClock::at(SystemClock.now());
    let dyn_clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(clock.clone());
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let sms = herald::app::sms_channel(&config, db.arc(), dyn_clock, keys, Default::default()).unwrap();
    let registry =
        herald::app::configured_registry(&config, herald::app::ConfiguredChannels { sms, ..Default::default() });
    let worker =
        common::worker(db.arc(), registry, &clock, WorkerConfig { max_attempts: 2, ..WorkerConfig::default() });
    let rows: Vec<_> = (0..4)
        .map(|i| {
            common::keyed_row(
                "u",
                "sms",
                format!("burst:{i}"),
                json!({"to": format!("+1415555010{i}"), "text": "x"}),
                clock.now(),
            )
        })
        .collect();
    common::enqueue_all(&*db.arc(), &rows, clock.now()).await;
    let (mut sent, mut held, mut failed) = (0, 0, 0);
    for _ in 0..8 {
        let report = worker.tick().await.unwrap();
        (sent, held, failed) = (sent + report.sent, held + report.held, failed + report.failed);
        clock.advance(Duration::from_millis(1_000));
    }
    assert_eq!((sent, failed), (4, 0), "held {held} times");
    assert!(held >= 3, "the three behind the first waited: {held}");
    assert_eq!(received.lock().unwrap().len(), 4);
    db.cleanup().await;
}

/// Quiet hours and a frequency cap apply to SMS as to any channel (a text
/// at night is what quiet hours are for): a text in the recipient's quiet
/// hours waits for them to end, with no call to the provider, and one over
/// the cap ends `suppressed` naming it.
async fn quiet_hours_and_a_cap_apply_to_texts(backend: Backend) {
    use herald::clock::{Clock, ManualClock, Millis, SystemClock};
    let (addr, received) = double().await;
    let transport = format!("twilio+http://{SID}:{TOKEN}@{addr}");
    let configure = |c: &mut herald::config::Config| {
        c.sms.transport = Some(transport.clone());
        c.sms.from = Some("+14155550100".into());
    };
    let app = App::start_on(backend, configure).await;
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": "news", "trigger_type": "news.happened", "channel": "sms", "category": "news",
                   "enabled": true, "throttle": {"limit": 1, "per": 86400},
                   "template": {"fallback_locale": "en", "locales": {"en": {"text": "News {{ payload.n }}"}}}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // Quiet from an hour before now until an hour after, in UTC (a moment
    // ahead of this process: `serve` dates triggers by the database's clock).
    let now = Millis(SystemClock.now().0 + 2_000);
    let hhmm = |m: Millis| chrono::DateTime::from_timestamp_millis(m.0).unwrap().format("%H:%M").to_string();
    let hour = Duration::from_secs(3600);
    let ada = json!({"phone": "+14155550101", "timezone": "UTC",
        "quiet_hours": {"from": hhmm(Millis(now.0 - 3_600_000)), "until": hhmm(now.plus(hour))}});
    let (status, body) = app.call(reqwest::Method::PUT, "/v1/users/ada", Some(ada)).await;
    assert!(status < 300, "{body}");
    trigger(&app, "news", "ada").await;
    trigger(&app, "news", "ada").await;

    let clock = ManualClock::at(now);
    let mut config = common::app::test_config(&app.db);
    configure(&mut config);
    let dyn_clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(clock.clone());
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let sms = herald::app::sms_channel(&config, app.db.arc(), dyn_clock, keys, Default::default()).unwrap();
    let registry =
        herald::app::configured_registry(&config, herald::app::ConfiguredChannels { sms, ..Default::default() });
    let worker = common::worker(app.db.arc(), registry, &clock, herald::delivery::worker::WorkerConfig::default());
    let report = worker.tick().await.unwrap();
    assert_eq!((report.held, report.sent), (2, 0), "{report:?}");
    assert!(received.lock().unwrap().is_empty(), "nothing texted in quiet hours");
    let (_, sends) = app.get("/v1/users/ada/sends").await;
    for m in sends["messages"].as_array().unwrap() {
        assert_eq!(m["status"], "scheduled", "{sends}");
        assert!(m["detail"].as_str().unwrap().contains("quiet hours"), "{sends}");
    }

    clock.set(now.plus(hour).plus(Duration::from_secs(61)));
    let report = worker.tick().await.unwrap();
    assert_eq!((report.sent, report.suppressed), (1, 1), "{report:?}");
    assert_eq!(received.lock().unwrap().len(), 1, "one text, the cap's one");
    let (_, sends) = app.get("/v1/users/ada/sends").await;
    let capped = sends["messages"].as_array().unwrap().iter().find(|m| m["status"] == "suppressed").cloned();
    let capped = capped.unwrap_or_else(|| panic!("one suppressed: {sends}"));
    assert!(capped["history"][0]["detail"].as_str().unwrap().contains("frequency cap"), "{capped}");
    app.stop().await;
}

/// `http.public_url` written with capitals and the default port: Twilio
/// signs the URL Herald gave it (`https://herald.example/…`, as a parsed
/// URL prints), and Herald checks the signature against the same, not
/// against the setting as written (which refused every callback).
async fn a_public_url_written_unusually_still_checks_twilios_signature() {
    let (addr, _received) = double().await;
    let app = App::start_on(Backend::Sqlite, |c| {
        c.sms.transport = Some(format!("twilio+http://{SID}:{TOKEN}@{addr}"));
        c.sms.from = Some("+14155550100".into());
        c.http.public_url = Some("https://HERALD.Example:443/".into());
    })
    .await;
    let stop = [("AccountSid", SID), ("From", "+14155550101"), ("To", "+14155550100"), ("Body", "STOP")];
    assert_eq!(twilio_post(&app, "/v1/sms/inbound/twilio", &stop, TOKEN).await.status(), 200);
    assert_eq!(suppressions(&app).await.len(), 1);
    app.stop().await;
}

/// `herald bench --channel sms|slack` drains through the channel to its
/// in-process double: every row sent, every request answered.
async fn the_bench_drains_through_both_channels() {
    for channel in ["sms", "slack"] {
        let opts = herald::tooling::bench::BenchOptions { rows: 200, channel: channel.into(), ..Default::default() };
        let report = herald::tooling::bench::run(&opts).await.unwrap();
        assert_eq!(report.sent, 200, "{channel}: {report:?}");
        assert_eq!(report.messaging.unwrap().received, 200, "{channel}");
    }
}

fn main() -> std::process::ExitCode {
    let mut trials = per_backend_tests![
        a_text_goes_through_twilio_and_stop_start_and_reports_come_back,
        delivery_reports_are_rows_in_the_send_log,
        twilio_answers_become_outcomes_retry_after_and_readyz,
        sms_rules_are_measured_in_segments,
        quiet_hours_and_a_cap_apply_to_texts,
        the_rate_is_shared_by_instances,
        a_burst_over_the_rate_is_held_not_failed,
    ];
    trials.extend(named_tests![
        a_public_url_written_unusually_still_checks_twilios_signature,
        an_unconfigured_channel_keeps_its_rules_off,
        the_bench_drains_through_both_channels
    ]);
    common::harness::main(trials)
}
