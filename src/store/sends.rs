//! Appending to `engagement_sends`, the send log, in sets.

use sqlx::AnyConnection;

use super::json_rows::row_as_array;
use super::queries::Query;
use super::{Dialect, StoreError, new_id_at};
use crate::clock::Millis;

/// One send-log row to append.
#[derive(Debug, Clone)]
pub(crate) struct NewSend {
    pub outbox_id: String,
    pub rule_id: Option<String>,
    pub trigger_id: Option<String>,
    pub user_id: String,
    pub channel: String,
    pub transport: Option<String>,
    pub address_hash: Option<String>,
    pub status: &'static str,
    pub detail: Option<String>,
    pub attempts: i64,
    pub provider_id: Option<String>,
}

/// Appends the rows on the caller's connection (inside its transaction).
pub(crate) async fn insert(
    conn: &mut AnyConnection,
    d: Dialect,
    sends: &[NewSend],
    now: Millis,
) -> Result<(), StoreError> {
    let rows: Vec<SendRow> = sends
        .iter()
        .map(|s| SendRow {
            // Made from `now`, like created_at: the id range is the time range.
            id: new_id_at(now),
            outbox_id: &s.outbox_id,
            rule_id: s.rule_id.as_deref(),
            trigger_id: s.trigger_id.as_deref(),
            user_id: &s.user_id,
            channel: &s.channel,
            transport: s.transport.as_deref(),
            address_hash: s.address_hash.as_deref(),
            status: s.status,
            detail: s.detail.as_deref(),
            attempts: s.attempts,
            provider_id: s.provider_id.as_deref(),
        })
        .collect();
    let queries = (Query::AppendSends, Query::AppendSendsValues);
    super::values::insert(conn, d, queries, rows, now, "append to the send log").await.map(drop)
}

row_as_array! {
    /// One send-log row as `append_sends` reads it (PostgreSQL: one row
    /// of its JSON array) and `append_sends_values` binds it.
    #[derive(Debug)]
    struct SendRow<'a> {
        /// A UUIDv7 made from the row's `created_at`.
        id: String,
        /// The outbox row the outcome is for.
        outbox_id: &'a str,
        /// The rule that planned it, if any.
        rule_id: Option<&'a str>,
        /// The trigger it was planned from, if any.
        trigger_id: Option<&'a str>,
        /// The recipient.
        user_id: &'a str,
        /// The channel that delivered it, or declined to.
        channel: &'a str,
        /// How it went out (`smtp`, `file`, `inbox`, …), when it did.
        transport: Option<&'a str>,
        /// The HMAC of the recipient's address.
        address_hash: Option<&'a str>,
        /// What happened (`SendStatus`).
        status: &'static str,
        /// Why, in words, for every status but `sent`.
        detail: Option<&'a str>,
        /// Deliveries started.
        attempts: i64,
        /// The provider's id for the message, when it gave one.
        provider_id: Option<&'a str>,
    }
}
