use super::*;
use crate::store::ConnectOptions;
use crate::store::admin::{OutboxFilter, list_outbox_sql};
use crate::store::queries::Query;

/// SQLite's plan for `sql`: the detail of each step.
async fn plan(store: &SqlStore, sql: &str) -> String {
    let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}")).fetch_all(store.pool()).await.unwrap();
    rows.iter().map(|r| r.try_get::<String, _>(3).unwrap()).collect::<Vec<_>>().join("; ")
}

/// The writer's batched statements keep their statement journals in
/// memory: with SQLite's default, each one past 64 KiB created, wrote
/// and deleted a temporary file (see `sqlite_pool`). The readers too,
/// for their sorts' temporary tables.
#[tokio::test]
async fn sqlite_keeps_statement_journals_in_memory() {
    for (which, mode) in pragma_on_both_pools("temp_store").await {
        assert_eq!(mode, 2, "the {which}'s temp_store is MEMORY (2)");
    }
}

/// The bundled SQLite is compiled as `.cargo/config.toml` asks
/// (`LIBSQLITE3_FLAGS`): without the allocator's statistics and the shared
/// page cache, each of which takes a process-wide mutex (15% of the writer
/// thread's time under a fan-out). A build that lost the setting (the file
/// left out, a `LIBSQLITE3_FLAGS` of one's own) still works, slower: this
/// test is what notices.
#[tokio::test]
async fn bundled_sqlite_is_compiled_without_its_process_wide_mutexes() {
    let (_dir, store) = sqlite_store().await;
    let rows = sqlx::query("PRAGMA compile_options").fetch_all(store.pool()).await.unwrap();
    let options: Vec<String> = rows.iter().map(|r| r.try_get::<String, _>(0).unwrap()).collect();
    assert!(options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"), "allocator statistics are on: {options:?}");
    assert!(
        !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
        "the page cache is shared under a lock: {options:?}"
    );
}

/// A fresh SQLite store in a temporary directory (kept alive by the guard).
async fn sqlite_store() -> (tempfile::TempDir, SqlStore) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("h.db").display());
    let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
    (dir, store)
}

/// `PRAGMA name` as the writer and a reader of a fresh SQLite store see it.
async fn pragma_on_both_pools(name: &str) -> [(&'static str, i64); 2] {
    let (_dir, store) = sqlite_store().await;
    let sql = format!("PRAGMA {name}");
    let writer = sqlx::query_scalar(&sql).fetch_one(&store.writer).await.unwrap();
    let reader = sqlx::query_scalar(&sql).fetch_one(&store.pool).await.unwrap();
    [("writer", writer), ("reader", reader)]
}

/// No connection maps the database file into memory: with it, RSS grew
/// with the file (see `sqlite_pool`) and the pipeline bench's RSS was
/// not flat.
#[tokio::test]
async fn sqlite_reads_without_mapping_the_file() {
    for (which, mapped) in pragma_on_both_pools("mmap_size").await {
        assert_eq!(mapped, 0, "the {which} maps no part of the file");
    }
}

/// The status index holds every status but `sent` (migration 16), and
/// SQLite uses a partial index only when the query names its term:
/// without it each of these would read the whole outbox, millions of
/// finished rows, to find the few in flight or failed.
#[tokio::test]
async fn sqlite_finds_rows_in_flight_and_failures_on_the_status_index() {
    let (_dir, store) = sqlite_store().await;
    store.migrate().await.unwrap();
    let failed = OutboxFilter { status: Some(OutboxStatus::Failed), limit: 50, ..Default::default() };
    let prune_sent = Query::PruneOutboxSent.sql(Dialect::Sqlite).to_owned();
    let prune_others = Query::PruneOutboxOthers.sql(Dialect::Sqlite).to_owned();
    for (what, sql) in [
        ("stale reclaim", Query::ReclaimStale.sql(Dialect::Sqlite).to_owned()),
        ("lapsed instances", Query::RescueLapsed.sql(Dialect::Sqlite).to_owned()),
        ("failed rows, newest first", list_outbox_sql(&failed).0),
        ("prune of failed rows", prune_others),
    ] {
        let plan = plan(&store, &sql).await;
        assert!(plan.contains("engagement_outbox_status"), "{what}: {plan}");
    }
    // `sent` rows are nearly every row: the primary key serves them.
    let sent = OutboxFilter { status: Some(OutboxStatus::Sent), limit: 50, ..Default::default() };
    let plan_sent = plan(&store, &list_outbox_sql(&sent).0).await;
    assert!(!plan_sent.contains("engagement_outbox_status"), "{plan_sent}");
    // Nor does the prune read the whole table to find its inbox
    // messages' pending follow-ups: a lookup of each one's dedupe key.
    let plan_prune_sent = plan(&store, &prune_sent).await;
    assert!(!plan_prune_sent.contains("SCAN"), "{plan_prune_sent}");
    assert!(plan_prune_sent.contains("SEARCH f USING INDEX sqlite_autoindex_engagement_outbox_2"), "{plan_prune_sent}");
    // Lookups by rule and trigger use their partial indexes.
    let by_rule = OutboxFilter { rule_id: Some("r".into()), limit: 50, ..Default::default() };
    assert!(plan(&store, &list_outbox_sql(&by_rule).0).await.contains("engagement_outbox_rule"));
    let by_trigger = Query::OutboxForTrigger.sql(Dialect::Sqlite);
    assert!(plan(&store, by_trigger).await.contains("engagement_outbox_trigger"));
}

/// The notifications name the channels instances listen on (see `listen`).
#[test]
fn postgres_notifies_the_channels_instances_listen_on() {
    let sql = |q: Query| q.sql(Dialect::Postgres);
    assert!(sql(Query::NotifyEnqueued).contains(&format!("'{NOTIFY_CHANNEL}'")));
    assert!(sql(Query::NotifyEvents).contains(&format!("'{EVENTS_CHANNEL}'")));
    assert!(sql(Query::NotifyInbox).contains(&format!("'{INBOX_CHANNEL}'")));
    let both = sql(Query::AppendEventsAndInbox);
    assert!(both.contains(&format!("'{EVENTS_CHANNEL}'")) && both.contains(&format!("'{INBOX_CHANNEL}'")));
}

/// The flush's update finds its rows by primary key, driven by its list,
/// not through the status index: `+o.status` (see queries/sqlite/flush.sql).
#[tokio::test]
async fn sqlite_records_outcomes_by_primary_key() {
    let (_dir, store) = sqlite_store().await;
    store.migrate().await.unwrap();
    for q in [Query::RecordClaimedValues, Query::RecordUnclaimedValues] {
        let plan = plan(&store, q.sql(Dialect::Sqlite)).await;
        assert!(plan.contains("SEARCH o USING INDEX sqlite_autoindex_engagement_outbox_1 (id=?)"), "{plan}");
    }
}
