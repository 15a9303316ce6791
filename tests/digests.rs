//! Digests and the answers about them:
//! a trigger dated in the future, the subject and the answer of a digest,
//! `herald sends` for a user with only a held message, and digests on a
//! calendar. Each test failed on the code before its fix; the clock is the
//! manual one wherever the planner or the worker reads it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::app::App;
use common::{Backend, TestDb, add_rule, at, user, worker};
use herald::clock::{Clock, ManualClock, Millis};
use herald::delivery::worker::WorkerConfig;
use herald::planning::planner::{Planner, RuleBook};
use herald::planning::recipient::RecipientInput;
use herald::store::{NewTrigger, OperatorStore, RecipientStore, RuleStore, Store, TriggerStore};
use serde_json::{Value, json};

/// A planner whose recipients without a zone are in `worker.default_timezone`
/// = Europe/Berlin, as `herald serve` configured so would plan.
fn planner_on(db: &TestDb, clock: &ManualClock) -> Planner {
    let rules = RuleBook::new(db.arc()).with_default_timezone("Europe/Berlin".parse().unwrap());
    Planner::with_rules(db.arc(), Arc::new(clock.clone()), Arc::new(rules), Duration::from_secs(1), 100)
}

async fn add_recipient(db: &TestDb, user_id: &str, body: Value, now: Millis) {
    let input: RecipientInput = serde_json::from_value(body).unwrap();
    db.store.put_recipient(&input.into_row(&user(user_id), now).unwrap()).await.unwrap();
}

/// A digest rule's extra fields: `digest` as given, a subject and body
/// that use `digest`.
fn digest_fields(digest: Value) -> Value {
    json!({
        "digest": digest,
        "template": {"fallback_locale": "en", "locales": {"en": {
            "subject": "{{ digest.count }} new comments",
            "text": "{% for i in digest.items %}{{ i.payload.n }} {% endfor %}"
        }}},
    })
}

/// A trigger as a host application inserts it (unplanned), occurring at
/// `occurred_at`, then one planner sweep at `clock`'s time.
async fn host_trigger(
    db: &TestDb,
    clock: &ManualClock,
    trigger_type: &str,
    user_id: &str,
    occurred_at: Millis,
) -> String {
    let t = NewTrigger {
        id: herald::store::new_id(),
        trigger_type: trigger_type.into(),
        user_id: user(user_id),
        payload: json!({"n": occurred_at.0}),
        idempotency_key: None,
        request_hash: None,
        occurred_at,
        send_at: None,
        actor_id: None,
    };
    db.store.insert_trigger(&t, clock.now()).await.unwrap();
    planner_on(db, clock).tick().await.unwrap();
    t.id
}

/// `herald sends` against the test's SQLite file.
fn herald_sends(db: &TestDb, user_id: &str) -> String {
    common::herald_sends(db, &["--user-id", user_id])
}

/// Item 23: a user whose only message is held by a send window was listed
/// with it, and then told "nothing was ever scheduled for user lena".
async fn herald_sends_with_only_a_held_message_does_not_say_nothing_was_scheduled() {
    let db = TestDb::new(Backend::Sqlite).await;
    // Wednesday 20:00 UTC, after the window's closing.
    let clock = ManualClock::at(at("2026-03-04T20:00:00Z"));
    add_rule(&db, clock.now(), "report", json!({"send_window": {"from": "09:00", "until": "18:00"}})).await;
    host_trigger(&db, &clock, "report", "lena", clock.now()).await;
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().held, 1);
    let text = herald_sends(&db, "lena");
    assert!(text.contains("not yet delivered (1):"), "{text}");
    assert!(text.contains("held until 2026-03-05T09:00:00.000Z"), "{text}");
    assert!(!text.contains("nothing was ever scheduled"), "{text}");
    assert!(text.contains("send log for user lena: no outcome yet"), "{text}");
    // A user with nothing at all still gets the plain answer.
    assert!(herald_sends(&db, "nobody").contains("nothing was ever scheduled for user nobody"));
    db.cleanup().await;
}

/// Item 4: one host-inserted trigger dated 30 days ahead, then three
/// current ones. All four went into one digest due in 30 days and the
/// inbox stayed empty. Now the digest's window is Herald's clock: it
/// opens when the first trigger is planned and is due an hour later, and
/// the far-future trigger is planned as if it occurred when planned,
/// saying so (a plain rule's message too).
async fn a_trigger_dated_a_month_ahead_swallows_no_digest(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    add_rule(db, clock.now(), "comment", digest_fields(json!({"window": 3600}))).await;
    add_rule(db, clock.now(), "comment", json!({"name": "plain"})).await;
    let month = Duration::from_secs(30 * 86_400);
    let future = host_trigger(db, &clock, "comment", "u1", clock.now().plus(month)).await;
    for _ in 0..3 {
        clock.advance(Duration::from_secs(60));
        host_trigger(db, &clock, "comment", "u1", clock.now()).await;
    }
    let t = db.store.get_trigger(&future).await.unwrap().unwrap();
    let detail = t.plan_detail.unwrap();
    assert!(
        detail.starts_with(
            "occurred_at 2026-04-03T10:00:00.000Z is 30days ahead of Herald's clock (2026-03-04T10:00:00.000Z), more \
             than the 5m allowed: planned as if it occurred at 2026-03-04T10:00:00.000Z"
        ),
        "{detail}"
    );
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    let report = w.tick().await.unwrap();
    assert_eq!(report.sent, 4, "the plain rule's four messages, the far-future one's too: {report:?}");
    clock.set(at("2026-03-04T10:59:59Z"));
    assert_eq!(w.tick().await.unwrap().claimed, 0, "the digest's hour is not over");
    clock.set(at("2026-03-04T11:00:00Z"));
    assert_eq!(w.tick().await.unwrap().sent, 1, "the digest, an hour after its first trigger was planned");
    let inbox = db.store.inbox_for_user(&user("u1"), 10).await.unwrap();
    let digests: Vec<&str> = inbox.iter().map(|m| m.title.as_str()).filter(|t| t.contains("new comments")).collect();
    assert_eq!(digests, ["4 new comments"]);

    // Within the skew (a host's clock 4 minutes fast) the trigger keeps its
    // occurred_at, and its digest is still due an hour after it was
    // planned, on the worker's clock: not an hour after the host's.
    let digest_of = |u: &'static str| async move {
        let rows = db.store.pending_for_user(&user(u), 10).await.unwrap();
        rows.into_iter().filter(|r| r.payload == "{}").map(|r| r.due_at).collect::<Vec<_>>()
    };
    let fast = host_trigger(db, &clock, "comment", "u2", clock.now().plus(Duration::from_secs(240))).await;
    assert_eq!(db.store.get_trigger(&fast).await.unwrap().unwrap().occurred_at, at("2026-03-04T11:04:00Z"));
    assert_eq!(digest_of("u2").await, [at("2026-03-04T12:00:00Z")]);
    // A row the planner reaches late (it was down for two hours) opens
    // a digest that collects for its whole hour from now, rather than one
    // already due that the next trigger cannot join.
    let late = clock.now().minus(Duration::from_secs(7200));
    host_trigger(db, &clock, "comment", "u3", late).await;
    clock.advance(Duration::from_secs(60));
    host_trigger(db, &clock, "comment", "u3", clock.now()).await;
    assert_eq!(digest_of("u3").await, [at("2026-03-04T12:00:00Z")], "one digest, due an hour after it opened");
}

/// Items 4 and 22 through the API: an `occurred_at` beyond the skew is a
/// 422 naming the field; one within it is taken. A trigger that goes into
/// a digest answers which digest, how many it holds and when it is due
/// (a replay too), and the send log gives the digest message its subject.
async fn the_api_refuses_a_future_occurred_at_and_says_which_digest_a_trigger_joined(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let rule = json!({
        "name": "comments", "trigger_type": "comment", "channel": "inbox", "category": "news", "enabled": true,
        "digest": {"window": 3600},
        "template": {"fallback_locale": "en", "locales": {"en": {
            "subject": "{{ digest.count }} new comments", "text": "{{ digest.items | length }}"}}},
    });
    let (status, body) = app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{body}");
    let now = chrono::Utc::now();
    let ahead = |secs: i64| (now + chrono::Duration::seconds(secs)).to_rfc3339();
    let (status, p) =
        app.post("/v1/triggers", json!({"type": "comment", "user_id": "u1", "occurred_at": ahead(30 * 86_400)})).await;
    assert_eq!(status, 422, "{p}");
    assert_eq!(p["errors"][0]["field"], "occurred_at", "{p}");
    let says = p["errors"][0]["message"].as_str().unwrap();
    assert!(says.contains("in the future") && says.contains("at most 5m ahead"), "{says}");

    let mut answers = Vec::new();
    for (i, occurred) in [Some(ahead(60)), None, None, None].into_iter().enumerate() {
        let mut t = json!({"type": "comment", "user_id": "u1", "idempotency_key": format!("k{i}")});
        if let Some(o) = occurred {
            t["occurred_at"] = json!(o);
        }
        let (status, a) = app.post("/v1/triggers", t).await;
        assert_eq!(status, 202, "{a}");
        answers.push(a);
    }
    let digest_id = answers[0]["digests"][0]["digest_id"].as_str().unwrap().to_owned();
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a["planned"], json!([]), "{a}");
        let d = &a["digests"][0];
        assert_eq!((d["digest_id"].as_str(), d["items"].as_i64()), (Some(digest_id.as_str()), Some(i as i64 + 1)));
        assert_eq!((d["channel"].as_str(), d["status"].as_str()), (Some("inbox"), Some("scheduled")), "{a}");
        let due = chrono::DateTime::parse_from_rfc3339(d["due_at"].as_str().unwrap()).unwrap();
        let hour = (due.with_timezone(&chrono::Utc) - now).num_seconds();
        assert!((3590..=3660).contains(&hour), "due an hour after the first trigger arrived, not later: {a}");
        let detail = a["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("in digest {digest_id} (inbox, {} trigger(s) so far, due ", i + 1)), "{a}");
    }
    let (_, replay) =
        app.post("/v1/triggers", json!({"type": "comment", "user_id": "u1", "idempotency_key": "k1"})).await;
    assert_eq!(replay["replayed"], true, "{replay}");
    assert_eq!(replay["digests"][0]["digest_id"], digest_id.as_str(), "{replay}");
    assert_eq!(replay["digests"][0]["items"], 4, "how many it holds now: {replay}");

    let (status, sends) = app.get("/v1/users/u1/sends").await;
    assert_eq!(status, 200, "{sends}");
    assert_eq!(sends["messages"][0]["subject"], "4 new comments", "{sends}");
    assert_eq!(sends["messages"][0]["digest_triggers"].as_array().unwrap().len(), 4, "{sends}");
    app.stop().await;
}

async fn api_digest_answers_sqlite() {
    the_api_refuses_a_future_occurred_at_and_says_which_digest_a_trigger_joined(Backend::Sqlite).await;
}

async fn api_digest_answers_postgres() {
    the_api_refuses_a_future_occurred_at_and_says_which_digest_a_trigger_joined(Backend::Postgres).await;
}

async fn api_digest_answers_mysql() {
    the_api_refuses_a_future_occurred_at_and_says_which_digest_a_trigger_joined(Backend::MySql).await;
}

/// Item 26: "a weekly digest on Monday morning" is one rule. Monday 09:00
/// in the recipient's zone (or `worker.default_timezone`, here
/// Europe/Berlin, for one without), on both sides of the spring change:
/// 08:00 UTC on 23 March (CET), 07:00 UTC on 30 March (CEST).
async fn a_weekly_digest_goes_out_monday_at_nine_local_time_across_the_spring_change(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-20T10:00:00Z")); // a Friday
    add_recipient(db, "berlin", json!({"timezone": "Europe/Berlin"}), clock.now()).await;
    add_recipient(db, "nozone", json!({}), clock.now()).await;
    add_recipient(db, "tokyo", json!({"timezone": "Asia/Tokyo"}), clock.now()).await;
    add_rule(db, clock.now(), "comment", digest_fields(json!({"schedule": {"days": ["mon"], "at": "09:00"}}))).await;
    for u in ["berlin", "nozone", "tokyo"] {
        host_trigger(db, &clock, "comment", u, clock.now()).await;
    }
    clock.set(at("2026-03-21T12:00:00Z"));
    host_trigger(db, &clock, "comment", "berlin", clock.now()).await;
    let due = |u: &'static str| async move {
        db.store.pending_for_user(&user(u), 10).await.unwrap().iter().map(|r| r.due_at).collect::<Vec<_>>()
    };
    assert_eq!(due("berlin").await, [at("2026-03-23T08:00:00Z")], "09:00 CET");
    assert_eq!(due("nozone").await, [at("2026-03-23T08:00:00Z")], "the default zone's 09:00");
    assert_eq!(due("tokyo").await, [at("2026-03-23T00:00:00Z")], "09:00 in Tokyo");
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    clock.set(at("2026-03-23T07:59:59Z"));
    assert_eq!(w.tick().await.unwrap().sent, 1, "only Tokyo's Monday has come");
    clock.set(at("2026-03-23T08:00:00Z"));
    assert_eq!(w.tick().await.unwrap().sent, 2);
    assert_eq!(db.store.inbox_for_user(&user("berlin"), 10).await.unwrap()[0].title, "2 new comments");

    // The next Friday, after the change: 09:00 CEST is 07:00 UTC.
    clock.set(at("2026-03-27T10:00:00Z"));
    host_trigger(db, &clock, "comment", "berlin", clock.now()).await;
    assert_eq!(due("berlin").await, [at("2026-03-30T07:00:00Z")], "09:00 CEST");
    clock.set(at("2026-03-30T06:59:59Z"));
    assert_eq!(w.tick().await.unwrap().claimed, 0, "not at 08:59 local");
    // A trigger in the digest's last second still joins it.
    host_trigger(db, &clock, "comment", "berlin", clock.now()).await;
    clock.set(at("2026-03-30T07:00:00Z"));
    assert_eq!(w.tick().await.unwrap().sent, 1);
    assert_eq!(db.store.inbox_for_user(&user("berlin"), 10).await.unwrap()[0].title, "2 new comments");
    // One at 09:00 itself opens next Monday's.
    host_trigger(db, &clock, "comment", "berlin", clock.now()).await;
    assert_eq!(due("berlin").await, [at("2026-04-06T07:00:00Z")]);
    let detail = db.store.triggers_for_user(&user("berlin"), 1).await.unwrap().remove(0).plan_detail.unwrap();
    assert!(detail.contains("goes into its inbox digest (schedule mon 09:00 in Europe/Berlin"), "{detail}");
}

/// Item 26's fields through the API: each bad value a 422 naming it, a
/// good schedule stored and shown, and the OpenAPI document describing the
/// schedule and a trigger's digests (item 22).
async fn digest_schedules_are_checked_by_name_and_documented() {
    let app = App::start().await;
    let rule = |digest: Value| {
        json!({
            "name": "weekly", "trigger_type": "comment", "channel": "inbox", "category": "news", "digest": digest,
            "template": {"fallback_locale": "en", "locales": {"en": {"subject": "{{ digest.count }}", "text": "t"}}},
        })
    };
    for (digest, field, says) in [
        (json!({"schedule": {"days": ["mon", "someday"], "at": "09:00"}}), "digest.schedule.days", "someday"),
        (json!({"schedule": {"days": [], "at": "09:00"}}), "digest.schedule.days", "at least one day"),
        (json!({"schedule": {"at": "9am"}}), "digest.schedule.at", "HH:MM"),
        (json!({"window": 3600, "schedule": {"at": "09:00"}}), "digest.schedule", "not both"),
        (json!({"max_items": 5}), "digest.window", "or a schedule"),
    ] {
        let (status, p) = app.post("/v1/rules", rule(digest.clone())).await;
        assert_eq!(status, 422, "{digest}: {p}");
        let hit = p["errors"].as_array().unwrap().iter().find(|e| e["field"] == field);
        assert!(hit.is_some_and(|e| e["message"].as_str().unwrap().contains(says)), "{field} / {says}: {p}");
    }
    let (status, created) = app.post("/v1/rules", rule(json!({"schedule": {"days": ["mon"], "at": "09:00"}}))).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["digest"], json!({"schedule": {"days": ["mon"], "at": "09:00"}}));
    let (status, every_day) = app.post("/v1/rules", rule(json!({"schedule": {"at": "18:30"}}))).await;
    assert_eq!(status, 201, "{every_day}");
    assert_eq!(every_day["digest"]["schedule"]["days"].as_array().unwrap().len(), 7);

    let doc: Value = app.http.get(app.url("/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["DigestInput"]["properties"]["schedule"].is_object(), "{}", schemas["DigestInput"]);
    assert!(schemas["DigestScheduleInput"]["properties"]["at"].is_object(), "{}", schemas["DigestScheduleInput"]);
    let digests = &schemas["TriggerAccepted"]["properties"]["digests"];
    assert!(digests.to_string().contains("DigestMembership"), "{digests}");
    assert!(schemas["DigestMembership"]["properties"]["due_at"].is_object(), "{}", schemas["DigestMembership"]);
    app.stop().await;
}

/// Items 22 and 26 on the operator screen: the editor's preview renders a
/// digest rule with `digest` (no false "`digest` is undefined"), lists
/// `digest` among the template's variables, and edits a schedule with the
/// API's checks.
async fn the_editor_previews_a_digest_rule_and_edits_its_schedule() {
    let app = App::start().await;
    let now = herald::clock::SystemClock.now();
    let op = herald::http::ui::session::add_operator(&app.db.store, "ops@example.com", "a long enough password", now)
        .await
        .unwrap();
    let token = "a-session-token-for-the-digest-editor-test";
    let hash = herald::http::ui::session::session_hash(token);
    app.db.store.create_session(&hash, &op, now, now.plus(Duration::from_secs(3600))).await.unwrap();
    let csrf = herald::http::ui::session::csrf_token(token);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let cookie = format!("herald_session={token}");
    let post = |fields: Vec<(&'static str, &'static str)>| {
        let (http, cookie, csrf, url) = (http.clone(), cookie.clone(), csrf.clone(), app.url("/ui/rules/new"));
        async move {
            let mut form = fields;
            form.push(("csrf", csrf.as_str()));
            let resp = http.post(url).header("cookie", cookie).form(&form).send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let blank = http.get(app.url("/ui/rules/new")).header("cookie", &cookie).send().await.unwrap();
    let blank = blank.text().await.unwrap();
    assert!(blank.contains("name=\"ds_at\"") && blank.contains("name=\"ds_day_mon\""), "{blank}");
    assert!(blank.contains("also has <code>digest</code>"), "the variables name digest: {blank}");

    let form = vec![
        ("name", "Comments"),
        ("trigger_type", "comment"),
        ("channel", "inbox"),
        ("category", "news"),
        ("delay", "0"),
        ("fallback_locale", "en"),
        ("loc0_tag", "en"),
        ("loc0_subject", "{{ digest.count }} new comments"),
        ("loc0_text", "{% for i in digest.items %}#{{ i.payload.n }} {% endfor %}"),
        ("sample_payload", "{\"n\": 7}"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut f = form.clone();
        f.extend_from_slice(extra);
        f
    };
    let (status, page) = post(with(&[("digest_window", "3600"), ("action", "preview")])).await;
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("is undefined"), "no false error: {page}");
    assert!(page.contains("<p class=\"subject\">1 new comments</p>") && page.contains("#7"), "{page}");

    let (status, page) = post(with(&[("ds_at", "9am"), ("ds_day_mon", "1"), ("action", "save")])).await;
    assert_eq!(status, 422, "{page}");
    assert!(page.contains("<code>digest.schedule.at</code>"), "{page}");
    let (status, page) = post(with(&[("ds_at", "09:00"), ("digest_window", "60"), ("action", "save")])).await;
    assert_eq!(status, 422, "{page}");
    assert!(page.contains("<code>digest.schedule</code>"), "{page}");
    let (status, page) = post(with(&[("ds_at", "09:00"), ("ds_day_mon", "1"), ("action", "save")])).await;
    assert_eq!(status, 303, "{page}");
    let rules = app.db.store.list_rules().await.unwrap();
    assert_eq!(rules[0].workflow, Some(json!({"digest": {"schedule": {"days": ["mon"], "at": "09:00"}}})));
    let page = http.get(app.url(&format!("/ui/rules/{}", rules[0].id))).header("cookie", &cookie).send().await;
    let page = page.unwrap().text().await.unwrap();
    assert!(page.contains("name=\"ds_at\" value=\"09:00\""), "{page}");
    assert!(page.contains("name=\"ds_day_mon\" value=\"1\" checked"), "{page}");
    app.stop().await;
}

/// Item 22 in `herald sends`: a digest message shows its subject, and
/// its triggers say when it goes out.
async fn herald_sends_shows_a_digests_subject_and_when_it_goes_out() {
    let db = TestDb::new(Backend::Sqlite).await;
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    add_rule(&db, clock.now(), "comment", digest_fields(json!({"window": 3600}))).await;
    let a = host_trigger(&db, &clock, "comment", "u1", clock.now()).await;
    let b = host_trigger(&db, &clock, "comment", "u1", clock.now()).await;
    let text = herald_sends(&db, "u1");
    assert!(text.contains("\"2 new comments\""), "{text}");
    assert!(text.contains(&format!("digest of 2 trigger(s), goes out 2026-03-04T11:00:00.000Z: {a}, {b}")), "{text}");
    db.cleanup().await;
}

backend_tests!(
    a_trigger_dated_a_month_ahead_swallows_no_digest,
    a_weekly_digest_goes_out_monday_at_nine_local_time_across_the_spring_change,
);

fn main() -> std::process::ExitCode {
    use common::harness::test;
    let mut trials = backend_trials();
    trials.extend([
        test("api::digest_answers_sqlite", api_digest_answers_sqlite),
        test("api::digest_answers_postgres", api_digest_answers_postgres),
        test("api::digest_answers_mysql", api_digest_answers_mysql),
        test(
            "api::digest_schedules_are_checked_by_name_and_documented",
            digest_schedules_are_checked_by_name_and_documented,
        ),
        test(
            "ui::the_editor_previews_a_digest_rule_and_edits_its_schedule",
            the_editor_previews_a_digest_rule_and_edits_its_schedule,
        ),
        test(
            "cli::herald_sends_with_only_a_held_message_does_not_say_nothing_was_scheduled",
            herald_sends_with_only_a_held_message_does_not_say_nothing_was_scheduled,
        ),
        test(
            "cli::herald_sends_shows_a_digests_subject_and_when_it_goes_out",
            herald_sends_shows_a_digests_subject_and_when_it_goes_out,
        ),
    ]);
    common::harness::main(trials)
}
