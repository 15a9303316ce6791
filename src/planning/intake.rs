//! Intake: `POST /v1/triggers` requests recorded and planned together.
//!
//! Each accepted trigger must be durable before the API answers, and one
//! transaction per request costs a commit (a disk flush) per request, which
//! held the API to a few hundred triggers a second. Concurrent requests
//! instead hand their trigger to one [`Batcher`], which records whatever has
//! queued up meanwhile in one transaction: the triggers inserted already
//! planned (their rows with them), idempotency keys checked for the whole
//! batch at once, and the rules read from a [`RuleBook`] instead of once
//! per request. Every request still waits for its own answer, and under
//! light load a batch is one trigger and nothing waits longer than before.

use std::sync::Arc;

use crate::batch::Batcher;
use crate::clock::Clock;
use crate::planning::planner::{Plan, RuleBook};
use crate::store::{NewTrigger, PlannedTrigger, Store, StoreError, TriggerInsert, TriggerRow};

/// Most triggers recorded in one transaction.
const GROUP: usize = 500;

/// Groups written at once on PostgreSQL and MySQL: while one commits, the
/// next is already being written instead of gathering behind it, as two
/// instances' intakes would (SQLite keeps one: `concurrent_flushes`).
/// Concurrent groups cannot record a key twice: the unique index makes the
/// second wait for the first and then find its row, as between instances;
/// a deadlock between them is a lost race, retried.
/// `herald bench --pipeline --duration 10` on PostgreSQL, 2 cores,
/// alternating: one 1,609-1,686 triggers/s, two 1,775-1,863, three
/// 1,947-1,962 (the database's CPU is the limit beyond that); on MariaDB
/// three against one, four pairs: 1.03-1.25x (2,333-2,545 triggers/s).
const FLUSHERS: usize = 3;

/// How long a batch whose commit went unanswered (the connection was lost,
/// the database failed over) may take to find out whether it committed,
/// and to commit again if it did not, before its requests are answered
/// 503. The answer must tell the truth: a trigger that is recorded is
/// acknowledged, and one answered with an error left nothing behind.
const IN_DOUBT_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// What became of one trigger handed to [`Intake::accept`].
pub enum Accepted {
    /// Recorded, with what it planned.
    Created(Plan),
    /// Its idempotency key was taken: the trigger holding it.
    Existing(Box<TriggerRow>),
}

type Answer = Result<Accepted, Arc<StoreError>>;

#[derive(Clone)]
pub struct Intake {
    writer: Batcher<NewTrigger, Answer>,
}

impl Intake {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, rules: Arc<RuleBook>) -> Intake {
        let flushers = store.dialect().concurrent_flushes(FLUSHERS);
        let writer = Batcher::spawn_parallel(GROUP, flushers, move |triggers: Vec<NewTrigger>| {
            let (store, clock, rules) = (store.clone(), clock.clone(), rules.clone());
            async move { record(store.as_ref(), clock.as_ref(), &rules, triggers).await }
        });
        Intake { writer }
    }

    /// Records and plans one trigger, in a transaction shared with whatever
    /// other requests arrive meanwhile; answers once it is committed.
    pub async fn accept(&self, trigger: NewTrigger) -> Result<Accepted, Arc<StoreError>> {
        self.writer.submit(trigger).await.unwrap_or_else(|| Err(Arc::new(StoreError::WriterGone)))
    }
}

async fn record(store: &dyn Store, clock: &dyn Clock, rules: &RuleBook, triggers: Vec<NewTrigger>) -> Vec<Answer> {
    let answers = match record_batch(store, clock, rules, &triggers).await {
        Err(e) if crate::batch::worth_splitting(&e, triggers.len()) => {
            // One trigger the database refuses must not fail the others:
            // record them one by one, so only that request gets the error.
            tracing::warn!(error = %e, triggers = triggers.len(), "recording a batch of triggers failed; recording them one by one");
            let each = crate::batch::one_by_one(&triggers, |one| record_batch(store, clock, rules, one)).await;
            return each.into_iter().map(|r| r.map_err(Arc::new)).collect();
        }
        other => other,
    };
    match answers {
        Ok(answers) => answers.into_iter().map(Ok).collect(),
        Err(e) => {
            let e = Arc::new(e);
            triggers.iter().map(|_| Err(e.clone())).collect()
        }
    }
}

async fn record_batch(
    store: &dyn Store,
    clock: &dyn Clock,
    rules: &RuleBook,
    triggers: &[NewTrigger],
) -> Result<Vec<Accepted>, StoreError> {
    let started = tokio::time::Instant::now();
    let mut pauses = crate::store::race::AwayPauses::new();
    loop {
        // Lost races (a Galera certification failure, a serialization
        // failure, a standby just after a failover) are tried again at once.
        let attempt = crate::store::race::retry_lost_race("accept triggers", || attempt(store, clock, rules, triggers));
        let (plans, error) = match attempt.await {
            Ok(Ok((outcomes, plans))) => return Ok(answers(outcomes, plans)),
            Ok(Err((plans, e))) => (plans, e),
            Err(e) => return Err(e),
        };
        if !error.is_unavailable() || started.elapsed() >= IN_DOUBT_WAIT {
            return Err(error);
        }
        // The database went away, perhaps after committing: find out before
        // answering, and commit again only if it did not.
        tracing::info!(error = %error, triggers = triggers.len(), "recording triggers got no answer; checking whether they were recorded");
        loop {
            tokio::time::sleep(pauses.next_pause()).await;
            let ids: Vec<&str> = triggers.iter().map(|t| t.id.as_str()).collect();
            // On Galera this read may reach another node than the commit
            // did: `recorded_triggers` waits for that node to catch up.
            match store.recorded_triggers(&ids).await {
                // None of them (one transaction): record them again.
                Ok(found) if found.is_empty() => break,
                Ok(found) => {
                    // It committed. A trigger not found is one whose
                    // idempotency key another trigger held: asking again
                    // answers which (it cannot insert anything twice).
                    tracing::info!(triggers = found.len(), "the triggers had been recorded; acknowledging them");
                    let found: std::collections::HashSet<String> = found.into_iter().collect();
                    let rest: Vec<NewTrigger> = triggers.iter().filter(|t| !found.contains(&t.id)).cloned().collect();
                    let mut rest = if rest.is_empty() {
                        Vec::new()
                    } else {
                        Box::pin(record_batch(store, clock, rules, &rest)).await?
                    }
                    .into_iter();
                    return Ok(triggers
                        .iter()
                        .zip(plans)
                        .map(|(t, plan)| match found.contains(&t.id) {
                            true => Accepted::Created(plan),
                            false => rest.next().expect("one answer per trigger asked again"),
                        })
                        .collect());
                }
                Err(e) if started.elapsed() >= IN_DOUBT_WAIT => return Err(e),
                Err(_) => continue,
            }
        }
    }
}

/// What each trigger became, with its plan.
fn answers(outcomes: Vec<TriggerInsert>, plans: Vec<Plan>) -> Vec<Accepted> {
    outcomes
        .into_iter()
        .zip(plans)
        .map(|(outcome, plan)| match outcome {
            TriggerInsert::Created => Accepted::Created(plan),
            TriggerInsert::Existing(first) => Accepted::Existing(first),
        })
        .collect()
}

/// One transaction recording and planning the batch. A lost race is the
/// outer error (to be retried); any other failure comes back with the plans
/// it would have recorded.
type Attempt = Result<(Vec<TriggerInsert>, Vec<Plan>), (Vec<Plan>, StoreError)>;

async fn attempt(
    store: &dyn Store,
    clock: &dyn Clock,
    rules: &RuleBook,
    triggers: &[NewTrigger],
) -> Result<Attempt, StoreError> {
    let now = clock.now();
    let book = rules.current().await?;
    let rows: Vec<TriggerRow> = triggers.iter().map(|t| t.unplanned_row(now)).collect();
    let refs: Vec<&TriggerRow> = rows.iter().collect();
    let recipients = rules.recipients_for(&book, &refs).await?;
    let plans: Vec<Plan> = rows.iter().map(|t| book.plan(t, &recipients)).collect();
    let planned: Vec<PlannedTrigger> = triggers
        .iter()
        .zip(&plans)
        .map(|(t, p)| PlannedTrigger {
            trigger: t.clone(),
            rows: p.rows.clone(),
            digests: p.digests.clone(),
            detail: p.detail(&t.trigger_type),
        })
        .collect();
    match store.accept_triggers(&planned, now).await {
        Ok(outcomes) => Ok(Ok((outcomes, plans))),
        Err(e) if e.is_lost_race() => Err(e),
        Err(e) => Ok(Err((plans, e))),
    }
}
