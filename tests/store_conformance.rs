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
    instances_claim_from_their_own_slice_first_on_mysql,
    migrate_twice_applies_nothing_the_second_time,
    every_indexed_text_column_compares_bytes,
    a_repeated_dedupe_key_plans_nothing_new,
    claim_takes_only_due_rows_oldest_first_and_counts_the_attempt,
    a_peek_leaves_out_rows_in_flight_and_rows_due_before_its_bound,
    concurrent_claims_never_hand_one_row_to_two_instances,
    concurrent_peeks_record_each_row_and_its_message_once,
    concurrent_planners_plan_each_trigger_once,
    concurrent_accepts_record_one_trigger_per_idempotency_key,
    finish_is_fenced_by_the_claim_token,
    outcome_and_send_log_row_are_written_together,
    a_sent_rows_provider_ids_are_kept_whole,
    an_upgrade_from_0020_keeps_the_send_log_and_takes_delivery_reports,
    an_upgrade_from_0021_keeps_digest_items_and_keys_them_per_user,
    reschedule_puts_the_row_back_with_its_error,
    release_can_refund_the_attempt,
    only_stale_claims_are_taken_back,
    status_summary_counts_every_status_and_finds_the_oldest_due,
    an_inbox_message_is_written_once_with_its_outcome,
    one_transaction_records_many_outcomes_each_fenced,
    a_flush_longer_than_one_statement_writes_every_row_once_in_order,
    send_log_reads_newest_first_and_pending_rows_separately,
    user_ids_are_case_sensitive,
    long_and_unicode_values_round_trip,
    rules_round_trip_and_only_enabled_ones_are_read_for_planning,
    cancelling_a_rule_ends_only_its_scheduled_rows_with_a_send_log_row,
    recipients_upsert_and_erasure_keeps_the_send_log,
    api_keys_are_found_by_hash_and_revocable,
    outbox_admin_filters_pages_retries_and_cancels,
    an_idempotency_key_returns_the_first_trigger,
    the_inbox_is_scoped_to_its_user_and_counts_follow_its_state,
    outcomes_and_cancellations_append_events_in_commit_order,
    a_bounce_is_recorded_once_with_its_send_log_row_and_suppression,
    a_webhook_token_is_accepted_once,
    losing_a_race_with_another_transaction_is_recognised_as_contention,
    operators_are_unique_by_email_and_removing_one_ends_its_sessions,
    sessions_are_found_by_hash_and_expired_ones_purged_at_the_next_login,
    login_failures_count_per_email_since_its_last_success_and_per_address,
    the_audit_log_pages_newest_first,
    a_lift_records_reason_who_and_audit_in_its_transaction,
    send_counts_and_bounce_evidence_are_read_back,
    retention_prunes_only_old_finished_rows_in_bounded_batches,
    retention_prunes_closed_digests_their_items_with_their_message_and_slots_no_cap_can_count,
    a_retention_pass_prunes_each_table_by_its_own_period,
    the_rows_of_an_instance_whose_lease_lapsed_are_taken_back_after_deliver_timeout,
    a_read_only_transaction_is_recognised_as_a_lost_race,
);

/// Two connections that each hold what the other wants: a real deadlock on
/// PostgreSQL and MariaDB (detected by the server, SQLSTATE 40P01 / 40001),
/// `SQLITE_BUSY` on SQLite (one writer at a time). The worker logs these as
/// routine contention, not errors, so the test checks the classification on
/// genuine errors from each server rather than on made-up ones.
async fn losing_a_race_with_another_transaction_is_recognised_as_contention(db: &TestDb) {
    use herald::store::StoreError;
    use sqlx::Executor;
    let pool = sqlx::any::AnyPoolOptions::new().max_connections(2).connect(&db.url).await.unwrap();
    let mut a = pool.acquire().await.unwrap();
    let mut b = pool.acquire().await.unwrap();
    let err = if db.backend() == common::Backend::Sqlite {
        a.execute("BEGIN IMMEDIATE").await.unwrap();
        b.execute("PRAGMA busy_timeout = 0").await.unwrap();
        let e = b.execute("BEGIN IMMEDIATE").await.unwrap_err();
        a.execute("ROLLBACK").await.unwrap();
        e
    } else {
        a.execute("CREATE TABLE herald_deadlock_probe (id INT PRIMARY KEY, v INT)").await.unwrap();
        a.execute("INSERT INTO herald_deadlock_probe (id, v) VALUES (1, 0), (2, 0)").await.unwrap();
        a.execute("BEGIN").await.unwrap();
        b.execute("BEGIN").await.unwrap();
        a.execute("UPDATE herald_deadlock_probe SET v = 1 WHERE id = 1").await.unwrap();
        b.execute("UPDATE herald_deadlock_probe SET v = 1 WHERE id = 2").await.unwrap();
        // Each now waits for the other; the server kills one.
        let (ra, rb) = tokio::join!(
            a.execute("UPDATE herald_deadlock_probe SET v = 2 WHERE id = 2"),
            b.execute("UPDATE herald_deadlock_probe SET v = 2 WHERE id = 1"),
        );
        let _ = a.execute("ROLLBACK").await;
        let _ = b.execute("ROLLBACK").await;
        match (ra, rb) {
            (Err(e), _) | (_, Err(e)) => e,
            _ => panic!("no deadlock was reported"),
        }
    };
    drop((a, b));
    pool.close().await;
    let e = StoreError::Database { op: "probe", source: err };
    assert!(e.is_contention(), "not recognised as contention: {e}");
    assert!(e.is_lost_race(), "a lost race is retried at once: {e}");
    assert!(!e.is_unavailable(), "a lost race is not the database being away: {e}");
    let other = StoreError::Database { op: "probe", source: sqlx::Error::RowNotFound };
    assert!(!other.is_contention());
}

async fn migrate_twice_applies_nothing_the_second_time(db: &TestDb) {
    assert!(db.store.migrate().await.unwrap().is_empty());
}

/// Keys compare bytes on every database (migration 0023 on PostgreSQL):
/// an index of ids or user ids is never ordered by the server's locale,
/// which costs PostgreSQL a `strcoll` per comparison and would make a
/// cursor's order depend on how the host created its database. Lists each
/// indexed text column in another collation, this migration's and any
/// later one's.
async fn every_indexed_text_column_compares_bytes(db: &TestDb) {
    let sql = match db.backend() {
        common::Backend::Sqlite => {
            "SELECT m.tbl_name AS tbl, x.name AS col, x.coll AS coll FROM sqlite_master m, pragma_index_xinfo(m.name) x \
             WHERE m.type = 'index' AND m.tbl_name LIKE 'engagement%' AND x.key = 1 AND x.name IS NOT NULL"
        }
        common::Backend::Postgres => {
            "SELECT CAST(c.relname AS text) AS tbl, CAST(a.attname AS text) AS col, \
                    CAST(COALESCE(co.collname, '') AS text) AS coll \
               FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
               JOIN pg_namespace n ON n.oid = c.relnamespace \
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) \
               LEFT JOIN pg_collation co ON co.oid = a.attcollation \
              WHERE n.nspname = current_schema() AND c.relname LIKE 'engagement%' \
                AND a.atttypid IN ('text'::regtype, 'varchar'::regtype)"
        }
        common::Backend::MySql => {
            "SELECT CAST(s.table_name AS CHAR) AS tbl, CAST(s.column_name AS CHAR) AS col, \
                    CAST(c.collation_name AS CHAR) AS coll \
               FROM information_schema.statistics s JOIN information_schema.columns c \
                 ON c.table_schema = s.table_schema AND c.table_name = s.table_name AND c.column_name = s.column_name \
              WHERE s.table_schema = DATABASE() AND s.table_name LIKE 'engagement%' AND c.collation_name IS NOT NULL"
        }
    };
    let rows: Vec<(String, String, String)> = sqlx::query_as(sql).fetch_all(db.store.pool()).await.unwrap();
    let bytes = |coll: &str| match db.backend() {
        common::Backend::Sqlite => coll == "BINARY",
        common::Backend::Postgres => coll == "C",
        common::Backend::MySql => coll.ends_with("_bin"),
    };
    let other: Vec<_> = rows.iter().filter(|(_, _, coll)| !bytes(coll)).collect();
    assert!(other.is_empty(), "indexed text columns not in byte order: {other:?}");
    for table in ["engagement_outbox", "engagement_topic_subscriptions"] {
        let read = rows.iter().any(|(t, col, _)| t == table && col == "user_id");
        assert!(read, "{table}.user_id is indexed and was read: {rows:?}");
    }
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
    let other_channel = row("u1", "email", Millis(T0.0 - 9_000));
    db.store.enqueue(&[later.clone(), due_second.clone(), due_first.clone(), other_channel.clone()], T0).await.unwrap();

    let token = new_id();
    let claimed = db.store.claim_channel("inbox", T0, 1, &token).await.unwrap();
    assert_eq!(claimed.len(), 1, "the batch is a bound");
    assert_eq!(claimed[0].id, due_first.id, "oldest due first");
    assert_eq!(claimed[0].status, OutboxStatus::Sending);
    assert_eq!(claimed[0].attempts, 1);
    assert_eq!(claimed[0].claim_token.as_deref(), Some(token.as_str()));

    let claimed = db.store.claim_channel("inbox", T0, 10, &new_id()).await.unwrap();
    let ids: Vec<_> = claimed.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids, vec![due_second.id.clone()], "the future row is not due");
    assert!(db.store.claim_channel("inbox", T0, 10, &new_id()).await.unwrap().is_empty());
    let other = db.store.claim_channel("email", T0, 10, &new_id()).await.unwrap();
    assert_eq!(other.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [other_channel.id.as_str()], "its own queue");
    assert_eq!(db.store.next_due_at().await.unwrap(), Some(later.due_at));
}

/// The inbox lane's read: due rows oldest first, without the rows it is
/// still recording, and with a bound, only rows due at or after it (where a
/// backlog's next read starts).
async fn a_peek_leaves_out_rows_in_flight_and_rows_due_before_its_bound(db: &TestDb) {
    let rows: Vec<_> = (0..4).map(|i| row("u1", "inbox", Millis(T0.0 - 4_000 + i * 1_000))).collect();
    let later = row("u1", "inbox", T0.plus(Duration::from_secs(60)));
    db.store.enqueue(&[rows.clone(), vec![later]].concat(), T0).await.unwrap();
    let ids = |rs: Vec<herald::store::OutboxRow>| rs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let all = ids(db.store.peek_channel("inbox", T0, 10, &[], None).await.unwrap());
    assert_eq!(all, rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>(), "every due row, oldest first");
    let in_flight = [rows[0].id.as_str(), rows[2].id.as_str()];
    let rest = ids(db.store.peek_channel("inbox", T0, 10, &in_flight, None).await.unwrap());
    assert_eq!(rest, vec![rows[1].id.clone(), rows[3].id.clone()], "rows in flight are left out");
    let from = ids(db.store.peek_channel("inbox", T0, 10, &in_flight, Some(rows[1].due_at)).await.unwrap());
    assert_eq!(from, vec![rows[1].id.clone(), rows[3].id.clone()], "the bound is inclusive");
    let from = ids(db.store.peek_channel("inbox", T0, 10, &[], Some(rows[2].due_at)).await.unwrap());
    assert_eq!(from, vec![rows[2].id.clone(), rows[3].id.clone()], "rows due before the bound wait");
    assert!(
        db.store.peek_channel("inbox", T0, 10, &[], Some(T0.plus(Duration::from_secs(1)))).await.unwrap().is_empty()
    );
}

async fn concurrent_claims_never_hand_one_row_to_two_instances(db: &TestDb) {
    let rows: Vec<_> = (0..300).map(|_| row("u1", "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    race_to_win_each_once(db, 300, "row", |store, _| async move {
        // On MariaDB two claims' `UPDATE … ORDER BY due_at LIMIT` can lock
        // the same index ranges in opposite orders, and the server ends one
        // with a deadlock (1213). That claim changed nothing; the worker
        // counts it as a lost race and claims again (`failed_sweep`), and
        // so does this test. What must never happen is a row won twice.
        let token = new_id();
        let claim = || store.claim_channel("inbox", T0, 25, &token);
        let batch = herald::store::race::retry_lost_race("test claim", claim).await.unwrap();
        (!batch.is_empty()).then(|| batch.into_iter().map(|r| r.id).collect())
    })
    .await;
}

/// The inbox lane on several instances at once: each reads the same due
/// rows (`peek_channel`) and records them with no claim token, claim and
/// outcome in one compare-and-set (`record_outcomes`). Each row is won by
/// one instance, with one send-log row and one message.
async fn concurrent_peeks_record_each_row_and_its_message_once(db: &TestDb) {
    use herald::store::{Record, RecordAction};
    const N: usize = 120;
    let rows: Vec<_> = (0..N).map(|i| row(&format!("u{}", i % 7), "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    race_to_win_each_once(db, N, "row", |store, _| async move {
        let batch = store.peek_channel("inbox", T0, 30, &[], None).await.unwrap();
        if batch.is_empty() {
            return None;
        }
        let sent = Finish::sent("inbox");
        let items: Vec<Record> = batch
            .iter()
            .map(|r| Record {
                row: r.clone(),
                token: None,
                action: RecordAction::Finish(sent.clone()),
                inbox: Some(NewInboxMessage {
                    outbox_id: r.id.clone(),
                    user_id: r.user_id.clone(),
                    title: "t".into(),
                    body: None,
                    url: None,
                    data: None,
                }),
            })
            .collect();
        let results = herald::store::race::retry_lost_race("test", || store.record_outcomes(&items, T0)).await.unwrap();
        Some(batch.into_iter().zip(results).filter(|(_, w)| *w).map(|(r, _)| r.id).collect())
    })
    .await;
    let mut messages = 0;
    for i in 0..7 {
        messages += db.store.inbox_for_user(&user(&format!("u{i}")), 1_000).await.unwrap().len();
    }
    assert_eq!(messages, N, "one message per row");
    for r in &rows {
        assert_eq!(db.store.sends_for_outbox(&r.id).await.unwrap().len(), 1, "one send-log row for {}", r.id);
    }
}

/// Host-inserted triggers planned by several planners at once
/// (`plan_triggers`, a compare-and-set on `planned_at`): each trigger is
/// won by one, and only the winner's rows are written.
async fn concurrent_planners_plan_each_trigger_once(db: &TestDb) {
    use herald::store::{TriggerPlan, TriggerStore};
    const N: usize = 60;
    for i in 0..N {
        db.store.insert_trigger(&trigger(&format!("t{i:03}"), None), T0).await.unwrap();
    }
    race_to_win_each_once(db, N, "trigger", |store, planner| async move {
        let due = store.unplanned_triggers(20).await.unwrap();
        if due.is_empty() {
            return None;
        }
        let plans: Vec<TriggerPlan> = due
            .iter()
            .map(|t| {
                let mut r = row("u", "inbox", T0);
                r.trigger_id = Some(t.id.clone());
                r.dedupe_key = format!("{}:{planner}", t.id);
                TriggerPlan { trigger_id: t.id.clone(), rows: vec![r], digests: vec![], detail: "one".into() }
            })
            .collect();
        let results = herald::store::race::retry_lost_race("test", || store.plan_triggers(&plans, T0)).await.unwrap();
        Some(due.into_iter().zip(results).filter(|(_, w)| *w).map(|(t, _)| t.id).collect())
    })
    .await;
    for i in 0..N {
        let rows = db.store.outbox_for_trigger(&format!("t{i:03}")).await.unwrap();
        assert_eq!(rows.len(), 1, "only the winner's row for t{i:03}: {rows:?}");
    }
}

/// The same triggers accepted by several instances at once (a host that
/// retried its request against another instance): `accept_triggers`
/// records one trigger per idempotency key, with its rows, and answers the
/// others with the trigger that holds the key.
async fn concurrent_accepts_record_one_trigger_per_idempotency_key(db: &TestDb) {
    use herald::store::{PlannedTrigger, TriggerInsert, TriggerStore};
    const KEYS: usize = 30;
    let mut tasks = tokio::task::JoinSet::new();
    for instance in 0..4 {
        let store = db.another_instance().await;
        tasks.spawn(async move {
            let batch: Vec<PlannedTrigger> = (0..KEYS)
                .map(|k| {
                    let id = format!("i{instance}-k{k:02}");
                    let mut r = row("u", "inbox", T0);
                    r.trigger_id = Some(id.clone());
                    PlannedTrigger {
                        trigger: trigger(&id, Some(&format!("k{k:02}"))),
                        rows: vec![r],
                        digests: vec![],
                        detail: "one".into(),
                    }
                })
                .collect();
            let answers =
                herald::store::race::retry_lost_race("test", || store.accept_triggers(&batch, T0)).await.unwrap();
            store.close().await;
            batch
                .into_iter()
                .zip(answers)
                .map(|(p, a)| match a {
                    TriggerInsert::Created => (p.trigger.idempotency_key.unwrap(), p.trigger.id),
                    TriggerInsert::Existing(t) => (p.trigger.idempotency_key.unwrap(), t.id),
                })
                .collect::<Vec<_>>()
        });
    }
    let mut holder: HashMap<String, String> = HashMap::new();
    while let Some(answers) = tasks.join_next().await {
        for (key, id) in answers.unwrap() {
            let first = holder.entry(key.clone()).or_insert_with(|| id.clone());
            assert_eq!(*first, id, "every instance is answered with the one trigger holding {key}");
        }
    }
    assert_eq!(holder.len(), KEYS);
    for instance in 0..4 {
        for k in 0..KEYS {
            let id = format!("i{instance}-k{k:02}");
            let recorded = db.store.get_trigger(&id).await.unwrap().is_some();
            assert_eq!(recorded, holder[&format!("k{k:02}")] == id, "{id}");
            let rows = db.store.outbox_for_trigger(&id).await.unwrap().len();
            assert_eq!(rows, usize::from(recorded), "rows only with the recorded trigger: {id}");
        }
    }
}

/// A trigger of type `x` for user `u` at `T0`, with `key` as its
/// idempotency key.
fn trigger(id: &str, key: Option<&str>) -> herald::store::NewTrigger {
    herald::store::NewTrigger {
        id: id.into(),
        trigger_type: "x".into(),
        user_id: user("u"),
        payload: serde_json::json!({}),
        idempotency_key: key.map(str::to_owned),
        request_hash: key.map(|_| "h".to_owned()),
        occurred_at: T0,
        send_at: None,
        actor_id: None,
    }
}

/// Four instances (stores of their own, opened before any starts) run
/// `round` at once, each until a round finds nothing to do (`None`); each
/// round answers the ids that instance won (its own index is the second
/// argument). Checks that all `n` ids were won, each by one instance.
async fn race_to_win_each_once<F, Fut>(db: &TestDb, n: usize, what: &str, round: F)
where
    F: Fn(herald::store::SqlStore, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Option<Vec<String>>> + Send + 'static,
{
    let mut instances = Vec::new();
    for _ in 0..4 {
        instances.push(db.another_instance().await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, store) in instances.into_iter().enumerate() {
        let round = round.clone();
        tasks.spawn(async move {
            let mut won = Vec::new();
            while let Some(ids) = round(store.clone(), i).await {
                won.extend(ids);
            }
            store.close().await;
            won
        });
    }
    let mut owners: HashMap<String, usize> = HashMap::new();
    while let Some(won) = tasks.join_next().await {
        for id in won.unwrap() {
            *owners.entry(id).or_default() += 1;
        }
    }
    assert_eq!(owners.len(), n, "every {what} won");
    assert!(owners.values().all(|&k| k == 1), "no {what} won by two");
}

async fn finish_is_fenced_by_the_claim_token(db: &TestDb) {
    let r = row("u1", "inbox", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let slow = db.store.claim_channel("inbox", T0, 1, "token-slow").await.unwrap().remove(0);

    // The slow sender's claim goes stale and another instance takes the row.
    let later = T0.plus(Duration::from_secs(3600));
    assert_eq!(db.store.reclaim_stale(later, later).await.unwrap(), 1);
    let fresh = db.store.claim_channel("inbox", later, 1, "token-fresh").await.unwrap().remove(0);
    assert_eq!(fresh.attempts, 2);

    let sent = Finish::sent("inbox");
    let failed = Finish::because(SendStatus::Failed, "late");
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
    let claimed = db.store.claim_channel("email", T0, 1, "t").await.unwrap().remove(0);
    let bounced = Finish {
        status: SendStatus::Bounced,
        detail: Some("550 5.1.1 no such user".into()),
        transport: None,
        address_hash: Some("abc123".into()),
        provider_id: None,
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

/// Migration 0021 widens the send log's status CHECK (a table rebuild on
/// SQLite, the constraint or column redefined elsewhere): a database at
/// 0020 holding send-log rows keeps every one of them, field for field, and
/// its indexes; it refused a `delivered` row before and takes one after,
/// and still refuses a status that is not one.
async fn an_upgrade_from_0020_keeps_the_send_log_and_takes_delivery_reports(db: &TestDb) {
    use herald::store::BounceStore;
    let old = TestDb::unmigrated(db.backend()).await;
    old.store.migrate_through(20).await.unwrap();
    let (a, b) = (row("u1", "sms", T0), row("u2", "email", T0));
    old.store.enqueue(&[a.clone(), b.clone()], T0).await.unwrap();
    for (r, finish) in [
        (&a, Finish { provider_id: Some("SM0123".into()), address_hash: Some("h1".into()), ..Finish::sent("sms") }),
        (
            &b,
            Finish {
                status: SendStatus::Bounced,
                detail: Some("550 5.1.1 no such user".into()),
                transport: Some("smtp".into()),
                address_hash: Some("h2".into()),
                provider_id: None,
            },
        ),
    ] {
        let claimed = old.store.claim_channel(r.channel.as_str(), T0, 1, "t").await.unwrap().remove(0);
        assert!(old.store.finish(&claimed, "t", &finish, T0).await.unwrap());
    }
    let report = |fingerprint: &str, status: &'static str| {
        common::twilio::delivery_report(&a.id, fingerprint, status, &format!("Twilio: {status}"), Some("h1"))
    };
    assert!(old.store.record_bounce(&report("a", "delivered"), T0).await.is_err(), "0020's CHECK refuses it");
    let log = |store: &herald::store::SqlStore| {
        let store = store.clone();
        let (a, b) = (a.id.clone(), b.id.clone());
        async move {
            let mut all = store.sends_for_outbox(&a).await.unwrap();
            all.extend(store.sends_for_outbox(&b).await.unwrap());
            serde_json::to_value(all).unwrap()
        }
    };
    let before = log(&old.store).await;
    assert_eq!(before.as_array().unwrap().len(), 2, "{before}");

    let applied = old.store.migrate().await.unwrap();
    assert_eq!(applied.first().map(|m| m.version), Some(21), "0021 and every later migration");
    // The Herald that migrated is a new process: 0023 changes the keys'
    // collation on PostgreSQL, which a running instance's prepared
    // statements would not survive (docs/operations/upgrading.md).
    let new = old.another_instance().await;
    assert_eq!(log(&new).await, before, "every send-log row kept as it was");
    if old.backend() == common::Backend::Sqlite {
        let indexes: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'engagement_sends' \
             AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
        )
        .fetch_all(new.pool())
        .await
        .unwrap();
        assert_eq!(indexes, ["engagement_sends_address", "engagement_sends_outbox", "engagement_sends_user"]);
    }

    let (t1, t2) = (T0.plus(Duration::from_secs(1)), T0.plus(Duration::from_secs(2)));
    assert!(new.record_bounce(&report("a", "delivered"), t1).await.unwrap());
    assert!(new.record_bounce(&report("b", "undelivered"), t2).await.unwrap());
    let after = new.sends_for_outbox(&a.id).await.unwrap();
    let statuses: Vec<&str> = after.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses, ["sent", "delivered", "undelivered"]);
    assert!(after.iter().all(|s| s.provider_id.as_deref() == Some("SM0123")), "{after:?}");
    let bogus = new.dialect().sql(
        "INSERT INTO engagement_sends (id, outbox_id, user_id, channel, status, attempts, created_at) \
         VALUES (?, ?, 'u1', 'sms', 'read', 0, 0)",
    );
    let refused = sqlx::query(&bogus).bind(new_id()).bind(a.id.clone()).execute(new.pool()).await;
    assert!(refused.is_err(), "the CHECK still refuses a status that is not one");
    new.close().await;
    old.cleanup().await;
}

/// A push to several devices records every accepting service's message id
/// (a Web Push `Location` URL is 100–200 characters): the send log keeps
/// them whole on every database, where a short column would refuse the
/// write and leave the row to be sent again.
async fn a_sent_rows_provider_ids_are_kept_whole(db: &TestDb) {
    let r = row("u1", "push", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = db.store.claim_channel("push", T0, 1, "t").await.unwrap().remove(0);
    let ids: Vec<String> =
        (0..4).map(|i| format!("https://push.example.net/message/{i}/{}", "a1b2c3d4".repeat(20))).collect();
    let sent = Finish { provider_id: Some(ids.join(" ")), ..Finish::sent("push") };
    assert!(db.store.finish(&claimed, "t", &sent, T0).await.unwrap());
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log[0].provider_id.as_deref(), Some(ids.join(" ").as_str()));
    assert!(log[0].provider_id.as_ref().unwrap().len() > 600);
}

async fn reschedule_puts_the_row_back_with_its_error(db: &TestDb) {
    let r = row("u1", "inbox", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = db.store.claim_channel("inbox", T0, 1, "t").await.unwrap().remove(0);
    let retry_at = T0.plus(Duration::from_secs(300));
    assert!(db.store.reschedule(&claimed, "t", retry_at, "451 try again later", T0).await.unwrap());

    let back = db.store.get_outbox(&r.id).await.unwrap().unwrap();
    assert_eq!(back.status, OutboxStatus::Scheduled);
    assert_eq!(back.due_at, retry_at);
    assert_eq!(back.last_error.as_deref(), Some("451 try again later"));
    assert_eq!((back.claim_token, back.attempts), (None, 1));
    assert!(db.store.claim_channel("inbox", T0, 1, "t2").await.unwrap().is_empty(), "not before its new due time");
    assert_eq!(db.store.claim_channel("inbox", retry_at, 1, "t3").await.unwrap()[0].attempts, 2);
    assert!(db.store.sends_for_outbox(&r.id).await.unwrap().is_empty(), "a retry is not a send-log row");
}

async fn release_can_refund_the_attempt(db: &TestDb) {
    let a = row("u1", "inbox", T0);
    let b = row("u1", "inbox", T0);
    db.store.enqueue(&[a.clone(), b.clone()], T0).await.unwrap();
    db.store.claim_channel("inbox", T0, 2, "t").await.unwrap();
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
    db.store.claim_channel("inbox", T0, 1, "t1").await.unwrap();
    let t1 = T0.plus(Duration::from_secs(600));
    db.store.enqueue(std::slice::from_ref(&young), t1).await.unwrap();
    db.store.claim_channel("inbox", t1, 1, "t2").await.unwrap();

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
    db.store.claim_channel("inbox", T0, 1, "t").await.unwrap();
    db.store.enqueue(&[oldest.clone(), other, future.clone()], T0).await.unwrap();

    let s = db.store.status_summary(T0).await.unwrap();
    assert_eq!((s.count(OutboxStatus::Scheduled), s.count(OutboxStatus::Sending)), (3, 1));
    let o = s.oldest_due.unwrap();
    assert_eq!((o.id.as_str(), o.user_id.as_str()), (oldest.id.as_str(), "u-old"));
    assert_eq!(o.overdue_seconds, 90.0);
    assert_eq!(s.next_due_at, Some(oldest.due_at));
}

async fn an_inbox_message_is_written_once_with_its_outcome(db: &TestDb) {
    let msg = NewInboxMessage {
        outbox_id: new_id(),
        user_id: "u1".into(),
        title: "Your export is ready".into(),
        body: Some("Download it within 7 days.".into()),
        url: Some("https://example.com/exports/1".into()),
        data: Some(serde_json::json!({ "export_id": 1 })),
    };
    let row = common::deliver_inbox(&db.store, &msg, T0).await;
    // The same read recorded again (a second instance that read the row
    // before the first committed): the row changed since, so the fence
    // refuses it and no second message is written.
    use herald::store::{Record, RecordAction};
    let sent = Finish::sent("inbox");
    let again = Record { row, token: None, action: RecordAction::Finish(sent), inbox: Some(msg.clone()) };
    assert_eq!(db.store.record_outcomes(&[again], T0).await.unwrap(), [false], "the second write loses");
    assert_eq!(db.store.sends_for_outbox(&msg.outbox_id).await.unwrap().len(), 1);
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
        let claimed = db.store.claim_channel("inbox", now, 1, &format!("t{i}")).await.unwrap().remove(0);
        assert_eq!(claimed.id, r.id);
        let f = Finish::sent("inbox");
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
    let claimed = db.store.claim_channel("inbox", T0, 3, "mine").await.unwrap();
    let sent = Finish::sent("inbox");
    let items = vec![
        Record {
            row: claimed[0].clone(),
            token: Some("mine".into()),
            action: RecordAction::Finish(sent.clone()),
            inbox: None,
        },
        Record {
            row: claimed[1].clone(),
            token: Some("not-mine".into()),
            action: RecordAction::Finish(sent),
            inbox: None,
        },
        Record {
            row: claimed[2].clone(),
            token: Some("mine".into()),
            action: RecordAction::Reschedule { due_at: T0.plus(Duration::from_secs(300)), detail: "421".into() },
            inbox: None,
        },
    ];
    assert_eq!(db.store.record_outcomes(&items, T0).await.unwrap(), vec![true, false, true]);
    assert_eq!(db.store.sends_for_outbox(&claimed[0].id).await.unwrap().len(), 1);
    assert!(db.store.sends_for_outbox(&claimed[1].id).await.unwrap().is_empty(), "a lost claim writes nothing");
    assert_eq!(db.store.get_outbox(&claimed[1].id).await.unwrap().unwrap().status, OutboxStatus::Sending);
    assert_eq!(db.store.get_outbox(&claimed[2].id).await.unwrap().unwrap().status, OutboxStatus::Scheduled);
}

/// A flush of more rows than one statement takes (MySQL cuts it into runs
/// of fixed lengths, the others into chunks) still writes one event, one
/// send-log row and one inbox message per row, at consecutive positions.
async fn a_flush_longer_than_one_statement_writes_every_row_once_in_order(db: &TestDb) {
    use herald::store::{EventStore, InboxStore, Record, RecordAction};
    const N: usize = 1_283;
    let rows: Vec<_> = (0..N).map(|_| row("u1", "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let claimed = db.store.claim_channel("inbox", T0, N as u32, "mine").await.unwrap();
    assert_eq!(claimed.len(), N);
    let sent = Finish::sent("inbox");
    let items: Vec<Record> = claimed
        .iter()
        .map(|r| Record {
            row: r.clone(),
            token: Some("mine".into()),
            action: RecordAction::Finish(sent.clone()),
            inbox: Some(NewInboxMessage {
                outbox_id: r.id.clone(),
                user_id: "u1".into(),
                title: format!("for {}", r.id),
                body: None,
                url: None,
                data: None,
            }),
        })
        .collect();
    assert_eq!(db.store.record_outcomes(&items, T0).await.unwrap(), vec![true; N]);

    let events = db.store.events_after(0, 2 * N as u32).await.unwrap();
    let inbox = db.store.inbox_after(&user("u1"), 0, 2 * N as u32).await.unwrap();
    let mut positions: Vec<i64> = events.iter().map(|e| e.position).chain(inbox.iter().map(|m| m.position)).collect();
    positions.sort_unstable();
    let first = positions[0];
    assert_eq!(positions, (first..first + 2 * N as i64).collect::<Vec<_>>(), "one position each, none skipped");
    let mut expected: Vec<&str> = claimed.iter().map(|r| r.id.as_str()).collect();
    expected.sort_unstable();
    let mut evented: Vec<&str> = events.iter().map(|e| e.outbox_id.as_deref().unwrap()).collect();
    evented.sort_unstable();
    assert_eq!(evented, expected, "one outcome event per row");
    let mut delivered: Vec<&str> = inbox.iter().map(|m| m.outbox_id.as_str()).collect();
    delivered.sort_unstable();
    assert_eq!(delivered, expected, "one inbox message per row");
    assert!(inbox.iter().all(|m| m.title == format!("for {}", m.outbox_id)), "each message with its own row's title");
    for r in [&claimed[0], &claimed[N / 2], &claimed[N - 1]] {
        assert_eq!(db.store.sends_for_outbox(&r.id).await.unwrap().len(), 1);
        assert_eq!(db.store.get_outbox(&r.id).await.unwrap().unwrap().status, OutboxStatus::Sent);
    }
}

fn rule_row(trigger_type: &str, enabled: bool) -> herald::store::RuleRow {
    herald::store::RuleRow {
        id: new_id(),
        name: "Welcome".into(),
        trigger_type: trigger_type.into(),
        condition: Some("payload.x > 1".into()),
        channel: "inbox".into(),
        template: serde_json::json!({"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}}),
        delay_seconds: 60,
        grace_seconds: None,
        category: "onboarding".into(),
        enabled,
        workflow: None,
        webhook_url: Some("https://hooks.example.com/h".into()),
        created_at: T0,
        updated_at: T0,
    }
}

async fn rules_round_trip_and_only_enabled_ones_are_read_for_planning(db: &TestDb) {
    use herald::store::RuleStore;
    let on = rule_row("signup", true);
    let off = rule_row("signup", false);
    db.store.insert_rule(&on).await.unwrap();
    db.store.insert_rule(&off).await.unwrap();
    let back = db.store.get_rule(&on.id).await.unwrap().unwrap();
    assert_eq!((back.condition.as_deref(), back.delay_seconds, back.grace_seconds), (Some("payload.x > 1"), 60, None));
    assert_eq!(back.template, on.template);
    assert_eq!(back.webhook_url.as_deref(), Some("https://hooks.example.com/h"));
    // What the planner's cache reads (`enabled_rules`).
    let found = db.store.enabled_rules().await.unwrap();
    assert_eq!(found.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), vec![on.id.as_str()]);
    let mut changed = off.clone();
    changed.enabled = true;
    changed.grace_seconds = Some(30);
    assert!(db.store.update_rule(&changed).await.unwrap());
    assert_eq!(db.store.enabled_rules().await.unwrap().len(), 2);
    assert_eq!(db.store.get_rule(&off.id).await.unwrap().unwrap().grace_seconds, Some(30));
    assert!(db.store.delete_rule(&on.id).await.unwrap());
    assert!(!db.store.delete_rule(&on.id).await.unwrap());
    assert_eq!(db.store.list_rules().await.unwrap().len(), 1);
}

async fn cancelling_a_rule_ends_only_its_scheduled_rows_with_a_send_log_row(db: &TestDb) {
    use herald::store::{CancelScope, RuleStore};
    let mut mine: Vec<_> = (0..3).map(|_| row("u1", "inbox", T0)).collect();
    for r in &mut mine {
        r.rule_id = Some("rule-1".into());
    }
    let other = row("u1", "inbox", T0);
    db.store.enqueue(&mine, T0).await.unwrap();
    db.store.enqueue(std::slice::from_ref(&other), T0).await.unwrap();
    // One of the rule's rows is being delivered: it is the worker's to finish.
    let mut claimed = db.store.claim_channel("inbox", T0, 1, "t").await.unwrap();
    assert_eq!(claimed.len(), 1);
    let claimed = claimed.remove(0);
    let n = db.store.cancel_scheduled(CancelScope::Rule("rule-1"), "rule disabled", T0).await.unwrap();
    let expected = if claimed.rule_id.as_deref() == Some("rule-1") { 2 } else { 3 };
    assert_eq!(n, expected);
    assert_eq!(db.store.get_outbox(&claimed.id).await.unwrap().unwrap().status, OutboxStatus::Sending);
    for r in mine.iter().filter(|r| r.id != claimed.id) {
        assert_eq!(db.store.get_outbox(&r.id).await.unwrap().unwrap().status, OutboxStatus::Cancelled);
        let log = db.store.sends_for_outbox(&r.id).await.unwrap();
        assert_eq!((log[0].status.as_str(), log[0].detail.as_deref()), ("cancelled", Some("rule disabled")));
    }
    if other.id != claimed.id {
        assert_eq!(db.store.get_outbox(&other.id).await.unwrap().unwrap().status, OutboxStatus::Scheduled);
    }
}

async fn recipients_upsert_and_erasure_keeps_the_send_log(db: &TestDb) {
    use herald::store::{RecipientRow, RecipientStore};
    let mut r = RecipientRow {
        user_id: "ada".into(),
        email: Some("ada@example.com".into()),
        name: Some("Ada".into()),
        locale: Some("de".into()),
        timezone: None,
        preferences: serde_json::json!({"categories": {"news": false}}),
        quiet_hours: None,
        phone: None,
        phone_hash: None,
        slack_user_id: None,
        user_choices: Default::default(),
        created_at: T0,
        updated_at: T0,
    };
    assert!(db.store.put_recipient(&r).await.unwrap(), "created");
    assert!(!db.store.put_recipient(&r).await.unwrap(), "the same values again: replaced, not duplicated");
    r.email = Some("ada@new.example".into());
    assert!(!db.store.put_recipient(&r).await.unwrap());
    let back = db.store.get_recipient(&user("ada")).await.unwrap().unwrap();
    assert_eq!(back.email.as_deref(), Some("ada@new.example"));
    assert_eq!(back.preferences["categories"]["news"], false);

    let waiting = row("ada", "inbox", T0.plus(Duration::from_secs(3600)));
    db.store.enqueue(std::slice::from_ref(&waiting), T0).await.unwrap();
    let msg = NewInboxMessage {
        outbox_id: new_id(),
        user_id: "ada".into(),
        title: "hi".into(),
        body: None,
        url: None,
        data: None,
    };
    common::deliver_inbox(&db.store, &msg, T0).await;

    let erased = db.store.erase_user(&user("ada"), T0).await.unwrap();
    assert_eq!((erased.recipient_deleted, erased.inbox_messages_deleted, erased.scheduled_cancelled), (true, 1, 1));
    assert!(db.store.get_recipient(&user("ada")).await.unwrap().is_none());
    let log = db.store.sends_for_user(&user("ada"), 10).await.unwrap();
    let statuses: Vec<&str> = log.iter().map(|s| s.status.as_str()).collect();
    assert_eq!(statuses.len(), 2, "the log keeps its rows: {statuses:?}");
    assert!(statuses.contains(&"sent") && statuses.contains(&"cancelled"));
}

async fn api_keys_are_found_by_hash_and_revocable(db: &TestDb) {
    use herald::store::RecipientStore;
    let (key, row) = herald::http::auth::generate("ci", T0);
    db.store.insert_api_key(&row).await.unwrap();
    let found = db.store.api_key_by_hash(&herald::http::auth::hash_key(&key)).await.unwrap().unwrap();
    assert_eq!((found.name.as_str(), found.revoked_at), ("ci", None));
    assert!(db.store.api_key_by_hash(&herald::http::auth::hash_key("hrld_other")).await.unwrap().is_none());
    assert!(db.store.revoke_api_key(&row.id, T0).await.unwrap());
    assert!(!db.store.revoke_api_key(&row.id, T0).await.unwrap(), "once");
    assert_eq!(db.store.list_api_keys().await.unwrap()[0].revoked_at, Some(T0));
}

async fn outbox_admin_filters_pages_retries_and_cancels(db: &TestDb) {
    use herald::store::{OutboxAdmin, OutboxFilter, RowAction};
    let rows: Vec<_> = (0..5).map(|i| row(if i < 3 { "a" } else { "b" }, "inbox", T0)).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let page =
        |before: Option<String>| OutboxFilter { user_id: Some("a".into()), before, limit: 2, ..Default::default() };
    let first = db.store.list_outbox(&page(None)).await.unwrap();
    let second = db.store.list_outbox(&page(Some(first[1].id.clone()))).await.unwrap();
    assert_eq!((first.len(), second.len()), (2, 1));
    assert!(first[0].id > first[1].id && first[1].id > second[0].id, "newest first, no overlap");

    let RowAction::Done(c) = db.store.cancel_outbox(&rows[0].id, "by hand", T0).await.unwrap() else { panic!() };
    assert_eq!(c.status, OutboxStatus::Cancelled);
    assert!(matches!(db.store.cancel_outbox(&rows[0].id, "again", T0).await.unwrap(), RowAction::Refused(_)));
    let later = T0.plus(Duration::from_secs(10));
    let RowAction::Done(r) = db.store.retry_outbox(&rows[0].id, later).await.unwrap() else { panic!() };
    assert_eq!((r.status, r.due_at, r.attempts), (OutboxStatus::Scheduled, later, 0));
    assert!(matches!(db.store.retry_outbox("missing", T0).await.unwrap(), RowAction::NotFound));
    let cancelled = OutboxFilter { status: Some(OutboxStatus::Cancelled), limit: 10, ..Default::default() };
    assert!(db.store.list_outbox(&cancelled).await.unwrap().is_empty());
}

async fn an_idempotency_key_returns_the_first_trigger(db: &TestDb) {
    use herald::store::{NewTrigger, TriggerInsert, TriggerStore};
    let t = |id: &str| NewTrigger {
        id: id.into(),
        trigger_type: "x".into(),
        user_id: user("u"),
        payload: serde_json::json!({"a": 1}),
        idempotency_key: Some("k-1".into()),
        request_hash: Some("h".into()),
        occurred_at: T0,
        send_at: None,
        actor_id: None,
    };
    assert!(matches!(db.store.insert_trigger(&t("first"), T0).await.unwrap(), TriggerInsert::Created));
    let TriggerInsert::Existing(first) = db.store.insert_trigger(&t("second"), T0).await.unwrap() else { panic!() };
    assert_eq!((first.id.as_str(), first.payload["a"].as_i64()), ("first", Some(1)));
    assert!(db.store.get_trigger("second").await.unwrap().is_none());
    // The in-doubt check's read (on MariaDB `SET STATEMENT wsrep_sync_wait
    // = 1 FOR …`, which a server that is not a Galera node accepts too).
    let found = db.store.recorded_triggers(&["second", "first", "never"]).await.unwrap();
    assert_eq!(found, vec!["first".to_owned()]);
    assert!(db.store.recorded_triggers(&[]).await.unwrap().is_empty());
}

async fn the_inbox_is_scoped_to_its_user_and_counts_follow_its_state(db: &TestDb) {
    use herald::store::{InboxCounts, InboxFilter, InboxMark, InboxStore};
    let mut changes = db.store.inbox_changes();
    for (user, title) in [("ada", "a1"), ("ada", "a2"), ("bob", "b1")] {
        let msg = NewInboxMessage {
            outbox_id: new_id(),
            user_id: user.into(),
            title: title.into(),
            body: None,
            url: None,
            data: None,
        };
        common::deliver_inbox(&db.store, &msg, T0).await;
    }
    assert_eq!(changes.recv().await.unwrap(), "ada", "an insert announces whose inbox changed");
    let ada = user("ada");
    assert_eq!(db.store.inbox_counts(&ada).await.unwrap(), InboxCounts { unseen: 2, unread: 2 });
    let page = db.store.inbox_page(&ada, InboxFilter::Inbox, None, 10).await.unwrap();
    assert_eq!(page.iter().map(|m| m.title.as_str()).collect::<Vec<_>>(), vec!["a2", "a1"]);
    let bobs = db.store.inbox_page(&user("bob"), InboxFilter::All, None, 10).await.unwrap();
    assert!(db.store.inbox_mark(&ada, &bobs[0].id, InboxMark::Read, T0).await.unwrap().is_none(), "not ada's");
    let read = db.store.inbox_mark(&ada, &page[0].id, InboxMark::Read, T0).await.unwrap().unwrap();
    assert_eq!((read.read_at, read.seen_at), (Some(T0), Some(T0)));
    assert_eq!(db.store.inbox_counts(&ada).await.unwrap(), InboxCounts { unseen: 1, unread: 1 });
    db.store.inbox_mark(&ada, &page[1].id, InboxMark::Archive, T0).await.unwrap();
    assert_eq!(db.store.inbox_counts(&ada).await.unwrap(), InboxCounts { unseen: 0, unread: 0 });
    assert_eq!(db.store.inbox_page(&ada, InboxFilter::Archived, None, 10).await.unwrap().len(), 1);
    db.store.inbox_mark(&ada, &page[0].id, InboxMark::Unread, T0).await.unwrap();
    assert_eq!(db.store.inbox_page(&ada, InboxFilter::Unread, None, 10).await.unwrap().len(), 1);
    assert_eq!(db.store.inbox_read_all(&ada, T0).await.unwrap(), 1);
    assert_eq!(db.store.inbox_counts(&user("bob")).await.unwrap(), InboxCounts { unseen: 1, unread: 1 });
    // A page ends below `before` (archived and read messages in `all`); a
    // `before` that is not one of the user's messages gives an empty page.
    let first = db.store.inbox_page(&ada, InboxFilter::All, None, 1).await.unwrap();
    let next = db.store.inbox_page(&ada, InboxFilter::All, Some(&first[0].id), 10).await.unwrap();
    assert_eq!((first[0].title.as_str(), next.len(), next[0].title.as_str()), ("a2", 1, "a1"));
    assert!(db.store.inbox_page(&ada, InboxFilter::All, Some(&bobs[0].id), 10).await.unwrap().is_empty());
    assert!(db.store.inbox_page(&ada, InboxFilter::Inbox, Some(&first[0].id), 10).await.unwrap().is_empty());
    let after = db.store.inbox_after(&ada, page[1].position, 10).await.unwrap();
    assert_eq!(after.iter().map(|m| m.title.as_str()).collect::<Vec<_>>(), vec!["a2"]);
    assert_eq!(db.store.inbox_after(&ada, 0, 10).await.unwrap().len(), 2);
    // A stream resumes from a position, or from an older client's message id.
    assert_eq!(db.store.inbox_resume_position(&ada, &page[1].position.to_string()).await.unwrap(), page[1].position);
    assert_eq!(db.store.inbox_resume_position(&ada, &page[1].id).await.unwrap(), page[1].position);
    assert_eq!(db.store.inbox_latest_position(&ada).await.unwrap(), page[0].position);
}

async fn outcomes_and_cancellations_append_events_in_commit_order(db: &TestDb) {
    use herald::store::{CancelScope, EventStore, RuleStore};
    assert_eq!(db.store.latest_event_position().await.unwrap(), 0);
    let mut signal = db.store.event_signal();
    let a = row("u1", "inbox", T0);
    let b = row("u2", "inbox", T0.plus(Duration::from_secs(60)));
    db.store.enqueue(&[a.clone(), b.clone()], T0).await.unwrap();
    let claimed = db.store.claim_channel("inbox", T0, 1, "t").await.unwrap().remove(0);
    let f = Finish::sent("inbox");
    db.store.finish(&claimed, "t", &f, T0).await.unwrap();
    signal.changed().await.unwrap();
    db.store.cancel_scheduled(CancelScope::User("u2"), "user deleted", T0).await.unwrap();
    // A lost claim writes no event.
    assert!(!db.store.finish(&claimed, "stale-token", &f, T0).await.unwrap());

    let events = db.store.events_after(0, 10).await.unwrap();
    let seen: Vec<(&str, Option<&str>, &str)> =
        events.iter().map(|e| (e.kind.as_str(), e.outbox_id.as_deref(), e.data["status"].as_str().unwrap())).collect();
    assert_eq!(seen, vec![("outcome", Some(a.id.as_str()), "sent"), ("outcome", Some(b.id.as_str()), "cancelled")]);
    assert_eq!(events[1].data["detail"], "user deleted");
    assert!(events[0].position < events[1].position, "positions follow commit order");
    assert_eq!(db.store.latest_event_position().await.unwrap(), events[1].position);
    assert_eq!(db.store.event_position(&events[1].id).await.unwrap(), Some(events[1].position));
    assert!(db.store.events_after(events[1].position, 10).await.unwrap().is_empty());
}

async fn a_bounce_is_recorded_once_with_its_send_log_row_and_suppression(db: &TestDb) {
    use herald::store::{
        BounceStore, EventStore, MatchedSend, NewBounce, SuppressionReason, SuppressionRow, SuppressionStore,
    };
    let r = row("u1", "email", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let b = NewBounce {
        fingerprint: "f".repeat(64),
        provider: "mail".into(),
        kind: "hard".into(),
        address_hash: Some("h".repeat(64)),
        status: Some("5.1.1".into()),
        reply_code: Some(550),
        detail: "5.1.1 550 user unknown".into(),
        raw_excerpt: "Subject: Undelivered Mail ✉".into(),
        matched: Some(MatchedSend {
            outbox_id: r.id.clone(),
            rule_id: None,
            trigger_id: None,
            user_id: "u1".into(),
            channel: "email".into(),
            matched_by: "verp",
        }),
        send_status: Some("bounced"),
        provider_id: None,
        suppress: Some(SuppressionRow {
            address_hash: "h".repeat(64),
            address_kind: herald::address::AddressKind::Email,
            category: "*".into(),
            reason: SuppressionReason::HardBounce,
            detail: Some("hard bounce".into()),
            created_at: T0,
            expires_at: None,
        }),
    };
    assert!(db.store.record_bounce(&b, T0).await.unwrap());
    assert!(!db.store.record_bounce(&b, T0).await.unwrap(), "the same bounce twice is recorded once");
    let log = db.store.sends_for_outbox(&r.id).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].status.as_str(), log[0].transport.as_deref()), ("bounced", Some("mail")));
    assert!(db.store.active_suppression(&"h".repeat(64), Some("x"), T0).await.unwrap().is_some());
    let bounces = db.store.list_bounces(10).await.unwrap();
    assert_eq!(bounces.len(), 1);
    assert_eq!((bounces[0].matched_by.as_deref(), bounces[0].reply_code), (Some("verp"), Some(550)));
    let kinds: Vec<String> = db.store.events_after(0, 10).await.unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec!["outcome", "suppression"]);
}

async fn a_webhook_token_is_accepted_once(db: &TestDb) {
    use herald::store::BounceStore;
    assert!(db.store.remember_token("mailgun:abc", T0).await.unwrap());
    assert!(!db.store.remember_token("mailgun:abc", T0.plus(Duration::from_secs(1))).await.unwrap());
    assert!(!db.store.remember_token("mailgun:abc", T0).await.unwrap(), "even within the same millisecond");
    assert!(db.store.remember_token("mailgun:abd", T0).await.unwrap());
}

fn operator(email: &str) -> herald::store::OperatorRow {
    herald::store::OperatorRow {
        id: new_id(),
        email: email.into(),
        password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        created_at: T0,
    }
}

async fn operators_are_unique_by_email_and_removing_one_ends_its_sessions(db: &TestDb) {
    use herald::store::OperatorStore;
    let s = &db.store;
    assert!(s.insert_operator(&operator("a@example.com")).await.unwrap());
    assert!(!s.insert_operator(&operator("a@example.com")).await.unwrap(), "the email is unique");
    assert!(s.insert_operator(&operator("b@example.com")).await.unwrap());
    let a = s.operator_by_email("a@example.com").await.unwrap().unwrap();
    assert!(a.password_hash.starts_with("$argon2id$"));
    assert!(
        s.operator_by_email("A@example.com").await.unwrap().is_none(),
        "callers normalise; the store compares exactly"
    );
    let emails: Vec<String> = s.list_operators().await.unwrap().into_iter().map(|o| o.email).collect();
    assert_eq!(emails, ["a@example.com", "b@example.com"]);
    let far = T0.plus(Duration::from_secs(3600));
    s.create_session("hash-a", &a, T0, far).await.unwrap();
    assert!(s.delete_operator("a@example.com").await.unwrap());
    assert!(!s.delete_operator("a@example.com").await.unwrap());
    assert!(s.session("hash-a").await.unwrap().is_none(), "their sessions end with them");
}

async fn sessions_are_found_by_hash_and_expired_ones_purged_at_the_next_login(db: &TestDb) {
    use herald::store::OperatorStore;
    let s = &db.store;
    let op = operator("ops@example.com");
    s.insert_operator(&op).await.unwrap();
    let hour = Duration::from_secs(3600);
    s.create_session("old", &op, T0, T0.plus(hour)).await.unwrap();
    let found = s.session("old").await.unwrap().unwrap();
    assert_eq!((found.operator_email.as_str(), found.expires_at), ("ops@example.com", T0.plus(hour)));
    // A later login purges what expired meanwhile.
    let later = T0.plus(hour * 2);
    s.create_session("new", &op, later, later.plus(hour)).await.unwrap();
    assert!(s.session("old").await.unwrap().is_none());
    assert!(s.delete_session("new").await.unwrap());
    assert!(!s.delete_session("new").await.unwrap());
    assert!(s.session("new").await.unwrap().is_none());
}

async fn login_failures_count_per_email_since_its_last_success_and_per_address(db: &TestDb) {
    use herald::store::{LoginAttempt, LoginFailures, OperatorStore};
    let s = &db.store;
    let at = |secs: u64, email: &str, ip: &str, outcome: &str| LoginAttempt {
        email: email.into(),
        ip: ip.into(),
        outcome: outcome.into(),
        created_at: T0.plus(Duration::from_secs(secs)),
    };
    for a in [
        at(0, "a@x.org", "10.0.0.1", "wrong_password"),
        at(10, "a@x.org", "10.0.0.1", "ok"),
        at(20, "a@x.org", "10.0.0.1", "wrong_password"),
        at(30, "a@x.org", "10.0.0.2", "unknown_email"),
        at(40, "b@x.org", "10.0.0.1", "unknown_email"),
        at(50, "a@x.org", "10.0.0.1", "rate_limited"),
    ] {
        s.record_login_attempt(&a).await.unwrap();
    }
    let f = s.login_failures("a@x.org", "10.0.0.1", T0.minus(Duration::from_secs(1)), T0).await.unwrap();
    let expected = LoginFailures {
        by_email: 2, // after the success at 10; the rate-limited refusal does not count
        email_oldest: Some(T0.plus(Duration::from_secs(20))),
        by_email_ip: 1, // the failure at 20 only: the one at 30 came from another address
        email_ip_oldest: Some(T0.plus(Duration::from_secs(20))),
        by_ip: 3, // every failure from the address, across emails, the success notwithstanding
        ip_oldest: Some(T0),
        known_address: true, // the success at 10
    };
    assert_eq!(f, expected);
    // Only failures after `since` count; a success before `known_since` is forgotten.
    let later = T0.plus(Duration::from_secs(20));
    let f = s.login_failures("a@x.org", "10.0.0.1", later, later).await.unwrap();
    assert_eq!((f.by_email, f.by_email_ip, f.by_ip, f.known_address), (1, 0, 1, false));
    // A pending attempt (its password still being checked) counts until it
    // is finished, and then as what it turned out to be.
    let pending = s.record_login_attempt(&at(60, "c@x.org", "10.0.0.3", "pending")).await.unwrap();
    let f = s.login_failures("c@x.org", "10.0.0.3", T0, T0).await.unwrap();
    assert_eq!((f.by_email, f.by_email_ip, f.by_ip), (1, 1, 1));
    s.finish_login_attempt(&pending, herald::store::LoginOutcome::Ok).await.unwrap();
    let f = s.login_failures("c@x.org", "10.0.0.3", T0, T0).await.unwrap();
    assert_eq!((f.by_email, f.by_email_ip, f.by_ip, f.known_address), (0, 0, 0, true));
    let outcomes: Vec<String> = s.recent_login_attempts(2).await.unwrap().into_iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["ok", "rate_limited"]);
}

async fn the_audit_log_pages_newest_first(db: &TestDb) {
    use herald::store::{AuditEntry, OperatorStore};
    let s = &db.store;
    for i in 0..5 {
        let e = AuditEntry {
            operator_email: "ops@example.com".into(),
            action: "rule.enable".into(),
            target: format!("rule-{i}"),
            detail: (i == 0).then(|| "é ✓ long detail".repeat(50)),
        };
        s.append_audit(&e, T0.plus(Duration::from_secs(i))).await.unwrap();
    }
    let page = s.audit_log(None, 3).await.unwrap();
    let targets: Vec<&str> = page.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(targets, ["rule-4", "rule-3", "rule-2"]);
    let rest = s.audit_log(Some(&page[2].id), 3).await.unwrap();
    let targets: Vec<&str> = rest.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(targets, ["rule-1", "rule-0"]);
    assert_eq!(rest[1].detail.as_deref(), Some("é ✓ long detail".repeat(50).as_str()));
    assert_eq!(rest[1].created_at, T0);
}

async fn a_lift_records_reason_who_and_audit_in_its_transaction(db: &TestDb) {
    use herald::store::{EventStore, Lift, OperatorStore, SuppressionReason, SuppressionRow, SuppressionStore};
    let s = &db.store;
    let hash = "c".repeat(64);
    for category in ["*", "news"] {
        let row = SuppressionRow {
            address_hash: hash.clone(),
            address_kind: herald::address::AddressKind::Email,
            category: category.into(),
            reason: SuppressionReason::Complaint,
            detail: None,
            created_at: T0,
            expires_at: None,
        };
        s.suppress(&row).await.unwrap();
    }
    let by_operator = Lift { reason: Some("customer asked"), by: "ops@example.com", audit: true };
    assert_eq!(s.lift_suppression(&hash, Some("news"), &by_operator, T0).await.unwrap(), 1);
    let by_key = Lift { reason: None, by: "api key \"ci\"", audit: false };
    let later = T0.plus(Duration::from_secs(5));
    assert_eq!(s.lift_suppression(&hash, None, &by_key, later).await.unwrap(), 1);
    assert_eq!(s.lift_suppression(&hash, None, &by_key, later).await.unwrap(), 0, "nothing left: nothing recorded");
    let lifts = s.suppression_lifts(Some(&hash), 10).await.unwrap();
    let seen: Vec<(&str, Option<&str>, &str, i64)> =
        lifts.iter().map(|l| (l.category.as_str(), l.reason.as_deref(), l.lifted_by.as_str(), l.lifted)).collect();
    assert_eq!(seen, [("*", None, "api key \"ci\"", 1), ("news", Some("customer asked"), "ops@example.com", 1)]);
    assert_eq!(s.suppression_lifts(None, 10).await.unwrap().len(), 2);
    let audit = s.audit_log(None, 10).await.unwrap();
    assert_eq!(audit.len(), 1, "only the operator's lift is audited");
    assert_eq!((audit[0].action.as_str(), audit[0].target.as_str()), ("suppression.lift", hash.as_str()));
    assert!(audit[0].detail.as_deref().unwrap().contains("customer asked"));
    let events = db.store.events_after(0, 10).await.unwrap();
    let lifted: Vec<_> = events.iter().filter(|e| e.kind == "suppression_lifted").collect();
    assert_eq!(lifted[0].data["reason"], "customer asked");
    assert_eq!(lifted[0].data["by"], "ops@example.com");
}

async fn send_counts_and_bounce_evidence_are_read_back(db: &TestDb) {
    use herald::store::{BounceStore, NewBounce, OutboxAdmin};
    let s = &db.store;
    let rows = [row("u1", "inbox", T0), row("u1", "inbox", T0), row("u2", "inbox", T0)];
    s.enqueue(&rows, T0).await.unwrap();
    let claimed = s.claim_channel("inbox", T0, 10, "tok").await.unwrap();
    let sent = Finish::sent("inbox");
    let failed = Finish::because(SendStatus::Failed, "no");
    s.finish(&claimed[0], "tok", &sent, T0).await.unwrap();
    s.finish(&claimed[1], "tok", &sent, T0.plus(Duration::from_secs(60))).await.unwrap();
    s.finish(&claimed[2], "tok", &failed, T0.plus(Duration::from_secs(60))).await.unwrap();
    let counts = s.send_counts_since(T0).await.unwrap();
    assert_eq!(counts, [("failed".to_owned(), 1), ("sent".to_owned(), 2)]);
    let counts = s.send_counts_since(T0.plus(Duration::from_secs(30))).await.unwrap();
    assert_eq!(counts, [("failed".to_owned(), 1), ("sent".to_owned(), 1)]);

    let hash = "d".repeat(64);
    let bounce = |fingerprint: &str| NewBounce {
        fingerprint: fingerprint.into(),
        provider: "mail".into(),
        kind: "hard".into(),
        address_hash: Some(hash.clone()),
        status: Some("5.1.1".into()),
        reply_code: Some(550),
        detail: "no such user".into(),
        raw_excerpt: "Final-Recipient: rfc822; x@example.com".into(),
        matched: None,
        send_status: None,
        provider_id: None,
        suppress: None,
    };
    s.record_bounce(&bounce("f1"), T0).await.unwrap();
    s.record_bounce(&bounce("f2"), T0.plus(Duration::from_secs(1))).await.unwrap();
    let evidence = s.bounces_for_address(&hash, 10).await.unwrap();
    assert_eq!(evidence.len(), 2);
    assert_eq!(evidence[0].raw_excerpt.as_deref(), Some("Final-Recipient: rfc822; x@example.com"));
    assert_eq!(evidence[0].bounce.reply_code, Some(550));
    assert!(s.bounces_for_address(&"e".repeat(64), 10).await.unwrap().is_empty());
}

/// Retention: what is older than the cutoff and done
/// goes, in batches no larger than asked; what is recent, or still to be
/// delivered, or referenced by a message still to be delivered, stays.
async fn retention_prunes_only_old_finished_rows_in_bounded_batches(db: &TestDb) {
    use herald::store::{
        BounceStore, EventStore, InboxMark, InboxStore, NewBounce, Prunable, SuppressionReason, SuppressionRow,
        SuppressionStore, TriggerStore, new_id_at,
    };
    const DAY: Duration = Duration::from_secs(86_400);
    let store = &db.store;
    let late = T0.plus(100 * DAY);
    let cutoff = T0.plus(50 * DAY);
    let sent = Finish::sent("inbox");
    // A row made at `made` (its id's time) and due at `due`.
    let made_at = |user: &str, made: Millis, due: Millis| {
        let mut r = row(user, "inbox", due);
        r.id = new_id_at(made);
        r
    };

    // Outbox and send log: three old rows finished long ago, one old row
    // finished recently (a long delay), one still scheduled, one new.
    let old: Vec<_> = (0..3).map(|i| made_at(&format!("old{i}"), T0, T0)).collect();
    // And an old sent inbox message whose escalation follow-up is not
    // planned yet: it stays until it is.
    let mut escalating = made_at("escalating", T0, T0);
    escalating.follow_up_at = Some(late.plus(DAY));
    store.enqueue(&old, T0).await.unwrap();
    store.enqueue(std::slice::from_ref(&escalating), T0).await.unwrap();
    for r in store.claim_channel("inbox", T0, 4, "t-old").await.unwrap() {
        assert!(store.finish(&r, "t-old", &sent, T0).await.unwrap());
    }
    let delayed = made_at("delayed", T0, late);
    let waiting = made_at("waiting", T0, late.plus(DAY));
    let recent = made_at("recent", late, late);
    store.enqueue(&[delayed.clone(), waiting.clone(), recent.clone()], late).await.unwrap();
    for r in store.claim_channel("inbox", late, 10, "t-late").await.unwrap() {
        assert!(store.finish(&r, "t-late", &sent, late).await.unwrap());
    }
    let events_before = store.events_after(0, 100).await.unwrap();
    assert_eq!(events_before.len(), 6, "one outcome event per finished row");

    // At most `limit` rows per call, then the rest.
    assert_eq!(store.prune(Prunable::Outbox, cutoff, 2).await.unwrap(), 2);
    assert_eq!(store.prune(Prunable::Outbox, cutoff, 2).await.unwrap(), 1);
    assert_eq!(store.prune(Prunable::Outbox, cutoff, 2).await.unwrap(), 0);
    for r in &old {
        assert!(store.get_outbox(&r.id).await.unwrap().is_none(), "an old sent row goes");
    }
    for (r, why) in [
        (&delayed, "finished after the cutoff"),
        (&waiting, "still scheduled"),
        (&recent, "recent"),
        (&escalating, "whose follow-up is still to be planned"),
    ] {
        assert!(store.get_outbox(&r.id).await.unwrap().is_some(), "a row {why} stays");
    }
    assert_eq!(store.prune(Prunable::Sends, cutoff, 1000).await.unwrap(), 4);
    assert!(store.sends_for_outbox(&old[0].id).await.unwrap().is_empty());
    assert_eq!(store.sends_for_outbox(&recent.id).await.unwrap().len(), 1, "recent send-log rows stay");
    assert_eq!(store.prune(Prunable::Events, cutoff, 1000).await.unwrap(), 4);
    let kept: Vec<i64> = store.events_after(0, 100).await.unwrap().iter().map(|e| e.position).collect();
    let expected: Vec<i64> = events_before[4..].iter().map(|e| e.position).collect();
    assert_eq!(kept, expected, "the newest events stay, positions unchanged");
    assert_eq!(store.prune(Prunable::Events, cutoff, 1000).await.unwrap(), 0);

    // Inbox: archived long ago goes; unarchived, however old, stays.
    let ada = user("ada");
    for title in ["archived", "kept"] {
        let msg = NewInboxMessage {
            outbox_id: new_id(),
            user_id: "ada".into(),
            title: title.into(),
            body: None,
            url: None,
            data: None,
        };
        common::deliver_inbox(store, &msg, T0).await;
    }
    let page = store.inbox_for_user(&ada, 10).await.unwrap();
    let archived = page.iter().find(|m| m.title == "archived").unwrap();
    store.inbox_mark(&ada, &archived.id, InboxMark::Archive, T0).await.unwrap();
    assert_eq!(store.prune(Prunable::ArchivedInbox, cutoff, 1000).await.unwrap(), 1);
    let titles: Vec<String> = store.inbox_for_user(&ada, 10).await.unwrap().into_iter().map(|m| m.title).collect();
    assert_eq!(titles, vec!["kept".to_owned()]);

    // Bounce evidence goes; the suppression it caused stays.
    let hash = "b".repeat(64);
    let bounce = NewBounce {
        fingerprint: "f".repeat(64),
        provider: "mail".into(),
        kind: "hard".into(),
        address_hash: Some(hash.clone()),
        status: Some("5.1.1".into()),
        reply_code: Some(550),
        detail: "550 5.1.1 user unknown".into(),
        raw_excerpt: "Subject: Undelivered".into(),
        matched: None,
        send_status: None,
        provider_id: None,
        suppress: Some(SuppressionRow {
            address_hash: hash.clone(),
            address_kind: herald::address::AddressKind::Email,
            category: "*".into(),
            reason: SuppressionReason::HardBounce,
            detail: None,
            created_at: T0,
            expires_at: None,
        }),
    };
    assert!(store.record_bounce(&bounce, T0).await.unwrap());
    assert_eq!(store.prune(Prunable::Bounces, cutoff, 1000).await.unwrap(), 1);
    assert!(store.list_bounces(10).await.unwrap().is_empty());
    assert!(store.active_suppression(&hash, Some("x"), late).await.unwrap().is_some(), "the suppression stays");

    // Triggers: planned and done goes; unplanned, or with a message still
    // to deliver, stays.
    for id in ["done", "pending", "unplanned"] {
        store.insert_trigger(&trigger(id, None), T0).await.unwrap();
    }
    let mut pending_row = made_at("u", T0, late.plus(DAY));
    pending_row.trigger_id = Some("pending".into());
    let plan = |id: &str, rows: Vec<herald::store::NewOutboxRow>| herald::store::TriggerPlan {
        trigger_id: id.into(),
        rows,
        digests: vec![],
        detail: "planned".into(),
    };
    let planned = store.plan_triggers(&[plan("done", vec![]), plan("pending", vec![pending_row])], T0).await.unwrap();
    assert_eq!(planned, [true, true]);
    assert_eq!(store.prune(Prunable::Triggers, cutoff, 1000).await.unwrap(), 1);
    assert!(store.get_trigger("done").await.unwrap().is_none());
    assert!(store.get_trigger("pending").await.unwrap().is_some(), "its message is still scheduled");
    assert!(store.get_trigger("unplanned").await.unwrap().is_some(), "not planned yet");
}

/// The workflow tables: a closed digest's bucket goes (an open one, which a
/// trigger may still join, stays); a digest's items go once its message
/// has left the outbox (the send log shows what a message it shows held);
/// a frequency-cap slot goes only when no cap can count it any more.
async fn retention_prunes_closed_digests_their_items_with_their_message_and_slots_no_cap_can_count(db: &TestDb) {
    use herald::clock::Clock;
    use herald::config::RetentionSettings;
    use herald::domain::ChannelName;
    use herald::retention::Retention;
    use herald::store::{
        DigestStore, NewDigestItem, NewTrigger, Prunable, SlotAnswer, SlotRequest, ThrottleStore, TriggerPlan,
        TriggerStore,
    };
    const DAY: Duration = Duration::from_secs(86_400);
    const HOUR: i64 = 3_600_000;
    let store = &db.store;
    // A trigger planned into the digest of `bucket` (window `window_ms`).
    let plan = |id: &str, bucket: &str, window_ms: i64, at: Millis| {
        let (id, bucket) = (id.to_owned(), bucket.repeat(64));
        async move {
            let t = NewTrigger {
                id: id.clone(),
                trigger_type: "comment".into(),
                user_id: user("u"),
                payload: serde_json::json!({}),
                idempotency_key: None,
                request_hash: None,
                occurred_at: at,
                send_at: None,
                actor_id: None,
            };
            store.insert_trigger(&t, at).await.unwrap();
            let item = NewDigestItem {
                bucket,
                rule_id: "r".into(),
                trigger_id: id.clone(),
                user_id: user("u"),
                channel: ChannelName::parse("channel", "inbox").unwrap(),
                payload: serde_json::json!({}),
                occurred_at: at,
                close: herald::planning::digest::DigestClose::After(Duration::from_millis(window_ms as u64)),
                max_items: 100,
                delay_ms: 0,
                grace_ms: None,
                to_many: false,
            };
            let p = TriggerPlan { trigger_id: id.clone(), rows: vec![], digests: vec![item], detail: "digest".into() };
            assert_eq!(store.plan_triggers(&[p], at).await.unwrap(), [true]);
            store.outbox_for_trigger(&id).await.unwrap().pop()
        }
    };
    // Digest "a" closes after an hour and is delivered; digest "b" (a
    // 31-day window) is still open.
    let a = plan("ta", "a", HOUR, T0).await.expect("ta opens digest a");
    let b = plan("tb", "b", 31 * 24 * HOUR, T0).await.expect("tb opens digest b");
    let claimed = store.claim_channel("inbox", T0.plus(Duration::from_secs(3600)), 10, "t").await.unwrap();
    assert_eq!(claimed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [a.id.as_str()]);
    let sent =
        Finish { status: SendStatus::Sent, detail: None, transport: None, address_hash: None, provider_id: None };
    assert!(store.finish(&claimed[0], "t", &sent, T0.plus(Duration::from_secs(3600))).await.unwrap());

    let cutoff = T0.plus(2 * DAY);
    assert_eq!(store.prune(Prunable::Digests, cutoff, 1000).await.unwrap(), 1, "only the closed digest");
    assert_eq!(store.prune(Prunable::Digests, cutoff, 1000).await.unwrap(), 0);
    // The open digest is still joined; the closed one's bucket opens anew.
    let later = T0.plus(DAY);
    assert!(plan("tb2", "b", 31 * 24 * HOUR, later).await.is_none(), "tb2 joins digest b");
    let items = store.digest_items(&[b.id.as_str()]).await.unwrap();
    assert_eq!(items.iter().map(|i| i.trigger_id.as_str()).collect::<Vec<_>>(), ["tb", "tb2"]);
    let a2 = plan("ta2", "a", HOUR, later).await.expect("the pruned bucket opens a new digest");
    assert_ne!(a2.id, a.id);

    // Items stay while their message is in the outbox, and go with it.
    assert_eq!(store.prune(Prunable::DigestItems, cutoff, 1000).await.unwrap(), 0, "digest a is still shown");
    assert_eq!(store.prune(Prunable::Outbox, cutoff, 1000).await.unwrap(), 1);
    assert_eq!(store.prune(Prunable::DigestItems, cutoff, 1000).await.unwrap(), 1);
    assert!(store.digest_items(&[a.id.as_str()]).await.unwrap().is_empty());
    assert_eq!(store.digest_items(&[b.id.as_str()]).await.unwrap().len(), 2, "an open digest keeps its items");

    // Slots: both of a cap of 2 used at T0, another bucket's a day later.
    let req = |bucket: &str, outbox: &str| SlotRequest {
        bucket: bucket.repeat(64),
        limit: 2,
        per_ms: HOUR,
        outbox_id: outbox.into(),
    };
    let granted = store.take_throttle_slots(&[req("s", "o1"), req("s", "o2")], T0).await.unwrap();
    assert_eq!(granted, [SlotAnswer::Granted, SlotAnswer::Granted]);
    let one = SlotRequest { limit: 1, ..req("t", "o3") };
    assert_eq!(store.take_throttle_slots(&[one], T0.plus(DAY)).await.unwrap(), [SlotAnswer::Granted]);
    // The pass keeps every slot for the longest `per` a cap may have (366
    // days), whatever the other periods.
    let settings = RetentionSettings { outbox: Duration::ZERO, ..RetentionSettings::default() };
    let clock = std::sync::Arc::new(herald::clock::ManualClock::at(T0.plus(366 * DAY)));
    let metrics = herald::metrics::Metrics::new();
    let retention = Retention::new(store.clone(), clock.clone(), settings, metrics.clone());
    let none = tokio_util::sync::CancellationToken::new();
    let report = retention.pass(&none).await;
    assert_eq!(report.of(Prunable::ThrottleSlots), 0, "a slot 366 days old may still count: {report:?}");
    assert_eq!(report.of(Prunable::DigestItems) + report.of(Prunable::Digests), 0, "outbox = 0s keeps digests");
    clock.advance(Duration::from_secs(1));
    let report = retention.pass(&none).await;
    assert_eq!(report.of(Prunable::ThrottleSlots), 2, "{report:?}");
    assert!(metrics.encode().contains("herald_pruned_rows_total{table=\"throttle_slots\"} 2"), "{}", metrics.encode());
    // The pruned bucket's cap starts afresh; the other keeps its slot.
    let now = clock.now();
    let again = store.take_throttle_slots(&[req("s", "o4"), req("s", "o5"), req("s", "o6")], now).await.unwrap();
    assert_eq!(again[..2], [SlotAnswer::Granted, SlotAnswer::Granted]);
    assert!(matches!(again[2], SlotAnswer::Capped { .. }), "still a cap of 2: {again:?}");
}

/// The loop's pass: each table by its own period, "0s" keeps for ever, the
/// age measured on the service's clock, and the metric counts what went.
async fn a_retention_pass_prunes_each_table_by_its_own_period(db: &TestDb) {
    use herald::config::RetentionSettings;
    use herald::retention::Retention;
    use herald::store::{Prunable, new_id_at};
    let mut r = row("u1", "inbox", T0);
    r.id = new_id_at(T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = db.store.claim_channel("inbox", T0, 1, "t").await.unwrap().remove(0);
    let sent =
        Finish { status: SendStatus::Sent, detail: None, transport: None, address_hash: None, provider_id: None };
    assert!(db.store.finish(&claimed, "t", &sent, T0).await.unwrap());

    let settings = RetentionSettings {
        outbox: Duration::from_secs(3600),
        sends: Duration::ZERO,
        events: Duration::from_secs(7200),
        ..RetentionSettings::default()
    };
    let clock = std::sync::Arc::new(herald::clock::ManualClock::at(T0.plus(Duration::from_secs(3599))));
    let metrics = herald::metrics::Metrics::new();
    let retention = Retention::new(db.store.clone(), clock.clone(), settings, metrics.clone());
    let none = tokio_util::sync::CancellationToken::new();
    assert_eq!(retention.pass(&none).await.total(), 0, "nothing is an hour old yet");
    clock.advance(Duration::from_secs(2));
    let report = retention.pass(&none).await;
    assert_eq!((report.of(Prunable::Outbox), report.of(Prunable::Events)), (1, 0), "{report:?}");
    assert!(db.store.get_outbox(&r.id).await.unwrap().is_none());
    assert_eq!(db.store.sends_for_outbox(&r.id).await.unwrap().len(), 1, "sends = \"0s\" keeps the send log");
    assert!(metrics.encode().contains("herald_pruned_rows_total{table=\"outbox\"} 1"), "{}", metrics.encode());
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}

/// What a standby (or a read-only MariaDB) answers a write with: 25006 on
/// PostgreSQL, 1792 on MariaDB. Retried like a lost race, never a 500.
async fn a_read_only_transaction_is_recognised_as_a_lost_race(db: &TestDb) {
    use herald::store::StoreError;
    use sqlx::Executor;
    if db.backend() == common::Backend::Sqlite {
        return; // no read-only servers
    }
    let mut conn = db.store.pool().acquire().await.unwrap();
    let begin = match db.backend() {
        common::Backend::Postgres => "BEGIN READ ONLY",
        _ => "START TRANSACTION READ ONLY",
    };
    conn.execute(begin).await.unwrap();
    let err = conn.execute("DELETE FROM engagement_outbox").await.unwrap_err();
    let _ = conn.execute("ROLLBACK").await;
    let e = StoreError::Database { op: "probe", source: err };
    assert!(e.is_read_only(), "not recognised as read-only: {e}");
    assert!(e.is_lost_race(), "{e}");
    assert!(!e.is_unavailable(), "{e}");
}

/// An instance holds a lease; the rows it claimed are taken back only once
/// its lease has been lapsed for longer than deliver_timeout, and then its
/// late outcome is refused by the fence. Rows of a live instance, and rows
/// claimed without an instance (left to the stale window), stay.
async fn the_rows_of_an_instance_whose_lease_lapsed_are_taken_back_after_deliver_timeout(db: &TestDb) {
    use herald::store::{InstanceIdentity, InstanceStore};
    let lease = Duration::from_secs(30);
    let deliver_timeout = Duration::from_secs(60);
    let who = |id: &str| InstanceIdentity { id: id.into(), host: "test".into(), pid: 1, started_at: T0 };
    let a = db.store.for_instance("instance-a");
    let b = db.store.for_instance("instance-b");
    a.renew_lease(&who("instance-a"), T0, T0.plus(lease)).await.unwrap();
    b.renew_lease(&who("instance-b"), T0, T0.plus(lease)).await.unwrap();

    let (ra, rb, rn) = (row("u1", "email", T0), row("u2", "email", T0), row("u3", "email", T0));
    db.store.enqueue(std::slice::from_ref(&ra), T0).await.unwrap();
    let held_a = a.claim_channel("email", T0, 10, "token-a").await.unwrap();
    assert_eq!(held_a.len(), 1);
    db.store.enqueue(std::slice::from_ref(&rb), T0).await.unwrap();
    assert_eq!(b.claim_channel("email", T0, 10, "token-b").await.unwrap().len(), 1);
    db.store.enqueue(std::slice::from_ref(&rn), T0).await.unwrap();
    assert_eq!(db.store.claim_channel("email", T0, 10, "token-none").await.unwrap().len(), 1);

    // B keeps renewing; A stops at T0 (its lease lapses at T0 + 30 s).
    let b_ref = &b;
    let rescue_at = |t: Millis| async move {
        b_ref.renew_lease(&who("instance-b"), t, t.plus(lease)).await.unwrap();
        db.store.rescue_lapsed(t.minus(deliver_timeout), t).await.unwrap()
    };
    assert_eq!(
        rescue_at(T0.plus(Duration::from_secs(60))).await,
        0,
        "A's lease is lapsed, but its deliveries may still run"
    );
    assert_eq!(rescue_at(T0.plus(Duration::from_secs(89))).await, 0, "lease + deliver_timeout is 90 s");
    let t = T0.plus(Duration::from_secs(91));
    assert_eq!(rescue_at(t).await, 1, "only A's row is taken back");
    let back = db.store.get_outbox(&ra.id).await.unwrap().unwrap();
    assert_eq!(back.status, OutboxStatus::Scheduled);
    assert!(back.last_error.unwrap().contains("lease"), "the rescue says why");
    assert_eq!(db.store.get_outbox(&rb.id).await.unwrap().unwrap().status, OutboxStatus::Sending);
    assert_eq!(db.store.get_outbox(&rn.id).await.unwrap().unwrap().status, OutboxStatus::Sending);

    // A's late outcome is refused; the rescuer's attempt is the one recorded.
    let sent = Finish::sent("smtp");
    assert!(!a.finish(&held_a[0], "token-a", &sent, t).await.unwrap(), "a late outcome loses to the rescue");
    let again = b.claim_channel("email", t, 10, "token-b2").await.unwrap();
    assert_eq!(again.len(), 1);
    assert!(b.finish(&again[0], "token-b2", &sent, t).await.unwrap());
    assert_eq!(db.store.sends_for_outbox(&ra.id).await.unwrap().len(), 1);

    // An instance that gave its lease up has its rows taken back once
    // deliver_timeout has passed since they were claimed.
    b.end_lease("instance-b").await.unwrap();
    assert_eq!(db.store.rescue_lapsed(t.minus(deliver_timeout), t).await.unwrap(), 1, "B's older row");
    let listed = db.store.instances().await.unwrap();
    assert_eq!(listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["instance-a"]);
    // A lapsed instance is forgotten after a day.
    let day = t.plus(herald::store::LAPSED_INSTANCE_RETENTION).plus(Duration::from_secs(60));
    db.store.rescue_lapsed(day.minus(deliver_timeout), day).await.unwrap();
    assert!(db.store.instances().await.unwrap().is_empty());
}

/// On MariaDB/MySQL (Galera) two instances with leases claim from disjoint
/// slices of the due rows (`CRC32(id) MOD 2` = their rank by id), so
/// instances on different nodes seldom collide; an instance whose slice is
/// empty takes from the whole set. Elsewhere claims are as before: the
/// oldest due rows, whoever claims.
async fn instances_claim_from_their_own_slice_first_on_mysql(db: &TestDb) {
    use herald::store::{InstanceIdentity, InstanceStore};
    use sqlx::Row;
    let (a_id, b_id) = ("instance-a", "instance-b");
    for id in [a_id, b_id] {
        let who = InstanceIdentity { id: id.into(), host: "h".into(), pid: 1, started_at: T0 };
        db.store.renew_lease(&who, T0, T0.plus(Duration::from_secs(60))).await.unwrap();
    }
    let (a, b) = (db.store.for_instance(a_id), db.store.for_instance(b_id));
    let rows: Vec<_> = (0..40).map(|i| row("u", "email", T0.plus(Duration::from_millis(i)))).collect();
    db.store.enqueue(&rows, T0).await.unwrap();
    let now = T0.plus(Duration::from_secs(1));
    let won_a = a.claim_channel("email", now, 5, "token-a").await.unwrap();
    let won_b = b.claim_channel("email", now, 5, "token-b").await.unwrap();
    assert_eq!((won_a.len(), won_b.len()), (5, 5));
    let ids = |won: &[herald::store::OutboxRow]| won.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    if db.backend() != common::Backend::MySql {
        // Unchanged: the oldest due first, in turn.
        assert_eq!(ids(&won_a), rows[..5].iter().map(|r| r.id.clone()).collect::<Vec<_>>());
        assert_eq!(ids(&won_b), rows[5..10].iter().map(|r| r.id.clone()).collect::<Vec<_>>());
        return;
    }
    let slice_of = |id: String| {
        let pool = db.store.pool().clone();
        async move {
            let row = sqlx::query("SELECT CAST(MOD(CRC32(?), 2) AS SIGNED)").bind(id).fetch_one(&pool).await.unwrap();
            row.get::<i64, _>(0)
        }
    };
    // Ranks by id: instance-a is 0, instance-b is 1.
    for id in ids(&won_a) {
        assert_eq!(slice_of(id).await, 0, "instance a claims from its slice");
    }
    for id in ids(&won_b) {
        assert_eq!(slice_of(id).await, 1, "instance b claims from its slice");
    }
    // The inbox's peek (claim and outcome in one transaction) likewise.
    let inbox: Vec<_> = (0..10).map(|i| row("u", "inbox", T0.plus(Duration::from_millis(i)))).collect();
    db.store.enqueue(&inbox, T0).await.unwrap();
    for r in a.peek_channel("inbox", now, 10, &[], None).await.unwrap() {
        assert_eq!(slice_of(r.id).await, 0, "instance a reads its slice of the inbox first");
    }
    // Instance a drains its slice; then it takes what is left elsewhere.
    let mut total = won_a.len() + won_b.len();
    loop {
        let more = a.claim_channel("email", now, 5, &format!("token-a{total}")).await.unwrap();
        if more.is_empty() {
            break;
        }
        total += more.len();
    }
    assert_eq!(total, 40, "an empty slice falls back to the whole set");
}

/// Migration 0022 makes a digest item's key (trigger, rule, user), a table
/// rebuild on SQLite: a database at 0021 holding digest items keeps every
/// one, and takes a second user's item for the same trigger and rule after,
/// which its old key refused.
async fn an_upgrade_from_0021_keeps_digest_items_and_keys_them_per_user(db: &TestDb) {
    let old = TestDb::unmigrated(db.backend()).await;
    old.store.migrate_through(21).await.unwrap();
    let insert = old.store.dialect().sql(
        "INSERT INTO engagement_digest_items (trigger_id, rule_id, outbox_id, user_id, payload, occurred_at, created_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    );
    let item = |user: &'static str| {
        sqlx::query(&insert).bind("t1").bind("r1").bind(format!("o-{user}")).bind(user).bind("{}").bind(T0.0).bind(T0.0)
    };
    item("u1").execute(old.store.pool()).await.unwrap();
    assert!(item("u2").execute(old.store.pool()).await.is_err(), "0021's key refuses a second user");
    old.store.migrate().await.unwrap();
    let count = "SELECT COUNT(*) FROM engagement_digest_items WHERE trigger_id = 't1'";
    let n: i64 = sqlx::query_scalar(count).fetch_one(old.store.pool()).await.unwrap();
    assert_eq!(n, 1, "the item is kept");
    item("u2").execute(old.store.pool()).await.unwrap();
    assert!(item("u2").execute(old.store.pool()).await.is_err(), "still one item per trigger, rule and user");
    let n: i64 = sqlx::query_scalar(count).fetch_one(old.store.pool()).await.unwrap();
    assert_eq!(n, 2);
    old.cleanup().await;
}
