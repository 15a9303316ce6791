//! The expander: turns a trigger to many (a topic's subscribers, or a list
//! of users) into outbox rows, a chunk at a time.
//!
//! `POST /v1/triggers` records such a trigger and answers at once; the
//! audience can be a million users, and planning them inside the request
//! would hold it for seconds and a transaction for as long. Instead an
//! expander takes the trigger's *lease* (a compare-and-set on
//! `expand_owner`/`expand_until`, so one instance expands a trigger at a
//! time) and plans [`CHUNK`] recipients per transaction, in user-id order:
//!
//! - **Set-based.** A rule without a condition or digest plans the same row
//!   for every recipient but the user id, so one `INSERT … SELECT` from the
//!   subscriptions, joined to those rules, plans the whole chunk: the rows
//!   never travel through this process. Rules with a condition or a digest
//!   are evaluated here per recipient, as for a single trigger, and their
//!   rows written in the same transaction.
//! - **Resumable.** The chunk's rows and the cursor (the chunk's last user
//!   id) commit together. An instance that dies mid-expansion leaves the
//!   cursor where its last chunk ended; when its lease passes another takes
//!   over from there.
//! - **Never twice.** Each row's dedupe key is `trigger:rule:user`, unique
//!   in the outbox: a chunk planned again (the lease passed while a slow
//!   chunk was committing) adds nothing.
//! - **Consistent audience.** A topic's audience is its subscribers when the
//!   trigger was recorded: a subscription whose `created_at` is after the
//!   trigger's is left out, wherever its user id falls. A subscriber
//!   removed before the expansion reaches them is left out; one removed
//!   after has a row already, which goes (cancel the trigger, or mute the
//!   topic, to stop it).
//! - **Flat memory.** A chunk's user ids are the most it holds.
//!
//! Rejected: a job row per recipient (a million writes before the first
//! row is planned), and expanding inside `POST /v1/triggers` (the answer
//! would wait on the audience's size).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::planning::planner::{Book, PlanRule, RuleBook, evaluate_rules};
use crate::store::{ChunkRule, FanOutRow, NewDigestItem, NewOutboxRow, PlanChunk, Store, StoreError};

/// Recipients planned per transaction. `herald bench --fanout` on
/// PostgreSQL: see docs/performance.md for the sizes tried.
pub const CHUNK: u32 = 10_000;

/// Chunks planned at once, each in its own transaction (PostgreSQL and
/// MariaDB; SQLite plans one at a time).
pub const PARALLEL_CHUNKS: usize = 2;

/// How long an expander holds a trigger without finishing a chunk before
/// another instance may take it over.
pub const LEASE: Duration = Duration::from_secs(30);

/// The dedupe key of a fanned-out row: one per trigger, rule and user.
/// MariaDB's key column is VARCHAR(255): there a user id over 180
/// characters is replaced by its SHA-256, as `plan_topic_chunk` does.
pub fn dedupe_key(mysql: bool, trigger_id: &str, rule_id: &str, user_id: &str) -> String {
    prefixed_dedupe_key("", mysql, trigger_id, rule_id, user_id)
}

/// [`dedupe_key`] after `prefix` (`digest:` for the digest a trigger to
/// many opens for each user), the user id hashed on MariaDB when the whole
/// would not fit its 255 characters.
pub fn prefixed_dedupe_key(prefix: &str, mysql: bool, trigger_id: &str, rule_id: &str, user_id: &str) -> String {
    if mysql && user_id.chars().count() > 180 - prefix.len() {
        use sha2::Digest;
        let hash = hex::encode(sha2::Sha256::digest(user_id.as_bytes()));
        return format!("{prefix}{trigger_id}:{rule_id}:{hash}");
    }
    format!("{prefix}{trigger_id}:{rule_id}:{user_id}")
}

#[derive(Clone)]
pub struct Expander {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    rules: Arc<RuleBook>,
    /// This instance, as it writes itself into `expand_owner`.
    owner: String,
    wake: Arc<Notify>,
    poll: Duration,
    chunk: u32,
    lease: Duration,
    /// Stop (as if killed) after this many chunks: for tests of a takeover.
    stop_after: Option<usize>,
}

/// What an expansion came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Expanded {
    /// Every chunk planned; the trigger is planned.
    Finished { recipients: i64, rows: i64 },
    /// Another instance holds it now, or it was cancelled.
    Stopped,
}

impl Expander {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, rules: Arc<RuleBook>, poll: Duration) -> Expander {
        Expander {
            store,
            clock,
            rules,
            owner: crate::store::new_id(),
            wake: Arc::new(Notify::new()),
            poll,
            chunk: CHUNK,
            lease: LEASE,
            stop_after: None,
        }
    }

    /// Recipients per chunk (`planner.fan_out_chunk`).
    pub fn with_chunk(mut self, chunk: u32) -> Expander {
        self.chunk = chunk.max(1);
        self
    }

    /// How long a lease lasts without a chunk (`planner.fan_out_lease`).
    pub fn with_lease(mut self, lease: Duration) -> Expander {
        self.lease = lease;
        self
    }

    /// Stops after `chunks` chunks without letting the lease go, as an
    /// instance killed mid-expansion would: for tests of what another
    /// instance does then.
    pub fn stopping_after(mut self, chunks: usize) -> Expander {
        self.stop_after = Some(chunks);
        self
    }

    /// This expander's name in `expand_owner`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// A trigger to many was recorded here: look now, not at the next poll.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Expands what waits until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let pause = match self.tick().await {
                Ok(0) => self.poll,
                Ok(_) => Duration::ZERO,
                Err(e) if e.is_lost_race() => Duration::from_millis(rand::random_range(5..=50)),
                Err(e) => {
                    tracing::warn!(error = %e, "expanding a trigger to many failed; trying again");
                    self.poll.max(Duration::from_secs(1))
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }

    /// Takes and expands the triggers waiting; answers how many it took.
    pub async fn tick(&self) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let mut taken = 0;
        for id in self.store.fan_outs_to_expand(now, 8).await? {
            if self.store.take_fan_out(&id, &self.owner, now, now.plus(self.lease)).await? {
                taken += 1;
                self.expand(&id).await?;
            }
        }
        Ok(taken)
    }

    /// Expands one trigger whose lease this instance holds, from its cursor.
    pub async fn expand(&self, id: &str) -> Result<Expanded, StoreError> {
        let Some(trigger) = self.store.fan_out_state(id).await? else { return Ok(Expanded::Stopped) };
        let held = trigger.expand_owner.as_deref() == Some(self.owner.as_str());
        if !held || trigger.planned_at.is_some() || trigger.cancelled_at.is_some() {
            return Ok(Expanded::Stopped);
        }
        let size = match trigger.audience_size {
            Some(n) => n,
            None => self.store.count_audience(&trigger).await?,
        };
        let book = self.rules.current().await?;
        let rules = book.rules_for(&trigger.trigger_type);
        let (set_rules, own_rules): (Vec<&PlanRule>, Vec<&PlanRule>) = rules.iter().partition(|r| r.is_uniform());
        let set_rules = chunk_rules(&book, &trigger, &set_rules);
        let dialect = self.store.dialect();
        let mysql = dialect == crate::store::Dialect::MySql;
        // Chunks planned side by side: PostgreSQL and MariaDB spend a chunk
        // on one core each, maintaining the outbox's indexes; SQLite has one
        // writer.
        let parallel = dialect.concurrent_flushes(PARALLEL_CHUNKS);
        let mut after = trigger.expand_cursor.clone().unwrap_or_default();
        let mut recipients = trigger.expanded_count;
        let mut chunks_planned = 0;
        loop {
            // A test's "killed after n chunks" ends a round early.
            let parallel = match self.stop_after {
                Some(n) if chunks_planned >= n => return Ok(Expanded::Stopped),
                Some(n) => parallel.min(n - chunks_planned),
                None => parallel,
            };
            let want = self.chunk.saturating_mul(parallel as u32);
            let users =
                if rules.is_empty() { Vec::new() } else { self.store.audience_chunk(&trigger, &after, want).await? };
            let Some(last) = users.last().cloned() else { break };
            let now = self.clock.now();
            let mut planned = Vec::new();
            let mut from = after.clone();
            for (i, part) in users.chunks(self.chunk as usize).enumerate() {
                let first = recipients + (i * self.chunk as usize) as i64;
                let (own_rows, digests) = self.evaluate(&book, &trigger, &own_rules, part, first, mysql).await?;
                let part_last = part.last().cloned().unwrap_or_default();
                planned.push((std::mem::replace(&mut from, part_last.clone()), part_last, first, own_rows, digests));
            }
            let chunks = planned.iter().map(|(after, last, first, rows, digests)| {
                let chunk = PlanChunk {
                    trigger: &trigger,
                    owner: &self.owner,
                    after,
                    last,
                    first: *first,
                    set_rules: &set_rules,
                    rows,
                    digests,
                };
                async move { self.store.plan_chunk(&chunk, now).await }
            });
            let results = futures::future::join_all(chunks).await;
            for result in results {
                if !result? {
                    return Ok(Expanded::Stopped);
                }
            }
            // Every chunk up to `last` committed: only now may the cursor
            // pass them (a crash before leaves it where it was, and the
            // next instance plans those chunks again, adding nothing).
            let held =
                self.store.advance_fan_out(id, &self.owner, &last, users.len() as i64, now.plus(self.lease)).await?;
            if !held {
                return Ok(Expanded::Stopped);
            }
            recipients += users.len() as i64;
            chunks_planned += planned.len();
            after = last;
            if (users.len() as u32) < want {
                break;
            }
        }
        let rows = self.store.fan_out_rows(id).await?;
        let detail = detail(&trigger, rules, size, recipients, rows);
        if !self.store.finish_fan_out(id, &self.owner, rows, &detail, self.clock.now()).await? {
            return Ok(Expanded::Stopped);
        }
        Ok(Expanded::Finished { recipients, rows })
    }

    /// The rows of rules with a condition or a digest for one chunk,
    /// evaluated per recipient as a single trigger's are.
    async fn evaluate(
        &self,
        book: &Book,
        trigger: &FanOutRow,
        rules: &[&PlanRule],
        users: &[String],
        first: i64,
        mysql: bool,
    ) -> Result<(Vec<NewOutboxRow>, Vec<NewDigestItem>), StoreError> {
        if rules.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let ids: Vec<&str> = users.iter().map(String::as_str).collect();
        let recipients: std::collections::HashMap<String, _> =
            self.store.recipients_by_ids(&ids).await?.into_iter().map(|r| (r.user_id.clone(), r)).collect();
        let (mut rows, mut digests) = (Vec::new(), Vec::new());
        for (i, user) in users.iter().enumerate() {
            let plan =
                evaluate_rules(&trigger.for_user(user), rules.iter().copied(), recipients.get(user), book.zone());
            // A millisecond per thousand recipients, as `plan_topic_chunk` does.
            let stagger = std::time::Duration::from_millis(((first + i as i64) / 1000) as u64);
            rows.extend(plan.rows.into_iter().map(|mut row| {
                row.dedupe_key = dedupe_key(mysql, &trigger.id, row.rule_id.as_deref().unwrap_or_default(), user);
                row.due_at = row.due_at.plus(stagger);
                row
            }));
            digests.extend(plan.digests.into_iter().map(|item| NewDigestItem { to_many: true, ..item }));
        }
        Ok((rows, digests))
    }
}

/// The rows a uniform rule plans for every recipient, as values the
/// chunk's statement copies: evaluated once, for a stand-in user.
fn chunk_rules(book: &Book, trigger: &FanOutRow, rules: &[&PlanRule]) -> Vec<ChunkRule> {
    let plan = evaluate_rules(&trigger.for_user("-"), rules.iter().copied(), None, book.zone());
    plan.rows
        .into_iter()
        .map(|r| ChunkRule {
            rule_id: r.rule_id.unwrap_or_default(),
            channel: r.channel.as_str().to_owned(),
            due_at: r.due_at.0,
            expires_at: r.expires_at.map(|t| t.0),
            follow_up_at: r.follow_up_at.map(|t| t.0),
        })
        .collect()
}

/// The trigger's `plan_detail` once expanded.
fn detail(trigger: &FanOutRow, rules: &[PlanRule], size: i64, recipients: i64, rows: i64) -> String {
    let whom = match (trigger.audience.as_deref(), &trigger.topic_key) {
        (Some("topic"), Some(key)) => format!("the subscribers of topic \"{key}\""),
        _ => "the users it names".to_owned(),
    };
    let actor = match &trigger.actor_id {
        Some(a) => format!(", actor \"{a}\" left out"),
        None => String::new(),
    };
    if rules.is_empty() {
        return format!(
            "no enabled rule matches trigger type \"{}\": nothing planned for {whom} ({size}{actor})",
            trigger.trigger_type
        );
    }
    let names: Vec<String> = rules.iter().map(|r| format!("\"{}\"", r.row.name)).collect();
    format!(
        "planned {rows} message(s) for {recipients} of {size} recipient(s), {whom}{actor}; rules {}",
        names.join(", ")
    )
}
