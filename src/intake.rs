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
use crate::planner::{Plan, RuleBook};
use crate::store::{NewTrigger, PlannedTrigger, Store, StoreError, TriggerInsert, TriggerRow};

/// Most triggers recorded in one transaction.
const GROUP: usize = 500;

/// How often a batch that lost a race (a deadlock or a serialization
/// failure, when several instances take the same idempotency key) is tried
/// again before its requests are answered with the error.
const CONTENTION_RETRIES: u32 = 3;

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
        let writer = Batcher::spawn(GROUP, move |triggers: Vec<NewTrigger>| {
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
        Err(e) if triggers.len() > 1 && !e.is_contention() => {
            // One trigger the database refuses must not fail the others:
            // record them one by one, so only that request gets the error.
            tracing::warn!(error = %e, triggers = triggers.len(), "recording a batch of triggers failed; recording them one by one");
            let mut answers = Vec::with_capacity(triggers.len());
            for t in &triggers {
                answers.push(match record_batch(store, clock, rules, std::slice::from_ref(t)).await {
                    Ok(mut one) => Ok(one.remove(0)),
                    Err(e) => Err(Arc::new(e)),
                });
            }
            return answers;
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
    let mut attempt = 1;
    loop {
        let now = clock.now();
        let book = rules.current().await?;
        let rows: Vec<TriggerRow> = triggers.iter().map(|t| t.unplanned_row(now)).collect();
        let refs: Vec<&TriggerRow> = rows.iter().collect();
        let recipients = rules.recipients_for(&book, &refs).await?;
        let mut plans: Vec<Plan> = rows.iter().map(|t| book.plan(t, &recipients)).collect();
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
            Ok(outcomes) => {
                return Ok(outcomes
                    .into_iter()
                    .zip(plans.drain(..))
                    .map(|(outcome, plan)| match outcome {
                        TriggerInsert::Created => Accepted::Created(plan),
                        TriggerInsert::Existing(first) => Accepted::Existing(first),
                    })
                    .collect());
            }
            Err(e) if e.is_contention() && attempt < CONTENTION_RETRIES => {
                tracing::debug!(error = %e, attempt, "recording triggers lost a race; trying again");
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
