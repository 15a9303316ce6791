//! [`SqlStore`]: the [`Store`] over sqlx's `Any` driver, for all three dialects.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Executor, Row};
use tokio::sync::{Notify, broadcast, watch};

use super::json_rows::{ClaimRef, keys_json, to_json};
use super::queries::Query;
use super::rows::{Fetch, Run};
use super::rows::{OldestDue, StatusCount, opt_text, text};
use super::{
    AppliedMigration, Dialect, Enqueued, InboxMessage, NewOutboxRow, OutboxRow, Record, SendRecord, StatusSummary,
    Store, StoreError, migrate,
};
use crate::clock::Millis;
use crate::domain::{OutboxStatus, UserId};

/// The PostgreSQL channel instances use to wake each other on enqueue.
pub const NOTIFY_CHANNEL: &str = "herald_outbox";

/// The PostgreSQL channel that carries "user X's inbox changed" between
/// instances, so a live stream served by one sees messages another delivered.
pub const INBOX_CHANNEL: &str = "herald_inbox";

/// The PostgreSQL channel that says "events were appended".
pub const EVENTS_CHANNEL: &str = "herald_events";

#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub max_connections: u32,
    /// How long to wait for a pooled connection before failing the operation.
    pub acquire_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { max_connections: 10, acquire_timeout: Duration::from_secs(10) }
    }
}

/// The one SQL implementation of [`Store`]; see the module docs for why.
#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    writer: AnyPool,
    dialect: Dialect,
    url: String,
    enqueued: Arc<Notify>,
    /// User ids whose inbox changed (see `InboxStore::inbox_changes`).
    inbox_changed: broadcast::Sender<String>,
    /// Bumped when events are appended (see `EventStore::event_signal`).
    events_appended: Arc<watch::Sender<u64>>,
    /// The instance this store claims for: written into `claimed_by` by
    /// every claim, so the rows of an instance whose lease lapsed can be
    /// found (see `instances`). `None`: claims name no instance and only
    /// the stale window takes them back.
    instance: Option<Arc<str>>,
    /// On MariaDB/MySQL (Galera): this instance's slice of the due rows,
    /// see [`ClaimSlice`].
    slice: Arc<std::sync::Mutex<ClaimSlice>>,
}

/// Claims spread over the instances on MariaDB/MySQL. On Galera every node
/// takes writes, and two instances on different nodes that claim (or, for
/// the inbox, finish) the same oldest due rows at once collide at commit:
/// one loses the certification and tries again (`race`). There is no
/// `SKIP LOCKED` across nodes. So each instance with a lease first looks in
/// its own slice, the rows whose `CRC32(id) MOD n` is its rank among the
/// `n` live instances (by id, read from `engagement_instances` at most every
/// [`SLICE_REFRESH`]), and only when its slice has nothing due takes from
/// the whole set as before. Slices are a preference, not a partition: a
/// row outside every slice (the count changed) is still claimed, and the
/// compare-and-set still decides. PostgreSQL (one primary, row locks) and
/// SQLite (one writer) claim as before.
#[derive(Debug, Default)]
struct ClaimSlice {
    read_at: Option<std::time::Instant>,
    /// (rank, instances); `None` with fewer than two live instances.
    slice: Option<(u32, u32)>,
}

/// How often an instance re-reads the live instances for its slice.
const SLICE_REFRESH: Duration = Duration::from_secs(5);

/// The payload of a `herald_inbox` notification for these users: their
/// ids, one a line. A NOTIFY payload is limited to 8000 bytes; past that,
/// "*" tells every stream to look.
pub(crate) fn inbox_notice(users: &[String]) -> String {
    let users = users.join("\n");
    if users.len() > 7900 { "*".to_owned() } else { users }
}

impl SqlStore {
    /// Applies the missing migrations up to and including `version`, and
    /// none after it: the database as an older Herald left it, for the
    /// tests that upgrade one holding rows (a later
    /// [`Store::migrate`] applies the rest). Not for production: a Herald
    /// runs against the newest schema it knows.
    pub async fn migrate_through(&self, version: i64) -> Result<Vec<AppliedMigration>, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(StoreError::db("migrate: connect"))?;
        let now = crate::clock::Clock::now(&crate::clock::SystemClock);
        migrate::run(&mut conn, self.dialect, now, Some(version)).await
    }

    /// Opens a pool for `url`. A SQLite file is created if missing and put in
    /// WAL mode, so the worker's writes do not block readers such as
    /// `herald status`.
    pub async fn connect(url: &str, opts: &ConnectOptions) -> Result<SqlStore, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::from_url(url)
            .ok_or_else(|| StoreError::UnsupportedUrl { url: crate::config::redact_url_password(url) })?;
        let url = normalise_url(url, dialect);
        let pool_opts = || AnyPoolOptions::new().acquire_timeout(opts.acquire_timeout);
        let (pool, writer) = if dialect == Dialect::Sqlite {
            // SQLite has one writer at a time, and a connection's page cache
            // is thrown away whenever another connection has written since
            // its last transaction. So every write goes through one
            // connection, whose cache stays warm and which callers queue for
            // in order, instead of several connections taking turns at the
            // write lock through busy_timeout's sleeps; reads use the others.
            let pool = sqlite_pool(pool_opts().max_connections(opts.max_connections), false)
                .connect(&url)
                .await
                .map_err(StoreError::db("connect"))?;
            let writer = sqlite_pool(pool_opts().max_connections(1), true)
                .connect(&url)
                .await
                .map_err(StoreError::db("connect"))?;
            (pool, writer)
        } else {
            let pool = pool_opts()
                .max_connections(opts.max_connections)
                .connect(&url)
                .await
                .map_err(StoreError::db("connect"))?;
            (pool.clone(), pool)
        };
        Ok(SqlStore {
            pool,
            writer,
            dialect,
            url,
            enqueued: Arc::new(Notify::new()),
            // Lagging receivers skip ahead; the stream re-reads from its last
            // id, so a missed signal only delays, never loses.
            inbox_changed: broadcast::channel(1024).0,
            events_appended: Arc::new(watch::channel(0).0),
            instance: None,
            slice: Arc::default(),
        })
    }

    /// This store (the same pools), claiming for instance `id`: every claim
    /// it makes names the instance (see [`super::InstanceStore`]).
    pub fn for_instance(&self, id: &str) -> SqlStore {
        SqlStore { instance: Some(Arc::from(id)), slice: Arc::default(), ..self.clone() }
    }

    /// This instance's claim slice (rank, live instances) on MariaDB/MySQL
    /// with a lease and at least one other live instance; see [`ClaimSlice`].
    /// A failure to read the instances means no slice, never a failed claim.
    async fn claim_slice(&self, now: Millis) -> Option<(u32, u32)> {
        let me = self.instance.as_deref().filter(|_| self.dialect == Dialect::MySql)?;
        {
            let cached = self.slice.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cached.read_at.is_some_and(|t| t.elapsed() < SLICE_REFRESH) {
                return cached.slice;
            }
        }
        let live = sqlx::query(self.sql(Query::LiveInstances)).bind(now.0).fetch_all(&self.pool).await.ok()?;
        let ids: Vec<String> = live.iter().filter_map(|r| text(r, "id").ok()).collect();
        let slice =
            ids.iter().position(|id| id == me).filter(|_| ids.len() > 1).map(|rank| (rank as u32, ids.len() as u32));
        let mut cached = self.slice.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *cached = ClaimSlice { read_at: Some(std::time::Instant::now()), slice };
        slice
    }

    /// A named statement's text in this store's dialect.
    pub(crate) fn sql(&self, query: Query) -> &'static str {
        query.sql(self.dialect)
    }

    /// What `query`, a statement that takes one list of keys (as
    /// `json_rows::keys_json`), reads for `keys`: nothing, and no statement,
    /// for no keys.
    pub(crate) async fn read_by_keys(
        &self,
        query: Query,
        keys: &[&str],
        op: &'static str,
    ) -> Result<Vec<AnyRow>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query(self.sql(query)).bind(keys_json(keys.iter().copied())?).all(self.pool(), op).await
    }

    /// The instance this store claims for, if any.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Where writes go: the same pool as reads, except on SQLite (see
    /// `connect`).
    pub(crate) fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// The URL the pool was opened with (after normalisation).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes both pools, once every connection has come back to them.
    /// A connection released just before is still on its way back (sqlx
    /// returns it from a spawned task), and closing the pool then raced
    /// with it (launchbadge/sqlx#3217): `close` could return with that
    /// connection open, or the connection could land in the closed pool's
    /// idle queue and never be closed. A process that exited then left it,
    /// and on SQLite the write-ahead log beside the file, behind (2 to 9
    /// `herald migrate` runs in 30, measured). Closed in turn, the last
    /// SQLite connection copies the log into the file and removes it. The
    /// wait for stragglers is bounded, for a caller that still holds a
    /// connection.
    pub async fn close(&self) {
        for pool in [&self.pool, &self.writer] {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            while pool.num_idle() < pool.size() as usize && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            pool.close().await;
        }
    }

    /// A transaction that will write. On SQLite it takes the write lock at
    /// `BEGIN IMMEDIATE`: a deferred transaction that reads first and writes
    /// later can find another writer holding the lock and fail with
    /// `SQLITE_BUSY` at once (SQLite will not wait there, since waiting could
    /// deadlock), which surfaced as 500 "database is locked" under
    /// concurrent writes. Taking the lock up front makes every writer wait
    /// its turn within `busy_timeout` instead.
    pub(crate) async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.dialect {
            Dialect::Sqlite => self.writer.begin_with("BEGIN IMMEDIATE").await,
            _ => self.writer.begin().await,
        }
    }

    /// Runs a claim statement (an `UPDATE` that marks rows `sending` under
    /// `token`) and returns the rows it won.
    async fn run_claim<'q>(
        &self,
        claim: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
        token: &str,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        if self.dialect == Dialect::Sqlite {
            // A claim need not survive a power cut: lost, its rows are simply
            // due again, as after a crash. So on SQLite it commits without
            // waiting for the disk (`synchronous = NORMAL` in WAL mode); the
            // next durable commit (an outcome, a trigger) flushes it with
            // everything before it. It is the one write per batch that can
            // skip a disk flush, and the writer connection spends most of its
            // time in those.
            let mut conn = self.writer.acquire().await.map_err(StoreError::db("claim due rows"))?;
            conn.execute("PRAGMA synchronous = NORMAL").await.map_err(StoreError::db("claim due rows"))?;
            let rows = claim.fetch_all(&mut *conn).await;
            conn.execute("PRAGMA synchronous = FULL").await.map_err(StoreError::db("claim due rows"))?;
            return outbox_rows(&rows.map_err(StoreError::db("claim due rows"))?);
        }
        if self.dialect.has_update_returning() {
            let rows = claim.all(&self.writer, "claim due rows").await?;
            return outbox_rows(&rows);
        }
        // The rows are read back on the connection that claimed them: on
        // Galera behind HAProxy another pooled connection can be on another
        // node, which may not have applied the claim yet (reads are not
        // causal by default), and rows claimed but not read back would sit
        // in `sending` under a live instance's lease until `stale`.
        let mut conn = self.writer.acquire().await.map_err(StoreError::db("claim due rows"))?;
        let won = claim.run(&mut *conn, "claim due rows").await?;
        if won == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.sql(Query::ClaimedByToken))
            .bind(token.to_owned())
            .all(&mut *conn, "read claimed rows")
            .await?;
        outbox_rows(&rows)
    }

    /// Tells other PostgreSQL instances' workers, from inside the writing
    /// transaction (sent at commit, no transaction of its own), that rows
    /// were enqueued.
    pub(crate) async fn notify_enqueued_in(&self, conn: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
        if self.dialect == Dialect::Postgres {
            sqlx::query(self.sql(Query::NotifyEnqueued)).run(&mut *conn, "notify other instances").await?;
        }
        Ok(())
    }

    /// After a commit that appended events and inbox messages: wakes the
    /// followers and streams of this process.
    pub(crate) fn announce_committed(&self, inbox_users: &[String]) {
        self.events_appended.send_modify(|n| *n = n.wrapping_add(1));
        for user in inbox_users {
            let _ = self.inbox_changed.send(user.clone());
        }
    }

    /// Wakes this process's worker and, on PostgreSQL, every other
    /// instance's, after rows were committed.
    pub(crate) async fn signal_enqueued(&self) {
        self.enqueued.notify_one();
        self.notify_others().await;
    }

    /// Inserts rows on a connection the caller holds (inside its
    /// transaction), skipping existing dedupe keys.
    pub(crate) async fn enqueue_on(
        &self,
        conn: &mut sqlx::AnyConnection,
        rows: &[NewOutboxRow],
        now: Millis,
    ) -> Result<Vec<Enqueued>, StoreError> {
        super::outbox::insert(conn, self.dialect, rows, false, now).await
    }

    pub fn inbox_changed_sender(&self) -> &broadcast::Sender<String> {
        &self.inbox_changed
    }

    /// Announces that a user's inbox changed, here and (PostgreSQL) to every
    /// other instance, whose streams may be serving that user.
    pub(crate) async fn signal_inbox_changed(&self, user_id: &str) {
        let _ = self.inbox_changed.send(user_id.to_owned());
        if self.dialect == Dialect::Postgres {
            let notify = sqlx::query(self.sql(Query::NotifyInbox)).bind(user_id.to_owned()).execute(&self.pool).await;
            if let Err(e) = notify {
                tracing::warn!(error = %e, "could not notify other instances of an inbox change");
            }
        }
    }

    pub fn events_sender(&self) -> &watch::Sender<u64> {
        &self.events_appended
    }

    /// Announces committed events to followers here and (PostgreSQL) in
    /// every other instance.
    pub(crate) async fn signal_events(&self) {
        self.events_appended.send_modify(|n| *n = n.wrapping_add(1));
        if self.dialect == Dialect::Postgres
            && let Err(e) = sqlx::query(self.sql(Query::NotifyEvents)).execute(&self.pool).await
        {
            tracing::warn!(error = %e, "could not notify other instances of new events");
        }
    }

    /// Tells other instances (PostgreSQL only) that rows were enqueued.
    async fn notify_others(&self) {
        if self.dialect == Dialect::Postgres
            && let Err(e) = sqlx::query(self.sql(Query::NotifyEnqueued)).execute(&self.pool).await
        {
            // Polling is the backstop; a lost notification only delays.
            tracing::warn!(error = %e, "could not notify other instances of new rows");
        }
    }
}

/// A SQLite pool's per-connection settings. WAL lets readers run beside the
/// one writer; busy_timeout turns a momentary write lock (another process
/// on the same file) into a wait, not an error. The writer also keeps a
/// larger page cache.
fn sqlite_pool(opts: AnyPoolOptions, writer: bool) -> AnyPoolOptions {
    opts.after_connect(move |conn, _meta| {
        Box::pin(async move {
            conn.execute("PRAGMA journal_mode = WAL").await?;
            conn.execute("PRAGMA busy_timeout = 10000").await?;
            // Every commit waits for the disk: an acknowledged trigger or a
            // recorded outcome survives a power cut (see `run_claim` for the
            // one exception).
            conn.execute("PRAGMA synchronous = FULL").await?;
            // No memory-mapped reads. With 256 MiB mapped, every page of the
            // database the process touched counted in its RSS, so a service
            // under load grew by the size of the file it wrote (27 -> 430-500
            // MiB over a 15 s pipeline bench, still rising) and an operator
            // could not tell that from a leak. Read through the page caches,
            // RSS levels off at about 135 MiB (the writer's 64 MiB cache, the
            // readers' and the heap) and stays there. Measured on
            // 2026-12-04, alternating: pipeline 1.22, 1.02, 0.98 (no loss),
            // the 100,000-row drain 0.99-1.06x slower (median 1.02).
            conn.execute("PRAGMA mmap_size = 0").await?;
            // A multi-row statement inside a transaction keeps a statement
            // journal (the pages it changed, to undo it alone on a
            // constraint error). By default SQLite spills that journal to a
            // temporary file past 64 KiB, which meant a file created,
            // written and deleted for most of the writer's batched
            // statements: 5.5% of the process's CPU in the pipeline bench,
            // in `open`, `pwrite` and `unlink`. In memory it is a copy.
            conn.execute("PRAGMA temp_store = MEMORY").await?;
            if writer {
                conn.execute("PRAGMA cache_size = -65536").await?;
            }
            Ok(())
        })
    })
}

/// Makes the URL say what Herald means by it: a SQLite path is created if
/// missing (`mode=rwc`), and `mariadb://` is MySQL's wire protocol.
fn normalise_url(url: &str, dialect: Dialect) -> String {
    match dialect {
        Dialect::Sqlite if !url.contains("mode=") && !url.contains(":memory:") => {
            let sep = if url.contains('?') { '&' } else { '?' };
            // A URL, not SQL.
            format!("{url}{sep}mode=rwc")
        }
        Dialect::MySql if url.starts_with("mariadb:") => {
            // A URL, not SQL.
            format!("mysql:{}", &url["mariadb:".len()..])
        }
        _ => url.to_owned(),
    }
}

fn outbox_rows(rows: &[AnyRow]) -> Result<Vec<OutboxRow>, StoreError> {
    rows.iter().map(OutboxRow::from_any).collect()
}

#[async_trait]
impl Store for SqlStore {
    fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn enqueued_signal(&self) -> Arc<Notify> {
        self.enqueued.clone()
    }

    async fn migrate(&self) -> Result<Vec<AppliedMigration>, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(StoreError::db("migrate: connect"))?;
        migrate::run(&mut conn, self.dialect, crate::clock::Clock::now(&crate::clock::SystemClock), None).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").run(&self.pool, "ping").await?;
        Ok(())
    }

    async fn database_time(&self) -> Result<Millis, StoreError> {
        let row = sqlx::query(self.sql(Query::DatabaseTime)).one(&self.pool, "read the database's clock").await?;
        Ok(Millis(row.try_get(0).map_err(StoreError::db("read the database's clock"))?))
    }

    async fn enqueue(&self, rows: &[NewOutboxRow], now: Millis) -> Result<Vec<Enqueued>, StoreError> {
        // All or nothing: `enqueue --count 1000` either schedules all of them
        // or reports the error with none scheduled.
        let mut tx = self.begin_write().await.map_err(StoreError::db("enqueue: begin"))?;
        let out = self.enqueue_on(&mut tx, rows, now).await?;
        tx.commit().await.map_err(StoreError::db("enqueue: commit"))?;
        if out.iter().any(|e| e.created) {
            self.signal_enqueued().await;
        }
        Ok(out)
    }

    async fn claim_channel(
        &self,
        channel: &str,
        now: Millis,
        limit: u32,
        token: &str,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        // Both statements take the same binds; the slice's adds its place.
        let claim = |q: Query| {
            sqlx::query(self.sql(q))
                .bind(token.to_owned())
                .bind(self.instance.as_deref().map(str::to_owned))
                .bind(now.0)
                .bind(now.0)
                .bind(channel.to_owned())
                .bind(now.0)
        };
        if let Some((rank, n)) = self.claim_slice(now).await {
            let slice = claim(Query::ClaimChannelSlice).bind(i64::from(n)).bind(i64::from(rank));
            let won = self.run_claim(slice.bind(i64::from(limit)), token).await?;
            if !won.is_empty() {
                return Ok(won);
            }
        }
        let claim = claim(Query::ClaimChannel).bind(i64::from(limit));
        self.run_claim(claim, token).await
    }

    async fn claim_unknown_channels(
        &self,
        known: &[&str],
        now: Millis,
        limit: u32,
        token: &str,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let claim = sqlx::query(self.sql(Query::ClaimUnknownChannels))
            .bind(token.to_owned())
            .bind(self.instance.as_deref().map(str::to_owned))
            .bind(now.0)
            .bind(now.0)
            .bind(now.0)
            .bind(keys_json(known.iter().copied())?)
            .bind(i64::from(limit));
        self.run_claim(claim, token).await
    }

    async fn peek_channel(
        &self,
        channel: &str,
        now: Millis,
        limit: u32,
        exclude: &[&str],
        from_due: Option<Millis>,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        // No lower bound is the smallest one: the statement stays the same.
        let from_due = from_due.map_or(i64::MIN, |m| m.0);
        let exclude = keys_json(exclude.iter().copied())?;
        // Both statements take the same binds; the slice's adds its place.
        let peek = |q: Query| {
            sqlx::query(self.sql(q)).bind(channel.to_owned()).bind(from_due).bind(now.0).bind(exclude.clone())
        };
        if let Some((rank, n)) = self.claim_slice(now).await {
            let slice = peek(Query::PeekChannelSlice).bind(i64::from(n)).bind(i64::from(rank));
            let rows = slice.bind(i64::from(limit)).all(&self.pool, "read due rows").await?;
            if !rows.is_empty() {
                return outbox_rows(&rows);
            }
        }
        let query = peek(Query::PeekChannel).bind(i64::from(limit));
        outbox_rows(&query.all(&self.pool, "read due rows").await?)
    }

    async fn next_due_for(&self, channel: &str) -> Result<Option<Millis>, StoreError> {
        let row = sqlx::query(self.sql(Query::NextDueForChannel))
            .bind(channel.to_owned())
            .one(&self.pool, "next due")
            .await?;
        let v: Option<i64> = row.try_get(0).map_err(StoreError::db("next due"))?;
        Ok(v.map(Millis))
    }

    async fn record_outcomes(&self, items: &[Record], now: Millis) -> Result<Vec<bool>, StoreError> {
        self.record_outcomes_set(items, now).await
    }

    async fn release_many(
        &self,
        claims: &[(String, String)],
        refund_attempt: bool,
        now: Millis,
    ) -> Result<u64, StoreError> {
        if claims.is_empty() {
            return Ok(0);
        }
        let claims: Vec<ClaimRef> = claims.iter().map(|(id, token)| ClaimRef { id, token }).collect();
        let query = sqlx::query(self.sql(Query::ReleaseClaims))
            .bind(to_json(&claims)?)
            .bind(i64::from(refund_attempt))
            .bind(now.0);
        let n = query.run(&self.writer, "release claims").await?;
        Ok(n)
    }

    async fn reclaim_stale(&self, cutoff: Millis, now: Millis) -> Result<u64, StoreError> {
        // Words for `last_error`, not SQL.
        let detail =
            format!("claim taken back at {now}: the instance delivering it stopped or stalled past the stale window");
        let n = sqlx::query(self.sql(Query::ReclaimStale))
            .bind(detail)
            .bind(now.0)
            .bind(cutoff.0)
            .run(&self.writer, "reclaim stale claims")
            .await?;
        Ok(n)
    }

    async fn next_due_at(&self) -> Result<Option<Millis>, StoreError> {
        let row = sqlx::query(self.sql(Query::NextDue)).one(&self.pool, "next due").await?;
        let v: Option<i64> = row.try_get(0).map_err(StoreError::db("next due"))?;
        Ok(v.map(Millis))
    }

    async fn status_summary(&self, now: Millis) -> Result<StatusSummary, StoreError> {
        let db = StoreError::db;
        let rows = sqlx::query(self.sql(Query::CountByStatus)).all(&self.pool, "count by status").await?;
        let mut counts: Vec<StatusCount> =
            OutboxStatus::ALL.iter().map(|&status| StatusCount { status, count: 0 }).collect();
        for row in rows {
            let status = text(&row, "status").map_err(db("count by status"))?;
            let count: i64 = row.try_get(1).map_err(db("count by status"))?;
            let status = status.parse::<OutboxStatus>().map_err(|_| StoreError::CorruptRow {
                table: "engagement_outbox",
                column: "status",
                value: status.clone(),
            })?;
            if let Some(c) = counts.iter_mut().find(|c| c.status == status) {
                c.count = count;
            }
        }
        let oldest = sqlx::query(self.sql(Query::OldestDue)).bind(now.0).optional(&self.pool, "oldest due row").await?;
        let oldest_due = match oldest {
            None => None,
            Some(row) => {
                let due_at = Millis(row.try_get("due_at").map_err(db("oldest due row"))?);
                Some(OldestDue {
                    id: text(&row, "id").map_err(db("oldest due row"))?,
                    user_id: text(&row, "user_id").map_err(db("oldest due row"))?,
                    channel: text(&row, "channel").map_err(db("oldest due row"))?,
                    attempts: row.try_get("attempts").map_err(db("oldest due row"))?,
                    last_error: opt_text(&row, "last_error").map_err(db("oldest due row"))?,
                    overdue_seconds: now.since(due_at).as_secs_f64(),
                    due_at,
                })
            }
        };
        let next_due_at = self.next_due_at().await?;
        Ok(StatusSummary { counts, oldest_due, next_due_at })
    }

    async fn get_outbox(&self, id: &str) -> Result<Option<OutboxRow>, StoreError> {
        let row =
            sqlx::query(self.sql(Query::GetOutbox)).bind(id.to_owned()).optional(&self.pool, "get outbox row").await?;
        row.as_ref().map(OutboxRow::from_any).transpose()
    }

    async fn sends_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<SendRecord>, StoreError> {
        sqlx::query_as(self.sql(Query::SendsForUser))
            .bind(user_id.as_str().to_owned())
            .bind(i64::from(limit))
            .all(&self.pool, "send log for user")
            .await
    }

    async fn sends_for_outbox(&self, outbox_id: &str) -> Result<Vec<SendRecord>, StoreError> {
        sqlx::query_as(self.sql(Query::SendsForOutbox))
            .bind(outbox_id.to_owned())
            .all(&self.pool, "send log for outbox row")
            .await
    }

    async fn pending_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        let rows = sqlx::query(self.sql(Query::PendingForUser))
            .bind(user_id.as_str().to_owned())
            .bind(i64::from(limit))
            .all(&self.pool, "pending rows for user")
            .await?;
        outbox_rows(&rows)
    }

    async fn inbox_for_user(&self, user_id: &UserId, limit: u32) -> Result<Vec<InboxMessage>, StoreError> {
        sqlx::query_as(self.sql(Query::InboxForUser))
            .bind(user_id.as_str().to_owned())
            .bind(i64::from(limit))
            .all(&self.pool, "inbox for user")
            .await
    }
}

#[cfg(test)]
mod tests;
