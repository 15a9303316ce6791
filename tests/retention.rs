//! Retention never prunes what a message still to be delivered needs, on
//! each backend, driven with the manual clock: an
//! escalation follow-up held by quiet hours or retried keeps its inbox
//! message's outbox row and (archived, unread) inbox row; a digest still
//! open keeps the triggers that joined it, and their idempotency keys.
//! Each case was pruned, and the follow-up cancelled as "no longer exists"
//! or "was deleted", before the fix.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{ScriptedChannel, TestDb, add_rule, at, user, worker};
use herald::clock::{Clock, ManualClock};
use herald::config::RetentionSettings;
use herald::delivery::channel::inbox::InboxChannel;
use herald::delivery::channel::{Outcome, Registry};
use herald::delivery::worker::{Worker, WorkerConfig};
use herald::planning::planner::Planner;
use herald::planning::recipient::RecipientInput;
use herald::retention::{PruneReport, Retention};
use herald::store::{InboxMark, InboxStore, NewTrigger, Prunable, RecipientStore, Store, TriggerInsert, TriggerStore};
use serde_json::{Value, json};

backend_tests!(
    a_follow_up_held_by_quiet_hours_and_retried_keeps_its_inbox_message,
    an_archived_unread_message_stays_while_its_follow_up_is_pending,
    a_chains_later_step_keeps_the_message_after_the_first_is_done,
    a_digest_still_open_keeps_the_triggers_that_joined_it,
);

const HOUR: Duration = Duration::from_secs(3600);

// The tests' times are in 2030 (`at`): the outbox's and the send log's ids
// are made on the real clock (UUIDv7), and their prune takes only ids made
// before the cutoff, so the manual clock must run ahead of the real one.

fn escalating(after: u64) -> Value {
    json!({"escalate": {"after": after, "unless": "read", "channel": "email", "template":
        {"fallback_locale": "en", "locales": {"en": {"subject": "You have an unread message", "text": "t"}}}}})
}

/// A trigger at `clock`'s time, planned; its id.
async fn trigger(db: &TestDb, clock: &ManualClock, trigger_type: &str, key: Option<&str>, n: u32) -> String {
    let t = NewTrigger {
        id: herald::store::new_id(),
        trigger_type: trigger_type.into(),
        user_id: user("u1"),
        payload: json!({"n": n}),
        idempotency_key: key.map(str::to_owned),
        request_hash: None,
        occurred_at: clock.now(),
        send_at: None,
        actor_id: None,
    };
    db.store.insert_trigger(&t, clock.now()).await.unwrap();
    Planner::new(db.arc(), Arc::new(clock.clone()), Duration::from_secs(1), 100).tick().await.unwrap();
    t.id
}

/// The inbox, and an "email" channel that asks for a retry on its first
/// delivery and sends after; how many times it was called.
fn registry_with_flaky_email() -> (Registry, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let email = ScriptedChannel::new(move |_| match counted.fetch_add(1, Ordering::SeqCst) {
        0 => Outcome::retry("421 try again later"),
        _ => Outcome::sent("test"),
    });
    let mut registry = Registry::new();
    registry.register("inbox", Arc::new(InboxChannel::new()));
    registry.register("email", email);
    (registry, calls)
}

/// One retention pass at `clock`'s time with every period an hour.
async fn prune(db: &TestDb, clock: &ManualClock) -> PruneReport {
    let settings = RetentionSettings {
        outbox: HOUR,
        sends: HOUR,
        events: HOUR,
        archived_inbox: HOUR,
        bounces: HOUR,
        triggers: HOUR,
        ..RetentionSettings::default()
    };
    let retention =
        Retention::new(db.store.clone(), Arc::new(clock.clone()), settings, herald::metrics::Metrics::new());
    retention.pass(&tokio_util::sync::CancellationToken::new()).await
}

/// The follow-ups' send-log entries: (status, detail of the newest).
async fn follow_up(db: &TestDb) -> (String, Option<String>) {
    let timeline = herald::http::users::user_timeline(&db.store, &user("u1"), 50).await.unwrap();
    let f = timeline.messages.into_iter().find(|m| m.follow_up_of.is_some()).expect("a follow-up was planned");
    (f.status, f.history.first().and_then(|h| h.detail.clone()))
}

fn tick_worker(db: &TestDb, clock: &ManualClock, registry: Registry) -> Worker {
    worker(db.arc(), registry, clock, WorkerConfig { retry: Duration::from_secs(300), ..WorkerConfig::default() })
}

/// The reproduction: `retention.outbox = "1h"` and quiet hours
/// holding the follow-up past it. The planned follow-up no longer marks
/// its message (`follow_up_at` is cleared when it is planned), so only the
/// pending follow-up row itself can keep the message; then a retry of the
/// follow-up, likewise.
async fn a_follow_up_held_by_quiet_hours_and_retried_keeps_its_inbox_message(db: &TestDb) {
    let clock = ManualClock::at(at("2030-03-04T10:00:00Z"));
    let quiet: RecipientInput =
        serde_json::from_value(json!({"quiet_hours": {"from": "10:20", "until": "22:00"}})).unwrap();
    db.store.put_recipient(&quiet.into_row(&user("u1"), clock.now()).unwrap()).await.unwrap();
    add_rule(db, clock.now(), "invoice", escalating(1800)).await;
    let (registry, email_calls) = registry_with_flaky_email();
    let w = tick_worker(db, &clock, registry);
    trigger(db, &clock, "invoice", None, 1).await;
    assert_eq!(w.tick().await.unwrap().sent, 1, "the inbox message, before quiet hours");

    clock.set(at("2030-03-04T10:30:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!(report.held, 1, "the follow-up is planned and held by quiet hours: {report:?}");
    clock.set(at("2030-03-04T21:00:00Z"));
    let pruned = prune(db, &clock).await;
    assert_eq!(pruned.of(Prunable::Outbox), 0, "the message of a held follow-up stays: {pruned:?}");

    clock.set(at("2030-03-04T22:00:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!(report.retried, 1, "quiet hours over: the follow-up is tried, and retried: {report:?}");
    clock.set(at("2030-03-04T23:04:00Z"));
    let pruned = prune(db, &clock).await;
    assert_eq!(pruned.of(Prunable::Outbox), 0, "the message of a retried follow-up stays: {pruned:?}");

    clock.set(at("2030-03-04T22:05:00Z").plus(HOUR));
    let report = w.tick().await.unwrap();
    assert_eq!((report.sent, report.cancelled), (1, 0), "{report:?} {:?}", follow_up(db).await);
    assert_eq!(follow_up(db).await.0, "sent");
    assert_eq!(email_calls.load(Ordering::SeqCst), 2);
    // Done: both rows age out like any other.
    clock.advance(2 * HOUR);
    assert_eq!(prune(db, &clock).await.of(Prunable::Outbox), 2);
}

/// An `invoice` trigger at 10:00 delivered to u1's inbox, and the message
/// archived unread at 10:10.
async fn deliver_and_archive(db: &TestDb, clock: &ManualClock, w: &Worker) {
    trigger(db, clock, "invoice", None, 1).await;
    assert_eq!(w.tick().await.unwrap().sent, 1, "the inbox message");
    clock.set(at("2030-03-04T10:10:00Z"));
    let message = db.store.inbox_for_user(&user("u1"), 10).await.unwrap().remove(0);
    db.store.inbox_mark(&user("u1"), &message.id, InboxMark::Archive, clock.now()).await.unwrap();
}

/// Archiving sees a message but does not read it: an `unless: read`
/// follow-up must still go, so the archived inbox row it reads stays while
/// the follow-up is not yet planned, and while it is planned but retried.
async fn an_archived_unread_message_stays_while_its_follow_up_is_pending(db: &TestDb) {
    let clock = ManualClock::at(at("2030-03-04T10:00:00Z"));
    add_rule(db, clock.now(), "invoice", escalating(86_400)).await;
    let (registry, email_calls) = registry_with_flaky_email();
    let w = tick_worker(db, &clock, registry);
    deliver_and_archive(db, &clock, &w).await;

    clock.set(at("2030-03-04T12:00:00Z"));
    let pruned = prune(db, &clock).await;
    assert_eq!(pruned.of(Prunable::ArchivedInbox), 0, "the follow-up is not planned yet: {pruned:?}");
    assert_eq!(pruned.of(Prunable::Triggers), 0, "the follow-up will be planned with its trigger: {pruned:?}");

    clock.set(at("2030-03-05T10:00:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!(report.retried, 1, "the follow-up is planned, tried and retried: {report:?}");
    let pruned = prune(db, &clock).await;
    let kept = [Prunable::ArchivedInbox, Prunable::Outbox, Prunable::Triggers].map(|t| pruned.of(t));
    assert_eq!(kept, [0, 0, 0], "{pruned:?}");

    clock.set(at("2030-03-05T10:05:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!((report.sent, report.cancelled), (1, 0), "{report:?} {:?}", follow_up(db).await);
    assert_eq!(email_calls.load(Ordering::SeqCst), 2);
    clock.advance(2 * HOUR);
    let pruned = prune(db, &clock).await;
    let gone = [Prunable::ArchivedInbox, Prunable::Outbox, Prunable::Triggers].map(|t| pruned.of(t));
    assert_eq!(gone, [1, 2, 1], "{pruned:?}");
}

/// A chain plans every step when the first falls due; once the first is
/// done, only the later step's row (`escalate:<id>:2`) is pending, and it
/// alone must keep the (archived, unread) message it asks about.
async fn a_chains_later_step_keeps_the_message_after_the_first_is_done(db: &TestDb) {
    let clock = ManualClock::at(at("2030-03-04T10:00:00Z"));
    let template = json!({"fallback_locale": "en", "locales": {"en": {"subject": "Unread", "text": "t"}}});
    let chain = json!({"escalate": [
        {"after": 1800, "unless": "read", "channel": "email", "template": template},
        {"after": 12_600, "channel": "email", "template": template},
    ]});
    add_rule(db, clock.now(), "invoice", chain).await;
    let mut registry = Registry::new();
    registry.register("inbox", Arc::new(InboxChannel::new()));
    registry.register("email", ScriptedChannel::new(|_| Outcome::sent("test")));
    let w = tick_worker(db, &clock, registry);
    deliver_and_archive(db, &clock, &w).await;
    clock.set(at("2030-03-04T10:30:00Z"));
    assert_eq!(w.tick().await.unwrap().sent, 1, "step 1");

    clock.set(at("2030-03-04T13:00:00Z"));
    let pruned = prune(db, &clock).await;
    let counts = [Prunable::Outbox, Prunable::ArchivedInbox, Prunable::Triggers].map(|t| pruned.of(t));
    assert_eq!(counts, [1, 0, 0], "only step 1's own row goes; step 2 is pending: {pruned:?}");

    clock.set(at("2030-03-04T13:30:00Z"));
    let report = w.tick().await.unwrap();
    assert_eq!((report.sent, report.cancelled), (1, 0), "step 2 finds its message: {report:?}");
}

/// The triggers that joined an open digest have no message of their own
/// (the digest's is planned by its first trigger), yet the digest message
/// is theirs: they and their idempotency keys stay until it is delivered,
/// so a host retrying one is answered as a replay, not put in again.
async fn a_digest_still_open_keeps_the_triggers_that_joined_it(db: &TestDb) {
    let clock = ManualClock::at(at("2030-03-04T10:00:00Z"));
    add_rule(db, clock.now(), "comment", json!({"digest": {"window": 7200}})).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(trigger(db, &clock, "comment", Some(&format!("comment-{n}")), n).await);
        clock.advance(Duration::from_secs(300));
    }
    clock.set(at("2030-03-04T11:30:00Z"));
    let pruned = prune(db, &clock).await;
    assert_eq!(pruned.of(Prunable::Triggers), 0, "{pruned:?}");
    for id in &ids {
        assert!(db.store.get_trigger(id).await.unwrap().is_some(), "{id} is in a digest still to be sent");
    }
    let retry = NewTrigger {
        id: herald::store::new_id(),
        trigger_type: "comment".into(),
        user_id: user("u1"),
        payload: json!({"n": 1}),
        idempotency_key: Some("comment-1".into()),
        request_hash: None,
        occurred_at: clock.now(),
        send_at: None,
        actor_id: None,
    };
    let replay = db.store.insert_trigger(&retry, clock.now()).await.unwrap();
    assert!(matches!(&replay, TriggerInsert::Existing(t) if t.id == ids[1]), "a replay: {replay:?}");

    clock.set(at("2030-03-04T12:00:00Z"));
    let w = worker(db.arc(), herald::app::registry(), &clock, WorkerConfig::default());
    assert_eq!(w.tick().await.unwrap().sent, 1);
    let inbox = db.store.inbox_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(inbox.len(), 1, "one digest message");
    clock.advance(HOUR);
    assert_eq!(prune(db, &clock).await.of(Prunable::Triggers), 3, "delivered: its triggers age out");
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
