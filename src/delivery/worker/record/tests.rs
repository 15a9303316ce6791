use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::clock::Millis;
use crate::store::{ConnectOptions, Finish, Record, RecordAction, SqlStore};

/// Log lines written while `f` runs on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn record(i: usize) -> Record {
    Record {
        row: crate::store::claimed_row(&format!("row-{i}"), &format!("t{i}"), 1),
        token: Some(format!("t{i}")),
        action: RecordAction::Finish(Finish {
            status: crate::domain::SendStatus::Sent,
            detail: None,
            transport: None,
            address_hash: None,
            provider_id: None,
        }),
        inbox: None,
    }
}

#[tokio::test]
async fn a_flush_the_database_cannot_take_is_one_warning_with_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("h.db").display());
    let store = SqlStore::connect(&url, &ConnectOptions::default()).await.unwrap();
    // A closed pool is a database that is away (PoolClosed).
    store.close().await;
    let items: Vec<Record> = (0..50).map(record).collect();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let away = super::AwayLog::default();
    let results = {
        let _guard = tracing::subscriber::set_default(subscriber);
        let first = super::record_group(&store, &items, Millis(2_000), &away).await;
        // The same rows retried, and a second group, within the window.
        super::record_group(&store, &items, Millis(2_250), &away).await;
        super::record_group(&store, &items[..7], Millis(2_500), &away).await;
        first
    };
    assert_eq!(results.len(), 50);
    assert!(results.iter().all(|r| r.as_ref().is_err_and(|e| e.is_unavailable())));
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "one line for the outage so far, not one per row or flush: {log}");
    assert!(warnings[0].contains("rows=50") && warnings[0].contains("keeping them"), "{}", warnings[0]);
    assert_eq!(log.lines().filter(|l| l.contains("DEBUG") && l.contains("keeping them")).count(), 2, "{log}");
    // Once the window has passed, the next failure reports what failed
    // meanwhile (the two flushes above and itself).
    *away.state.lock().unwrap() = (Some(tokio::time::Instant::now() - super::AWAY_LOG_EVERY), 2, 57);
    assert_eq!(away.failed(3), Some((3, 60)));
}
