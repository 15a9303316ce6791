//! The `push` channel end to end, on each database: a rule, a user's
//! devices registered through the API, a trigger, the worker, and a Web
//! Push service that verifies the VAPID token and decrypts like a browser
//! (`herald::tooling::push_receiver`) beside endpoints that answer 410,
//! 429 and 403. What a user of Herald would check: the notification's
//! fields as the device decrypts them, the row's status and its send-log
//! detail per device, the dead device removed with who and why, a retry
//! after the push service's `Retry-After` and not before, "no push
//! subscription for this user" as the reason, and `/readyz` naming a
//! refused credential.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::app::App;
use common::{Backend, harness};
use herald::clock::{Clock, ManualClock, Millis, SystemClock};
use herald::delivery::channel::push::vapid::generate_key_pair;
use herald::delivery::health::ChannelHealth;
use herald::delivery::worker::WorkerConfig;
use herald::store::{HistoryStore, InboxStore, OperatorStore, PushDeviceStore, RuleStore, Store};
use herald::tooling::push_receiver::{BenchDevice, PushReceiver};
use serde_json::json;

/// A push service's other answers: `/gone` 410 always, `/limited` 429 with
/// `Retry-After: 1` the first time and 201 after, `/forbidden` 403 (a VAPID
/// key it does not accept).
async fn other_answers() -> (String, Arc<AtomicUsize>) {
    let limited = Arc::new(AtomicUsize::new(0));
    let count = limited.clone();
    let app = axum::Router::new()
        .route(
            "/gone",
            axum::routing::post(|| async { (StatusCode::GONE, "push subscription has unsubscribed or expired.") }),
        )
        .route(
            "/limited",
            axum::routing::post(move || {
                let count = count.clone();
                async move {
                    if count.fetch_add(1, Ordering::SeqCst) == 0 {
                        (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "slow down").into_response()
                    } else {
                        StatusCode::CREATED.into_response()
                    }
                }
            }),
        )
        .route("/forbidden", axum::routing::post(|| async { (StatusCode::FORBIDDEN, "invalid JWT provided") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, limited)
}

/// A moment after the triggers just sent: `serve` dates them by the
/// database's clock, which may run a little ahead of this process's.
fn after_triggers() -> Millis {
    Millis(SystemClock.now().0 + 2_000)
}

struct Setup {
    app: App,
    config: herald::config::Config,
    receiver: PushReceiver,
    devices: Vec<BenchDevice>,
    others: String,
    limited: Arc<AtomicUsize>,
}

async fn setup(backend: Backend, worker_in_serve: bool) -> Setup {
    setup_with(backend, worker_in_serve, |_| {}).await
}

/// [`setup`] with more configuration (an SMTP relay, for a chain that
/// escalates to email after push).
async fn setup_with(backend: Backend, worker_in_serve: bool, more: impl Fn(&mut herald::config::Config)) -> Setup {
    let (private, public) = generate_key_pair();
    let (receiver, devices) = PushReceiver::start(3, &public).await.unwrap();
    let (others, limited) = other_answers().await;
    let configure = |c: &mut herald::config::Config| {
        c.push.vapid_private_key = Some(private.clone());
        c.push.vapid_subject = Some("mailto:ops@example.com".into());
        c.push.allow_private_networks = true;
        c.worker.enabled = worker_in_serve;
        c.worker.poll = Duration::from_millis(50);
        more(c);
    };
    let app = App::start_on(backend, configure).await;
    let mut config = common::app::test_config(&app.db);
    configure(&mut config);
    Setup { app, config, receiver, devices, others, limited }
}

impl Setup {
    /// A worker with the configured push channel (and email, when the
    /// configuration has a relay), on `clock`.
    fn worker(&self, clock: &ManualClock) -> herald::delivery::worker::Worker {
        let clock_arc: Arc<dyn Clock> = Arc::new(clock.clone());
        let push =
            herald::app::push_channel(&self.config, self.app.db.arc(), clock_arc.clone(), ChannelHealth::default())
                .unwrap();
        let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
        let email = herald::app::email_channel(
            &self.config,
            self.app.db.arc(),
            clock_arc,
            keys,
            herald::metrics::Metrics::new(),
        )
        .unwrap();
        let channels = herald::app::ConfiguredChannels { push, email, ..Default::default() };
        let registry = herald::app::configured_registry(&self.config, channels);
        common::worker(self.app.db.arc(), registry, clock, WorkerConfig::default())
    }

    async fn register(&self, user: &str, endpoint: &str, keys: &BenchDevice, label: Option<&str>) -> String {
        let mut body = json!({"endpoint": endpoint, "keys": {"p256dh": keys.p256dh, "auth": keys.auth}});
        if let Some(l) = label {
            body["label"] = json!(l);
        }
        let (status, device) = self.app.post(&format!("/v1/users/{user}/push-subscriptions"), body).await;
        assert_eq!(status, 201, "{device}");
        device["id"].as_str().unwrap().to_owned()
    }

    async fn push_rule(&self) {
        let rule = json!({
            "name": "Export ready", "trigger_type": "export.ready", "channel": "push", "category": "exports",
            "enabled": true, "push": {"ttl": 600, "urgency": "high"},
            "template": {"fallback_locale": "en", "locales": {"en": {
                "title": "Export {{ payload.name }} ready",
                "body": "{{ payload.rows }} rows",
                "url": "https://app.example/exports/{{ payload.id }}"
            }}}
        });
        let (status, body) = self.app.post("/v1/rules", rule).await;
        assert_eq!(status, 201, "{body}");
    }

    async fn trigger(&self, user: &str) {
        let body = json!({"type": "export.ready", "user_id": user, "payload": {"name": "Q3", "rows": 12, "id": 7}});
        let (status, answer) = self.app.post("/v1/triggers", body).await;
        assert_eq!(status, 202, "{answer}");
    }

    /// The user's only message: (status, outbox id, its history's details).
    async fn message(&self, user: &str) -> (String, String, Vec<String>) {
        let (_, sends) = self.app.get(&format!("/v1/users/{user}/sends")).await;
        let m = &sends["messages"][0];
        let details = m["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| format!("{}: {}", h["status"].as_str().unwrap(), h["detail"].as_str().unwrap_or("")))
            .collect();
        (m["status"].as_str().unwrap().to_owned(), m["outbox_id"].as_str().unwrap().to_owned(), details)
    }
}

async fn a_notification_reaches_each_live_device_and_a_gone_one_is_removed(backend: Backend) {
    let s = setup(backend, false).await;
    s.push_rule().await;
    let laptop = s.register("ada", &s.devices[0].endpoint, &s.devices[0], Some("Ada's laptop")).await;
    let gone = s.register("ada", &format!("{}/gone", s.others), &s.devices[1], None).await;
    s.trigger("ada").await;
    let clock = ManualClock::at(after_triggers());
    let report = s.worker(&clock).tick().await.unwrap();
    assert_eq!(report.sent, 1, "{report:?}");

    let (status, outbox_id, history) = s.message("ada").await;
    assert_eq!(status, "sent");
    let tail: String = gone.chars().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
    assert_eq!(
        history,
        [format!(
            "sent: 1 of 2 devices accepted: web (Ada's laptop): accepted; web …{tail}: removed, the push service \
             answered 410: push subscription has unsubscribed or expired."
        )]
    );

    // What the browser decrypted, field by field.
    let received = s.receiver.received();
    assert_eq!(received.len(), 1);
    let n = &received[0];
    assert_eq!(
        n.payload,
        json!({"id": outbox_id, "title": "Export Q3 ready", "body": "12 rows",
               "url": "https://app.example/exports/7", "data": {"name": "Q3", "rows": 12, "id": 7}})
    );
    assert_eq!((n.ttl, n.urgency.as_str(), n.topic.len()), (600, "high", 32));

    // The dead device is gone from the list, kept with who and why, audited.
    let (_, list) = s.app.get("/v1/users/ada/push-subscriptions").await;
    let ids: Vec<&str> = list["items"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [laptop.as_str()]);
    let all = s.app.db.store.push_devices("ada", true).await.unwrap();
    let removed = all.iter().find(|d| d.id == gone).unwrap();
    assert_eq!(removed.removed_by.as_deref(), Some("provider"));
    assert!(removed.removed_reason.as_deref().unwrap().contains("answered 410"), "{removed:?}");
    let audit = s.app.db.store.audit_for_target("user:ada", 10).await.unwrap();
    assert!(audit.iter().any(|a| a.action == "push_device.removed"), "{audit:?}");
    s.app.stop().await;
}

async fn no_device_is_the_reason_and_a_429_waits_for_its_retry_after(backend: Backend) {
    let s = setup(backend, false).await;
    s.push_rule().await;
    let clock = ManualClock::at(after_triggers());
    let worker = s.worker(&clock);

    // Nobody to push to: suppressed, naming why, nothing sent.
    s.trigger("bob").await;
    clock.set(after_triggers());
    assert_eq!(worker.tick().await.unwrap().suppressed, 1);
    let (status, _, history) = s.message("bob").await;
    assert_eq!(
        (status.as_str(), history),
        ("suppressed", vec!["suppressed: no push subscription for this user".to_owned()])
    );
    assert!(s.receiver.received().is_empty());

    // Rate limited: retried when the push service said, not five minutes on.
    s.register("cy", &format!("{}/limited", s.others), &s.devices[2], None).await;
    s.trigger("cy").await;
    clock.set(after_triggers());
    let report = worker.tick().await.unwrap();
    assert_eq!((report.sent, report.retried), (0, 1), "{report:?}");
    let row = s.app.db.store.user_history(&common::user("cy"), 10).await.unwrap().rows.remove(0);
    assert_eq!(row.due_at, Millis(clock.now().0 + 1_000), "due again after Retry-After: 1");
    assert_eq!(worker.tick().await.unwrap().sent, 0, "not before");
    clock.advance(Duration::from_millis(1_000));
    assert_eq!(worker.tick().await.unwrap().sent, 1);
    assert_eq!(s.limited.load(Ordering::SeqCst), 2);
    s.app.stop().await;
}

/// Push is a channel like the others: a user who switched it off is not
/// pushed to (the reason names it), and an unread inbox message escalates
/// to push after `after`.
async fn preferences_and_escalation_treat_push_as_a_channel(backend: Backend) {
    let s = setup(backend, false).await;
    s.push_rule().await;
    s.register("fay", &s.devices[0].endpoint, &s.devices[0], None).await;
    let prefs = json!({"preferences": {"channels": {"push": false}}});
    let (status, _) = s.app.call(reqwest::Method::PUT, "/v1/users/fay", Some(prefs)).await;
    assert_eq!(status, 201);
    s.trigger("fay").await;
    let clock = ManualClock::at(after_triggers());
    let worker = s.worker(&clock);
    assert_eq!(worker.tick().await.unwrap().suppressed, 1);
    let (status, _, history) = s.message("fay").await;
    assert_eq!(status, "suppressed");
    assert!(history[0].contains("push"), "{history:?}");
    assert!(s.receiver.received().is_empty());

    let inbox_rule = json!({
        "name": "Invoice", "trigger_type": "invoice.due", "channel": "inbox", "category": "billing", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Invoice due", "text": "t"}}},
        "escalate": {"after": 60, "unless": "read", "channel": "push", "template":
            {"fallback_locale": "en", "locales": {"en": {"title": "You have an unread invoice"}}}}
    });
    let (status, body) = s.app.post("/v1/rules", inbox_rule).await;
    assert_eq!(status, 201, "{body}");
    s.register("gus", &s.devices[1].endpoint, &s.devices[1], None).await;
    let (status, _) = s.app.post("/v1/triggers", json!({"type": "invoice.due", "user_id": "gus"})).await;
    assert_eq!(status, 202);
    clock.set(after_triggers());
    assert_eq!(worker.tick().await.unwrap().sent, 1, "the inbox message");
    clock.advance(Duration::from_secs(59));
    assert_eq!(worker.tick().await.unwrap().sent, 0, "not before `after`");
    clock.advance(Duration::from_secs(1));
    assert_eq!(worker.tick().await.unwrap().sent, 1, "the push follow-up");
    let received = s.receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].payload["title"], "You have an unread invoice");
    s.app.stop().await;
}

/// A chain "in the inbox; if unread after a minute, push; if still unread
/// after five, email", for three users: one who never reads gets the push
/// at one minute and the email at five; one who reads between the steps
/// gets the push and not the email; one who reads at once gets neither.
/// Every step is in the send log, a cancelled one naming the message read.
async fn an_unread_inbox_message_escalates_to_push_then_email(backend: Backend) {
    let sink = common::smtp::SmtpSink::start().await;
    let url = sink.url();
    let s = setup_with(backend, false, |c| {
        c.email.transport = Some(url.clone());
        c.email.from = Some("Herald Tests <news@herald.test>".into());
        c.email.address_secret = Some("a test secret of sufficient length".into());
        c.email.public_url = Some("https://herald.test".into());
    })
    .await;
    let rule = json!({
        "name": "Invoice", "trigger_type": "invoice.due", "channel": "inbox", "category": "billing", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Invoice due", "text": "t"}}},
        "escalate": [
            {"after": 60, "unless": "read", "channel": "push", "template":
                {"fallback_locale": "en", "locales": {"en": {"title": "You have an unread invoice"}}}},
            {"after": 300, "channel": "email", "template":
                {"fallback_locale": "en", "locales": {"en": {"subject": "Still unread: your invoice", "text": "See the app."}}}}
        ]
    });
    let (status, body) = s.app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["escalate"][1]["channel"], "email", "the chain reads back as given: {body}");
    for (i, u) in ["ann", "ben", "cat"].into_iter().enumerate() {
        let (status, _) = s
            .app
            .call(reqwest::Method::PUT, &format!("/v1/users/{u}"), Some(json!({"email": format!("{u}@example.com")})))
            .await;
        assert_eq!(status, 201);
        s.register(u, &s.devices[i].endpoint, &s.devices[i], None).await;
        let (status, _) = s.app.post("/v1/triggers", json!({"type": "invoice.due", "user_id": u})).await;
        assert_eq!(status, 202);
    }
    let clock = ManualClock::at(after_triggers());
    let worker = s.worker(&clock);
    assert_eq!(worker.tick().await.unwrap().sent, 3, "the inbox messages");
    let delivered = clock.now();
    let read = |u: &'static str| {
        let (store, at) = (s.app.db.store.clone(), clock.now());
        async move {
            let user = common::user(u);
            let msg = store.inbox_for_user(&user, 10).await.unwrap().remove(0);
            store.inbox_mark(&user, &msg.id, herald::store::InboxMark::Read, at).await.unwrap();
        }
    };
    read("cat").await;
    // The triggers are dated by the database's clock, a little before
    // `delivered`: a step's row may be claimed (and a read one cancelled)
    // a moment before its time, but nothing goes before its `after`.
    clock.advance(Duration::from_secs(59));
    let early = worker.tick().await.unwrap();
    assert_eq!(early.sent, 0, "nothing before the first step: {early:?}");
    clock.advance(Duration::from_secs(1));
    let report = worker.tick().await.unwrap();
    assert_eq!(report.sent, 2, "push to ann and ben: {report:?}");
    assert_eq!(early.cancelled + report.cancelled, 1, "not to cat: {early:?} {report:?}");
    assert_eq!(s.receiver.received().len(), 2);
    read("ben").await;
    clock.set(delivered.plus(Duration::from_secs(299)));
    let early = worker.tick().await.unwrap();
    assert_eq!(early.sent, 0, "{early:?}");
    assert!(sink.messages().is_empty(), "no email before the second step");
    clock.advance(Duration::from_secs(1));
    let report = worker.tick().await.unwrap();
    assert_eq!(report.sent, 1, "ann's email: {report:?}");
    assert_eq!(early.cancelled + report.cancelled, 2, "ben's and cat's emails: {early:?} {report:?}");

    // "Did they get it": each follow-up says which step of which message.
    let app = &s.app;
    let timeline = |u: &'static str| async move {
        let (_, sends) = app.get(&format!("/v1/users/{u}/sends")).await;
        let messages = sends["messages"].as_array().unwrap().clone();
        let by_channel = |c: &str| messages.iter().find(|m| m["channel"] == c).unwrap().clone();
        (by_channel("inbox"), by_channel("push"), by_channel("email"))
    };
    let (inbox, push, email) = timeline("ann").await;
    assert_eq!(inbox["follow_ups"], json!([push["outbox_id"], email["outbox_id"]]), "{inbox}");
    assert_eq!(inbox["follow_up"], push["outbox_id"], "the old field: the first step");
    for (m, step) in [(&push, 1), (&email, 2)] {
        assert_eq!(
            (&m["follow_up_of"], &m["follow_up_step"], &m["status"]),
            (&inbox["outbox_id"], &json!(step), &json!("sent")),
            "{m}"
        );
    }
    let arrived = sink.messages_per_outbox_id();
    assert_eq!(arrived.get(email["outbox_id"].as_str().unwrap()), Some(&1), "{arrived:?}");
    assert_eq!(arrived.len(), 1, "one email in all");

    let read_detail = |m: &serde_json::Value, inbox: &serde_json::Value, channel: &str| {
        assert_eq!(m["status"], "cancelled", "{m}");
        let detail = m["history"][0]["detail"].as_str().unwrap();
        assert!(detail.starts_with("read in the inbox at "), "{detail}");
        let names =
            format!("no {channel} needed (follow-up of inbox message {})", inbox["outbox_id"].as_str().unwrap());
        assert!(detail.ends_with(&names), "{detail}");
    };
    let (inbox, push, email) = timeline("ben").await;
    assert_eq!(push["status"], "sent", "{push}");
    read_detail(&email, &inbox, "email");
    let (inbox, push, email) = timeline("cat").await;
    read_detail(&push, &inbox, "push");
    read_detail(&email, &inbox, "email");

    // The dry run names every step, in order, and what cancels them.
    let (_, preview) = s.app.get(&format!("/v1/rules/{}/preview", body["id"].as_str().unwrap())).await;
    let reason = preview["results"][0]["reason"].as_str().unwrap();
    let (push_at, email_at) = (reason.find("then push at the earliest "), reason.find(", then email at the earliest "));
    assert!(push_at.is_some_and(|p| email_at.is_some_and(|e| p < e)), "{reason}");
    assert!(reason.starts_with("inbox due ") && reason.ends_with(" unless read"), "{reason}");
    s.app.stop().await;
}

/// A refused VAPID key makes `/readyz` say so in the push service's words
/// (the worker runs inside `serve`, which shares what it learns);
/// `?only=database` still answers ready.
async fn a_refused_credential_makes_readyz_name_the_provider() {
    let s = setup(Backend::Sqlite, true).await;
    s.push_rule().await;
    s.register("dee", &format!("{}/forbidden", s.others), &s.devices[0], None).await;
    s.trigger("dee").await;
    let ready = |path: &'static str| {
        let (http, url) = (s.app.http.clone(), s.app.url(path));
        async move {
            let r = http.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let mut answer = ready("/readyz").await;
    for _ in 0..200 {
        if answer.0 == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        answer = ready("/readyz").await;
    }
    assert_eq!(answer.0, 503, "{answer:?}");
    assert!(
        answer.1.contains("push: Web Push: the provider refused Herald's credential: the push service answered 403"),
        "{}",
        answer.1
    );
    assert_eq!(ready("/readyz?only=database").await.0, 200);
    let (status, _, history) = s.message("dee").await;
    assert_eq!(status, "failed", "{history:?}");
    s.app.stop().await;
}

/// Without a provider a push rule is saved off, and refused when turned on,
/// naming the setting.
async fn a_push_rule_cannot_be_turned_on_without_a_provider() {
    let app = App::start().await;
    let mut rule = json!({
        "name": "n", "trigger_type": "export.ready", "channel": "push", "category": "exports", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"title": "t"}}}
    });
    let (status, p) = app.post("/v1/rules", rule.clone()).await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("channel")), "{p}");
    assert!(p["errors"][0]["message"].as_str().unwrap().contains("push.vapid_private_key"), "{p}");
    rule["enabled"] = json!(false);
    let (status, p) = app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{p}");
    assert_eq!(app.db.store.list_rules().await.unwrap().len(), 1);

    // A push rule in email's shape, or with push options on another channel,
    // is refused by field.
    let wrong = json!({
        "name": "n", "trigger_type": "x", "channel": "push", "category": "c", "push": {"ttl": 9_999_999},
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}}
    });
    let (status, p) = app.post("/v1/rules", wrong).await;
    assert_eq!(status, 422, "{p}");
    let fields: Vec<&str> = p["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(
        fields,
        ["template.locales.en.title", "template.locales.en.subject", "template.locales.en.text", "push.ttl"],
        "{p}"
    );
    app.stop().await;
}

/// A digest on a push rule folds a burst into one notification, its title
/// rendered from the digest, as for any channel.
async fn a_digest_folds_a_burst_into_one_notification(backend: Backend) {
    let s = setup(backend, false).await;
    let rule = json!({
        "name": "Exports", "trigger_type": "export.ready", "channel": "push", "category": "exports",
        "enabled": true, "digest": {"window": 3600},
        "template": {"fallback_locale": "en", "locales": {"en": {"title": "{{ digest.count }} exports ready"}}}
    });
    let (status, body) = s.app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{body}");
    s.register("ada", &s.devices[0].endpoint, &s.devices[0], None).await;
    for _ in 0..3 {
        s.trigger("ada").await;
    }
    let clock = ManualClock::at(after_triggers());
    let worker = s.worker(&clock);
    assert_eq!(worker.tick().await.unwrap().sent, 0, "the digest waits for its window");
    clock.advance(Duration::from_secs(3601));
    let report = worker.tick().await.unwrap();
    assert_eq!(report.sent, 1, "{report:?}");
    let received = s.receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].payload["title"], "3 exports ready", "{:?}", received[0].payload);
}

/// Quiet hours and a frequency cap apply to push as to any channel: a
/// notification in the recipient's quiet hours waits for them to end,
/// with no call to the push service, and one over the cap ends
/// `suppressed` naming it.
async fn quiet_hours_and_a_cap_apply_to_push(backend: Backend) {
    let s = setup(backend, false).await;
    let rule = json!({
        "name": "Export ready", "trigger_type": "export.ready", "channel": "push", "category": "exports",
        "enabled": true, "throttle": {"limit": 1, "per": 86400},
        "template": {"fallback_locale": "en", "locales": {"en": {"title": "Export {{ payload.name }} ready"}}}
    });
    let (status, body) = s.app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{body}");
    s.register("ada", &s.devices[0].endpoint, &s.devices[0], None).await;
    // Quiet from an hour before now until an hour after, in UTC.
    let now = after_triggers();
    let hhmm = |m: Millis| chrono::DateTime::from_timestamp_millis(m.0).unwrap().format("%H:%M").to_string();
    let hour = Duration::from_secs(3600);
    let quiet = json!({"timezone": "UTC",
        "quiet_hours": {"from": hhmm(Millis(now.0 - 3_600_000)), "until": hhmm(now.plus(hour))}});
    let (status, body) = s.app.call(reqwest::Method::PUT, "/v1/users/ada", Some(quiet)).await;
    assert!(status < 300, "{body}");
    s.trigger("ada").await;
    s.trigger("ada").await;

    let clock = ManualClock::at(now);
    let worker = s.worker(&clock);
    let report = worker.tick().await.unwrap();
    assert_eq!((report.held, report.sent), (2, 0), "{report:?}");
    assert!(s.receiver.received().is_empty(), "nothing pushed in quiet hours");
    let (_, sends) = s.app.get("/v1/users/ada/sends").await;
    for m in sends["messages"].as_array().unwrap() {
        assert_eq!(m["status"], "scheduled", "{sends}");
        assert!(m["detail"].as_str().unwrap().contains("quiet hours"), "{sends}");
        assert!(m["held_until"].is_string(), "{sends}");
    }

    clock.set(now.plus(hour).plus(Duration::from_secs(61)));
    let report = worker.tick().await.unwrap();
    assert_eq!((report.sent, report.suppressed), (1, 1), "{report:?}");
    assert_eq!(s.receiver.received().len(), 1, "one notification, the cap's one");
    let (_, sends) = s.app.get("/v1/users/ada/sends").await;
    let capped = sends["messages"].as_array().unwrap().iter().find(|m| m["status"] == "suppressed").cloned();
    let capped = capped.unwrap_or_else(|| panic!("one suppressed: {sends}"));
    assert!(capped["history"][0]["detail"].as_str().unwrap().contains("frequency cap"), "{capped}");
}

fn main() -> std::process::ExitCode {
    let mut trials = per_backend_tests![
        a_notification_reaches_each_live_device_and_a_gone_one_is_removed,
        no_device_is_the_reason_and_a_429_waits_for_its_retry_after,
        preferences_and_escalation_treat_push_as_a_channel,
        an_unread_inbox_message_escalates_to_push_then_email,
        quiet_hours_and_a_cap_apply_to_push,
        a_digest_folds_a_burst_into_one_notification,
    ];
    trials.extend(named_tests![
        a_refused_credential_makes_readyz_name_the_provider,
        a_push_rule_cannot_be_turned_on_without_a_provider
    ]);
    harness::main(trials)
}
