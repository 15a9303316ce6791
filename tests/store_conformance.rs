//! The store's contract, run unchanged against SQLite, PostgreSQL and
//! MariaDB/MySQL. Every dialect must pass every test here.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{T0, TestDb, row, user};
use herald::clock::Millis;
use herald::domain::{OutboxStatus, SendStatus};
use herald::store::{Finish, NewInboxMessage, Store, new_id};

backend_tests!(
    migrate_twice_applies_nothing_the_second_time,
    a_repeated_dedupe_key_plans_nothing_new,
    claim_takes_only_due_rows_oldest_first_and_counts_the_attempt,
    concurrent_claims_never_hand_one_row_to_two_instances,
    finish_is_fenced_by_the_claim_token,
    outcome_and_send_log_row_are_written_together,
    reschedule_puts_the_row_back_with_its_error,
    release_can_refund_the_attempt,
    only_stale_claims_are_taken_back,
    status_summary_counts_every_status_and_finds_the_oldest_due,
    inbox_insert_is_idempotent_on_the_outbox_id,
    one_transaction_records_many_outcomes_each_fenced,
    send_log_reads_newest_first_and_pending_rows_separately,
    user_ids_are_case_sensitive,
    long_and_unicode_values_round_trip,
);

async fn migrate_twice_applies_nothing_the_second_time(db: &TestDb) {
    assert!(db.store.migrate().await.unwrap().is_empty());
}

async fn a_repeated_dedupe_key_plans_nothing_new(db: &TestDb) {
    let first = row("u1", "inbox", T0);
    let mut again = row("u1", "inbox", T0);
    again.dedupe_key = first.dedupe_key.clone();
    let fresh = row("u1", "inbox", T0);

    let done = db.store.enqueue(std::slice::from_ref(&first), T0).await.unwrap();
    assert!(done[0].created);
    let done = db.store.enqueue(&[again.clone(), fresh.clone()], T0).await.unwrap();
    assert!(!done[0].created, "same dedupe key must not insert again");
    assert_eq!(done[0].id, first.id, "the existing row's id is reported");
    assert!(done[1].created);
    assert_eq!(db.store.status_summary(T0).await.unwrap().count(OutboxStatus::Scheduled), 2);
}

async fn claim_takes_only_due_rows_oldest_first_and_counts_the_attempt(db: &TestDb) {
    let later = row("u1", "inbox", T0.plus(Duration::from_secs(60)));
    let due_second = row("u1", "inbox", Millis(T0.0 - 1_000));
    let due_first = row("u1", "inbox", Millis(T0.0 - 5_000));
    db.store.enqueue(&[later.clone(), due_second.clone(), due_first.clone()], T0).await.unwrap();

    let token = new_id();
    let claimed = db.store.claim_due(T0, 1, &token).await.unwrap();
    assert_eq!(claimed.len(), 1, "the batch is a bound");
    assert_eq!(claimed[0].id, due_first.id, "oldest due first");
    assert_eq!(claimed[0].status, OutboxStatus::Sending);
    assert_eq!(claimed[0].attempts, 1);
    assert_eq!(claimed[0].claim_token.as_deref(), Some(token.as_str()));

    let claimed = db.store.claim_due(T0, 10, &new_id()).await.unwrap();
    let ids: Vec<_> = claimed.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids, vec![due_second.id.clone()], "the future row is not due");
    assert!(db.store.claim_due(T0, 10, &new_id()).await.unwrap().is_empty());
    assert_eq!(db.store.next_due_at().await.unwrap(), Some(later.due_at));
}

async fn concurrent_claims_never_hand_one_row_to_two_instances(db: &TestDb) {
    let rows: Vec<_> = (0..300).map(|_| row("u1", "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let mut instances = Vec::new();
    for _ in 0..4 {
        instances.push(db.another_instance().await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for store in instances {
        tasks.spawn(async move {
            let mut won = Vec::new();
            loop {
                let batch = store.claim_due(T0, 25, &new_id()).await.unwrap();
                if batch.is_empty() {
                    break;
                }
                won.extend(batch.into_iter().map(|r| (r.id, r.claim_token.unwrap())));
            }
            store.close().await;
            won
        });
    }
    let mut owners: HashMap<String, usize> = HashMap::new();
    while let Some(won) = tasks.join_next().await {
        for (id, _token) in won.unwrap() {
            *owners.entry(id).or_default() += 1;
        }
    }
    assert_eq!(owners.len(), 300, "every row claimed");
    assert!(owners.values().all(|&n| n == 1), "no row claimed twice");
}

async fn finish_is_fenced_by_the_claim_token(db: &TestDb) {
    let r = row("u1", "inbox", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let slow = db.store.claim_due(T0, 1, "token-slow").await.unwrap().remove(0);

    // The slow sender's claim goes stale and another instance takes the row.
    let later = T0.plus(Duration::from_secs(3600));
    assert_eq!(db.store.reclaim_stale(later, later).await.unwrap(), 1);
    let fresh = db.store.claim_due(later, 1, "token-fresh").await.unwrap().remove(0);
    assert_eq!(fresh.attempts, 2);

    let sent = Finish { status: SendStatus::Sent, detail: None, transport: Some("inbox".into()), address_hash: None };
    let failed =
        Finish { status: SendStatus::Failed, detail: Some("late".into()), transport: None, address_hash: None };
    assert!(!db.store.finish(&slow, "token-slow", &failed, later).await.unwrap(), "old token must lose");
    assert!(!db.store.reschedule(&slow, "token-slow", later, "x", later).await.unwrap());
    assert!(!db.store.release(&r.id, "token-slow", true, later).await.unwrap());
    assert!(db.store.finish(&fresh, "token-fresh", &sent, later).await.unwrap());

    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1, "exactly one send-log row: {log:?}");
    assert_eq!(log[0].status, "sent");
    assert_eq!(db.store.get_outbox(&r.id).await.unwrap().unwrap().status, OutboxStatus::Sent);
}

async fn outcome_and_send_log_row_are_written_together(db: &TestDb) {
    let r = row("u1", "email", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = db.store.claim_due(T0, 1, "t").await.unwrap().remove(0);
    let bounced = Finish {
        status: SendStatus::Bounced,
        detail: Some("550 5.1.1 no such user".into()),
        transport: None,
        address_hash: Some("abc123".into()),
    };
    assert!(db.store.finish(&claimed, "t", &bounced, T0).await.unwrap());

    let outbox = db.store.get_outbox(&r.id).await.unwrap().unwrap();
    assert_eq!(outbox.status, OutboxStatus::Failed, "a bounce is 'failed' in the outbox");
    assert_eq!(outbox.last_error.as_deref(), Some("550 5.1.1 no such user"));
    assert_eq!(outbox.claim_token, None);
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1);
    let s = &log[0];
    assert_eq!((s.status.as_str(), s.detail.as_deref()), ("bounced", Some("550 5.1.1 no such user")));
    assert_eq!((s.address_hash.as_deref(), s.attempts, s.user_id.as_str()), (Some("abc123"), 1, "u1"));
    assert_eq!(s.created_at, T0);
}

async fn reschedule_puts_the_row_back_with_its_error(db: &TestDb) {
    let r = row("u1", "inbox", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = db.store.claim_due(T0, 1, "t").await.unwrap().remove(0);
    let retry_at = T0.plus(Duration::from_secs(300));
    assert!(db.store.reschedule(&claimed, "t", retry_at, "451 try again later", T0).await.unwrap());

    let back = db.store.get_outbox(&r.id).await.unwrap().unwrap();
    assert_eq!(back.status, OutboxStatus::Scheduled);
    assert_eq!(back.due_at, retry_at);
    assert_eq!(back.last_error.as_deref(), Some("451 try again later"));
    assert_eq!((back.claim_token, back.attempts), (None, 1));
    assert!(db.store.claim_due(T0, 1, "t2").await.unwrap().is_empty(), "not before its new due time");
    assert_eq!(db.store.claim_due(retry_at, 1, "t3").await.unwrap()[0].attempts, 2);
    assert!(db.store.sends_for_outbox(&r.id).await.unwrap().is_empty(), "a retry is not a send-log row");
}

async fn release_can_refund_the_attempt(db: &TestDb) {
    let a = row("u1", "inbox", T0);
    let b = row("u1", "inbox", T0);
    db.store.enqueue(&[a.clone(), b.clone()], T0).await.unwrap();
    db.store.claim_due(T0, 2, "t").await.unwrap();
    assert!(db.store.release(&a.id, "t", true, T0).await.unwrap());
    assert!(db.store.release(&b.id, "t", false, T0).await.unwrap());
    let a = db.store.get_outbox(&a.id).await.unwrap().unwrap();
    let b = db.store.get_outbox(&b.id).await.unwrap().unwrap();
    assert_eq!((a.status, a.attempts), (OutboxStatus::Scheduled, 0), "never started: refunded");
    assert_eq!((b.status, b.attempts), (OutboxStatus::Scheduled, 1), "interrupted mid-send: counted");
}

async fn only_stale_claims_are_taken_back(db: &TestDb) {
    let old = row("u1", "inbox", T0);
    let young = row("u1", "inbox", T0);
    db.store.enqueue(std::slice::from_ref(&old), T0).await.unwrap();
    db.store.claim_due(T0, 1, "t1").await.unwrap();
    let t1 = T0.plus(Duration::from_secs(600));
    db.store.enqueue(std::slice::from_ref(&young), t1).await.unwrap();
    db.store.claim_due(t1, 1, "t2").await.unwrap();

    let cutoff = T0.plus(Duration::from_secs(300)); // claims older than this are stale
    assert_eq!(db.store.reclaim_stale(cutoff, t1).await.unwrap(), 1);
    let old = db.store.get_outbox(&old.id).await.unwrap().unwrap();
    assert_eq!(old.status, OutboxStatus::Scheduled);
    assert!(old.last_error.unwrap().contains("stale"), "the reclaim says why");
    assert_eq!(db.store.get_outbox(&young.id).await.unwrap().unwrap().status, OutboxStatus::Sending);
}

async fn status_summary_counts_every_status_and_finds_the_oldest_due(db: &TestDb) {
    let empty = db.store.status_summary(T0).await.unwrap();
    assert_eq!(empty.counts.len(), 7, "every status, zero included");
    assert!(empty.oldest_due.is_none());

    let oldest = row("u-old", "inbox", Millis(T0.0 - 90_000));
    let other = row("u1", "inbox", Millis(T0.0 - 1_000));
    let future = row("u1", "inbox", T0.plus(Duration::from_secs(60)));
    let claimed = row("u1", "inbox", Millis(T0.0 - 100_000));
    db.store.enqueue(std::slice::from_ref(&claimed), T0).await.unwrap();
    db.store.claim_due(T0, 1, "t").await.unwrap();
    db.store.enqueue(&[oldest.clone(), other, future.clone()], T0).await.unwrap();

    let s = db.store.status_summary(T0).await.unwrap();
    assert_eq!((s.count(OutboxStatus::Scheduled), s.count(OutboxStatus::Sending)), (3, 1));
    let o = s.oldest_due.unwrap();
    assert_eq!((o.id.as_str(), o.user_id.as_str()), (oldest.id.as_str(), "u-old"));
    assert_eq!(o.overdue_seconds, 90.0);
    assert_eq!(s.next_due_at, Some(oldest.due_at));
}

async fn inbox_insert_is_idempotent_on_the_outbox_id(db: &TestDb) {
    let msg = NewInboxMessage {
        outbox_id: new_id(),
        user_id: "u1".into(),
        title: "Your export is ready".into(),
        body: Some("Download it within 7 days.".into()),
        url: Some("https://example.com/exports/1".into()),
        data: Some(serde_json::json!({ "export_id": 1 })),
    };
    assert!(db.store.insert_inbox(&msg, T0).await.unwrap());
    assert!(!db.store.insert_inbox(&msg, T0).await.unwrap(), "second write is a no-op");
    let inbox = db.store.inbox_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].title, "Your export is ready");
    assert_eq!(inbox[0].data, Some(serde_json::json!({ "export_id": 1 })));
    assert!(inbox[0].read_at.is_none());
}

async fn send_log_reads_newest_first_and_pending_rows_separately(db: &TestDb) {
    let rows: Vec<_> = (0..3).map(|i| row("u1", "inbox", Millis(T0.0 + i))).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    for (i, r) in rows.iter().enumerate().take(2) {
        let now = Millis(T0.0 + 10 + i as i64);
        let claimed = db.store.claim_due(now, 1, &format!("t{i}")).await.unwrap().remove(0);
        assert_eq!(claimed.id, r.id);
        let f = Finish { status: SendStatus::Sent, detail: None, transport: Some("inbox".into()), address_hash: None };
        db.store.finish(&claimed, &format!("t{i}"), &f, now).await.unwrap();
    }
    let log = db.store.sends_for_user(&user("u1"), 10).await.unwrap();
    let ids: Vec<_> = log.iter().map(|s| s.outbox_id.as_str()).collect();
    assert_eq!(ids, vec![rows[1].id.as_str(), rows[0].id.as_str()]);
    let pending = db.store.pending_for_user(&user("u1"), 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, rows[2].id);
    assert!(db.store.sends_for_user(&user("someone-else"), 10).await.unwrap().is_empty());
}

async fn user_ids_are_case_sensitive(db: &TestDb) {
    db.store.enqueue(&[row("Alice", "inbox", T0)], T0).await.unwrap();
    assert_eq!(db.store.pending_for_user(&user("Alice"), 10).await.unwrap().len(), 1);
    assert!(db.store.pending_for_user(&user("alice"), 10).await.unwrap().is_empty());
}

async fn long_and_unicode_values_round_trip(db: &TestDb) {
    let mut r = row(&"ü".repeat(127), "inbox", T0);
    r.payload = serde_json::json!({ "title": "Grüße 👋", "body": "x".repeat(100_000) });
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let back = db.store.get_outbox(&r.id).await.unwrap().unwrap();
    assert_eq!(back.user_id, "ü".repeat(127));
    let payload: serde_json::Value = serde_json::from_str(&back.payload).unwrap();
    assert_eq!(payload, r.payload);
}

async fn one_transaction_records_many_outcomes_each_fenced(db: &TestDb) {
    use herald::store::{Record, RecordAction};
    let rows: Vec<_> = (0..3).map(|_| row("u1", "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let claimed = db.store.claim_due(T0, 3, "mine").await.unwrap();
    let sent = Finish { status: SendStatus::Sent, detail: None, transport: Some("inbox".into()), address_hash: None };
    let items = vec![
        Record { row: claimed[0].clone(), token: "mine".into(), action: RecordAction::Finish(sent.clone()) },
        Record { row: claimed[1].clone(), token: "not-mine".into(), action: RecordAction::Finish(sent) },
        Record {
            row: claimed[2].clone(),
            token: "mine".into(),
            action: RecordAction::Reschedule { due_at: T0.plus(Duration::from_secs(300)), detail: "421".into() },
        },
    ];
    assert_eq!(db.store.record_outcomes(&items, T0).await.unwrap(), vec![true, false, true]);
    assert_eq!(db.store.sends_for_outbox(&claimed[0].id).await.unwrap().len(), 1);
    assert!(db.store.sends_for_outbox(&claimed[1].id).await.unwrap().is_empty(), "a lost claim writes nothing");
    assert_eq!(db.store.get_outbox(&claimed[1].id).await.unwrap().unwrap().status, OutboxStatus::Sending);
    assert_eq!(db.store.get_outbox(&claimed[2].id).await.unwrap().unwrap().status, OutboxStatus::Scheduled);
}
