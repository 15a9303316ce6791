//! PostgreSQL LISTEN/NOTIFY between instances: an enqueue anywhere wakes
//! every worker at once, and an inbox change anywhere reaches every live
//! stream. Polling stays the backstop, so a lost notification
//! or a dropped listener connection only delays, never loses.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::sql::{EVENTS_CHANNEL, INBOX_CHANNEL, NOTIFY_CHANNEL};

/// Forwards notifications on [`NOTIFY_CHANNEL`] to `wake` until `shutdown`.
/// Reconnects with a capped backoff when the server goes away.
pub async fn forward_notifications(store: super::SqlStore, shutdown: CancellationToken) {
    let url = store.url().to_owned();
    let wake: Arc<Notify> = super::Store::enqueued_signal(&store);
    let inbox = store.inbox_changed_sender().clone();
    let events = store.events_sender().clone();
    // A lost LISTEN connection costs latency, not deliveries (the worker
    // polls meanwhile), so it is asked for less often than a claim.
    let mut away = super::race::AwayPauses::between(Duration::from_millis(500), Duration::from_secs(30));
    while !shutdown.is_cancelled() {
        let mut listener = match PgListener::connect(&url).await {
            Ok(l) => l,
            Err(e) => {
                let pause = away.next_pause();
                tracing::warn!(error = %e, retry_in = ?pause, "LISTEN connection failed; polling meanwhile");
                tokio::select! { _ = tokio::time::sleep(pause) => {}, _ = shutdown.cancelled() => return }
                continue;
            }
        };
        if let Err(e) = listener.listen_all([NOTIFY_CHANNEL, INBOX_CHANNEL, EVENTS_CHANNEL]).await {
            tracing::warn!(error = %e, "LISTEN failed; polling meanwhile");
            tokio::select! { _ = tokio::time::sleep(away.next_pause()) => {}, _ = shutdown.cancelled() => return }
            continue;
        }
        away.reset();
        // A reconnect may have missed notifications: sweep once to be sure.
        wake.notify_one();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                msg = listener.try_recv() => match msg {
                    Ok(Some(n)) if n.channel() == EVENTS_CHANNEL => {
                        events.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    // One notification per flush: the users, one a line ("*": all).
                    Ok(Some(n)) if n.channel() == INBOX_CHANNEL => {
                        for user in n.payload().lines() {
                            let _ = inbox.send(user.to_owned());
                        }
                    }
                    Ok(Some(_)) => wake.notify_one(),
                    Ok(None) => { wake.notify_one(); } // reconnected; sweep in case we missed one
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                        break;
                    }
                }
            }
        }
    }
}
