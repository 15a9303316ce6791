//! Triggers to many on each backend: a topic's subscribers or a list of
//! users, the actor left out, expanded in chunks by one instance at a time
//! and taken over when it stops, cancelled half-way, held until `send_at`,
//! and a subscriber removed or added while the expansion runs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::app::App;
use common::{Backend, TestDb, add_rule, user, worker};
use herald::clock::{Clock, ManualClock, Millis};
use herald::delivery::worker::WorkerConfig;
use herald::planning::fan_out::{Expanded, Expander};
use herald::planning::planner::RuleBook;
use herald::store::{
    Audience, FanOutStore, InboxFilter, InboxStore, NewFanOut, RecipientStore, Store, TriggerInsert, TriggerStore,
};
use serde_json::json;

const T0: Millis = Millis(1_800_000_000_000);

backend_tests!(
    a_topic_of_ten_thousand_with_the_actor_left_out_makes_9999_inbox_messages,
    an_expansion_stopped_half_way_is_finished_by_another_instance_once_its_lease_passes,
    user_ids_with_duplicates_make_one_message_each,
    a_cancel_half_way_stops_the_expansion_and_cancels_what_was_planned,
    send_at_holds_every_message_until_then,
    a_subscriber_removed_during_expansion_is_left_out_and_one_added_after_the_trigger_too,
    rules_with_a_condition_are_evaluated_per_recipient_in_the_same_chunks,
    a_user_who_muted_the_topic_is_suppressed_saying_so_and_counted_as_muted,
    templates_see_the_actor_and_the_topic,
    a_digest_keyed_on_the_topic_folds_each_subscribers_triggers_into_one_message,
);

fn main() -> std::process::ExitCode {
    let mut trials = backend_trials();
    trials.extend(per_backend_tests![the_api_takes_exactly_one_audience_and_reports_the_whole_of_it]);
    common::harness::main(trials)
}

/// Subscribes `users` to `topic` as a host would insert them, at `at`.
async fn subscribe(db: &TestDb, topic: &str, users: impl IntoIterator<Item = String>, at: Millis) {
    let users: Vec<String> = users.into_iter().collect();
    for chunk in users.chunks(500) {
        let values = vec!["(?, ?, ?)"; chunk.len()].join(", ");
        let sql = db.store.dialect().sql(&format!(
            "INSERT INTO engagement_topic_subscriptions (topic_key, user_id, created_at) VALUES {values}"
        ));
        let mut q = sqlx::query(&sql);
        for u in chunk {
            q = q.bind(topic.to_owned()).bind(u.clone()).bind(at.0);
        }
        q.execute(db.store.pool()).await.unwrap();
    }
}

async fn unsubscribe(db: &TestDb, topic: &str, user_id: &str) {
    let sql = db.store.dialect().sql("DELETE FROM engagement_topic_subscriptions WHERE topic_key = ? AND user_id = ?");
    sqlx::query(&sql).bind(topic.to_owned()).bind(user_id.to_owned()).execute(db.store.pool()).await.unwrap();
}

fn users(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| format!("u{i:06}"))
}

fn fan_out(id: &str, audience: Audience, actor: Option<&str>, now: Millis) -> NewFanOut {
    NewFanOut {
        id: id.into(),
        trigger_type: "doc.commented".into(),
        audience,
        actor_id: actor.map(user),
        payload: json!({"doc": "Roadmap"}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: now,
        send_at: None,
    }
}

fn expander(store: Arc<dyn Store>, clock: &ManualClock, chunk: u32) -> Expander {
    let clock: Arc<dyn Clock> = Arc::new(clock.clone());
    Expander::new(store.clone(), clock, Arc::new(RuleBook::new(store)), Duration::from_secs(1)).with_chunk(chunk)
}

/// The trigger's rows: (user id, status), sorted.
async fn rows_of(db: &TestDb, trigger: &str) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> = db
        .store
        .outbox_for_trigger(trigger)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.user_id, r.status.as_str().to_owned()))
        .collect();
    rows.sort();
    rows
}

/// Runs the worker until nothing is due; answers how many it sent.
async fn drain(db: &TestDb, clock: &ManualClock) -> usize {
    let w = worker(db.arc(), herald::app::registry(), clock, WorkerConfig { batch: 1000, ..WorkerConfig::default() });
    let mut sent = 0;
    loop {
        let report = w.tick().await.unwrap();
        if report.claimed == 0 {
            return sent;
        }
        sent += report.sent;
    }
}

async fn a_topic_of_ten_thousand_with_the_actor_left_out_makes_9999_inbox_messages(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({"name": "comments"})).await;
    subscribe(db, "doc:42", users(10_000), T0).await;
    let t = fan_out("t-10k", Audience::Topic("doc:42".into()), Some("u000042"), T0);
    assert!(matches!(db.store.record_fan_out(&t, T0).await.unwrap(), TriggerInsert::Created));
    let expander = expander(db.arc(), &clock, 3_000);
    assert_eq!(expander.tick().await.unwrap(), 1);
    let state = db.store.fan_out_state("t-10k").await.unwrap().unwrap();
    assert!(state.planned_at.is_some(), "the expansion finished: {state:?}");
    assert_eq!((state.audience_size, state.expanded_count, state.planned_count), (Some(9_999), 9_999, Some(9_999)));
    // Each thousand recipients are due a millisecond after the thousand before.
    let due: Vec<Millis> = db.store.outbox_for_trigger("t-10k").await.unwrap().iter().map(|r| r.due_at).collect();
    assert_eq!((due.iter().min(), due.iter().max()), (Some(&T0), Some(&T0.plus(Duration::from_millis(9)))));
    // Each id is a UUIDv7 of the planning time, and the ids ascend with the
    // recipient's place in the audience (user-id order), chunk after chunk,
    // so the primary key takes every row at its right edge.
    let mut planned = db.store.outbox_for_trigger("t-10k").await.unwrap();
    planned.sort_by(|a, b| a.user_id.cmp(&b.user_id));
    assert!(planned.windows(2).all(|w| w[0].id < w[1].id), "ids ascend in audience order");
    for row in [&planned[0], &planned[9_998]] {
        assert_eq!(uuid::Uuid::parse_str(&row.id).unwrap().get_version_num(), 7, "{}", row.id);
        assert_eq!(row.id[..13], format!("{:08x}-{:04x}", T0.0 >> 16, T0.0 & 0xffff), "the planning time");
    }
    assert_eq!(drain(db, &clock).await, 1_000, "the first thousand are due at once");
    clock.advance(Duration::from_millis(9));
    assert_eq!(drain(db, &clock).await, 8_999);
    let rows = rows_of(db, "t-10k").await;
    assert_eq!(rows.len(), 9_999);
    assert!(rows.iter().all(|(_, s)| s == "sent"));
    assert!(!rows.iter().any(|(u, _)| u == "u000042"), "the actor is left out");
    let inbox = db.store.inbox_page(&user("u000001"), InboxFilter::Inbox, None, 10).await.unwrap();
    assert_eq!(inbox.len(), 1, "one inbox message for a subscriber");
    assert!(db.store.inbox_page(&user("u000042"), InboxFilter::Inbox, None, 10).await.unwrap().is_empty());
    let outcomes = db.store.trigger_outcomes("t-10k").await.unwrap();
    assert_eq!(outcomes.iter().map(|o| o.count).sum::<i64>(), 9_999);
    assert_eq!(expander.tick().await.unwrap(), 0, "nothing left to expand");
}

async fn an_expansion_stopped_half_way_is_finished_by_another_instance_once_its_lease_passes(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({})).await;
    add_rule(db, T0, "doc.commented", json!({"name": "second rule"})).await;
    subscribe(db, "doc:7", users(5_000), T0).await;
    db.store.record_fan_out(&fan_out("t-crash", Audience::Topic("doc:7".into()), None, T0), T0).await.unwrap();
    // The first instance plans 2 chunks of 1,000 and dies holding the lease.
    let first = expander(db.arc(), &clock, 1_000).stopping_after(2);
    assert_eq!(first.tick().await.unwrap(), 1);
    let state = db.store.fan_out_state("t-crash").await.unwrap().unwrap();
    assert_eq!((state.expanded_count, state.planned_at), (2_000, None));
    assert_eq!(state.expand_cursor.as_deref(), Some("u001999"));
    // Another instance leaves it alone while the lease holds...
    let second: Arc<dyn Store> = Arc::new(db.another_instance().await);
    let second = expander(second, &clock, 1_000);
    assert_eq!(second.tick().await.unwrap(), 0, "the lease still holds");
    // ...and takes over from the cursor once it has passed.
    clock.advance(herald::planning::fan_out::LEASE + Duration::from_secs(1));
    assert_eq!(second.tick().await.unwrap(), 1);
    let state = db.store.fan_out_state("t-crash").await.unwrap().unwrap();
    assert!(state.planned_at.is_some());
    assert_eq!((state.expanded_count, state.planned_count), (5_000, Some(10_000)));
    let rows = rows_of(db, "t-crash").await;
    assert_eq!(rows.len(), 10_000, "two rules × 5,000 subscribers, each once");
    let mut distinct: Vec<&String> = rows.iter().map(|(u, _)| u).collect();
    distinct.dedup();
    assert_eq!(distinct.len(), 5_000);
    // The first instance, back from the dead, finds it is no longer its own.
    let state = db.store.fan_out_state("t-crash").await.unwrap().unwrap();
    assert_eq!(state.expand_owner, None);
    assert_eq!(first.expand("t-crash").await.unwrap(), Expanded::Stopped);
    assert_eq!(rows_of(db, "t-crash").await.len(), 10_000);
}

async fn user_ids_with_duplicates_make_one_message_each(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({})).await;
    let ids = ["ada", "bob", "ada", "cy", "bob", "dee"].map(user).to_vec();
    db.store.record_fan_out(&fan_out("t-list", Audience::Users(ids), Some("dee"), T0), T0).await.unwrap();
    assert_eq!(expander(db.arc(), &clock, 100).tick().await.unwrap(), 1);
    let rows = rows_of(db, "t-list").await;
    let users: Vec<&str> = rows.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(users, ["ada", "bob", "cy"], "each once, the actor left out");
    let state = db.store.fan_out_state("t-list").await.unwrap().unwrap();
    assert_eq!(state.audience_size, Some(3));
    let sql = db.store.dialect().sql("SELECT COUNT(*) FROM engagement_trigger_users WHERE trigger_id = ?");
    let left: i64 = sqlx::query_scalar(&sql).bind("t-list").fetch_one(db.store.pool()).await.unwrap();
    assert_eq!(left, 0, "the list is deleted once the expansion is done");
    // A 'users' trigger cancelled before it was expanded: its list goes
    // with the cancel (the same transaction), and nothing is planned.
    let ids = ["eve", "fay"].map(user).to_vec();
    db.store.record_fan_out(&fan_out("t-list-2", Audience::Users(ids), None, T0), T0).await.unwrap();
    herald::http::trigger_report::cancel_trigger(&db.store, "t-list-2", "the test", T0).await.unwrap();
    let left: i64 = sqlx::query_scalar(&sql).bind("t-list-2").fetch_one(db.store.pool()).await.unwrap();
    assert_eq!(left, 0, "the list is deleted with the cancel");
    assert_eq!(expander(db.arc(), &clock, 100).tick().await.unwrap(), 0);
    assert!(rows_of(db, "t-list-2").await.is_empty());
}

async fn a_cancel_half_way_stops_the_expansion_and_cancels_what_was_planned(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({"delay": 3600})).await;
    subscribe(db, "doc:9", users(1_000), T0).await;
    db.store.record_fan_out(&fan_out("t-cancel", Audience::Topic("doc:9".into()), None, T0), T0).await.unwrap();
    let first = expander(db.arc(), &clock, 100).stopping_after(4);
    assert_eq!(first.tick().await.unwrap(), 1);
    assert_eq!(rows_of(db, "t-cancel").await.len(), 400);
    let cancelled = herald::http::trigger_report::cancel_trigger(&db.store, "t-cancel", "the test", T0).await.unwrap();
    assert_eq!(cancelled, 400);
    // Neither the instance holding it nor another plans any more of it.
    assert_eq!(first.expand("t-cancel").await.unwrap(), Expanded::Stopped);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(expander(db.arc(), &clock, 100).tick().await.unwrap(), 0);
    let rows = rows_of(db, "t-cancel").await;
    assert_eq!(rows.len(), 400);
    assert!(rows.iter().all(|(_, s)| s == "cancelled"));
    assert_eq!(drain(db, &clock).await, 0);
    let report = herald::http::trigger_report::TriggerReport::read(&db.store, "t-cancel").await.unwrap().unwrap();
    assert_eq!(report.state, "cancelled");
    assert_eq!(report.cancelled_by.as_deref(), Some("the test"));
    assert_eq!(report.counts.get("cancelled"), Some(&400));
    let sends = db.store.sends_for_user(&user("u000001"), 10).await.unwrap();
    assert_eq!(sends[0].detail.as_deref(), Some("trigger t-cancel cancelled through the test"));
}

async fn send_at_holds_every_message_until_then(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({"delay": 600})).await;
    let nine = T0.plus(Duration::from_secs(3 * 3600));
    let mut t = fan_out("t-later", Audience::Users(vec![user("ada"), user("bob")]), None, T0);
    t.send_at = Some(nine);
    db.store.record_fan_out(&t, T0).await.unwrap();
    expander(db.arc(), &clock, 100).tick().await.unwrap();
    let rows = db.store.outbox_for_trigger("t-later").await.unwrap();
    assert!(rows.iter().all(|r| r.due_at == nine.plus(Duration::from_secs(600))), "send_at plus the rule's delay");
    assert_eq!(drain(db, &clock).await, 0, "nothing before send_at");
    clock.set(nine);
    assert_eq!(drain(db, &clock).await, 0, "nor before the rule's delay after it");
    clock.advance(Duration::from_secs(600));
    assert_eq!(drain(db, &clock).await, 2);
}

async fn a_subscriber_removed_during_expansion_is_left_out_and_one_added_after_the_trigger_too(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({})).await;
    subscribe(db, "doc:5", users(300), T0).await;
    let recorded = T0.plus(Duration::from_secs(1));
    db.store
        .record_fan_out(&fan_out("t-churn", Audience::Topic("doc:5".into()), None, recorded), recorded)
        .await
        .unwrap();
    let first = expander(db.arc(), &clock, 100).stopping_after(1);
    first.tick().await.unwrap();
    // Mid-expansion: one planned subscriber and one not yet reached leave;
    // a new one joins at the end of the order, after the trigger.
    unsubscribe(db, "doc:5", "u000050").await;
    unsubscribe(db, "doc:5", "u000250").await;
    subscribe(db, "doc:5", ["u999999".to_owned()], T0.plus(Duration::from_secs(2))).await;
    clock.advance(herald::planning::fan_out::LEASE + Duration::from_secs(1));
    assert_eq!(expander(db.arc(), &clock, 100).tick().await.unwrap(), 1);
    let users: Vec<String> = rows_of(db, "t-churn").await.into_iter().map(|(u, _)| u).collect();
    assert_eq!(users.len(), 299);
    assert!(users.contains(&"u000050".to_owned()), "planned before they left: their message stands");
    assert!(!users.contains(&"u000250".to_owned()), "left before the expansion reached them");
    assert!(!users.contains(&"u999999".to_owned()), "subscribed after the trigger was recorded");
}

async fn rules_with_a_condition_are_evaluated_per_recipient_in_the_same_chunks(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({})).await;
    add_rule(db, T0, "doc.commented", json!({"name": "vip", "condition": "user.id < 'u000010'"})).await;
    subscribe(db, "doc:3", users(250), T0).await;
    db.store
        .record_fan_out(&fan_out("t-cond", Audience::Topic("doc:3".into()), Some("u000001"), T0), T0)
        .await
        .unwrap();
    expander(db.arc(), &clock, 100).tick().await.unwrap();
    let rows = rows_of(db, "t-cond").await;
    // 249 from the plain rule, 9 (u000000, u000002..u000009) from the other.
    assert_eq!(rows.len(), 249 + 9);
    let state = db.store.fan_out_state("t-cond").await.unwrap().unwrap();
    assert_eq!(state.planned_count, Some(258));
}

async fn the_api_takes_exactly_one_audience_and_reports_the_whole_of_it(backend: Backend) {
    let app = App::start_on(backend, |c| {
        c.planner.enabled = true;
        c.planner.poll = Duration::from_millis(20);
    })
    .await;
    let (status, _) = app.post("/v1/rules", common::app::inbox_rule("doc.commented", true)).await;
    assert_eq!(status, 201);
    subscribe(&app.db, "doc:1", users(50), Millis(0)).await;
    // Exactly one of user_id, user_ids and topic.
    for body in [
        json!({"type": "doc.commented"}),
        json!({"type": "doc.commented", "user_id": "a", "topic": "doc:1"}),
        json!({"type": "doc.commented", "user_ids": []}),
        json!({"type": "doc.commented", "user_ids": vec!["x"; 1001]}),
        json!({"type": "doc.commented", "topic": "doc 1"}),
        json!({"type": "doc.commented", "topic": "doc:1", "send_at": "2099-01-01T00:00:00Z"}),
        json!({"type": "doc.commented", "topic": "doc:1", "actor_id": ""}),
    ] {
        let (status, problem) = app.post("/v1/triggers", body.clone()).await;
        assert_eq!(status, 422, "{body} → {problem}");
    }
    let body = json!({"type": "doc.commented", "topic": "doc:1", "actor_id": "u000003", "idempotency_key": "c-1",
                      "payload": {"name": "Roadmap"}});
    let (status, answer) = app.post("/v1/triggers", body.clone()).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["state"], "expanding");
    let id = answer["trigger_id"].as_str().unwrap().to_owned();
    let (_, replay) = app.post("/v1/triggers", body.clone()).await;
    assert_eq!((replay["trigger_id"].as_str(), replay["replayed"].as_bool()), (Some(id.as_str()), Some(true)));
    let mut changed = body.clone();
    changed["topic"] = json!("doc:2");
    assert_eq!(app.post("/v1/triggers", changed).await.0, 409);
    // The expander plans it after the answer; the report follows it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let report = loop {
        let (status, report) = app.get(&format!("/v1/triggers/{id}")).await;
        assert_eq!(status, 200, "{report}");
        if report["state"] == "planned" {
            break report;
        }
        assert!(std::time::Instant::now() < deadline, "not planned in 20 s: {report}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(report["audience"], "topic");
    assert_eq!(report["audience_size"], 49);
    let counted: i64 = report["counts"].as_object().unwrap().values().map(|n| n.as_i64().unwrap()).sum();
    assert_eq!(counted, 49, "{report}");
    app.deliver().await;
    let (_, report) = app.get(&format!("/v1/triggers/{id}")).await;
    assert_eq!(report["counts"]["sent"], 49, "{report}");
    assert_eq!(report["by_channel"]["inbox"]["sent"], 49, "{report}");
    assert_eq!(app.get("/v1/triggers/nope").await.0, 404);
    let (status, cancelled) = app.post(&format!("/v1/triggers/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["cancelled"], 0, "everything was sent already");
    app.stop().await;
}

async fn a_user_who_muted_the_topic_is_suppressed_saying_so_and_counted_as_muted(db: &TestDb) {
    let clock = ManualClock::at(T0);
    add_rule(db, T0, "doc.commented", json!({})).await;
    subscribe(db, "doc:8", users(3), T0).await;
    subscribe(db, "doc:9", users(3), T0).await;
    // u000001 mutes doc:8 (and only it): the choice the preference center writes.
    let mut choices = herald::planning::recipient::UserChoices::new();
    choices.entry(herald::planning::recipient::topic_choice_key("doc:8")).or_default().insert("*".into(), false);
    db.store.merge_user_choices(&user("u000001"), &choices, T0).await.unwrap();
    for (id, topic) in [("t-8", "doc:8"), ("t-9", "doc:9")] {
        db.store.record_fan_out(&fan_out(id, Audience::Topic(topic.into()), None, T0), T0).await.unwrap();
    }
    expander(db.arc(), &clock, 100).tick().await.unwrap();
    assert_eq!(drain(db, &clock).await, 5);
    let muted: Vec<(String, String)> = rows_of(db, "t-8").await;
    assert_eq!(muted[1], ("u000001".to_owned(), "suppressed".to_owned()), "{muted:?}");
    assert!(rows_of(db, "t-9").await.iter().all(|(_, s)| s == "sent"), "another topic still reaches them");
    let sends = db.store.sends_for_user(&user("u000001"), 10).await.unwrap();
    let suppressed = sends.iter().find(|s| s.status == "suppressed").expect("a suppressed send");
    assert_eq!(suppressed.detail.as_deref(), Some("the user muted topic \"doc:8\""));
    let report = herald::http::trigger_report::TriggerReport::read(&db.store, "t-8").await.unwrap().unwrap();
    assert_eq!((report.counts.get("sent"), report.why_not.get("muted")), (Some(&2), Some(&1)), "{report:?}");
}

async fn templates_see_the_actor_and_the_topic(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let template = json!({"fallback_locale": "en", "locales": {"en": {
        "subject": "{{ actor.name }} commented on {{ payload.doc }}", "text": "in {{ trigger.topic }}"}}});
    add_rule(db, T0, "doc.commented", json!({"template": template})).await;
    let ada = herald::planning::recipient::RecipientInput { name: Some("Ada".into()), ..Default::default() };
    db.store.put_recipient(&ada.into_row(&user("ada"), T0).unwrap()).await.unwrap();
    subscribe(db, "doc:1", ["ada".to_owned(), "bob".to_owned()], T0).await;
    db.store.record_fan_out(&fan_out("t-actor", Audience::Topic("doc:1".into()), Some("ada"), T0), T0).await.unwrap();
    expander(db.arc(), &clock, 100).tick().await.unwrap();
    assert_eq!(drain(db, &clock).await, 1);
    let inbox = db.store.inbox_page(&user("bob"), InboxFilter::Inbox, None, 10).await.unwrap();
    assert_eq!((inbox[0].title.as_str(), inbox[0].body.as_deref()), ("Ada commented on Roadmap", Some("in doc:1")));
}

async fn a_digest_keyed_on_the_topic_folds_each_subscribers_triggers_into_one_message(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let rule = json!({
        "digest": {"window": 3600, "key": "trigger.topic"},
        "template": {"fallback_locale": "en", "locales": {"en": {
            "subject": "{{ digest.count }} comments", "text": "{% for i in digest.items %}{{ i.payload.n }} {% endfor %}"}}},
    });
    add_rule(db, T0, "doc.commented", rule).await;
    subscribe(db, "doc:1", users(50), T0).await;
    subscribe(db, "doc:2", users(50), T0).await;
    for (i, topic) in [(1, "doc:1"), (2, "doc:1"), (3, "doc:2")] {
        let mut t = fan_out(&format!("t-d{i}"), Audience::Topic(topic.into()), None, T0);
        t.payload = json!({"n": i});
        db.store.record_fan_out(&t, T0).await.unwrap();
        expander(db.arc(), &clock, 20).tick().await.unwrap();
    }
    let state = db.store.fan_out_state("t-d2").await.unwrap().unwrap();
    assert_eq!(state.planned_count, Some(50), "one digest item per subscriber: {state:?}");
    clock.advance(Duration::from_secs(3601));
    assert_eq!(drain(db, &clock).await, 100, "one message per subscriber per topic");
    let inbox = db.store.inbox_page(&user("u000007"), InboxFilter::Inbox, None, 10).await.unwrap();
    let mut titles: Vec<&str> = inbox.iter().map(|m| m.title.as_str()).collect();
    titles.sort();
    assert_eq!(titles, ["1 comments", "2 comments"], "doc:1's two triggers in one digest, doc:2's in another");
}
