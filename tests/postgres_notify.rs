//! PostgreSQL instances wake each other with LISTEN/NOTIFY: a row enqueued
//! through one instance is delivered by another whose poll is an hour away.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, TestDb, row, user};
use herald::clock::{Clock, SystemClock};
use herald::delivery::worker::{Worker, WorkerConfig, WorkerParts};
use herald::store::Store;
use tokio_util::sync::CancellationToken;

async fn an_enqueue_on_one_instance_wakes_the_worker_of_another() {
    let db = TestDb::new(Backend::Postgres).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let worker_store = db.another_instance().await;
    let worker_side: Arc<dyn Store> = Arc::new(worker_store.clone());
    let enqueue_side = db.another_instance().await;

    let shutdown = CancellationToken::new();
    let worker = Worker::new(WorkerParts {
        store: worker_side.clone(),
        registry: herald::app::registry(),
        clock: clock.clone(),
        config: WorkerConfig { poll: Duration::from_secs(3600), ..WorkerConfig::default() },
        metrics: herald::metrics::Metrics::new(),
        address_keys: None,
        lease: None,
    });
    let listener = tokio::spawn(herald::store::listen::forward_notifications(worker_store, shutdown.clone()));
    let running = tokio::spawn({
        let t = shutdown.clone();
        async move { worker.run(t).await }
    });

    // Each round enqueues through the other instance and gives the worker two
    // seconds; the first round may race the listener's connection, so a few
    // rounds are allowed. Without NOTIFY nothing arrives for an hour.
    let mut delivered = 0;
    for round in 1..=5 {
        enqueue_side.enqueue(&[row("remote", "inbox", clock.now())], clock.now()).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while tokio::time::Instant::now() < deadline {
            delivered = worker_side.inbox_for_user(&user("remote"), 100).await.unwrap().len();
            if delivered == round {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if delivered == round && round >= 2 {
            break;
        }
    }
    assert!(delivered >= 2, "rows enqueued elsewhere were not delivered promptly ({delivered})");
    shutdown.cancel();
    running.await.unwrap();
    listener.await.unwrap();
    enqueue_side.close().await;
    db.cleanup().await;
}

async fn an_inbox_change_on_one_instance_reaches_the_streams_of_another() {
    use herald::store::{InboxStore, NewInboxMessage};
    let db = TestDb::new(Backend::Postgres).await;
    let streaming_side = db.another_instance().await;
    let writing_side = db.another_instance().await;
    let shutdown = CancellationToken::new();
    let listener = tokio::spawn(herald::store::listen::forward_notifications(streaming_side.clone(), shutdown.clone()));
    let mut changes = streaming_side.inbox_changes();
    // The listener may still be connecting: write until a change arrives.
    let mut heard = None;
    for _ in 0..10 {
        let msg = NewInboxMessage {
            outbox_id: herald::store::new_id(),
            user_id: "remote-user".into(),
            title: "t".into(),
            body: None,
            url: None,
            data: None,
        };
        common::deliver_inbox(&writing_side, &msg, SystemClock.now()).await;
        // NOTIFY channels are per database, not per schema: the other test in
        // this file (user "remote") may be heard too. Wait for this one's.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        while let Ok(Ok(user)) = tokio::time::timeout_at(deadline, changes.recv()).await {
            if user == "remote-user" {
                heard = Some(user);
                break;
            }
        }
        if heard.is_some() {
            break;
        }
    }
    assert_eq!(heard.as_deref(), Some("remote-user"), "the other instance's stream hears of the new message");
    shutdown.cancel();
    listener.await.unwrap();
    writing_side.close().await;
    streaming_side.close().await;
    db.cleanup().await;
}

/// An outcome with no inbox message (an email sent, say) still tells the
/// event followers of other instances: the flush's one statement notifies
/// `herald_events` whenever it appends events. (Until 2026-12-06 only a
/// flush that also wrote inbox messages did; the rest waited for a poll.)
async fn an_outcome_without_an_inbox_message_reaches_the_event_followers_of_another() {
    use herald::store::Finish;
    let db = TestDb::new(Backend::Postgres).await;
    let following_side = db.another_instance().await;
    let writing_side = db.another_instance().await;
    let shutdown = CancellationToken::new();
    let listener = tokio::spawn(herald::store::listen::forward_notifications(following_side.clone(), shutdown.clone()));
    let mut appended = following_side.events_sender().subscribe();
    // The listener may still be connecting: write until one is heard.
    let mut heard = false;
    for _ in 0..10 {
        let now = SystemClock.now();
        let r = row("follower", "email", now);
        writing_side.enqueue(std::slice::from_ref(&r), now).await.unwrap();
        let claimed = writing_side.claim_channel("email", now, 10, "t").await.unwrap();
        let claimed = claimed.into_iter().find(|c| c.id == r.id).expect("the row just enqueued is due");
        assert!(writing_side.finish(&claimed, "t", &Finish::sent("smtp"), now).await.unwrap());
        appended.mark_unchanged();
        if tokio::time::timeout(Duration::from_secs(1), appended.changed()).await.is_ok() {
            heard = true;
            break;
        }
    }
    assert!(heard, "the other instance's event followers hear of the outcome");
    shutdown.cancel();
    listener.await.unwrap();
    writing_side.close().await;
    following_side.close().await;
    db.cleanup().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        an_enqueue_on_one_instance_wakes_the_worker_of_another,
        an_inbox_change_on_one_instance_reaches_the_streams_of_another,
        an_outcome_without_an_inbox_message_reaches_the_event_followers_of_another,
    ])
}
