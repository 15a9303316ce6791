//! Group commit: many concurrent callers, one transaction.
//!
//! Deliveries finish concurrently, and each must be recorded durably before
//! the worker moves on. One transaction per row costs one disk flush per row
//! (on SQLite, two: the inbox message and the outcome), which caps a drain at
//! a few hundred rows a second on an ordinary disk. A [`Batcher`] lets every
//! caller wait for its own result as before, while one task writes whatever
//! has queued up meanwhile in a single transaction. Under light load a batch
//! is one item and nothing waits longer than it did; under load the flushes
//! are shared. The alternative, collecting a whole sweep's outcomes and
//! writing them at its end, would hold a fast row's outcome hostage to the
//! slowest delivery in the batch.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Mutex, mpsc, oneshot};

use crate::store::StoreError;

/// Submits items to a background task that flushes them in groups.
pub struct Batcher<T, R> {
    tx: mpsc::Sender<(T, oneshot::Sender<R>)>,
}

impl<T, R> Clone for Batcher<T, R> {
    fn clone(&self) -> Self {
        Batcher { tx: self.tx.clone() }
    }
}

impl<T: Send + 'static, R: Send + 'static> Batcher<T, R> {
    /// Starts the flushing task. `flush` gets up to `max` items and returns
    /// one result per item, in order. The task ends when every `Batcher`
    /// handle is dropped.
    pub fn spawn<F, Fut>(max: usize, flush: F) -> Batcher<T, R>
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<R>> + Send,
    {
        Batcher::spawn_parallel(max, 1, flush)
    }

    /// Like [`Batcher::spawn`], with up to `flushers` flushes running at
    /// once: while one group is being written, the next gathers and starts
    /// instead of waiting for it. Worth it where the database runs
    /// transactions side by side (PostgreSQL, MySQL) and the flushes cannot
    /// conflict; callers still get their own results, and a group is still
    /// at most `max` items.
    pub fn spawn_parallel<F, Fut>(max: usize, flushers: usize, flush: F) -> Batcher<T, R>
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<R>> + Send,
    {
        let (tx, rx) = mpsc::channel::<(T, oneshot::Sender<R>)>(max * 4);
        let (rx, flush) = (Arc::new(Mutex::new(rx)), Arc::new(flush));
        for _ in 0..flushers.max(1) {
            let (rx, flush) = (rx.clone(), flush.clone());
            tokio::spawn(async move {
                loop {
                    // Gather a group while holding the queue; the next
                    // flusher gathers while this one writes.
                    let (items, replies) = {
                        let mut rx = rx.lock().await;
                        let Some(first) = rx.recv().await else { break };
                        let mut items = Vec::with_capacity(max);
                        let mut replies = Vec::with_capacity(max);
                        items.push(first.0);
                        replies.push(first.1);
                        while items.len() < max {
                            match rx.try_recv() {
                                Ok((item, reply)) => {
                                    items.push(item);
                                    replies.push(reply);
                                }
                                Err(_) => break,
                            }
                        }
                        (items, replies)
                    };
                    let results = flush(items).await;
                    debug_assert_eq!(results.len(), replies.len());
                    for (reply, result) in replies.into_iter().zip(results) {
                        // The caller may have been cancelled (shutdown); its
                        // result is simply not wanted any more.
                        let _ = reply.send(result);
                    }
                }
            });
        }
        Batcher { tx }
    }

    /// Queues `item` and waits for its result. `None` only if the flushing
    /// task is gone (it panicked), which callers treat as a failed write.
    pub async fn submit(&self, item: T) -> Option<R> {
        let (reply, result) = oneshot::channel();
        self.tx.send((item, reply)).await.ok()?;
        result.await.ok()
    }
}

/// Whether a batch the database refused should be written again one item
/// at a time: it refused the batch for something in one of its items (a
/// value too long, a constraint), so the others must not fail with it. Not
/// after a lost race (the same batch wins when tried again, see
/// [`crate::store::race`]) nor while the database is away (one by one
/// would only multiply the failing statements).
pub fn worth_splitting(e: &StoreError, items: usize) -> bool {
    items > 1 && !e.is_lost_race() && !e.is_unavailable()
}

/// Writes `items` one at a time with `write` (which takes a slice and
/// answers one result per item, as for the whole batch), after the batch
/// was refused: every item gets its own result, and only the one at fault
/// its error. The intake (triggers), the planner's sweep and the worker's
/// outcome flush split a refused batch with this.
pub async fn one_by_one<'a, I, T, F, Fut>(items: &'a [I], mut write: F) -> Vec<Result<T, StoreError>>
where
    F: FnMut(&'a [I]) -> Fut,
    Fut: Future<Output = Result<Vec<T>, StoreError>>,
{
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        // One result per item given: the first is this item's.
        out.push(write(std::slice::from_ref(item)).await.map(|mut one| one.remove(0)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A refused batch is split so that only the item at fault fails; a
    /// lost race or an absent database is not split (one by one would not
    /// help), nor is a batch of one.
    #[tokio::test]
    async fn a_refused_batch_is_written_one_by_one_and_only_the_bad_item_fails() {
        let refused = StoreError::Encode("value too long".into());
        assert!(worth_splitting(&refused, 3));
        assert!(!worth_splitting(&refused, 1));
        assert!(!worth_splitting(&StoreError::Injected { what: "race", lost_race: true }, 3));
        assert!(!worth_splitting(&StoreError::WriterGone, 3));
        let items = [1, 2, 3];
        let each = one_by_one(&items, |one: &[i32]| async move {
            if one == [2] {
                Err(StoreError::Encode("two".into()))
            } else {
                Ok(one.iter().map(|i| i * 10).collect::<Vec<_>>())
            }
        })
        .await;
        assert_eq!(each.len(), 3);
        assert_eq!(each[0].as_ref().ok(), Some(&10));
        assert!(matches!(&each[1], Err(StoreError::Encode(m)) if m == "two"));
        assert_eq!(each[2].as_ref().ok(), Some(&30));
    }

    #[tokio::test]
    async fn concurrent_submissions_share_flushes_and_get_their_own_results() {
        let flushes = Arc::new(AtomicUsize::new(0));
        let counter = flushes.clone();
        let batcher = Batcher::spawn(64, move |items: Vec<u32>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { items.into_iter().map(|i| i * 10).collect() }
        });
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..200u32 {
            let b = batcher.clone();
            tasks.spawn(async move { (i, b.submit(i).await.unwrap()) });
        }
        while let Some(done) = tasks.join_next().await {
            let (i, r) = done.unwrap();
            assert_eq!(r, i * 10);
        }
        let n = flushes.load(Ordering::SeqCst);
        assert!((4..200).contains(&n), "200 items in {n} flushes: grouped, and at most 64 a flush");
    }

    /// With two flushers the second group is written while the first is
    /// still being written: the first flush waits until a second one has
    /// started, which with one flusher would never happen.
    #[tokio::test]
    async fn two_flushers_write_two_groups_at_once() {
        let started = Arc::new(tokio::sync::Barrier::new(2));
        let barrier = started.clone();
        let batcher = Batcher::spawn_parallel(1, 2, move |items: Vec<u32>| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                items.into_iter().map(|i| i + 1).collect()
            }
        });
        let (a, b) = (batcher.clone(), batcher.clone());
        let both = async { tokio::join!(a.submit(1), b.submit(2)) };
        let (ra, rb) = tokio::time::timeout(std::time::Duration::from_secs(10), both)
            .await
            .expect("the two groups are flushed side by side");
        assert_eq!((ra, rb), (Some(2), Some(3)));
    }
}
