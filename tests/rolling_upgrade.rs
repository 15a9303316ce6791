//! What an upgrade with several instances may do, on
//! SQLite, PostgreSQL and MariaDB: an instance of this version keeps
//! serving and delivering beside a database a newer Herald migrated with an
//! additive migration (a new nullable column, a new table), and refuses to
//! start on it once restarted, naming the migration, instead of running
//! half-compatible. docs/operations/upgrading.md says what follows.

mod common;

use std::process::Command;

use common::app::App;
use herald::store::Store;
use serde_json::json;

/// A later release's migration as this one would meet it: recorded in the
/// bookkeeping table, adding a nullable column and a table.
async fn migrate_as_a_newer_herald(app: &App) {
    let pool = app.db.store.pool();
    let d = app.db.store.dialect();
    sqlx::query("ALTER TABLE engagement_outbox ADD COLUMN digest_schedule TEXT").execute(pool).await.unwrap();
    sqlx::query("CREATE TABLE engagement_future (id VARCHAR(36) NOT NULL PRIMARY KEY)").execute(pool).await.unwrap();
    sqlx::query(&d.sql("INSERT INTO engagement_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"))
        .bind(9_999_i64)
        .bind("from_a_newer_herald")
        .bind(0_i64)
        .execute(pool)
        .await
        .unwrap();
}

async fn trigger_and_deliver(app: &App, kind: &str, user: &str) {
    let (status, body) = app.post("/v1/triggers", json!({"type": kind, "user_id": user})).await;
    assert_eq!(status, 202, "{body}");
    let report = app.deliver().await;
    assert_eq!(report.sent, 1, "{report:?}");
    let (_, sends) = app.get(&format!("/v1/users/{user}/sends")).await;
    assert!(sends.to_string().contains("\"status\":\"sent\""), "{sends}");
}

async fn an_old_instance_runs_beside_an_additive_migration_and_refuses_to_restart(backend: common::Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let rule = json!({"name": "r", "trigger_type": "t.hello", "channel": "inbox", "category": "t", "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Hi", "text": "hello"}}}});
    let (status, body) = app.post("/v1/rules", rule).await;
    assert_eq!(status, 201, "{body}");
    trigger_and_deliver(&app, "t.hello", "before").await;

    migrate_as_a_newer_herald(&app).await;
    // The running instance goes on: its statements name their columns.
    trigger_and_deliver(&app, "t.hello", "after").await;
    let (status, _) = app.get("/readyz").await;
    assert_eq!(status, 200);

    // Restarted, it migrates first (serve's default, the unit's
    // ExecStartPre, the Kubernetes init container) and stops there.
    let err = app.db.store.migrate().await.unwrap_err().to_string();
    assert!(err.contains("migration 9999") && err.contains("newer Herald"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["--database-url", &app.db.url, "migrate", "--wait", "1s"])
        .env("HERALD_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("migration 9999"), "{text}");
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(per_backend_tests![an_old_instance_runs_beside_an_additive_migration_and_refuses_to_restart])
}
