//! Instance leases, end to end: two `herald serve` processes with the
//! default worker settings on one PostgreSQL drain inbox rows and emails to
//! an SMTP server that takes 2 s to accept each message, so that emails are
//! in flight; the instance holding claims is SIGKILLed. Its rows must
//! be delivered by the other within 120 s (the lease, 20 s, plus
//! `worker.deliver_timeout`, 60 s, plus a heartbeat of at most 5 s: not
//! the 15-minute stale window), with no inbox message doubled. An email the
//! killed
//! instance had handed to the SMTP server but not yet recorded goes again:
//! the audit counts those, bounded by the claims it held.
//!
//! The kill comes at one of three moments of a batch's life: just after its
//! claim committed, before any message was accepted
//! (`claimed`); once messages have been accepted, with others on the wire
//! and more waiting for a slot (`delivering`); and 3 s after the rows were
//! enqueued, as the outside review did (`three_seconds_in`). With 300
//! emails a lane that claimed a whole batch and one more ahead held 100 to
//! 200 claims at the kill, which waited for the lease rescue (80-85 s) and
//! then for the one instance left, 4 a second: some were still `sending`
//! 120 s after the kill.
//!
//! Run only on request (`harness::on_request`, like `#[ignore]`): each takes
//! about two minutes. `.ci/run` runs them next to the chaos tests:
//!
//! ```sh
//! cargo test --test leases -- --ignored --nocapture
//! ```
//!
//! Knobs: `HERALD_TEST_LEASE_INBOX_ROWS` (default 2000) and
//! `HERALD_TEST_LEASE_EMAILS` (default 300).

mod chaos_support;
mod common;

use std::time::{Duration, Instant};

use chaos_support::{knob, output_dir};
use common::smtp::SmtpSink;
use common::{Backend, TestDb};
use herald::clock::{Clock, SystemClock};
use herald::store::{InstanceStore, NewOutboxRow};
use herald::tooling::cluster;

/// The issue's bound: a killed instance's rows are delivered again within
/// two minutes with the default settings.
const RESCUE_BOUND: Duration = Duration::from_secs(120);

async fn enqueue(db: &TestDb, inbox: usize, emails: usize) {
    let now = SystemClock.now();
    let emails = (0..emails).map(|i| {
        let payload =
            serde_json::json!({ "to": format!("slow{i}@lease.test"), "subject": format!("lease {i}"), "text": "x" });
        common::keyed_row("lease-user", "email", format!("lease-email:{i}"), payload, now)
    });
    let inbox = (0..inbox).map(|i| {
        let payload = serde_json::json!({ "title": format!("lease {i}") });
        common::keyed_row("lease-user", "inbox", format!("lease-inbox:{i}"), payload, now)
    });
    let rows: Vec<NewOutboxRow> = emails.chain(inbox).collect();
    common::enqueue_all(&db.store, &rows, now).await;
}

/// Rows `sending` under the claims of the instance whose process is `pid`.
async fn held_by(db: &TestDb, pid: u32) -> (Option<String>, i64) {
    let instances = db.store.instances().await.unwrap();
    let Some(id) = instances.into_iter().find(|i| i.pid == i64::from(pid)).map(|i| i.id) else {
        return (None, 0);
    };
    let n: (i64,) = sqlx::query_as(
        &herald::store::Dialect::Postgres
            .sql("SELECT COUNT(*) FROM engagement_outbox WHERE status = 'sending' AND claimed_by = ?"),
    )
    .bind(id.clone())
    .fetch_one(db.store.pool())
    .await
    .unwrap();
    (Some(id), n.0)
}

/// When in a batch's life the victim is killed.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// As soon as an instance holds email claims, before the SMTP server has
    /// accepted any message.
    Claimed,
    /// Once the SMTP server has accepted messages and an instance still
    /// holds claims (some on the wire, some waiting for a slot).
    Delivering,
    /// 3 s after the rows were enqueued, whoever holds the most claims.
    ThreeSecondsIn,
}

/// The instance (index) holding the most email claims, and how many.
async fn most_claims(db: &TestDb, pids: &[u32]) -> (usize, i64) {
    let mut best = (0, 0);
    for (i, &pid) in pids.iter().enumerate() {
        let held = held_by(db, pid).await.1;
        if held > best.1 {
            best = (i, held);
        }
    }
    best
}

/// `sending` rows by the instance that claimed them, for a failure message.
async fn sending_by_instance(db: &TestDb) -> Vec<(Option<String>, i64)> {
    sqlx::query_as(
        "SELECT claimed_by, COUNT(*) FROM engagement_outbox WHERE status = 'sending' GROUP BY claimed_by ORDER BY 1",
    )
    .fetch_all(db.store.pool())
    .await
    .unwrap()
}

async fn a_killed_instances_rows_are_delivered_by_the_other_within_two_minutes(moment: Moment) {
    let db = TestDb::new(Backend::Postgres).await;
    let (inbox, emails) =
        (knob("HERALD_TEST_LEASE_INBOX_ROWS", 2000) as usize, knob("HERALD_TEST_LEASE_EMAILS", 300) as usize);
    let sink = SmtpSink::start().await;
    let log_dir = output_dir(&format!("leases/postgres-{moment:?}"));
    let env = sink.instance_env("lease");
    // Every worker setting is the default: the bound must hold as shipped.
    let mut cluster = common::start_cluster(db.url.clone(), 2, log_dir.clone(), env).await;

    enqueue(&db, inbox, emails).await;
    let enqueued = Instant::now();
    let pids: Vec<u32> = (0..2).map(|i| cluster.pid(i).expect("the instance runs")).collect();
    // Polled every 10 ms (not `wait_for`'s 100 ms): the `claimed` moment
    // lasts the 2 s the SMTP server takes for the first message.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (victim_index, held) = loop {
        assert!(Instant::now() < deadline, "{moment:?}: the moment to kill never came");
        let (i, held) = most_claims(&db, &pids).await;
        let accepted = sink.messages().len();
        let now = match moment {
            Moment::Claimed => held > 0,
            Moment::Delivering => held > 0 && accepted > 0,
            Moment::ThreeSecondsIn => enqueued.elapsed() >= Duration::from_secs(3) && held > 0,
        };
        if now {
            if matches!(moment, Moment::Claimed) {
                assert_eq!(accepted, 0, "the claimed moment came too late: messages were already accepted");
            }
            break (i, held);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let victim = held_by(&db, pids[victim_index]).await.0;
    let accepted_at_kill = sink.messages().len();
    cluster.kill(victim_index).await.unwrap();
    let survivor = 1 - victim_index;
    let killed = Instant::now();
    eprintln!(
        "leases {moment:?}: SIGKILLed instance {victim_index} ({victim:?}) holding {held} claims, \
         {accepted_at_kill} messages accepted"
    );

    // The survivor alone must finish everything, the killed instance's rows
    // included, within the bound.
    let drained = cluster::wait_drained(db.store.pool(), RESCUE_BOUND + Duration::from_secs(30)).await;
    let took = killed.elapsed();
    let still_sending = sending_by_instance(&db).await;
    cluster.check_alive(survivor).unwrap();
    let metrics = reqwest::get(format!("{}/metrics", cluster.base_url(survivor))).await.unwrap().text().await.unwrap();
    let rescued = metrics
        .lines()
        .find_map(|l| l.strip_prefix("herald_rescued_claims_total{reason=\"lease_lapsed\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    let unclean = cluster.stop(Duration::from_secs(30)).await;
    drained.unwrap_or_else(|e| panic!("{moment:?}: {e}; still sending, by instance: {still_sending:?}"));

    let audit = cluster::audit(db.store.pool()).await.unwrap();
    let received = sink.messages_per_outbox_id();
    let extra_emails: u32 = received.values().map(|n| n - 1).sum();
    let report = serde_json::json!({
        "moment": format!("{moment:?}"), "inbox_rows": inbox, "emails": emails, "held_by_killed_instance": held,
        "accepted_at_kill": accepted_at_kill, "drained_after_kill_s": took.as_secs_f64(),
        "rescued_lease_lapsed": rescued, "duplicate_emails": extra_emails, "audit": audit,
    });
    std::fs::write(log_dir.join("report.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    eprintln!("leases: {report}");

    assert!(unclean.is_empty(), "the survivor did not stop cleanly: {unclean:?}");
    assert!(took <= RESCUE_BOUND, "{moment:?}: the killed instance's rows took {took:?} (more than {RESCUE_BOUND:?})");
    assert!(rescued >= 1.0, "the survivor counted no rescue: {metrics}");
    assert_eq!(audit.violations(), Vec::<String>::new(), "logs in {}", log_dir.display());
    assert_eq!(audit.by_status.get("sent").copied(), Some((inbox + emails) as i64), "{:?}", audit.by_status);
    assert_eq!(audit.inbox_duplicated, 0, "no inbox message doubled");
    assert_eq!(received.len(), emails, "every email reached the SMTP server");
    assert!(
        i64::from(extra_emails) <= held,
        "{extra_emails} emails went twice: more than the {held} claims the killed instance held"
    );
    db.cleanup().await;
}

fn main() -> std::process::ExitCode {
    let trial = |name: &str, moment: Moment| {
        common::harness::on_request(
            format!("postgres::a_killed_instances_rows_are_delivered_by_the_other_within_two_minutes::{name}"),
            "kills a herald process and waits out its lease, about two minutes",
            move || a_killed_instances_rows_are_delivered_by_the_other_within_two_minutes(moment),
        )
    };
    common::harness::main(vec![
        trial("claimed", Moment::Claimed),
        trial("delivering", Moment::Delivering),
        trial("three_seconds_in", Moment::ThreeSecondsIn),
    ])
}
