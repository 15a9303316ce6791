//! "Did this address get it", asked of a running service: every email outcome
//! the worker of `herald serve` decides before the
//! email channel runs (an opt-out, a frequency cap, a template that fails,
//! a grace window that ended during quiet hours) is found by `herald sends
//! --address`, on all three databases. Before the fix the service's worker
//! had no address keys, so each of these answered "nothing in the send log
//! for that address".

mod common;

use std::time::{Duration, Instant};

use common::Backend;
use common::app::App;
use serde_json::{Value, json};

const SECRET: &str = "a test secret of sufficient length";

fn email_rule(name: &str, trigger_type: &str, subject: &str) -> Value {
    json!({
        "name": name,
        "trigger_type": trigger_type,
        "channel": "email",
        "category": "news",
        "delay": 0,
        "grace": 60,
        "throttle": {"limit": 1, "per": 86400},
        "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": subject, "text": "Hello"}}}
    })
}

/// `herald sends --address ADDRESS --json` against the service's database.
fn sends_by_address(db_url: &str, address: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["sends", "--address", address, "--json"])
        .env("HERALD_DATABASE_URL", db_url)
        .env("HERALD_EMAIL__ADDRESS_SECRET", SECRET)
        .env("HERALD_LOG", "warn")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run herald sends");
    assert!(out.status.success(), "herald sends --address {address}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("herald sends --json prints JSON")
}

fn statuses(log: &Value) -> Vec<String> {
    let mut s: Vec<String> =
        log["sends"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap().to_owned()).collect();
    s.sort();
    s
}

async fn email_outcomes_decided_before_the_channel_are_found_by_address(backend: Backend) {
    let mail = tempfile::tempdir().unwrap();
    let transport = format!("file://{}", mail.path().display());
    let app = App::start_on(backend, |c| {
        assert_eq!(c.email.address_secret.as_deref(), Some(SECRET));
        c.worker.enabled = true;
        c.email.transport = Some(transport);
        c.email.from = Some("Herald <news@herald.test>".into());
    })
    .await;
    for (status, _) in [
        app.post("/v1/rules", email_rule("news", "news", "News")).await,
        app.post("/v1/rules", email_rule("broken", "broken", "News {{ payload.missing }}")).await,
    ] {
        assert_eq!(status, 201);
    }
    // Quiet hours that hold nothing now, so the late trigger's row is
    // decided by the quiet-hours gate: expired, not held.
    let hour = (chrono::Utc::now().timestamp() / 3600 + 3) % 24;
    let quiet = json!({"from": format!("{hour:02}:00"), "until": format!("{:02}:00", (hour + 1) % 24)});
    for (user, body) in [
        ("optout", json!({"email": "optout@example.org", "preferences": {"categories": {"news": false}}})),
        ("capped", json!({"email": "capped@example.org"})),
        ("broken", json!({"email": "broken@example.org"})),
        ("late", json!({"email": "late@example.org", "quiet_hours": quiet, "timezone": "UTC"})),
    ] {
        let (status, _) = app.call(reqwest::Method::PUT, &format!("/v1/users/{user}"), Some(body)).await;
        assert_eq!(status, 201, "{user}");
    }
    let an_hour_ago = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    for trigger in [
        json!({"type": "news", "user_id": "optout"}),
        json!({"type": "news", "user_id": "capped", "idempotency_key": "capped-1"}),
        json!({"type": "news", "user_id": "capped", "idempotency_key": "capped-2"}),
        json!({"type": "broken", "user_id": "broken"}),
        json!({"type": "news", "user_id": "late", "occurred_at": an_hour_ago}),
    ] {
        let (status, body) = app.post("/v1/triggers", trigger).await;
        assert_eq!(status, 202, "{body}");
    }

    // The service's own worker decides them; the bound only keeps a broken
    // build from hanging the test.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, outbox) = app.get("/v1/outbox?limit=100").await;
        let rows = outbox["items"].as_array().cloned().unwrap_or_default();
        let open = rows.iter().filter(|r| matches!(r["status"].as_str(), Some("scheduled" | "sending"))).count();
        if rows.len() == 5 && open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the worker did not finish the five rows: {outbox}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let expect = [
        ("optout@example.org", vec!["suppressed"], "opted out of category \"news\""),
        ("capped@example.org", vec!["sent", "suppressed"], "frequency cap"),
        ("broken@example.org", vec!["failed"], "template failed to render"),
        ("late@example.org", vec!["expired"], "grace window"),
    ];
    for (address, want, detail) in expect {
        let log = sends_by_address(&app.db.url, address);
        assert_eq!(statuses(&log), want, "{address}: {log}");
        assert!(
            log["sends"].as_array().unwrap().iter().any(|s| s["detail"].as_str().is_some_and(|d| d.contains(detail))),
            "{address}: no send-log row says {detail:?}: {log}"
        );
    }
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    use common::harness::test;
    common::harness::main(vec![
        test("sqlite::email_outcomes_decided_before_the_channel_are_found_by_address", || {
            email_outcomes_decided_before_the_channel_are_found_by_address(Backend::Sqlite)
        }),
        test("postgres::email_outcomes_decided_before_the_channel_are_found_by_address", || {
            email_outcomes_decided_before_the_channel_are_found_by_address(Backend::Postgres)
        }),
        test("mysql::email_outcomes_decided_before_the_channel_are_found_by_address", || {
            email_outcomes_decided_before_the_channel_are_found_by_address(Backend::MySql)
        }),
    ])
}
