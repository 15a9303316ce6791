//! The store's SQL, each statement by name, in its final text per dialect.
//!
//! `sqlite/`, `postgres/` and `mariadb/` beside this file hold one block per
//! statement, in one file per area of the store (`outbox.sql`, `flush.sql`,
//! `triggers.sql`, …; PostgreSQL alone has `notify.sql`), with what holds for
//! the whole dialect in its `README.md`. A statement SQLite and MariaDB run
//! in the same text is written once, in `shared/` (also one file per area),
//! and loaded for both: two copies would have to be kept equal by hand. So
//! `grep -r 'name: X$' src/store/queries/mariadb src/store/queries/shared`
//! finds MariaDB's text of X, whichever of the two holds it:
//!
//! ```text
//! -- name: claim_channel
//! -- Claims one channel's due rows for this instance.
//! -- binds: token, instance, now, now, channel, now, limit
//! UPDATE engagement_outbox SET … ;
//! ```
//!
//! The text is written out in full, placeholders in the dialect's own form
//! (`?` on MariaDB, `$1` on PostgreSQL, `?` or `?1` on SQLite), so a reader
//! can grep a statement by its name and paste it into `EXPLAIN`. The Rust
//! still holds the logic once (see the module docs of `store`): it asks for
//! [`Query::ClaimChannel`] and binds the values named on the `binds:` line,
//! in that order, which is the same in all three files (a dialect whose text
//! reads them in another order numbers its placeholders). A statement that
//! dialects run in different ways has one name per way, in the files of the
//! dialects that run it: MariaDB's claim slices (`claim_channel_slice`), a
//! batch as a `VALUES` list on SQLite and MariaDB (`append_sends_values`, one
//! row's tuple that `values::statement` repeats) or as one JSON parameter on
//! PostgreSQL (`append_sends`, rows as arrays of a struct's fields, named by
//! alias).
//!
//! Statements name their columns, never `SELECT *` from a table: on PostgreSQL a
//! prepared `SELECT *` fails with "cached plan must not change result type"
//! once a newer Herald's migration adds a column, so a running instance
//! broke on the first upgrade of another (tests/rolling_upgrade.rs).
//!
//! The alternative rejected was assembling statements in Rust from shared
//! fragments (`format!` with a `match dialect` per difference): fewer lines,
//! but no statement could be read anywhere as the database receives it.
//!
//! The files are parsed once, on first use; every name is checked against
//! [`Query::ALL`] by this module's tests, and `tests/named_queries.rs`
//! runs `EXPLAIN` on every statement on every backend.

use std::sync::LazyLock;

use super::Dialect;

/// Declares [`Query`]: one variant per named statement, with its name in the
/// files and the dialects that have it (a statement for one dialect's
/// feature, such as MariaDB's claim slices, is in that file only).
macro_rules! named_queries {
    ($($(#[$doc:meta])* $variant:ident = $name:literal $(only $($only:ident)|+)?,)*) => {
        /// A statement of the store, by name; its text is [`Query::sql`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Query {
            $($(#[$doc])* $variant,)*
        }

        impl Query {
            /// Every named statement.
            pub const ALL: &[Query] = &[$(Query::$variant,)*];

            /// Its name in the `.sql` files.
            pub fn name(self) -> &'static str {
                match self {
                    $(Query::$variant => $name,)*
                }
            }

            /// Whether `dialect`'s file has this statement.
            pub fn runs_on(self, dialect: Dialect) -> bool {
                match self {
                    $(Query::$variant => named_queries!(@on dialect $($($only)|+)?),)*
                }
            }
        }
    };
    (@on $d:ident) => { true };
    (@on $d:ident $($only:ident)|+) => { matches!($d, $(Dialect::$only)|+) };
}

named_queries! {
    /// Claims one channel's due rows, oldest due first.
    ClaimChannel = "claim_channel",
    /// MariaDB: [`Query::ClaimChannel`] within this instance's slice.
    ClaimChannelSlice = "claim_channel_slice" only MySql,
    /// Claims due rows of channels this instance does not have.
    ClaimUnknownChannels = "claim_unknown_channels",
    /// MariaDB: the rows a claim won, read back by its token.
    ClaimedByToken = "claimed_by_token" only MySql,
    /// MariaDB: the live instances, for the claim slices.
    LiveInstances = "live_instances" only MySql,
    /// One channel's due rows, unclaimed.
    PeekChannel = "peek_channel",
    /// MariaDB: [`Query::PeekChannel`] within this instance's slice.
    PeekChannelSlice = "peek_channel_slice" only MySql,
    /// The earliest due time of one channel's scheduled rows.
    NextDueForChannel = "next_due_for_channel",
    /// The earliest due time of all scheduled rows.
    NextDue = "next_due",
    /// Gives claims back unfinished.
    ReleaseClaims = "release_claims",
    /// Takes back claims older than the stale window.
    ReclaimStale = "reclaim_stale",
    /// Cancels a rule's scheduled rows.
    CancelScheduledRule = "cancel_scheduled_rule",
    /// Cancels a user's scheduled rows.
    CancelScheduledUser = "cancel_scheduled_user",
    /// Cancels one row's scheduled rows.
    CancelScheduledRow = "cancel_scheduled_row",
    /// MariaDB: locks a rule's scheduled rows for [`Query::CancelScheduledRule`].
    LockScheduledRule = "lock_scheduled_rule" only MySql,
    /// MariaDB: locks a user's scheduled rows for [`Query::CancelScheduledUser`].
    LockScheduledUser = "lock_scheduled_user" only MySql,
    /// MariaDB: locks one row's scheduled rows for [`Query::CancelScheduledRow`].
    LockScheduledRow = "lock_scheduled_row" only MySql,
    /// Records a trigger to many, unplanned.
    InsertFanOutTrigger = "insert_fan_out_trigger",
    /// The users a 'users' trigger names.
    InsertTriggerUsers = "insert_trigger_users",
    /// Triggers to many waiting for an expander.
    FanOutsToExpand = "fan_outs_to_expand",
    /// Takes a trigger's expansion (a lease, by compare-and-set).
    TakeFanOut = "take_fan_out",
    /// Locks a trigger for one chunk, if this instance still holds it.
    HoldFanOut = "hold_fan_out",
    /// A trigger with its audience and expansion.
    FanOutState = "fan_out_state",
    /// A topic trigger's audience, counted.
    CountTopicAudience = "count_topic_audience",
    /// A 'users' trigger's audience, counted.
    CountUsersAudience = "count_users_audience",
    /// Stores the audience's size.
    SetAudienceSize = "set_audience_size",
    /// The next chunk of a topic trigger's audience.
    TopicChunk = "topic_chunk",
    /// The next chunk of a 'users' trigger's audience.
    UsersChunk = "users_chunk",
    /// Plans a chunk of a topic trigger in one statement.
    PlanTopicChunk = "plan_topic_chunk",
    /// Plans a chunk of a 'users' trigger in one statement.
    PlanUsersChunk = "plan_users_chunk",
    /// Moves an expansion's cursor past a chunk.
    AdvanceFanOut = "advance_fan_out",
    /// Counts a trigger's rows when its expansion is done.
    CountFanOutRows = "count_fan_out_rows",
    /// Marks an expansion done.
    FinishFanOut = "finish_fan_out",
    /// Marks a trigger cancelled.
    CancelTrigger = "cancel_trigger",
    /// Deletes a 'users' trigger's list once it is no longer needed.
    ForgetTriggerUsers = "forget_trigger_users",
    /// Cancels a chunk of a trigger's scheduled rows.
    CancelScheduledTrigger = "cancel_scheduled_trigger",
    /// MariaDB: locks a chunk of a trigger's scheduled rows for [`Query::CancelScheduledTrigger`].
    LockScheduledTrigger = "lock_scheduled_trigger" only MySql,
    /// A trigger's messages counted by status, channel and why not.
    TriggerOutcomes = "trigger_outcomes",
    /// Outbox rows by status.
    CountByStatus = "count_by_status",
    /// The oldest row that is due and waiting.
    OldestDue = "oldest_due",
    /// One outbox row.
    GetOutbox = "get_outbox",
    /// A user's send log, newest first.
    SendsForUser = "sends_for_user",
    /// One outbox row's send log, oldest first.
    SendsForOutbox = "sends_for_outbox",
    /// A user's rows still waiting, newest first.
    PendingForUser = "pending_for_user",
    /// A user's inbox, newest first.
    InboxForUser = "inbox_for_user",
    /// The database's clock.
    DatabaseTime = "database_time",
    /// A flush's fenced outbox update, for rows still claimed.
    RecordClaimed = "record_claimed" only Postgres | MySql,
    /// A flush's fenced outbox update, for rows never claimed.
    RecordUnclaimed = "record_unclaimed" only Postgres | MySql,
    /// SQLite: [`Query::RecordClaimed`] as a `VALUES` list (see `values`).
    RecordClaimedValues = "record_claimed_values" only Sqlite,
    /// SQLite: [`Query::RecordUnclaimed`] as a `VALUES` list.
    RecordUnclaimedValues = "record_unclaimed_values" only Sqlite,
    /// MariaDB: locks the rows [`Query::RecordClaimed`] may change.
    LockClaimed = "lock_claimed" only MySql,
    /// MariaDB: locks the rows [`Query::RecordUnclaimed`] may change.
    LockUnclaimed = "lock_unclaimed" only MySql,
    /// Appends send-log rows given as one JSON parameter.
    AppendSends = "append_sends" only Postgres,
    /// Appends send-log rows as a `VALUES` list (see `values`).
    AppendSendsValues = "append_sends_values" only Sqlite | MySql,
    /// Appends events given as one JSON parameter.
    AppendEvents = "append_events" only Postgres,
    /// Appends events as a `VALUES` list (see `values`).
    AppendEventsValues = "append_events_values" only Sqlite | MySql,
    /// Writes inbox messages as a `VALUES` list (see `values`).
    InsertInboxValues = "insert_inbox_values" only Sqlite | MySql,
    /// The end of an outcome flush in one statement: positions taken,
    /// events appended, inbox messages written, other instances notified.
    AppendEventsAndInbox = "append_events_and_inbox" only Postgres,
    /// Inserts outbox rows given as one JSON parameter.
    InsertOutbox = "insert_outbox" only Postgres,
    /// Inserts outbox rows as a `VALUES` list (see `values`).
    InsertOutboxValues = "insert_outbox_values" only Sqlite | MySql,
    /// Takes positions in commit order for a transaction's events and
    /// inbox messages.
    ReservePositions = "reserve_positions",
    /// The newest position handed out.
    NewestPosition = "newest_position",
    /// Records one trigger.
    InsertTrigger = "insert_trigger",
    /// The trigger that holds an idempotency key.
    TriggerByIdempotencyKey = "trigger_by_idempotency_key",
    /// Records a batch of triggers planned in the same transaction.
    AcceptTriggers = "accept_triggers",
    /// The triggers that hold some idempotency keys.
    TriggersByIdempotencyKeys = "triggers_by_idempotency_keys",
    /// MariaDB: locks the triggers [`Query::PlanTriggers`] will mark.
    LockUnplanned = "lock_unplanned" only MySql,
    /// Marks triggers planned, by compare-and-set.
    PlanTriggers = "plan_triggers",
    /// One trigger.
    GetTrigger = "get_trigger",
    /// When some triggers happened.
    TriggerTimes = "trigger_times",
    /// Which of some trigger ids are recorded.
    RecordedTriggers = "recorded_triggers",
    /// MariaDB (Galera): [`Query::RecordedTriggers`] after the node caught up.
    RecordedTriggersSynced = "recorded_triggers_synced" only MySql,
    /// Triggers not planned yet.
    UnplannedTriggers = "unplanned_triggers",
    /// The outbox rows planned from one trigger.
    OutboxForTrigger = "outbox_for_trigger",
    /// The latest triggers of a type.
    RecentTriggers = "recent_triggers",
    /// A user's triggers.
    TriggersForUser = "triggers_for_user",
    /// Events after a position.
    EventsAfter = "events_after",
    /// The newest event's position.
    LatestEventPosition = "latest_event_position",
    /// One event's position.
    EventPosition = "event_position",
    /// A page of a user's messages, filtered.
    InboxPage = "inbox_page",
    /// A user's messages after a position.
    InboxAfter = "inbox_after",
    /// A user's newest message's position.
    InboxLatestPosition = "inbox_latest_position",
    /// Where an old client's stream resumes.
    InboxResumePosition = "inbox_resume_position",
    /// A user's badge counts.
    InboxCounts = "inbox_counts",
    /// Marks a message seen.
    InboxMarkSeen = "inbox_mark_seen",
    /// Marks a message read.
    InboxMarkRead = "inbox_mark_read",
    /// Marks a message unread.
    InboxMarkUnread = "inbox_mark_unread",
    /// Archives a message.
    InboxArchive = "inbox_archive",
    /// One of a user's messages.
    InboxMessage = "inbox_message",
    /// Marks all of a user's messages read.
    InboxReadAll = "inbox_read_all",
    /// Gives a lease up.
    EndLease = "end_lease",
    /// Takes back the rows of instances whose lease lapsed.
    RescueLapsed = "rescue_lapsed",
    /// Forgets long-lapsed instances.
    ForgetLapsedInstances = "forget_lapsed_instances",
    /// Every instance.
    ListInstances = "list_instances",
    /// Takes or renews a lease.
    RenewLease = "renew_lease",
    /// The items of some digest messages.
    DigestItems = "digest_items",
    /// The digests a trigger is in.
    DigestsOfTrigger = "digests_of_trigger",
    /// Whether a trigger is in a digest of a rule.
    DigestItemOfRule = "digest_item_of_rule",
    /// Makes a digest bucket's row.
    CreateDigestBucket = "create_digest_bucket",
    /// A bucket's open digest, locked.
    ReadDigestBucket = "read_digest_bucket",
    /// Joins an open digest, by compare-and-set.
    JoinDigest = "join_digest",
    /// Counts an item into a bucket.
    CountDigestItem = "count_digest_item",
    /// Opens a bucket's next digest.
    OpenDigest = "open_digest",
    /// Adds a trigger to a digest.
    InsertDigestItem = "insert_digest_item",
    /// What became of escalations' originals.
    OriginalStates = "original_states",
    /// Messages whose follow-up is due.
    DueFollowUps = "due_follow_ups",
    /// Marks follow-ups planned.
    ClearFollowUps = "clear_follow_ups",
    /// The slots of some frequency caps' buckets, locked.
    ReadThrottleSlots = "read_throttle_slots",
    /// Adds the slots a batch lacks.
    AddThrottleSlots = "add_throttle_slots",
    /// Marks slots used.
    TakeThrottleSlots = "take_throttle_slots",
    /// SQLite: takes slots read outside the write lock, all or none.
    TakeKnownThrottleSlots = "take_known_throttle_slots" only Sqlite,
    /// Adds a rule.
    InsertRule = "insert_rule",
    /// One rule.
    GetRule = "get_rule",
    /// Every rule.
    ListRules = "list_rules",
    /// Replaces a rule.
    UpdateRule = "update_rule",
    /// Deletes a rule.
    DeleteRule = "delete_rule",
    /// Every enabled rule.
    EnabledRules = "enabled_rules",
    /// Some rules' versions.
    RuleVersions = "rule_versions",
    /// Some rules.
    RulesByIds = "rules_by_ids",
    /// PostgreSQL: wakes other instances' workers.
    NotifyEnqueued = "notify_enqueued" only Postgres,
    /// PostgreSQL: wakes other instances' event followers.
    NotifyEvents = "notify_events" only Postgres,
    /// PostgreSQL: wakes other instances' inbox streams.
    NotifyInbox = "notify_inbox" only Postgres,
    /// Suppresses an address unless it already is.
    InsertSuppression = "insert_suppression",
    /// The suppression in force for an address and category.
    FindSuppression = "find_suppression",
    /// An address's suppressions.
    SuppressionsOfAddress = "suppressions_of_address",
    /// The newest suppressions.
    ListSuppressions = "list_suppressions",
    /// The send log for an address.
    SendsForAddress = "sends_for_address",
    /// Which rows hold some dedupe keys.
    OutboxByDedupeKeys = "outbox_by_dedupe_keys",
    /// Creates a recipient unless it exists.
    InsertRecipient = "insert_recipient",
    /// Replaces a recipient.
    UpdateRecipient = "update_recipient",
    /// One recipient.
    GetRecipient = "get_recipient",
    /// Some users' recipients.
    RecipientsByIds = "recipients_by_ids",
    /// The users whose phone has an address hash.
    RecipientsByPhoneHash = "recipients_by_phone_hash",
    /// Creates a recipient the host has not described, unless it exists.
    InsertBareRecipient = "insert_bare_recipient",
    /// A user's own choices, locked.
    LockUserChoices = "lock_user_choices",
    /// Stores a user's own choices.
    UpdateUserChoices = "update_user_choices",
    /// Erasure: a user's inbox.
    DeleteUserInbox = "delete_user_inbox",
    /// Erasure: a user's recipient row.
    DeleteRecipient = "delete_recipient",
    /// Erasure: remembers the user was deleted.
    RememberErasedUser = "remember_erased_user",
    /// Whether a user was deleted.
    ErasedUser = "erased_user",
    /// Forgets a user was deleted.
    UneraseUser = "unerase_user",
    /// Appends an operator's action to the audit log.
    InsertAuditEntry = "insert_audit_entry",
    /// Adds an operator (a taken email fails on the key).
    InsertOperator = "insert_operator",
    /// An operator by email.
    OperatorByEmail = "operator_by_email",
    /// Ends an operator's sessions.
    DeleteOperatorSessions = "delete_operator_sessions",
    /// Removes an operator.
    DeleteOperator = "delete_operator",
    /// Forgets expired sessions.
    PurgeExpiredSessions = "purge_expired_sessions",
    /// Forgets login attempts older than their retention.
    PurgeLoginAttempts = "purge_login_attempts",
    /// Starts an operator session (the token's hash, never the token).
    InsertSession = "insert_session",
    /// A session by its token's hash.
    SessionByToken = "session_by_token",
    /// Ends a session.
    DeleteSession = "delete_session",
    /// Records a login attempt.
    InsertLoginAttempt = "insert_login_attempt",
    /// Settles a pending login attempt's outcome.
    SetLoginOutcome = "set_login_outcome",
    /// An email's latest successful login since `since`.
    LastLoginSuccess = "last_login_success",
    /// An email's failed (or pending) logins after `since`, and the oldest.
    LoginFailuresByEmail = "login_failures_by_email",
    /// An address's failed (or pending) logins after `since`, and the oldest.
    LoginFailuresByIp = "login_failures_by_ip",
    /// Failed (or pending) logins of an email from an address after `since`, and the oldest.
    LoginFailuresByEmailIp = "login_failures_by_email_ip",
    /// Whether an email logged in from an address since `since`.
    KnownLoginAddress = "known_login_address",
    /// The latest login attempts.
    RecentLoginAttempts = "recent_login_attempts",
    /// The audit log of one target, newest first.
    AuditForTarget = "audit_for_target",
    /// The audit log before an id, newest first.
    AuditBefore = "audit_before",
    /// An address's suppression lifts, newest first.
    SuppressionLiftsOfAddress = "suppression_lifts_of_address",
    /// The newest suppression lifts.
    SuppressionLifts = "suppression_lifts",
    /// Adds an API key.
    InsertApiKey = "insert_api_key",
    /// An API key by its hash.
    ApiKeyByHash = "api_key_by_hash",
    /// Every API key.
    ListApiKeys = "list_api_keys",
    /// Revokes an API key.
    RevokeApiKey = "revoke_api_key",
    /// Files a push device unless its device_hash is taken.
    InsertPushDevice = "insert_push_device",
    /// The push device that holds a device_hash, locked.
    LockPushDeviceByHash = "lock_push_device_by_hash",
    /// Gives a known push device to a user and lifts its removal.
    ReclaimPushDevice = "reclaim_push_device",
    /// One push device.
    PushDeviceById = "push_device_by_id",
    /// A user's live push devices.
    LivePushDevices = "live_push_devices",
    /// Some users' live push devices.
    LivePushDevicesOf = "live_push_devices_of",
    /// A user's push devices, removed ones too.
    AllPushDevices = "all_push_devices",
    /// Marks one of a user's push devices removed.
    RemovePushDevice = "remove_push_device",
    /// Records providers' acceptances for some push devices.
    MarkPushSuccess = "mark_push_success",
    /// Erasure: a user's push devices.
    DeleteUserPushDevices = "delete_user_push_devices",
    /// Creates a topic unless it exists.
    InsertTopic = "insert_topic",
    /// Replaces a topic's name and description.
    UpdateTopic = "update_topic",
    /// One topic, with its subscriber count.
    GetTopic = "get_topic",
    /// A page of topics.
    ListTopics = "list_topics",
    /// A topic's subscriptions, with the topic.
    DeleteTopicSubscriptions = "delete_topic_subscriptions",
    /// A topic's row.
    DeleteTopic = "delete_topic",
    /// Subscribes users to a topic, skipping those already subscribed.
    Subscribe = "subscribe",
    /// Removes users from a topic.
    Unsubscribe = "unsubscribe",
    /// A page of a topic's subscribers.
    TopicSubscribers = "topic_subscribers",
    /// A page of the topics a user follows.
    UserTopics = "user_topics",
    /// The names of some topics.
    TopicNames = "topic_names",
    /// Erasure: the topics a user follows.
    DeleteUserSubscriptions = "delete_user_subscriptions",
    /// Retention: finished `sent` outbox rows, oldest first.
    PruneOutboxSent = "prune_outbox_sent",
    /// Retention: finished outbox rows of another status, oldest first.
    PruneOutboxOthers = "prune_outbox_others",
    /// Retention: the send log's oldest rows.
    PruneSends = "prune_sends",
    /// Retention: messages archived long ago.
    PruneArchivedInbox = "prune_archived_inbox",
    /// Retention: old bounce evidence.
    PruneBounces = "prune_bounces",
    /// Retention: old planned triggers nothing waits on.
    PruneTriggers = "prune_triggers",
    /// Retention: closed digests.
    PruneDigests = "prune_digests",
    /// Retention: the items of digests whose message is gone.
    PruneDigestItems = "prune_digest_items",
    /// Retention: frequency-cap slots no cap counts.
    PruneThrottleSlots = "prune_throttle_slots",
    /// Retention: the oldest events' positions and times.
    PruneEventsOldest = "prune_events_oldest",
    /// Retention: events up to a position.
    PruneEvents = "prune_events",
}

/// One block of a `.sql` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub name: &'static str,
    /// The comment lines between the name and the binds.
    pub doc: Vec<&'static str>,
    /// The values the statement takes, in bind order.
    pub binds: Vec<&'static str>,
    /// The statement, without its final `;`.
    pub sql: &'static str,
}

/// Why a `.sql` file could not be read: a bug in the file, found by the
/// tests (and at the first statement run).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("line {line}: {what}")]
    Malformed { line: usize, what: &'static str },
    #[error("src/store/queries/{dir}/{area}.sql: {inner}")]
    InFile { dir: &'static str, area: &'static str, inner: Box<ParseError> },
}

impl ParseError {
    /// Names the file the error is in.
    fn in_file(self, dir: &'static str, area: &'static str) -> Self {
        ParseError::InFile { dir, area, inner: Box::new(self) }
    }
}

/// Declares a dialect's files: each area's name and text, in reading order.
macro_rules! sql_files {
    ($dir:literal: $($area:literal),* $(,)?) => {
        &[$(($area, include_str!(concat!($dir, "/", $area, ".sql"))),)*]
    };
}

/// One `.sql` file: its area (the file's name without `.sql`) and its text.
pub type SqlFile = (&'static str, &'static str);

const SQLITE: &[SqlFile] = sql_files!("sqlite":
    "outbox", "flush", "triggers", "fan_out", "instances", "workflows", "rules", "recipients", "push_devices", "retention",
    "topics");
const POSTGRES: &[SqlFile] = sql_files!("postgres":
    "outbox", "flush", "triggers", "fan_out", "events", "inbox", "instances", "workflows", "rules", "notify", "recipients",
    "operators", "push_devices", "retention", "topics");
const MARIADB: &[SqlFile] = sql_files!("mariadb":
    "outbox", "flush", "triggers", "fan_out", "instances", "workflows", "rules", "recipients", "push_devices", "retention",
    "topics");
/// The statements SQLite and MariaDB run in the same text, written once.
const SHARED: &[SqlFile] = sql_files!("shared":
    "outbox", "flush", "triggers", "fan_out", "events", "inbox", "instances", "workflows", "rules", "recipients",
    "operators", "push_devices", "retention", "topics");

/// One dialect's files. Split by area so that none grows past what a reader
/// scrolls through; the rejected alternative, one file per dialect, passed
/// 780 lines before every statement had a name.
pub fn files(dialect: Dialect) -> &'static [SqlFile] {
    match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MARIADB,
    }
}

/// The files a dialect shares with another: `shared/`, whose statements
/// SQLite and MariaDB run in the same text (PostgreSQL's placeholders and
/// JSON functions differ from both, so it shares none).
pub fn shared_files(dialect: Dialect) -> &'static [SqlFile] {
    match dialect {
        Dialect::Sqlite | Dialect::MySql => SHARED,
        Dialect::Postgres => &[],
    }
}

/// Every block a dialect runs: its own files', then the shared ones'.
pub fn dialect_blocks(dialect: Dialect) -> Result<Vec<Block>, ParseError> {
    let mut blocks = Vec::new();
    let sources = [(file_stem(dialect), files(dialect)), ("shared", shared_files(dialect))];
    for (dir, list) in sources {
        for &(area, text) in list {
            blocks.extend(parse(text).map_err(|e| e.in_file(dir, area))?);
        }
    }
    Ok(blocks)
}

/// Splits a file into its blocks, in file order. A block starts at
/// `-- name: X`, continues with `--` comment lines (the last of which is
/// `-- binds: a, b` or `-- binds:` for none) and ends with the statement's
/// closing `;` at the end of a line.
pub fn parse(text: &'static str) -> Result<Vec<Block>, ParseError> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let line = line.trim_end();
        if line.is_empty() || (line.starts_with("--") && !line.starts_with("-- name:")) {
            continue;
        }
        let Some(name) = line.strip_prefix("-- name:").map(str::trim) else {
            return Err(ParseError::Malformed { line: n + 1, what: "text outside a block" });
        };
        let mut doc = Vec::new();
        let mut binds = None;
        while let Some((m, l)) = lines.next_if(|(_, l)| l.starts_with("--")) {
            if let Some(list) = l.strip_prefix("-- binds:") {
                binds = Some(list.split(',').map(str::trim).filter(|b| !b.is_empty()).collect());
                break;
            }
            if l.starts_with("-- name:") {
                return Err(ParseError::Malformed { line: m + 1, what: "a block without a statement" });
            }
            doc.push(l.trim_start_matches('-').trim());
        }
        let binds = binds.ok_or(ParseError::Malformed { line: n + 1, what: "no `-- binds:` line" })?;
        // The statement: from here to the line that ends with `;`, as a
        // slice of the file (no copy).
        let Some(&(first, _)) = lines.peek() else {
            return Err(ParseError::Malformed { line: n + 1, what: "a block without a statement" });
        };
        let start = line_offset(text, first);
        let mut end = None;
        for (m, l) in lines.by_ref() {
            if l.trim_end().ends_with(';') {
                end = Some(line_offset(text, m) + l.trim_end().len() - 1);
                break;
            }
        }
        let end = end.ok_or(ParseError::Malformed { line: n + 1, what: "a statement without its closing `;`" })?;
        blocks.push(Block { name, doc, binds, sql: text[start..end].trim() });
    }
    Ok(blocks)
}

/// The byte offset of line `n` (from 0) of `text`.
fn line_offset(text: &str, n: usize) -> usize {
    text.split_inclusive('\n').take(n).map(str::len).sum()
}

/// Where a dialect's statements are in [`TEXTS`].
fn slot(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => 0,
        Dialect::Postgres => 1,
        Dialect::MySql => 2,
    }
}

/// Each dialect's statements (in [`slot`] order), indexed by `Query as usize`.
static BLOCKS: LazyLock<[Vec<Option<Block>>; 3]> = LazyLock::new(|| {
    [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql].map(|d| {
        let blocks = dialect_blocks(d).unwrap_or_else(|e| panic!("{e}"));
        Query::ALL.iter().map(|q| blocks.iter().find(|b| b.name == q.name()).cloned()).collect()
    })
});

/// The name of a dialect's directory.
pub fn file_stem(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "sqlite",
        Dialect::Postgres => "postgres",
        Dialect::MySql => "mariadb",
    }
}

impl Query {
    /// This statement's text in `dialect`. A statement a dialect does not
    /// have is a bug in the caller (see [`Query::runs_on`]), caught by the
    /// tests that run it there.
    pub fn sql(self, dialect: Dialect) -> &'static str {
        self.block(dialect).sql
    }

    /// The text of a multi-row statement (one whose row tuple is marked
    /// `/* each row */`) for `rows` rows: the tuple repeated, as a flush
    /// runs it.
    pub fn sql_for_rows(self, dialect: Dialect, rows: usize) -> String {
        super::values::repeat_row(self.sql(dialect), rows)
    }

    /// The values this statement takes, in bind order.
    pub fn binds(self, dialect: Dialect) -> &'static [&'static str] {
        &self.block(dialect).binds
    }

    fn block(self, dialect: Dialect) -> &'static Block {
        BLOCKS[slot(dialect)][self as usize]
            .as_ref()
            .unwrap_or_else(|| panic!("queries/{}/ has no statement {}", file_stem(dialect), self.name()))
    }
}

#[cfg(test)]
mod tests;
