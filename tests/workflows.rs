//! Workflows on a rule on each backend, driven with the manual
//! clock: send windows and quiet hours hold messages (in the recipient's
//! zone, the grace window counted from the opening), and a frequency cap
//! holds with two instances delivering at once. And the API refusing each
//! new field's bad values with a 422 naming it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::app::App;
use common::{Backend, ScriptedChannel, TestDb, add_rule, at, user, worker};
use herald::clock::{Clock, ManualClock, Millis};
use herald::delivery::channel::{Outcome, Registry};
use herald::delivery::worker::{TickReport, WorkerConfig, WorkerParts};
use herald::domain::OutboxStatus;
use herald::planning::planner::Planner;
use herald::planning::recipient::RecipientInput;
use herald::store::{
    DigestStore, EventStore, InboxStore, NewTrigger, OperatorStore, RecipientStore, RuleStore, Store, TriggerStore,
};
use serde_json::{Value, json};

backend_tests!(
    a_message_due_at_night_waits_for_the_window_and_keeps_its_grace,
    quiet_hours_hold_every_rule_but_transactional_ones,
    a_cap_of_three_sends_exactly_three_of_five_across_two_instances,
    a_cap_holds_on_a_claimed_lane_and_a_retry_keeps_its_slot,
    a_digest_of_ten_triggers_is_one_message_with_ten_items,
    three_planners_racing_on_one_digest_make_one_message_with_every_trigger_once,
    a_digest_claimed_by_a_worker_that_died_is_delivered_once_and_a_late_trigger_opens_the_next,
    a_digest_closes_early_at_max_items_and_keys_keep_digests_apart,
    a_window_opens_at_local_time_across_a_dst_change_in_two_zones,
    escalation_is_cancelled_when_read_in_time_and_emailed_otherwise,
    a_follow_up_is_planned_once_when_it_falls_due_even_by_two_instances,
    a_chain_step_the_rule_no_longer_has_is_cancelled_saying_so,
    a_hold_on_a_claimed_lane_gives_back_its_attempt_and_a_retry_outside_the_window_waits,
);

async fn a_hold_on_a_claimed_lane_gives_back_its_attempt_and_a_retry_outside_the_window_waits(db: &TestDb) {
    // Wednesday 17:55 UTC; window 09:00-18:00 every day; a scripted channel
    // (claimed lane) that fails once.
    let clock = ManualClock::at(at("2026-03-04T17:55:00Z"));
    let mut rule =
        add_rule(db, clock.now(), "x", json!({"grace": 600, "send_window": {"from": "09:00", "until": "18:00"}})).await;
    rule.id = herald::store::new_id();
    (rule.channel, rule.trigger_type) = ("scripted".into(), "ping".into());
    db.store.insert_rule(&rule).await.unwrap();
    let (registry, channel) = fails_once_then_sends();
    let config = WorkerConfig { retry: Duration::from_secs(300), ..WorkerConfig::default() };
    let w = worker(db.arc(), registry, &clock, config);
    trigger(db, &clock, "ping", "u1").await;
    assert_eq!(w.tick().await.unwrap().retried, 1, "inside the window: attempted, and failed");
    // The retry falls due at 18:00, when the window has shut: held until
    // 09:00, the claim's attempt given back, the grace left moved along.
    clock.set(at("2026-03-04T18:00:00Z"));
    let r = w.tick().await.unwrap();
    assert_eq!((r.claimed, r.held), (1, 1), "{r:?}");
    let row = &db.store.pending_for_user(&user("u1"), 10).await.unwrap()[0];
    assert_eq!(row.attempts, 1, "only the real attempt counts");
    assert_eq!(row.due_at, at("2026-03-05T09:00:00Z"));
    assert_eq!(row.expires_at, Some(at("2026-03-05T09:05:00Z")), "five minutes of grace were left");
    let held = held_events(db).await;
    assert_eq!(held.len(), 1, "a claimed lane's hold is an event too: {held:?}");
    assert_eq!(held[0]["until"], "2026-03-05T09:00:00.000Z");
    clock.set(at("2026-03-05T09:01:00Z"));
    assert_eq!(w.tick().await.unwrap().sent, 1);
    assert_eq!(channel.calls(), 2, "the hold never called the channel");
}

async fn add_recipient(db: &TestDb, user_id: &str, body: Value, now: Millis) {
    let input: RecipientInput = serde_json::from_value(body).unwrap();
    db.store.put_recipient(&input.into_row(&user(user_id), now).unwrap()).await.unwrap();
}

/// Records a trigger at `clock`'s time and plans it.
async fn trigger(db: &TestDb, clock: &ManualClock, trigger_type: &str, user_id: &str) {
    let now = clock.now();
    let t = NewTrigger {
        id: herald::store::new_id(),
        trigger_type: trigger_type.into(),
        user_id: user(user_id),
        payload: json!({}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: now,
        send_at: None,
        actor_id: None,
    };
    db.store.insert_trigger(&t, now).await.unwrap();
    let planner = Planner::new(db.arc(), Arc::new(clock.clone()), Duration::from_secs(1), 100);
    planner.tick().await.unwrap();
}

async fn a_message_due_at_night_waits_for_the_window_and_keeps_its_grace(db: &TestDb) {
    // Wednesday 2026-03-04, 21:00 in Berlin (20:00 UTC); window weekdays 09:00-18:00.
    let clock = ManualClock::at(at("2026-03-04T20:00:00Z"));
    add_recipient(db, "u1", json!({"timezone": "Europe/Berlin"}), clock.now()).await;
    add_rule(
        db,
        clock.now(),
        "digest.ready",
        json!({"grace": 3600, "send_window": {"days": ["mon","tue","wed","thu","fri"], "from": "09:00", "until": "18:00"}}),
    )
    .await;
    trigger(db, &clock, "digest.ready", "u1").await;
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());

    let report = w.tick().await.unwrap();
    assert_eq!((report.held, report.sent), (1, 0), "{report:?}");
    let pending = db.store.pending_for_user(&user("u1"), 10).await.unwrap();
    let row = &pending[0];
    assert_eq!(row.status, OutboxStatus::Scheduled);
    assert_eq!(row.due_at, at("2026-03-05T08:00:00Z"), "09:00 in Berlin the next morning");
    assert_eq!(row.expires_at, Some(at("2026-03-05T09:00:00Z")), "the grace hour counts from the opening");
    assert_eq!(row.attempts, 0, "a hold is not an attempt");
    let why = row.last_error.as_deref().unwrap();
    assert!(why.contains("held by the rule's send window (mon,tue,wed,thu,fri 09:00–18:00, Europe/Berlin)"), "{why}");
    assert!(why.contains("until 2026-03-05T08:00:00.000Z"), "{why}");
    // The events stream says so, written with the hold.
    let held = held_events(db).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["outbox_id"], row.id.as_str());
    assert_eq!(held[0]["until"], "2026-03-05T08:00:00.000Z");
    assert_eq!(held[0]["reason"], "send_window");
    assert_eq!(held[0]["detail"], why);

    clock.set(at("2026-03-05T07:59:59Z"));
    assert_eq!(w.tick().await.unwrap().claimed, 0, "not before the opening");
    // Half an hour after the opening: 13.5 hours past the original grace
    // window, still delivered.
    clock.set(at("2026-03-05T08:30:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!(report.sent, 1, "{report:?}");
    let log = db.store.sends_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(log.iter().map(|s| s.status.as_str()).collect::<Vec<_>>(), ["sent"]);
}

async fn quiet_hours_hold_every_rule_but_transactional_ones(db: &TestDb) {
    // 23:30 in New York (EST, UTC-5) on a Tuesday.
    let clock = ManualClock::at(at("2026-01-14T04:30:00Z"));
    add_recipient(
        db,
        "u1",
        json!({"timezone": "America/New_York", "quiet_hours": {"from": "22:00", "until": "07:00"}}),
        clock.now(),
    )
    .await;
    add_rule(db, clock.now(), "login.code", json!({"category": "transactional"})).await;
    add_rule(db, clock.now(), "news.posted", json!({})).await;
    trigger(db, &clock, "login.code", "u1").await;
    trigger(db, &clock, "news.posted", "u1").await;
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    let report = w.tick().await.unwrap();
    assert_eq!((report.sent, report.held), (1, 1), "{report:?}");
    let pending = db.store.pending_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].due_at, at("2026-01-14T12:00:00Z"), "07:00 EST");
    let why = pending[0].last_error.as_deref().unwrap();
    assert!(why.contains("the recipient's quiet hours (22:00–07:00, America/New_York)"), "{why}");
    let held = held_events(db).await;
    assert_eq!(held.len(), 1, "one event for the held row, none for the one sent: {held:?}");
    assert_eq!(
        (held[0]["reason"].as_str(), held[0]["until"].as_str()),
        (Some("quiet_hours"), Some("2026-01-14T12:00:00.000Z"))
    );

    clock.set(at("2026-01-14T12:00:00Z"));
    assert_eq!(w.tick().await.unwrap().sent, 1);
    assert_eq!(held_events(db).await.len(), 1, "delivering writes no second hold");
}

/// The `held` events on the events stream, oldest first (their data).
async fn held_events(db: &TestDb) -> Vec<Value> {
    let events = db.store.events_after(0, 1000).await.unwrap();
    events.into_iter().filter(|e| e.kind == "held").map(|e| e.data).collect()
}

/// A registry whose one channel, `scripted` (also returned, to count its
/// calls), answers the first delivery "421 try later" and sends every
/// later one.
fn fails_once_then_sends() -> (Registry, Arc<ScriptedChannel>) {
    let first = std::sync::atomic::AtomicBool::new(true);
    let channel = ScriptedChannel::new(move |_| {
        if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Outcome::retry("421 try later")
        } else {
            Outcome::sent("scripted")
        }
    });
    let mut registry = Registry::new();
    registry.register("scripted", channel.clone());
    (registry, channel)
}

fn count(log: &[herald::store::SendRecord], status: &str) -> usize {
    log.iter().filter(|s| s.status == status).count()
}

async fn a_cap_of_three_sends_exactly_three_of_five_across_two_instances(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    let rule =
        add_rule(db, clock.now(), "comment.added", json!({"throttle": {"limit": 3, "per": 86400, "scope": "rule"}}))
            .await;
    for _ in 0..5 {
        trigger(db, &clock, "comment.added", "u1").await;
    }
    // Two instances, each with its own pool, read the same five inbox rows
    // at once.
    let a = worker(Arc::new(db.another_instance().await), herald::app::registry(), &clock, WorkerConfig::default());
    let b = worker(Arc::new(db.another_instance().await), herald::app::registry(), &clock, WorkerConfig::default());
    let (ra, rb) = tokio::join!(a.tick(), b.tick());
    let mut total = TickReport::default();
    for r in [ra.unwrap(), rb.unwrap()] {
        total.sent += r.sent;
        total.suppressed += r.suppressed;
    }
    // Whatever one instance lost to the other is due again: sweep until done.
    for _ in 0..3 {
        let r = a.tick().await.unwrap();
        total.sent += r.sent;
        total.suppressed += r.suppressed;
    }
    assert_eq!((total.sent, total.suppressed), (3, 2), "{total:?}");
    let log = db.store.sends_for_user(&user("u1"), 20).await.unwrap();
    assert_eq!((count(&log, "sent"), count(&log, "suppressed"), log.len()), (3, 2, 5), "{log:?}");
    assert_eq!(db.store.inbox_for_user(&user("u1"), 20).await.unwrap().len(), 3);
    let detail = log.iter().find(|s| s.status == "suppressed").unwrap().detail.clone().unwrap();
    let expected = format!("frequency cap: 3 per day for rule \"rule for comment.added\" ({}), reached at ", rule.id);
    assert!(detail.starts_with(&expected), "{detail}");
    assert!(detail.contains("the next message may go from 2026-03-05T10:00:00.001Z"), "{detail}");

    // A day later the cap has room again.
    clock.set(at("2026-03-05T10:00:01Z"));
    trigger(db, &clock, "comment.added", "u1").await;
    assert_eq!(a.tick().await.unwrap().sent, 1);
}

async fn a_cap_holds_on_a_claimed_lane_and_a_retry_keeps_its_slot(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    // A rule on a scripted channel (stored directly: the API knows only
    // Herald's own channels), capped at 2 per hour across its category.
    let mut rule =
        add_rule(db, clock.now(), "ping", json!({"throttle": {"limit": 2, "per": 3600, "scope": "category"}})).await;
    rule.id = herald::store::new_id();
    rule.channel = "scripted".into();
    rule.trigger_type = "ping.scripted".into();
    db.store.insert_rule(&rule).await.unwrap();
    let db_rule = db.store.get_rule(&rule.id).await.unwrap().unwrap();
    assert!(db_rule.workflow.is_some());
    let (registry, _) = fails_once_then_sends();
    let w = worker(db.arc(), registry, &clock, WorkerConfig::default());
    trigger(db, &clock, "ping.scripted", "u1").await;
    let r = w.tick().await.unwrap();
    assert_eq!(r.retried, 1, "{r:?}");
    trigger(db, &clock, "ping.scripted", "u1").await;
    trigger(db, &clock, "ping.scripted", "u1").await;
    let r = w.tick().await.unwrap();
    // The retried message still holds its slot: one of the two new ones gets
    // the other, the last is capped.
    assert_eq!((r.sent, r.suppressed), (1, 1), "{r:?}");
    clock.advance(Duration::from_secs(300));
    let r = w.tick().await.unwrap();
    assert_eq!(r.sent, 1, "the retry goes out on its own slot: {r:?}");
    let log = db.store.sends_for_user(&user("u1"), 20).await.unwrap();
    let detail = log.iter().find(|s| s.status == "suppressed").unwrap().detail.clone().unwrap();
    assert!(detail.starts_with("frequency cap: 2 per hour for category \"news\""), "{detail}");
}

const DIGEST_TEMPLATE: &str = "{{ digest.count }} new comments";

fn digest_rule(window: i64, extra: Value) -> Value {
    let mut body = json!({
        "digest": {"window": window},
        "template": {"fallback_locale": "en", "locales": {"en": {
            "subject": DIGEST_TEMPLATE,
            "text": "{% for i in digest.items %}{{ i.payload.n }} {% endfor %}"
        }}},
    });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// Host-style triggers (inserted unplanned) at `clock`'s time.
async fn insert_unplanned(
    db: &TestDb,
    clock: &ManualClock,
    trigger_type: &str,
    user_id: &str,
    payload: Value,
) -> String {
    let t = NewTrigger {
        id: herald::store::new_id(),
        trigger_type: trigger_type.into(),
        user_id: user(user_id),
        payload,
        idempotency_key: None,
        request_hash: None,
        occurred_at: clock.now(),
        send_at: None,
        actor_id: None,
    };
    db.store.insert_trigger(&t, clock.now()).await.unwrap();
    t.id
}

fn planner_on(store: Arc<dyn Store>, clock: &ManualClock) -> Planner {
    Planner::new(store, Arc::new(clock.clone()), Duration::from_secs(1), 100)
}

async fn a_digest_of_ten_triggers_is_one_message_with_ten_items(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    add_rule(db, clock.now(), "comment", digest_rule(3600, json!({}))).await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(insert_unplanned(db, &clock, "comment", "u1", json!({"n": n})).await);
        planner_on(db.arc(), &clock).tick().await.unwrap();
        clock.advance(Duration::from_secs(60));
    }
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().claimed, 0, "the window is still open");
    clock.set(at("2026-03-04T11:00:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!(report.sent, 1, "{report:?}");
    let inbox = db.store.inbox_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].title, "10 new comments");
    assert_eq!(inbox[0].body.as_deref(), Some("0 1 2 3 4 5 6 7 8 9 "));

    // The send log says which triggers went into it.
    let timeline = herald::http::users::user_timeline(&db.store, &user("u1"), 50).await.unwrap();
    assert_eq!(timeline.messages.len(), 1);
    assert_eq!(timeline.messages[0].digest_triggers.as_ref(), Some(&ids));
    assert!(timeline.triggers_without_messages.is_empty());

    // The next trigger opens the next digest.
    insert_unplanned(db, &clock, "comment", "u1", json!({"n": 10})).await;
    planner_on(db.arc(), &clock).tick().await.unwrap();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(w.tick().await.unwrap().sent, 1);
    let inbox = db.store.inbox_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(inbox.iter().map(|m| m.title.as_str()).collect::<Vec<_>>(), ["1 new comments", "10 new comments"]);
}

async fn three_planners_racing_on_one_digest_make_one_message_with_every_trigger_once(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    add_rule(db, clock.now(), "comment", digest_rule(3600, json!({}))).await;
    for n in 0..30 {
        insert_unplanned(db, &clock, "comment", "u1", json!({"n": n})).await;
    }
    // Small batches, so the three planners interleave on the one digest.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let store: Arc<dyn Store> = Arc::new(db.another_instance().await);
        let clock = clock.clone();
        tasks.spawn(async move {
            let p = Planner::new(store, Arc::new(clock), Duration::from_secs(1), 4);
            let mut planned = 0;
            loop {
                match p.tick().await {
                    Ok(0) => break planned,
                    Ok(n) => planned += n,
                    Err(e) if e.is_contention() => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
    }
    let mut planned = 0;
    while let Some(n) = tasks.join_next().await {
        planned += n.unwrap();
    }
    assert_eq!(planned, 30);
    let rows = db.store.pending_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(rows.len(), 1, "one digest message: {rows:?}");
    let items = db.store.digest_items(&[rows[0].id.as_str()]).await.unwrap();
    let mut triggers: Vec<&str> = items.iter().map(|i| i.trigger_id.as_str()).collect();
    triggers.sort_unstable();
    triggers.dedup();
    assert_eq!((items.len(), triggers.len()), (30, 30), "every trigger once");
    clock.advance(Duration::from_secs(3600));
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().sent, 1);
    assert_eq!(db.store.inbox_for_user(&user("u1"), 10).await.unwrap()[0].title, "30 new comments");
}

async fn a_digest_claimed_by_a_worker_that_died_is_delivered_once_and_a_late_trigger_opens_the_next(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    // On a claimed lane (a scripted channel), so a claim can be left behind.
    let mut rule = add_rule(db, clock.now(), "x", digest_rule(600, json!({}))).await;
    rule.id = herald::store::new_id();
    (rule.channel, rule.trigger_type) = ("scripted".into(), "comment".into());
    db.store.insert_rule(&rule).await.unwrap();
    for n in 0..3 {
        insert_unplanned(db, &clock, "comment", "u1", json!({"n": n})).await;
    }
    planner_on(db.arc(), &clock).tick().await.unwrap();
    // A worker claims the digest when its window closes, then dies.
    clock.set(at("2026-03-04T10:10:00Z"));
    let claimed = db.store.claim_channel("scripted", clock.now(), 10, "dead-worker").await.unwrap();
    assert_eq!(claimed.len(), 1);
    // A trigger arriving meanwhile opens the next digest.
    insert_unplanned(db, &clock, "comment", "u1", json!({"n": 3})).await;
    planner_on(db.arc(), &clock).tick().await.unwrap();
    let channel = ScriptedChannel::new(|_| Outcome::sent("scripted"));
    let mut registry = Registry::new();
    registry.register("scripted", channel.clone());
    let w = worker(db.arc(), registry, &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().sent, 0, "the claim is not stale yet");
    // After the stale window the claim is taken back and delivered, once.
    clock.advance(Duration::from_secs(15 * 60 + 1));
    let report = w.tick().await.unwrap();
    assert_eq!((report.reclaimed, report.sent), (1, 2), "{report:?}");
    assert_eq!(w.tick().await.unwrap().claimed, 0);
    assert_eq!(channel.calls(), 2);
    let timeline = herald::http::users::user_timeline(&db.store, &user("u1"), 50).await.unwrap();
    let mut sizes: Vec<usize> =
        timeline.messages.iter().map(|m| m.digest_triggers.as_ref().map_or(0, Vec::len)).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [1, 3], "each trigger in exactly one digest");
    assert!(timeline.messages.iter().all(|m| m.status == "sent"));
}

async fn a_digest_closes_early_at_max_items_and_keys_keep_digests_apart(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    add_rule(
        db,
        clock.now(),
        "comment",
        digest_rule(3600, json!({"digest": {"window": 3600, "max_items": 3, "key": "payload.thread"}})),
    )
    .await;
    for (n, thread) in [(0, "a"), (1, "b"), (2, "a"), (3, "a"), (4, "a")] {
        insert_unplanned(db, &clock, "comment", "u1", json!({"n": n, "thread": thread})).await;
        planner_on(db.arc(), &clock).tick().await.unwrap();
        clock.advance(Duration::from_secs(1));
    }
    // Thread a's first digest is full (three items): due now, not in an hour.
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().sent, 1);
    assert_eq!(db.store.inbox_for_user(&user("u1"), 10).await.unwrap()[0].body.as_deref(), Some("0 2 3 "));
    clock.advance(Duration::from_secs(3600));
    assert_eq!(w.tick().await.unwrap().sent, 2);
    let mut bodies: Vec<String> =
        db.store.inbox_for_user(&user("u1"), 10).await.unwrap().into_iter().filter_map(|m| m.body).collect();
    bodies.sort();
    assert_eq!(bodies, ["0 2 3 ", "1 ", "4 "]);
}

async fn a_window_opens_at_local_time_across_a_dst_change_in_two_zones(db: &TestDb) {
    // Saturday evening before each zone's spring change; a weekday window.
    for (user_id, zone, trigger_at, opens) in [
        ("ny", "America/New_York", "2026-03-08T01:00:00Z", "2026-03-09T13:00:00Z"),
        ("berlin", "Europe/Berlin", "2026-03-28T19:00:00Z", "2026-03-30T07:00:00Z"),
    ] {
        let clock = ManualClock::at(at(trigger_at));
        add_recipient(db, user_id, json!({"timezone": zone}), clock.now()).await;
        add_rule(
            db,
            clock.now(),
            &format!("report.{user_id}"),
            json!({"send_window": {"days": ["mon","tue","wed","thu","fri"], "from": "09:00", "until": "17:00"}}),
        )
        .await;
        trigger(db, &clock, &format!("report.{user_id}"), user_id).await;
        let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
        assert_eq!(w.tick().await.unwrap().held, 1);
        let row = &db.store.pending_for_user(&user(user_id), 10).await.unwrap()[0];
        assert_eq!(row.due_at, at(opens), "{zone}: 09:00 local after the change");
        clock.set(at(opens));
        assert_eq!(w.tick().await.unwrap().sent, 1, "{zone}");
    }
}

async fn escalation_is_cancelled_when_read_in_time_and_emailed_otherwise(db: &TestDb) {
    let sink = common::smtp::SmtpSink::start().await;
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    for u in ["reader", "ignorer"] {
        add_recipient(db, u, json!({"email": format!("{u}@example.com")}), clock.now()).await;
    }
    add_rule(
        db,
        clock.now(),
        "invoice.due",
        json!({"escalate": {"after": 1800, "unless": "read", "channel": "email", "template":
            {"fallback_locale": "en", "locales": {"en": {"subject": "You have an unread invoice", "text": "See the app."}}}}}),
    )
    .await;
    trigger(db, &clock, "invoice.due", "reader").await;
    trigger(db, &clock, "invoice.due", "ignorer").await;
    let settings = herald::config::EmailSettings {
        transport: Some(sink.url()),
        from: Some("Herald Tests <news@herald.test>".into()),
        address_secret: Some("a test secret of sufficient length".into()),
        public_url: Some("https://herald.test".into()),
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let store = db.arc();
    let dyn_clock: Arc<dyn Clock> = Arc::new(clock.clone());
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let metrics = herald::metrics::Metrics::new();
    let email = herald::delivery::channel::email::EmailChannel::from_settings(
        &settings,
        "https://herald.test",
        store.clone(),
        dyn_clock.clone(),
        keys,
        metrics.clone(),
    )
    .unwrap();
    let registry = herald::app::registry_with_email(Some(Arc::new(email)));
    let config = WorkerConfig { deliver_timeout: Duration::from_secs(20), ..WorkerConfig::default() };
    let w = herald::delivery::worker::Worker::new(WorkerParts {
        store,
        registry,
        clock: dyn_clock,
        config,
        metrics,
        address_keys: None,
        lease: None,
    });

    let report = w.tick().await.unwrap();
    assert_eq!(report.sent, 2, "the two inbox messages: {report:?}");
    // The reader reads theirs ten minutes later.
    clock.advance(Duration::from_secs(600));
    let msg = db.store.inbox_for_user(&user("reader"), 10).await.unwrap().remove(0);
    db.store.inbox_mark(&user("reader"), &msg.id, herald::store::InboxMark::Read, clock.now()).await.unwrap();
    clock.advance(Duration::from_secs(1199));
    assert_eq!(w.tick().await.unwrap().claimed, 0, "not before `after`");
    clock.advance(Duration::from_secs(1));
    let report = w.tick().await.unwrap();
    assert_eq!((report.cancelled, report.sent), (1, 1), "{report:?}");

    let reader = herald::http::users::user_timeline(&db.store, &user("reader"), 50).await.unwrap();
    let follow_up = reader.messages.iter().find(|m| m.follow_up_of.is_some()).unwrap();
    assert_eq!(follow_up.status, "cancelled");
    let why = follow_up.history[0].detail.clone().unwrap();
    assert!(why.starts_with("read in the inbox at 2026-03-04T10:10:00.000Z: no email needed"), "{why}");
    let original = reader.messages.iter().find(|m| m.channel == "inbox").unwrap();
    assert_eq!(original.follow_up.as_ref(), Some(&follow_up.outbox_id), "the log links them both ways");
    assert_eq!(follow_up.follow_up_of.as_ref(), Some(&original.outbox_id));

    let ignorer = herald::http::users::user_timeline(&db.store, &user("ignorer"), 50).await.unwrap();
    let follow_up = ignorer.messages.iter().find(|m| m.follow_up_of.is_some()).unwrap();
    assert_eq!((follow_up.channel.as_str(), follow_up.status.as_str()), ("email", "sent"));
    let arrived = sink.messages_per_outbox_id();
    assert_eq!(arrived.get(&follow_up.outbox_id), Some(&1), "{arrived:?}");
    assert_eq!(arrived.len(), 1, "no email for the reader");
    let text = std::fs::read_to_string(&sink.messages()[0]).unwrap();
    assert!(text.contains("You have an unread invoice"), "{text}");
}

/// The follow-up is no outbox row until it falls due; then two instances
/// looking at once plan it once. A chain's steps are planned together,
/// once each, the later one due its own `after` on.
async fn a_follow_up_is_planned_once_when_it_falls_due_even_by_two_instances(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    let email = json!({"fallback_locale": "en", "locales": {"en": {"subject": "Unread", "text": "t"}}});
    add_rule(
        db,
        clock.now(),
        "invoice",
        json!({"escalate": {"after": 600, "unless": "read", "channel": "email", "template": email}}),
    )
    .await;
    add_rule(
        db,
        clock.now(),
        "reminder",
        json!({"escalate": [
            {"after": 600, "unless": "read", "channel": "email", "template": email},
            {"after": 1500, "channel": "email", "template": email},
        ]}),
    )
    .await;
    trigger(db, &clock, "invoice", "u1").await;
    trigger(db, &clock, "reminder", "u2").await;
    let a = worker(Arc::new(db.another_instance().await), herald::app::registry(), &clock, WorkerConfig::default());
    let b = worker(Arc::new(db.another_instance().await), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(a.tick().await.unwrap().sent, 2, "the inbox messages");
    let follow_ups = |u: &'static str| async move {
        let t = herald::http::users::user_timeline(&db.store, &user(u), 50).await.unwrap();
        let mut steps: Vec<(usize, String)> = t
            .messages
            .into_iter()
            .filter(|m| m.follow_up_of.is_some())
            .map(|m| (m.follow_up_step.unwrap(), m.due_at))
            .collect();
        steps.sort();
        steps
    };
    clock.advance(Duration::from_secs(599));
    let _ = tokio::join!(a.tick(), b.tick());
    assert_eq!((follow_ups("u1").await.len(), follow_ups("u2").await.len()), (0, 0), "nothing before it falls due");
    clock.advance(Duration::from_secs(1));
    let (ra, rb) = tokio::join!(a.tick(), b.tick());
    let (_, _) = (ra.unwrap(), rb.unwrap());
    assert_eq!(follow_ups("u1").await.len(), 1, "one follow-up, whoever planned it");
    let chain = follow_ups("u2").await;
    let steps: Vec<usize> = chain.iter().map(|(n, _)| *n).collect();
    assert_eq!(steps, [1, 2], "each step once: {chain:?}");
    assert_eq!(chain[1].1, "2026-03-04T10:25:00.000Z", "step 2 due its own after on: {chain:?}");
    let _ = tokio::join!(a.tick(), b.tick());
    assert_eq!((follow_ups("u1").await.len(), follow_ups("u2").await.len()), (1, 2), "and never a second");
}

/// A chain's steps are planned together; a rule edited back to one
/// follow-up before the second step's time cancels that step, saying why,
/// instead of sending it (or the inbox template on email, as a follow-up
/// the rule no longer had once was).
async fn a_chain_step_the_rule_no_longer_has_is_cancelled_saying_so(db: &TestDb) {
    let clock = ManualClock::at(at("2026-03-04T10:00:00Z"));
    let email = json!({"fallback_locale": "en", "locales": {"en": {"subject": "Unread", "text": "t"}}});
    let first = json!({"after": 600, "unless": "read", "channel": "email", "template": email});
    let mut rule = add_rule(
        db,
        clock.now(),
        "invoice",
        json!({"escalate": [first, {"after": 1200, "channel": "email", "template": email}]}),
    )
    .await;
    trigger(db, &clock, "invoice", "u1").await;
    let mut registry = Registry::new();
    registry.register("inbox", Arc::new(herald::delivery::channel::inbox::InboxChannel::new()));
    registry.register("email", ScriptedChannel::new(|_| Outcome::sent("scripted")));
    let w = worker(db.arc(), registry, &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().sent, 1, "the inbox message");
    clock.advance(Duration::from_secs(600));
    assert_eq!(w.tick().await.unwrap().sent, 1, "step 1, step 2 planned with it");
    clock.advance(Duration::from_secs(1));
    rule.workflow = Some(json!({"escalate": first}));
    rule.updated_at = clock.now();
    assert!(db.store.update_rule(&rule).await.unwrap());
    clock.set(at("2026-03-04T10:20:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!(report.cancelled, 1, "{report:?}");
    let t = herald::http::users::user_timeline(&db.store, &user("u1"), 50).await.unwrap();
    let step2 = t.messages.iter().find(|m| m.follow_up_step == Some(2)).unwrap();
    assert_eq!(step2.status, "cancelled");
    let why = step2.history[0].detail.clone().unwrap();
    assert!(why.contains("no longer has an escalation step 2 on email"), "{why}");
}

/// `herald sends` tells a hold from an error and prints the digest and
/// escalation links the API gives (SQLite: the binary reads the test's file).
async fn herald_sends_prints_holds_digests_and_escalation_links() {
    let db = TestDb::new(Backend::Sqlite).await;
    let db = &db;
    // Wednesday 20:00 UTC: after the window's closing.
    let clock = ManualClock::at(at("2026-03-04T20:00:00Z"));
    add_rule(db, clock.now(), "report", json!({"send_window": {"from": "09:00", "until": "18:00"}})).await;
    add_rule(db, clock.now(), "comment", digest_rule(3600, json!({}))).await;
    add_rule(
        db,
        clock.now(),
        "invoice",
        json!({"escalate": {"after": 1800, "unless": "read", "channel": "email", "template":
            {"fallback_locale": "en", "locales": {"en": {"subject": "Unread", "text": "t"}}}}}),
    )
    .await;
    trigger(db, &clock, "report", "u1").await;
    let mut digest = Vec::new();
    for n in 0..2 {
        digest.push(insert_unplanned(db, &clock, "comment", "u1", json!({"n": n})).await);
        planner_on(db.arc(), &clock).tick().await.unwrap();
    }
    trigger(db, &clock, "invoice", "u1").await;
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    let report = w.tick().await.unwrap();
    assert!(report.held >= 1, "{report:?}");
    // The follow-up is planned when it falls due, half an hour on.
    clock.advance(Duration::from_secs(1800));
    w.tick().await.unwrap();

    let run = |json: bool| {
        let args: &[&str] = if json { &["--user-id", "u1", "--json"] } else { &["--user-id", "u1"] };
        common::herald_sends(db, args)
    };
    let text = run(false);
    assert!(
        text.contains("held until 2026-03-05T09:00:00.000Z: held by the rule's send window (mon,tue,wed,thu,fri,sat,sun 09:00–18:00, UTC)"),
        "{text}"
    );
    assert!(!text.contains("last error: held"), "a hold is not an error: {text}");
    assert!(
        text.contains(&format!(
            "digest of 2 trigger(s), goes out 2026-03-04T21:00:00.000Z: {}, {}",
            digest[0], digest[1]
        )),
        "{text}"
    );
    let timeline = herald::http::users::user_timeline(&db.store, &user("u1"), 50).await.unwrap();
    let follow_up = timeline.messages.iter().find(|m| m.follow_up_of.is_some()).expect("a follow-up is planned");
    let original = follow_up.follow_up_of.clone().unwrap();
    assert!(text.contains(&format!("follow-up of inbox message {original}")), "{text}");
    assert!(text.contains(&format!("followed up by {}", follow_up.outbox_id)), "{text}");
    assert_eq!(text.matches(&format!("followed up by {}", follow_up.outbox_id)).count(), 1, "once per message: {text}");

    let json: Value = serde_json::from_str(&run(true)).unwrap();
    let pending = json["pending"].as_array().unwrap();
    let held = pending.iter().find(|p| p["held_until"].is_string()).expect("the held row says until when");
    assert_eq!(held["held_until"], "2026-03-05T09:00:00.000Z");
    let d = pending.iter().find(|p| p["digest_triggers"].is_array()).expect("the digest says what it holds");
    assert_eq!(d["digest_triggers"], json!(digest));
    // The API says the same about the held row.
    let held_api = timeline.messages.iter().find(|m| m.held_until.is_some()).unwrap();
    assert_eq!(held_api.held_until.as_deref(), Some("2026-03-05T09:00:00.000Z"));
}

async fn api_refuses_each_bad_workflow_field_by_name() {
    let app = App::start_on(Backend::Sqlite, |_| {}).await;
    let base = json!({
        "name": "r", "trigger_type": "t", "channel": "inbox", "category": "news",
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}},
    });
    let email_template = json!({"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}});
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"send_window": {"days": ["mon", "funday"], "from": "09:00", "until": "18:00"}}),
            "send_window.days",
            "funday",
        ),
        (json!({"send_window": {"from": "9am", "until": "18:00"}}), "send_window.from", "HH:MM"),
        (json!({"send_window": {"from": "09:00", "until": "24:00"}}), "send_window.until", "HH:MM"),
        (json!({"digest": {"window": 0}}), "digest.window", "1 to"),
        (json!({"digest": {"window": 60, "key": "payload.(("}}), "digest.key", ""),
        (json!({"digest": {"window": 60, "max_items": 0}}), "digest.max_items", "1 to 1000"),
        (json!({"throttle": {"limit": 0, "per": 60}}), "throttle.limit", "1 to 1000"),
        (json!({"throttle": {"limit": 3, "per": -1}}), "throttle.per", "seconds"),
        (json!({"throttle": {"limit": 3, "per": 60, "scope": "user"}}), "throttle.scope", "rule or category"),
        (
            json!({"escalate": {"after": 0, "unless": "read", "channel": "email", "template": email_template}}),
            "escalate.after",
            "1 to",
        ),
        (
            json!({"escalate": {"after": 60, "unless": "opened", "channel": "email", "template": email_template}}),
            "escalate.unless",
            "seen or read",
        ),
        (
            json!({"escalate": {"after": 60, "unless": "read", "channel": "pigeon", "template": email_template}}),
            "escalate.channel",
            "pigeon",
        ),
        (json!({"display_name": ""}), "display_name", "1 to 100"),
    ];
    for (extra, field, says) in cases {
        let mut body = base.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, p) = app.post("/v1/rules", body.clone()).await;
        assert_eq!(status, 422, "{body}: {p}");
        let errors = p["errors"].as_array().unwrap();
        let hit = errors.iter().find(|e| e["field"] == field);
        assert!(hit.is_some_and(|e| e["message"].as_str().unwrap().contains(says)), "{field} / {says}: {p}");
    }
    // An escalation to a channel this instance cannot deliver on is saved
    // off, not turned on.
    let mut unconfigured = base.clone();
    unconfigured["escalate"] = json!({"after": 60, "unless": "read", "channel": "email", "template": email_template});
    unconfigured["enabled"] = json!(true);
    let (status, p) = app.post("/v1/rules", unconfigured.clone()).await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("escalate.channel")), "{p}");
    unconfigured["enabled"] = json!(false);
    assert_eq!(app.post("/v1/rules", unconfigured).await.0, 201);
    // A chain: each step later than the one before, at most three, none
    // on webhook; each refusal names the step.
    let push_template = json!({"fallback_locale": "en", "locales": {"en": {"title": "Unread"}}});
    let step = |after: i64, channel: &str| {
        let template = if channel == "push" { push_template.clone() } else { email_template.clone() };
        json!({"after": after, "channel": channel, "template": template})
    };
    let mut first = step(1800, "push");
    first["unless"] = json!("read");
    let chains: Vec<(Value, &str, &str)> = vec![
        (json!([first, step(1800, "email")]), "escalate[1].after", "greater than escalate[0].after (1800)"),
        (json!([first, step(900, "email")]), "escalate[1].after", "every step counts from the inbox delivery"),
        (
            json!([first, step(3600, "email"), step(7200, "email"), step(9000, "email")]),
            "escalate",
            "1 to 3 steps, not 4",
        ),
        (json!([first, step(3600, "webhook")]), "escalate[1].channel", "no webhook URL"),
        (json!([step(60, "push"), step(120, "email")]), "escalate[0].unless", "seen or read"),
    ];
    for (chain, field, says) in chains {
        let mut body = base.clone();
        body["escalate"] = chain;
        let (status, p) = app.post("/v1/rules", body.clone()).await;
        assert_eq!(status, 422, "{body}: {p}");
        let hit = p["errors"].as_array().unwrap().iter().find(|e| e["field"] == field);
        assert!(hit.is_some_and(|e| e["message"].as_str().unwrap().contains(says)), "{field} / {says}: {p}");
    }
    // Turned on without the providers of its steps (this instance has no
    // email and no push): refused naming every step; saved off.
    let mut chain = base.clone();
    chain["escalate"] = json!([first, step(7200, "email")]);
    chain["enabled"] = json!(true);
    let (status, p) = app.post("/v1/rules", chain.clone()).await;
    let fields: Vec<&str> = p["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!((status, fields), (422, vec!["escalate[0].channel", "escalate[1].channel"]), "{p}");
    chain["enabled"] = json!(false);
    let (status, saved) = app.post("/v1/rules", chain.clone()).await;
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["escalate"], chain["escalate"], "the chain reads back as given");
    // Escalation only on an inbox rule, and not with a digest.
    let mut on_email = base.clone();
    on_email["channel"] = json!("webhook");
    on_email["webhook_url"] = json!("https://example.com/hook");
    on_email["escalate"] = json!({"after": 60, "unless": "read", "channel": "email", "template": email_template});
    let (status, p) = app.post("/v1/rules", on_email).await;
    assert!(status == 422 && p["errors"].as_array().unwrap().iter().any(|e| e["field"] == "escalate"), "{p}");
    let mut both = base.clone();
    both["escalate"] = json!({"after": 60, "unless": "read", "channel": "email", "template": email_template});
    both["digest"] = json!({"window": 60});
    let (status, p) = app.post("/v1/rules", both).await;
    assert!(status == 422 && p["errors"].as_array().unwrap().iter().any(|e| e["field"] == "escalate"), "{p}");

    // A good rule round-trips its fields; PATCH null removes one.
    let mut good = base.clone();
    good["send_window"] = json!({"days": ["sat", "sun"], "from": "10:00", "until": "12:00"});
    good["throttle"] = json!({"limit": 3, "per": 86400});
    good["display_name"] = json!("News");
    let (status, rule) = app.post("/v1/rules", good).await;
    assert_eq!(status, 201, "{rule}");
    assert_eq!(rule["send_window"]["days"], json!(["sat", "sun"]));
    assert_eq!(rule["throttle"], json!({"limit": 3, "per": 86400, "scope": "rule"}));
    assert_eq!(rule["display_name"], "News");
    let id = rule["id"].as_str().unwrap();
    let (status, patched) =
        app.call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(json!({"send_window": null}))).await;
    assert_eq!(status, 200, "{patched}");
    assert!(patched["rule"].get("send_window").is_none(), "{patched}");
    assert_eq!(patched["rule"]["throttle"]["limit"], 3);

    // Quiet hours and time zones on a recipient.
    let (status, p) = app
        .call(reqwest::Method::PUT, "/v1/users/u1", Some(json!({"quiet_hours": {"from": "22:00", "until": "7"}})))
        .await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("quiet_hours.until")), "{p}");
    let (status, p) = app.call(reqwest::Method::PUT, "/v1/users/u1", Some(json!({"timezone": "Mars/Olympus"}))).await;
    assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some("timezone")), "{p}");
    let (status, p) = app
        .call(
            reqwest::Method::PUT,
            "/v1/users/u1",
            Some(json!({"timezone": "Europe/Berlin", "quiet_hours": {"from": "22:00", "until": "07:00"}})),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    assert_eq!(p["quiet_hours"], json!({"from": "22:00", "until": "07:00"}));
    app.stop().await;
}

async fn as_user(app: &App, token: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = app.http.request(method, app.url(path)).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn the_preference_center_wins_over_a_host_sync_and_is_audited() {
    let mail = tempfile::tempdir().unwrap();
    let transport = format!("file://{}", mail.path().display());
    let app = App::start_on(Backend::Sqlite, |c| {
        c.email.transport = Some(transport);
        c.email.from = Some("Herald <news@herald.test>".into());
    })
    .await;
    let news = json!({
        "name": "News", "trigger_type": "news", "channel": "inbox", "category": "news", "enabled": true,
        "display_name": "Product news", "description": "What we shipped this week",
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "News", "text": "t"}}},
        "escalate": {"after": 3600, "unless": "seen", "channel": "email",
            "template": {"fallback_locale": "en", "locales": {"en": {"subject": "News", "text": "t"}}}},
    });
    assert_eq!(app.post("/v1/rules", news).await.0, 201);
    let receipts = json!({
        "name": "Receipts", "trigger_type": "paid", "channel": "inbox", "category": "transactional", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Receipt", "text": "t"}}},
    });
    assert_eq!(app.post("/v1/rules", receipts).await.0, 201);
    let (_, t) = app.post("/v1/users/u1/token", json!({})).await;
    let token = t["token"].as_str().unwrap().to_owned();

    let (status, center) = as_user(&app, &token, reqwest::Method::GET, "/v1/inbox/preferences", None).await;
    assert_eq!(status, 200, "{center}");
    let news = center["categories"].as_array().unwrap().iter().find(|c| c["category"] == "news").unwrap().clone();
    assert_eq!(
        (news["name"].as_str(), news["description"].as_str()),
        (Some("Product news"), Some("What we shipped this week"))
    );
    let channels: Vec<&str> =
        news["channels"].as_array().unwrap().iter().map(|c| c["channel"].as_str().unwrap()).collect();
    assert_eq!(channels, ["email", "inbox"], "the rule's channel and its follow-up's");
    let tx = center["categories"].as_array().unwrap().iter().find(|c| c["category"] == "transactional").unwrap();
    assert_eq!(tx["locked"], true);

    // Bad choices are refused by name.
    for (body, field) in [
        (json!({"categories": {"nope": {"inbox": false}}}), "categories.nope"),
        (json!({"categories": {"news": {"webhook": false}}}), "categories.news.webhook"),
        (json!({"categories": {"transactional": {"inbox": false}}}), "categories.transactional.inbox"),
    ] {
        let (status, p) = as_user(&app, &token, reqwest::Method::PUT, "/v1/inbox/preferences", Some(body)).await;
        assert_eq!((status, p["errors"][0]["field"].as_str()), (422, Some(field)), "{p}");
    }
    let (status, center) = as_user(
        &app,
        &token,
        reqwest::Method::PUT,
        "/v1/inbox/preferences",
        Some(json!({"categories": {"news": {"inbox": false}}})),
    )
    .await;
    assert_eq!(status, 200, "{center}");
    let news = center["categories"].as_array().unwrap().iter().find(|c| c["category"] == "news").unwrap().clone();
    let inbox = news["channels"].as_array().unwrap().iter().find(|c| c["channel"] == "inbox").unwrap().clone();
    assert_eq!((inbox["enabled"].as_bool(), inbox["decided_by"].as_str()), (Some(false), Some("user")));

    // A host sync afterwards does not undo it.
    let (status, body) = app
        .call(
            reqwest::Method::PUT,
            "/v1/users/u1",
            Some(json!({"preferences": {"categories": {"news": true, "digest": false}}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["user_preferences"], json!({"news": {"inbox": false}}), "{body}");
    let (status, body) = app.post("/v1/triggers", json!({"type": "news", "user_id": "u1"})).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = app.post("/v1/triggers", json!({"type": "paid", "user_id": "u1"})).await;
    assert_eq!(status, 202, "{body}");
    let report = app.deliver().await;
    assert_eq!((report.sent, report.suppressed), (1, 1), "the receipt goes, the news does not: {report:?}");
    let log = app.db.store.sends_for_user(&user("u1"), 10).await.unwrap();
    let why = log.iter().find(|s| s.status == "suppressed").unwrap().detail.clone().unwrap();
    assert_eq!(why, "the user turned off \"news\" by inbox in their preference center");

    // The hosted page: a GET changes nothing; the form turns it back on.
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let link = format!("/p/{}", keys.sign_preferences("u1"));
    let page = app.http.get(app.url(&link)).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    let news_inbox = "value=\"[&quot;news&quot;,&quot;inbox&quot;]\"";
    assert!(html.contains("Product news") && html.contains(news_inbox), "{html}");
    assert!(!html.contains(&format!("{news_inbox} checked")), "shows the user's off");
    let forged = app.http.get(app.url("/p/dTE.AAAA")).send().await.unwrap();
    assert_eq!(forged.status().as_u16(), 400);
    let saved = app
        .http
        .post(app.url(&link))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs([
                    ("shown", r#"["news","inbox"]"#),
                    ("shown", r#"["news","email"]"#),
                    ("was", r#"["news","email"]"#),
                    ("on", r#"["news","inbox"]"#),
                ])
                .finish(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status().as_u16(), 200);
    assert!(saved.text().await.unwrap().contains("Saved."));
    let (_, body) = app.get("/v1/users/u1").await;
    assert_eq!(body["user_preferences"], json!({"news": {"inbox": true, "email": false}}), "{body}");
    app.post("/v1/triggers", json!({"type": "news", "user_id": "u1"})).await;
    assert_eq!(app.deliver().await.sent, 1);

    // Every change is in the audit trail, with who made it.
    let audit = app.db.store.audit_for_target("user:u1", 10).await.unwrap();
    let who: Vec<&str> = audit.iter().map(|a| a.operator_email.as_str()).collect();
    assert_eq!(who, ["user u1 (preference page)", "api key \"tests\"", "user u1 (inbox API)"], "{audit:?}");
    assert_eq!(audit[2].detail.as_deref(), Some("news by inbox: off"));
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    let mut trials = backend_trials();
    trials.push(common::harness::test(
        "api::refuses_each_bad_workflow_field_by_name",
        api_refuses_each_bad_workflow_field_by_name,
    ));
    trials.push(common::harness::test(
        "cli::herald_sends_prints_holds_digests_and_escalation_links",
        herald_sends_prints_holds_digests_and_escalation_links,
    ));
    trials.push(common::harness::test(
        "api::the_preference_center_wins_over_a_host_sync_and_is_audited",
        the_preference_center_wins_over_a_host_sync_and_is_audited,
    ));
    common::harness::main(trials)
}
