//! `herald copy --to URL`: a stopped database copied
//! into an empty one, run as a user runs it (the binary), on every pair of
//! backends: every table row for row, pending rows delivered once from the
//! target and never again, positions going on from the source's, a
//! non-empty target, a running source and a column the target lacks
//! refused.

mod common;

use std::process::{Command, Output};

use common::{Backend, TestDb, harness};
use herald::clock::{Clock, SystemClock};
use herald::store::copy::catalogue::{self, Kind};
use herald::store::{SqlStore, Store, SuppressionReason, SuppressionRow, SuppressionStore};
use sqlx::Row;

fn herald(url: &str, args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_herald"))
        .current_dir(dir.path())
        .env_remove("HERALD_CONFIG")
        .env("HERALD_EMAIL__ADDRESS_SECRET", "a test secret of sufficient length")
        .env("HERALD_LOG", "warn")
        .args(["--database-url", url])
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

/// Every row of every Herald table (bookkeeping aside), as sorted text, so
/// two databases can be compared table for table, column for column.
async fn dump(store: &SqlStore) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for t in catalogue::tables(store.pool(), store.dialect()).await.unwrap() {
        if t.name == "engagement_schema_migrations" {
            continue;
        }
        let mut cols: Vec<_> = t.columns.clone();
        cols.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<&str> = cols.iter().map(|c| c.name.as_str()).collect();
        let rows =
            sqlx::query(&format!("SELECT {} FROM {}", names.join(", "), t.name)).fetch_all(store.pool()).await.unwrap();
        let mut lines: Vec<String> = rows
            .iter()
            .map(|r| {
                cols.iter()
                    .enumerate()
                    .map(|(i, c)| match c.kind {
                        Kind::Int => format!("{}={:?}", c.name, r.try_get::<Option<i64>, _>(i).unwrap()),
                        Kind::Text => format!("{}={:?}", c.name, text(r, i)),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        lines.sort();
        out.push((t.name, lines));
    }
    out
}

/// A text column; MySQL's binary-collated text arrives as bytes.
fn text(r: &sqlx::any::AnyRow, i: usize) -> Option<String> {
    r.try_get::<Option<String>, _>(i)
        .or_else(|_| r.try_get::<Option<Vec<u8>>, _>(i).map(|b| b.map(|b| String::from_utf8(b).unwrap())))
        .unwrap()
}

async fn scalar(store: &SqlStore, sql: &str) -> i64 {
    sqlx::query(sql).fetch_one(store.pool()).await.unwrap().try_get::<i64, _>(0).unwrap()
}

/// A source with something in most tables: the demo (rules, a recipient,
/// triggers, delivered inbox messages, events, the send log), an API key,
/// an operator, a suppression, and 25 inbox messages due now that it never
/// delivered.
async fn fill(src: &TestDb) {
    ok(herald(&src.url, &["demo"]));
    ok(herald(&src.url, &["keys", "create", "--name", "billing"]));
    let mut add = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["--database-url", &src.url, "operators", "add", "--email", "ops@example.com", "--password-stdin"])
        .env("HERALD_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    add.stdin.take().unwrap().write_all(b"a long operator password\n").unwrap();
    assert!(add.wait().unwrap().success());
    let suppression = SuppressionRow {
        address_hash: "0".repeat(64),
        address_kind: herald::address::AddressKind::Email,
        category: "*".into(),
        reason: SuppressionReason::Manual,
        detail: Some("copied".into()),
        created_at: SystemClock.now(),
        expires_at: None,
    };
    src.store.suppress(&suppression).await.unwrap();
    ok(herald(&src.url, &["enqueue", "--channel", "inbox", "--user-id", "pending-user", "--count", "25"]));
}

async fn every_row_moves_and_pending_rows_are_delivered_once(from: Backend, to: Backend) {
    let src = TestDb::new(from).await;
    let dst = TestDb::new(to).await;
    fill(&src).await;
    // The source is stopped: its pools closed like a stopped server's.
    src.store.close().await;
    let src_store = src.another_instance().await;
    let before = dump(&src_store).await;
    let last_position = scalar(&src_store, "SELECT MAX(position) FROM engagement_events").await;
    let counter = scalar(&src_store, "SELECT last FROM engagement_sequences WHERE name = 'stream'").await;
    let pending = scalar(&src_store, "SELECT COUNT(*) FROM engagement_outbox WHERE status = 'scheduled'").await;
    let sent_before = scalar(&src_store, "SELECT COUNT(*) FROM engagement_sends").await;
    assert_eq!(pending, 25);
    let nonempty = before.iter().filter(|(_, rows)| !rows.is_empty()).count();
    assert!(nonempty >= 11, "the source should fill most tables: {before:?}");

    let out = ok(herald(&src.url, &["copy", "--to", &dst.url]));
    assert!(out.contains("counts verified, committed"), "{out}");
    assert!(out.contains("engagement_outbox: 2"), "{out}");

    // Every table, every column, every row.
    let after = dump(&dst.store).await;
    assert_eq!(before.len(), after.len());
    for ((t1, r1), (t2, r2)) in before.iter().zip(&after) {
        assert_eq!(t1, t2);
        assert_eq!(r1, r2, "{t1} differs after the copy");
    }

    // The target delivers the pending rows, once; nothing the source had
    // delivered goes out again.
    let worker = common::system_worker(dst.arc());
    let mut sent = 0;
    for _ in 0..10 {
        let r = worker.tick().await.unwrap();
        sent += r.sent;
        if r.claimed == 0 {
            break;
        }
    }
    assert_eq!(sent as i64, pending, "the pending rows are delivered from the target");
    let d = &dst.store;
    assert_eq!(scalar(d, "SELECT COUNT(*) FROM engagement_outbox WHERE status = 'scheduled'").await, 0);
    assert_eq!(scalar(d, "SELECT COUNT(*) FROM engagement_sends").await, sent_before + pending);
    let twice =
        "SELECT COUNT(*) FROM (SELECT outbox_id FROM engagement_inbox GROUP BY outbox_id HAVING COUNT(*) > 1) t";
    assert_eq!(scalar(d, twice).await, 0, "an outbox row reached the inbox twice");
    let twice = "SELECT COUNT(*) FROM (SELECT outbox_id, status FROM engagement_sends GROUP BY outbox_id, status HAVING COUNT(*) > 1) t";
    assert_eq!(scalar(d, twice).await, 0, "an outbox row was recorded sent twice");
    assert_eq!(scalar(d, "SELECT COUNT(*) FROM engagement_inbox WHERE user_id = 'pending-user'").await, pending);

    // Positions go on from the source's counter.
    let first_new = scalar(d, "SELECT MIN(position) FROM engagement_inbox WHERE user_id = 'pending-user'").await;
    assert!(first_new > counter && counter >= last_position, "new positions {first_new} after {counter}");

    // A second copy into the same target is refused, and changes nothing.
    let again = herald(&src.url, &["copy", "--to", &dst.url]);
    let text = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success() && text.contains("the target is not empty"), "{text}");
    assert!(text.contains("engagement_"), "the refusal names a table: {text}");
    src_store.close().await;
    src.cleanup().await;
    dst.cleanup().await;
}

/// A migration that seeds another table must be added to
/// `store::copy::SEEDED`, or the emptiness check would refuse every target.
async fn only_the_seeded_tables_hold_rows_after_migrating(db: &TestDb) {
    for (table, rows) in dump(&db.store).await {
        let seeded = herald::store::copy::SEEDED.iter().any(|(t, _)| *t == table);
        assert!(seeded || rows.is_empty(), "{table} holds rows after migrating: {rows:?}");
    }
}

/// A column the source has and the target lacks (a newer Herald's
/// migration on one side) stops the copy before a row moves.
async fn a_column_only_the_source_has_is_refused(from: Backend, to: Backend) {
    let src = TestDb::new(from).await;
    let dst = TestDb::new(to).await;
    sqlx::query("ALTER TABLE engagement_outbox ADD COLUMN digest_schedule TEXT")
        .execute(src.store.pool())
        .await
        .unwrap();
    let out = herald(&src.url, &["copy", "--to", &dst.url]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("engagement_outbox") && text.contains("digest_schedule"), "{text}");
    assert_eq!(scalar(&dst.store, "SELECT COUNT(*) FROM engagement_outbox").await, 0);
    src.cleanup().await;
    dst.cleanup().await;
}

/// A source with a live instance lease (a `herald serve` still running)
/// is refused: what it delivered after the copy would go out again.
async fn a_running_source_is_refused(from: Backend, to: Backend) {
    let src = TestDb::new(from).await;
    let dst = TestDb::new(to).await;
    let now = SystemClock.now().0;
    let q = src.store.dialect().sql(
        "INSERT INTO engagement_instances (id, host, pid, started_at, renewed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    sqlx::query(&q)
        .bind("instance-1")
        .bind("host")
        .bind(1_i64)
        .bind(now)
        .bind(now)
        .bind(now + 600_000)
        .execute(src.store.pool())
        .await
        .unwrap();
    let out = herald(&src.url, &["copy", "--to", &dst.url]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("still running on the source"), "{text}");
    assert!(text.contains("instance-1"), "{text}");
    src.cleanup().await;
    dst.cleanup().await;
}

fn name(b: Backend) -> &'static str {
    match b {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
        Backend::MySql => "mysql",
    }
}

fn main() -> std::process::ExitCode {
    let all = [Backend::Sqlite, Backend::Postgres, Backend::MySql];
    let mut trials = Vec::new();
    for from in all {
        for to in all.into_iter().filter(|t| *t != from) {
            let pair = format!("{}_to_{}", name(from), name(to));
            trials.push(harness::test(
                format!("{pair}::every_row_moves_and_pending_rows_are_delivered_once"),
                move || every_row_moves_and_pending_rows_are_delivered_once(from, to),
            ));
        }
    }
    for (from, to) in [(Backend::Sqlite, Backend::Postgres), (Backend::Sqlite, Backend::MySql)] {
        let pair = format!("{}_to_{}", name(from), name(to));
        trials.push(harness::test(format!("{pair}::a_column_only_the_source_has_is_refused"), move || {
            a_column_only_the_source_has_is_refused(from, to)
        }));
        trials.push(harness::test(format!("{pair}::a_running_source_is_refused"), move || {
            a_running_source_is_refused(from, to)
        }));
    }
    for backend in all {
        trials.push(harness::test(
            format!("{}::only_the_seeded_tables_hold_rows_after_migrating", name(backend)),
            move || async move {
                let db = TestDb::new(backend).await;
                only_the_seeded_tables_hold_rows_after_migrating(&db).await;
                db.cleanup().await;
            },
        ));
    }
    harness::main(trials)
}
