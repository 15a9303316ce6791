//! The worker's behaviour end to end, against each backend: what a user sees
//! in the outbox, the send log and the inbox after sweeps.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{ScriptedChannel, T0, TestDb, row, user, worker};
use herald::clock::{Clock, ManualClock};
use herald::delivery::channel::{Channel, Delivery, Outcome, Registry};
use herald::delivery::worker::{Worker, WorkerConfig, WorkerParts};
use herald::domain::OutboxStatus;
use herald::store::{OutboxRow, Store};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

backend_tests!(
    inbox_rows_are_delivered_and_logged_as_sent,
    a_missing_channel_ends_failed_in_plain_words,
    retries_are_flat_and_give_up_after_max_attempts,
    a_panicking_channel_is_a_retry_not_a_crashed_tick,
    a_row_past_its_grace_window_expires_undelivered,
    a_slow_sender_whose_claim_was_taken_back_cannot_overwrite_the_newer_result,
    deliveries_per_channel_are_bounded,
    shutdown_puts_back_everything_it_did_not_finish,
    a_hung_delivery_times_out_as_a_retry,
    an_enqueue_wakes_the_running_worker_at_once,
    a_rule_disabled_while_its_row_waits_for_a_slot_cancels_it,
    an_instance_that_cannot_renew_its_lease_starts_no_delivery,
    a_lost_instances_rows_are_rescued_after_its_lease_and_deliver_timeout,
    a_starting_instance_ends_rows_of_a_channel_it_lacks_at_once,
    a_backlog_is_read_in_batches_that_grow,
);

fn registry_with(name: &str, channel: Arc<dyn Channel>) -> Registry {
    let mut r = Registry::new();
    r.register(name, channel);
    r
}

fn inbox_registry() -> Registry {
    herald::app::registry()
}

async fn inbox_rows_are_delivered_and_logged_as_sent(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let rows: Vec<_> = (0..3).map(|_| row("u1", "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let w = worker(db.arc(), inbox_registry(), &clock, WorkerConfig::default());

    let report = w.tick().await.unwrap();
    assert_eq!((report.claimed, report.sent), (3, 3), "{report:?}");
    assert_eq!(w.tick().await.unwrap().claimed, 0, "nothing left");

    let inbox = db.store.inbox_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(inbox.len(), 3);
    let log = db.store.sends_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(log.len(), 3);
    assert!(log.iter().all(|s| s.status == "sent" && s.transport.as_deref() == Some("inbox") && s.detail.is_none()));
    let summary = db.store.status_summary(T0).await.unwrap();
    assert_eq!(summary.count(OutboxStatus::Sent), 3);
}

async fn a_missing_channel_ends_failed_in_plain_words(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let gone = row("u1", "pigeon", T0);
    let unbuilt = row("u1", "email", T0);
    db.store.enqueue(&[gone.clone(), unbuilt.clone()], T0).await.unwrap();
    let w = worker(db.arc(), inbox_registry(), &clock, WorkerConfig::default());
    let report = w.tick().await.unwrap();
    assert_eq!(report.failed, 2, "{report:?}");

    let gone_log = db.store.sends_for_outbox(&gone.id).await.unwrap();
    assert_eq!(gone_log[0].status, "failed");
    assert_eq!(
        gone_log[0].detail.as_deref(),
        Some(
            "channel \"pigeon\" does not exist here (the channels are email, inbox, push, slack, sms, webhook); nothing was sent"
        )
    );
    let unbuilt_log = db.store.sends_for_outbox(&unbuilt.id).await.unwrap();
    assert_eq!(
        unbuilt_log[0].detail.as_deref(),
        Some(
            "channel \"email\" is not configured on this instance: no email transport is configured \
             (set email.transport); nothing was sent"
        ),
    );
    assert_eq!(db.store.get_outbox(&gone.id).await.unwrap().unwrap().status, OutboxStatus::Failed);
}

async fn retries_are_flat_and_give_up_after_max_attempts(db: &TestDb) {
    let (clock, r) = one_row(db, "flaky").await;
    let channel = ScriptedChannel::new(|_| Outcome::retry("451 4.3.0 try again later"));
    let w = worker(db.arc(), registry_with("flaky", channel.clone()), &clock, WorkerConfig::default());

    for attempt in 1..=4 {
        assert_eq!(w.tick().await.unwrap().retried, 1, "attempt {attempt}");
        let back = db.store.get_outbox(&r.id).await.unwrap().unwrap();
        assert_eq!((back.status, back.attempts), (OutboxStatus::Scheduled, attempt));
        assert_eq!(back.due_at, clock.now().plus(Duration::from_secs(300)), "flat five minutes");
        assert_eq!(back.last_error.as_deref(), Some("451 4.3.0 try again later"));
        clock.advance(Duration::from_secs(299));
        assert_eq!(w.tick().await.unwrap().claimed, 0, "not before the retry interval");
        clock.advance(Duration::from_secs(1));
    }
    let report = w.tick().await.unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(channel.calls(), 5);
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].detail.as_deref(), Some("gave up after 5 attempts; last error: 451 4.3.0 try again later"));
    assert_eq!(log[0].attempts, 5);
}

async fn a_panicking_channel_is_a_retry_not_a_crashed_tick(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let mut boom = row("u1", "moody", T0);
    boom.payload = serde_json::json!({ "title": "boom" });
    let fine = row("u1", "moody", T0);
    db.store.enqueue(&[boom.clone(), fine.clone()], T0).await.unwrap();
    let channel = ScriptedChannel::new(|row: &OutboxRow| {
        if row.payload.contains("boom") {
            panic!("template exploded");
        }
        Outcome::Sent { transport: "test".into(), detail: None, address_hash: None, provider_id: None }
    });
    let w = worker(db.arc(), registry_with("moody", channel), &clock, WorkerConfig::default());
    let report = w.tick().await.unwrap();
    assert_eq!((report.sent, report.retried), (1, 1), "{report:?}");
    let back = db.store.get_outbox(&boom.id).await.unwrap().unwrap();
    assert_eq!(back.status, OutboxStatus::Scheduled);
    assert_eq!(back.last_error.as_deref(), Some("channel \"moody\" panicked: template exploded"));
}

async fn a_row_past_its_grace_window_expires_undelivered(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let mut r = row("u1", "counted", T0);
    r.expires_at = Some(T0.plus(Duration::from_secs(60)));
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let channel = ScriptedChannel::new(|_| Outcome::Sent {
        transport: "t".into(),
        detail: None,
        address_hash: None,
        provider_id: None,
    });
    let w = worker(db.arc(), registry_with("counted", channel.clone()), &clock, WorkerConfig::default());

    clock.advance(Duration::from_secs(61));
    let report = w.tick().await.unwrap();
    assert_eq!(report.expired, 1, "{report:?}");
    assert_eq!(channel.calls(), 0, "never delivered late");
    assert_eq!(db.store.get_outbox(&r.id).await.unwrap().unwrap().status, OutboxStatus::Expired);
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log[0].status, "expired");
    assert!(log[0].detail.as_deref().unwrap().contains("grace window"), "{log:?}");
}

/// Runs `w` until the token it returns is cancelled.
fn run_in_background(w: Worker) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    (shutdown, tokio::spawn(async move { w.run(token).await }))
}

/// A clock at T0, and one row for user `u1` on `channel` due then, enqueued.
async fn one_row(db: &TestDb, channel: &str) -> (ManualClock, herald::store::NewOutboxRow) {
    let r = row("u1", channel, T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    (ManualClock::at(T0), r)
}

/// A channel that blocks until released, telling the test when it started.
struct GatedChannel {
    started: Notify,
    release: Notify,
    outcome: Outcome,
}

impl GatedChannel {
    /// Blocks until released, then answers `outcome`.
    fn new(outcome: Outcome) -> Arc<GatedChannel> {
        Arc::new(GatedChannel { started: Notify::new(), release: Notify::new(), outcome })
    }
}

#[async_trait::async_trait]
impl Channel for GatedChannel {
    async fn deliver(&self, _d: &Delivery) -> Outcome {
        self.started.notify_one();
        self.release.notified().await;
        self.outcome.clone()
    }
}

async fn a_slow_sender_whose_claim_was_taken_back_cannot_overwrite_the_newer_result(db: &TestDb) {
    let (clock, r) = one_row(db, "relay").await;
    let slow = GatedChannel::new(Outcome::terminal("554 too late, from the slow sender"));
    let slow_worker = worker(db.arc(), registry_with("relay", slow.clone()), &clock, WorkerConfig::default());
    let slow_tick = tokio::spawn(async move { slow_worker.tick().await.unwrap() });
    slow.started.notified().await;

    // Past the stale window another instance takes the row back and delivers it.
    clock.advance(Duration::from_secs(16 * 60));
    let other = db.another_instance().await;
    let fast = ScriptedChannel::new(|_| Outcome::Sent {
        transport: "relay".into(),
        detail: None,
        address_hash: None,
        provider_id: None,
    });
    let fast_worker = worker(Arc::new(other), registry_with("relay", fast), &clock, WorkerConfig::default());
    let report = fast_worker.tick().await.unwrap();
    assert_eq!((report.reclaimed, report.sent), (1, 1), "{report:?}");

    slow.release.notify_one();
    let report = slow_tick.await.unwrap();
    assert_eq!(report.lost_claim, 1, "{report:?}");

    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1, "one outcome, the newer one: {log:?}");
    assert_eq!(log[0].status, "sent");
    assert_eq!(db.store.get_outbox(&r.id).await.unwrap().unwrap().status, OutboxStatus::Sent);
}

/// Counts how many deliveries overlap.
struct OverlapChannel {
    now: AtomicUsize,
    peak: AtomicUsize,
}

#[async_trait::async_trait]
impl Channel for OverlapChannel {
    async fn deliver(&self, _d: &Delivery) -> Outcome {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Outcome::Sent { transport: "t".into(), detail: None, address_hash: None, provider_id: None }
    }
}

async fn deliveries_per_channel_are_bounded(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let rows: Vec<_> = (0..12).map(|_| row("u1", "smtp", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let channel = Arc::new(OverlapChannel { now: AtomicUsize::new(0), peak: AtomicUsize::new(0) });
    let mut config = WorkerConfig::default();
    config.concurrency.insert("smtp".into(), 3);
    let w = worker(db.arc(), registry_with("smtp", channel.clone()), &clock, config);
    assert_eq!(w.tick().await.unwrap().sent, 12);
    assert_eq!(channel.peak.load(Ordering::SeqCst), 3, "concurrent, and never more than the limit");
}

async fn shutdown_puts_back_everything_it_did_not_finish(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let rows: Vec<_> = (0..5).map(|_| row("u1", "hung", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let hung = GatedChannel::new(Outcome::terminal("never"));
    let mut config = WorkerConfig { shutdown_grace: Duration::from_millis(200), ..WorkerConfig::default() };
    config.concurrency.insert("hung".into(), 1);
    let w = worker(db.arc(), registry_with("hung", hung.clone()), &clock, config);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let tick = tokio::spawn(async move { w.tick_until(&token).await.unwrap() });
    hung.started.notified().await; // one delivery in flight, four waiting for the slot
    shutdown.cancel();
    let report = tick.await.unwrap();
    assert_eq!(report.released, 5, "{report:?}");

    let summary = db.store.status_summary(T0).await.unwrap();
    assert_eq!(summary.count(OutboxStatus::Sending), 0, "nothing left owned in sending");
    assert_eq!(summary.count(OutboxStatus::Scheduled), 5);
    let mut attempts = Vec::new();
    for r in &rows {
        attempts.push(db.store.get_outbox(&r.id).await.unwrap().unwrap().attempts);
    }
    attempts.sort();
    assert_eq!(attempts, vec![0, 0, 0, 0, 1], "only the interrupted delivery counts as an attempt");
}

async fn a_hung_delivery_times_out_as_a_retry(db: &TestDb) {
    let (clock, r) = one_row(db, "hung").await;
    let hung = GatedChannel::new(Outcome::terminal("x"));
    let config = WorkerConfig { deliver_timeout: Duration::from_millis(50), ..WorkerConfig::default() };
    let w = worker(db.arc(), registry_with("hung", hung), &clock, config);
    assert_eq!(w.tick().await.unwrap().retried, 1);
    let back = db.store.get_outbox(&r.id).await.unwrap().unwrap();
    assert_eq!(back.last_error.as_deref(), Some("delivery did not finish within 0.05s"));
}

/// Waits (bounded) until the user's inbox holds `n` messages.
async fn inbox_reaches(store: &dyn Store, user_id: &str, n: usize, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if store.inbox_for_user(&user(user_id), 100).await.unwrap().len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn an_enqueue_wakes_the_running_worker_at_once(db: &TestDb) {
    // A real clock here: the worker's loop sleeps on tokio's timer.
    let clock: Arc<dyn Clock> = Arc::new(herald::clock::SystemClock);
    let config = WorkerConfig { poll: Duration::from_secs(3600), ..WorkerConfig::default() };
    let store = db.arc();
    let w = Worker::new(WorkerParts {
        store: store.clone(),
        registry: herald::app::registry(),
        clock: clock.clone(),
        config,
        metrics: herald::metrics::Metrics::new(),
        address_keys: None,
        lease: None,
    });
    let (shutdown, running) = run_in_background(w);
    for i in 1..=2 {
        db.store.enqueue(&[row("waker", "inbox", clock.now())], clock.now()).await.unwrap();
        assert!(
            inbox_reaches(store.as_ref(), "waker", i, Duration::from_secs(10)).await,
            "message {i} must arrive long before the hour-long poll"
        );
    }
    shutdown.cancel();
    running.await.unwrap();
}

/// Rows are composed a batch at a time, right after the claim;
/// a row that then waits for a delivery slot (the channel is busy) is
/// composed again before it goes, so a rule disabled after the claim and
/// before the delivery still cancels it, as it would have when every row
/// read its rule just before sending.
async fn a_rule_disabled_while_its_row_waits_for_a_slot_cancels_it(db: &TestDb) {
    use herald::store::{RuleRow, RuleStore, new_id};
    let clock = ManualClock::at(T0);
    let mut rule = RuleRow {
        id: new_id(),
        name: "Digest".into(),
        trigger_type: "thing.happened".into(),
        condition: None,
        channel: "gated".into(),
        template: serde_json::json!({"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}}),
        delay_seconds: 0,
        grace_seconds: None,
        category: "updates".into(),
        enabled: true,
        webhook_url: None,
        workflow: None,
        created_at: T0,
        updated_at: T0,
    };
    db.store.insert_rule(&rule).await.unwrap();
    let rows: Vec<_> = (0..2)
        .map(|_| {
            let mut r = row("u1", "gated", T0);
            r.rule_id = Some(rule.id.clone());
            r
        })
        .collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let gate = GatedChannel::new(Outcome::sent("gated"));
    let mut config = WorkerConfig::default();
    config.concurrency.insert("gated".into(), 1);
    let w = worker(db.arc(), registry_with("gated", gate.clone()), &clock, config);
    let tick = tokio::spawn(async move { w.tick().await.unwrap() });

    // Both rows claimed and composed; the first is delivering, the second
    // waits for the one slot. Now the operator disables the rule.
    gate.started.notified().await;
    rule.enabled = false;
    rule.updated_at = T0.plus(Duration::from_secs(2));
    assert!(db.store.update_rule(&rule).await.unwrap());
    clock.advance(Duration::from_secs(2));
    gate.release.notify_one();
    let report = tick.await.unwrap();
    assert_eq!((report.claimed, report.sent), (2, 1), "{report:?}");

    let mut statuses = Vec::new();
    for r in &rows {
        let log = db.store.sends_for_outbox(&r.id).await.unwrap();
        statuses.push((log[0].status.clone(), log[0].detail.clone()));
    }
    statuses.sort();
    assert_eq!(
        statuses,
        vec![("cancelled".to_owned(), Some("rule disabled".to_owned())), ("sent".to_owned(), None)],
        "the row still waiting when the rule was disabled is cancelled, not sent"
    );
}

fn sent_channel() -> Arc<ScriptedChannel> {
    ScriptedChannel::new(|_| Outcome::Sent {
        transport: "relay".into(),
        detail: None,
        address_hash: None,
        provider_id: None,
    })
}

fn leased_worker(
    store: &herald::store::SqlStore,
    id: &str,
    channel: Arc<ScriptedChannel>,
    clock: &ManualClock,
) -> Worker {
    let who = herald::store::InstanceIdentity { id: id.into(), host: "test".into(), pid: 1, started_at: clock.now() };
    Worker::new(WorkerParts {
        store: Arc::new(store.for_instance(id)),
        registry: registry_with("relay", channel),
        clock: Arc::new(clock.clone()),
        config: WorkerConfig::default(),
        metrics: herald::metrics::Metrics::new(),
        address_keys: Some(herald::address::AddressKeys::from_secret(b"worker test secret")),
        lease: Some(who),
    })
}

/// No lease, no delivery: before the first renewal, and once the lease
/// (20 s by default) has run out without one.
async fn an_instance_that_cannot_renew_its_lease_starts_no_delivery(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let channel = sent_channel();
    let w = leased_worker(&db.store, "instance-a", channel.clone(), &clock);
    db.store.enqueue(&[row("u1", "relay", T0)], T0).await.unwrap();
    assert_eq!(w.tick().await.unwrap().claimed, 0, "no lease yet");
    w.heartbeat().await.unwrap();
    assert_eq!(w.tick().await.unwrap().sent, 1);

    clock.advance(Duration::from_secs(19)); // past 20 s less a tenth, unrenewed
    db.store.enqueue(&[row("u1", "relay", clock.now())], clock.now()).await.unwrap();
    assert_eq!(w.tick().await.unwrap().claimed, 0, "the lease ran out: nothing new starts");
    assert_eq!(channel.calls(), 1);
    w.heartbeat().await.unwrap();
    assert_eq!(w.tick().await.unwrap().sent, 1, "renewed: deliveries resume");
    assert_eq!(channel.calls(), 2);
}

/// A direct lane (the inbox) reads a backlog in batches that
/// double after each full one (10, 20, 40, 80, then 100: ten times
/// `worker.batch`), so 300 due rows take 6 reads and flushes, not 30; every
/// row is still delivered once.
async fn a_backlog_is_read_in_batches_that_grow(db: &TestDb) {
    let clock = ManualClock::at(T0);
    let rows: Vec<_> = (0..300).map(|i| row(&format!("u{i}"), "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let metrics = herald::metrics::Metrics::new();
    let w = Worker::new(WorkerParts {
        store: db.arc(),
        registry: inbox_registry(),
        clock: Arc::new(clock.clone()),
        config: WorkerConfig { batch: 10, ..WorkerConfig::default() },
        metrics: metrics.clone(),
        address_keys: None,
        lease: None,
    });
    let (shutdown, running) = run_in_background(w);
    let sent = || metric(&metrics.encode_text(), "herald_deliveries_total{channel=\"inbox\",outcome=\"sent\"} ");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while sent() < 300 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    running.await.unwrap();
    assert_eq!(sent(), 300);
    let reads = metric(&metrics.encode_text(), "herald_claim_duration_seconds_count ");
    assert!((5..=8).contains(&reads), "300 rows in {reads} reads of a batch of 10 growing to 100");
    for r in &rows {
        assert_eq!(db.store.sends_for_outbox(&r.id).await.unwrap().len(), 1, "each row once");
    }
}

/// A counter's value in the text exposition (0 when absent).
fn metric(text: &str, prefix: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// A CI failure: `run` spawned the sweep for channels this instance lacks
/// before its lease was taken, so the sweep's first round started nothing
/// and the row waited for the next one (5 s at the least). The lease is now
/// taken before anything starts; the row ends well inside that.
async fn a_starting_instance_ends_rows_of_a_channel_it_lacks_at_once(db: &TestDb) {
    let (clock, r) = one_row(db, "pigeon").await;
    let w = leased_worker(&db.store, "instance-a", sent_channel(), &clock);
    let (shutdown, running) = run_in_background(w);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut status = OutboxStatus::Scheduled;
    while std::time::Instant::now() < deadline {
        status = db.store.get_outbox(&r.id).await.unwrap().unwrap().status;
        if status == OutboxStatus::Failed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    running.await.unwrap();
    assert_eq!(
        status,
        OutboxStatus::Failed,
        "the first sweep after start ends the row of a channel this instance lacks"
    );
}

/// Instance A claims a row and is lost (no more heartbeats, no outcome).
/// Instance B takes the row back once A's lease has been lapsed for longer
/// than deliver_timeout (20 s + 60 s by default: not the 15-minute stale
/// window), counts the rescue with its reason and delivers it; A's late
/// outcome is refused.
async fn a_lost_instances_rows_are_rescued_after_its_lease_and_deliver_timeout(db: &TestDb) {
    let (clock, r) = one_row(db, "relay").await;
    let a_channel = GatedChannel::new(Outcome::Sent {
        transport: "late".into(),
        detail: None,
        address_hash: None,
        provider_id: None,
    });
    let who = herald::store::InstanceIdentity { id: "instance-a".into(), host: "test".into(), pid: 1, started_at: T0 };
    let a = Worker::new(WorkerParts {
        store: Arc::new(db.store.for_instance("instance-a")),
        registry: registry_with("relay", a_channel.clone()),
        clock: Arc::new(clock.clone()),
        config: WorkerConfig::default(),
        metrics: herald::metrics::Metrics::new(),
        address_keys: Some(herald::address::AddressKeys::from_secret(b"worker test secret")),
        lease: Some(who),
    });
    a.heartbeat().await.unwrap();
    let a_tick = tokio::spawn(async move { a.tick().await.unwrap() });
    a_channel.started.notified().await; // A holds the claim, mid-delivery

    let b_channel = sent_channel();
    let other = db.another_instance().await;
    let metrics = herald::metrics::Metrics::new();
    let who = herald::store::InstanceIdentity { id: "instance-b".into(), host: "test".into(), pid: 2, started_at: T0 };
    let b = Worker::new(WorkerParts {
        store: Arc::new(other.for_instance("instance-b")),
        registry: registry_with("relay", b_channel.clone()),
        clock: Arc::new(clock.clone()),
        config: WorkerConfig::default(),
        metrics: metrics.clone(),
        address_keys: Some(herald::address::AddressKeys::from_secret(b"worker test secret")),
        lease: Some(who),
    });
    clock.advance(Duration::from_secs(79));
    assert_eq!(b.heartbeat().await.unwrap(), 0, "A's lease lapsed at 20 s; its delivery may run until 80 s");
    clock.advance(Duration::from_secs(2));
    assert_eq!(b.heartbeat().await.unwrap(), 1, "taken back at lease + deliver_timeout");
    assert_eq!(metrics.rescued_count("lease_lapsed"), 1);
    assert!(metrics.encode_text().contains("herald_rescued_claims_total{reason=\"lease_lapsed\"} 1"));
    assert_eq!(b.tick().await.unwrap().sent, 1);

    a_channel.release.notify_one();
    assert_eq!(a_tick.await.unwrap().lost_claim, 1, "A's late outcome is refused");
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].transport.as_deref(), Some("relay"), "B's delivery is the one recorded");
    assert_eq!(b_channel.calls(), 1);
}

/// PostgreSQL only: a trigger makes every update of the outbox fail with
/// SQLSTATE 57P03 ("cannot connect now", what a server starting up or
/// failing over answers) and counts the attempts in a sequence (not rolled
/// back). The delivery succeeds while the database is "away"; the outcome is
/// kept and recorded when it answers again: one send-log row, one delivery.
async fn an_outcome_kept_while_the_database_is_away_is_recorded_when_it_answers(db: &TestDb) {
    use sqlx::Executor;
    let pool = db.store.pool();
    let (clock, r) = one_row(db, "relay").await;
    let relay = GatedChannel::new(Outcome::Sent {
        transport: "relay".into(),
        detail: None,
        address_hash: None,
        provider_id: None,
    });
    let metrics = herald::metrics::Metrics::new();
    let w = Worker::new(WorkerParts {
        store: db.arc(),
        registry: registry_with("relay", relay.clone()),
        clock: Arc::new(clock.clone()),
        config: WorkerConfig::default(),
        metrics: metrics.clone(),
        address_keys: None,
        lease: None,
    });
    let tick = tokio::spawn(async move { w.tick().await.unwrap() });
    relay.started.notified().await; // claimed; the relay is accepting the message

    pool.execute("CREATE SEQUENCE herald_fault_hits").await.unwrap();
    pool.execute("CREATE TABLE herald_fault (away BOOLEAN)").await.unwrap();
    pool.execute("INSERT INTO herald_fault VALUES (true)").await.unwrap();
    pool.execute(
        "CREATE FUNCTION herald_fault() RETURNS trigger AS $$ BEGIN \
           IF EXISTS (SELECT 1 FROM herald_fault) THEN \
             PERFORM nextval('herald_fault_hits'); \
             RAISE EXCEPTION 'the database is away (test)' USING ERRCODE = '57P03'; \
           END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
    )
    .await
    .unwrap();
    pool.execute(
        "CREATE TRIGGER herald_fault BEFORE UPDATE ON engagement_outbox FOR EACH ROW EXECUTE FUNCTION herald_fault()",
    )
    .await
    .unwrap();
    relay.release.notify_one(); // accepted: now the outcome must be recorded

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let hits: (i64, bool) =
            sqlx::query_as("SELECT last_value, is_called FROM herald_fault_hits").fetch_one(pool).await.unwrap();
        // Refused six times (over about six seconds: more than a few
        // quick retries would have waited), and still kept.
        if hits.1 && hits.0 >= 6 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the outcome was not retried: {hits:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!tick.is_finished(), "the outcome is still kept, not given up");
    pool.execute("DELETE FROM herald_fault").await.unwrap(); // the database is back

    let report = tokio::time::timeout(Duration::from_secs(10), tick).await.expect("recorded within 2 s").unwrap();
    assert_eq!((report.sent, report.unrecorded), (1, 0), "{report:?}");
    assert_eq!(metrics.outcomes_kept("recorded"), 1);
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(db.store.get_outbox(&r.id).await.unwrap().unwrap().status, OutboxStatus::Sent);
}

fn main() -> std::process::ExitCode {
    let mut trials = backend_trials();
    trials.push(common::harness::test(
        "postgres::an_outcome_kept_while_the_database_is_away_is_recorded_when_it_answers".to_owned(),
        || async {
            let db = TestDb::new(common::Backend::Postgres).await;
            an_outcome_kept_while_the_database_is_away_is_recorded_when_it_answers(&db).await;
            db.cleanup().await;
        },
    ));
    common::harness::main(trials)
}
