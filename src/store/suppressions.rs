//! `engagement_suppressions`: addresses (by hash) Herald must not mail, and
//! the send log searched by address hash.
//!
//! A suppression covers one category or, with category `*`, all of them.
//! Hard bounces, complaints and manual entries are `*`; a one-click
//! unsubscribe suppresses the category the message was in. Lifting deletes
//! the row: what was suppressed, when and why stays in the send log (every
//! message it stopped is a `suppressed` row there naming the reason).

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;

use super::events::NewEvent;
use super::queries::Query;
use super::rows::{Column, from_columns, text};
use super::rows::{Fetch, Run};
use super::{Dialect, SendRecord, SqlStore, Store, StoreError};
use crate::clock::Millis;

/// The category value meaning "every category".
pub const ALL_CATEGORIES: &str = "*";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuppressionReason {
    /// The mailbox does not exist (5.1.1 and kin).
    HardBounce,
    /// Soft bounces kept coming (`bounces.soft_bounce_limit` within
    /// `bounces.soft_bounce_window`); expires after the window.
    SoftBounce,
    /// The recipient reported a message as spam.
    Complaint,
    /// The recipient unsubscribed (one category).
    Unsubscribe,
    /// An operator added it.
    Manual,
    /// The number's owner texted STOP (or the provider reported one,
    /// Twilio 21610): every category but `transactional`, which the SMS
    /// channel lets through. Only a START lifts it by text; a START never
    /// lifts another reason (an operator's, an invalid number).
    Stop,
}

impl SuppressionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SuppressionReason::HardBounce => "hard_bounce",
            SuppressionReason::SoftBounce => "soft_bounce",
            SuppressionReason::Complaint => "complaint",
            SuppressionReason::Unsubscribe => "unsubscribe",
            SuppressionReason::Manual => "manual",
            SuppressionReason::Stop => "stop",
        }
    }

    pub fn parse(s: &str) -> Option<SuppressionReason> {
        Some(match s {
            "hard_bounce" => SuppressionReason::HardBounce,
            "soft_bounce" => SuppressionReason::SoftBounce,
            "complaint" => SuppressionReason::Complaint,
            "unsubscribe" => SuppressionReason::Unsubscribe,
            "manual" => SuppressionReason::Manual,
            "stop" => SuppressionReason::Stop,
            _ => return None,
        })
    }
}

impl fmt::Display for SuppressionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuppressionRow {
    pub address_hash: String,
    /// What `address_hash` is the hash of: an email address or a phone
    /// number. Kept with the hash it was first suppressed under.
    pub address_kind: crate::address::AddressKind,
    /// A category, or `*` for all.
    pub category: String,
    pub reason: SuppressionReason,
    /// Where it came from: the server's reply, "one-click unsubscribe", an
    /// operator's note.
    pub detail: Option<String>,
    pub created_at: Millis,
    /// After this it no longer applies; `None`: until lifted.
    pub expires_at: Option<Millis>,
}

impl Column for SuppressionReason {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        let reason = text(row, col)?;
        SuppressionReason::parse(&reason).ok_or_else(|| sqlx::Error::ColumnDecode {
            index: col.into(),
            // An error's words, not SQL.
            source: format!("unknown suppression reason {reason:?}").into(),
        })
    }
}

impl Column for crate::address::AddressKind {
    fn read(row: &AnyRow, col: &str) -> Result<Self, sqlx::Error> {
        Ok(crate::address::AddressKind::parse(&text(row, col)?))
    }
}

from_columns!(SuppressionRow: address_hash, address_kind, category, reason, detail, created_at, expires_at);

/// Who lifts a suppression, and why.
#[derive(Debug, Clone, Copy)]
pub struct Lift<'a> {
    /// Free text from the operator: "customer fixed their mailbox".
    pub reason: Option<&'a str>,
    /// An operator's email, or `api key "NAME"`.
    pub by: &'a str,
    /// Also append an audit-log row (operator actions from the screen).
    pub audit: bool,
}

#[async_trait]
pub trait SuppressionStore: Send + Sync {
    /// Adds a suppression; true when it is new. An existing one for the same
    /// hash and category takes the new reason, detail and expiry and keeps
    /// its creation time, so repeating a suppression is harmless.
    async fn suppress(&self, s: &SuppressionRow) -> Result<bool, StoreError>;

    /// The suppression in force for this address and category (one for the
    /// category itself, or for `*`), if any. `category` `None` checks `*` only.
    async fn active_suppression(
        &self,
        address_hash: &str,
        category: Option<&str>,
        now: Millis,
    ) -> Result<Option<SuppressionRow>, StoreError>;

    /// Suppressions, newest first; for one address hash when given.
    /// Expired ones are listed too (with their `expires_at`).
    async fn list_suppressions(
        &self,
        address_hash: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SuppressionRow>, StoreError>;

    /// Lifts suppressions of an address: one category, or all of them when
    /// `category` is `None`. Returns how many were lifted. When any were,
    /// who lifted them and why is kept (`engagement_suppression_lifts`), in
    /// the event, and for an operator in the audit log, all in the lift's
    /// transaction.
    async fn lift_suppression(
        &self,
        address_hash: &str,
        category: Option<&str>,
        lift: &Lift<'_>,
        now: Millis,
    ) -> Result<u64, StoreError>;

    /// The send log for one address hash, newest first.
    async fn sends_for_address(&self, address_hash: &str, limit: u32) -> Result<Vec<SendRecord>, StoreError>;
}

/// Adds or replaces a suppression inside the caller's transaction (bounce
/// ingestion suppresses in the same transaction as it records the bounce),
/// and pushes its event onto `events` for the caller to append last (see
/// `positions`: events take their positions after every other lock).
/// Returns whether it was new.
pub(crate) async fn suppress_in(
    tx: &mut sqlx::AnyConnection,
    d: Dialect,
    s: &SuppressionRow,
    events: &mut Vec<NewEvent>,
) -> Result<bool, StoreError> {
    // Update, else insert (as recipients do): MySQL reports a matched
    // row as affected, so "0" means absent on every dialect.
    let update = d.sql(
        "UPDATE engagement_suppressions SET reason = ?, detail = ?, expires_at = ? \
             WHERE address_hash = ? AND category = ?",
    );
    let updated = sqlx::query(&update)
        .bind(s.reason.as_str())
        .bind(s.detail.clone())
        .bind(s.expires_at.map(|t| t.0))
        .bind(s.address_hash.clone())
        .bind(s.category.clone())
        .run(&mut *tx, "suppress: update")
        .await?;
    let created = updated == 0;
    if created {
        // Ignoring a duplicate: a concurrent suppress of the same address
        // (two bounces at once) is not an error.
        sqlx::query(Query::InsertSuppression.sql(d))
            .bind(s.address_hash.clone())
            .bind(s.address_kind.as_str())
            .bind(s.category.clone())
            .bind(s.reason.as_str())
            .bind(s.detail.clone())
            .bind(s.created_at.0)
            .bind(s.expires_at.map(|t| t.0))
            .run(&mut *tx, "suppress: insert")
            .await?;
    }
    let event = serde_json::json!({
        "address_hash": s.address_hash, "address_kind": s.address_kind, "category": s.category, "reason": s.reason.as_str(),
        "detail": s.detail, "expires_at": s.expires_at.map(|t| t.to_rfc3339()), "at": s.created_at.to_rfc3339(),
    });
    events.push(NewEvent { kind: "suppression", user_id: None, outbox_id: None, data: event });
    Ok(created)
}

#[async_trait]
impl SuppressionStore for SqlStore {
    async fn suppress(&self, s: &SuppressionRow) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await.map_err(StoreError::db("suppress: begin"))?;
        let mut events = Vec::with_capacity(1);
        let created = suppress_in(&mut tx, self.dialect(), s, &mut events).await?;
        super::events::append(&mut tx, self.dialect(), &events, s.created_at).await?;
        tx.commit().await.map_err(StoreError::db("suppress: commit"))?;
        self.signal_events().await;
        Ok(created)
    }

    async fn active_suppression(
        &self,
        address_hash: &str,
        category: Option<&str>,
        now: Millis,
    ) -> Result<Option<SuppressionRow>, StoreError> {
        // `*` sorts before letters, so an all-categories suppression is the
        // one reported when both exist.
        sqlx::query_as(self.sql(Query::FindSuppression))
            .bind(address_hash.to_owned())
            .bind(ALL_CATEGORIES)
            .bind(category.unwrap_or(ALL_CATEGORIES).to_owned())
            .bind(now.0)
            .optional(self.pool(), "find suppression")
            .await
    }

    async fn list_suppressions(
        &self,
        address_hash: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SuppressionRow>, StoreError> {
        match address_hash {
            Some(h) => {
                sqlx::query_as(self.sql(Query::SuppressionsOfAddress))
                    .bind(h.to_owned())
                    .bind(i64::from(limit))
                    .fetch_all(self.pool())
                    .await
            }
            None => {
                sqlx::query_as(self.sql(Query::ListSuppressions)).bind(i64::from(limit)).fetch_all(self.pool()).await
            }
        }
        .map_err(StoreError::db("list suppressions"))
    }

    async fn lift_suppression(
        &self,
        address_hash: &str,
        category: Option<&str>,
        lift: &Lift<'_>,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let mut tx = self.begin_write().await.map_err(db("lift suppression: begin"))?;
        let result = match category {
            Some(c) => {
                sqlx::query(&d.sql("DELETE FROM engagement_suppressions WHERE address_hash = ? AND category = ?"))
                    .bind(address_hash.to_owned())
                    .bind(c.to_owned())
                    .execute(&mut *tx)
                    .await
            }
            None => {
                sqlx::query(&d.sql("DELETE FROM engagement_suppressions WHERE address_hash = ?"))
                    .bind(address_hash.to_owned())
                    .execute(&mut *tx)
                    .await
            }
        };
        let lifted = result.map_err(db("lift suppression"))?.rows_affected();
        if lifted > 0 {
            let category = category.unwrap_or(ALL_CATEGORIES);
            let event = serde_json::json!({
                "address_hash": address_hash, "category": category, "lifted": lifted,
                "reason": lift.reason, "by": lift.by, "at": now.to_rfc3339(),
            });
            let record = d.sql(
                "INSERT INTO engagement_suppression_lifts (id, address_hash, category, lifted, reason, lifted_by, \
                 created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            );
            sqlx::query(&record)
                .bind(super::new_id())
                .bind(address_hash.to_owned())
                .bind(category.to_owned())
                .bind(i64::try_from(lifted).unwrap_or(i64::MAX))
                .bind(lift.reason.map(str::to_owned))
                .bind(lift.by.to_owned())
                .bind(now.0)
                .run(&mut *tx, "lift suppression: record")
                .await?;
            if lift.audit {
                let entry = super::operators::AuditEntry {
                    operator_email: lift.by.to_owned(),
                    action: "suppression.lift".into(),
                    target: address_hash.to_owned(),
                    // The audit entry's words, not SQL.
                    detail: Some(format!(
                        "category {category}, {lifted} lifted; reason: {}",
                        lift.reason.unwrap_or("(none given)")
                    )),
                };
                super::operators::append_audit_in(&mut tx, d, &entry, now).await?;
            }
            let event = NewEvent { kind: "suppression_lifted", user_id: None, outbox_id: None, data: event };
            super::events::append(&mut tx, d, &[event], now).await?;
        }
        tx.commit().await.map_err(db("lift suppression: commit"))?;
        if lifted > 0 {
            self.signal_events().await;
        }
        Ok(lifted)
    }

    async fn sends_for_address(&self, address_hash: &str, limit: u32) -> Result<Vec<SendRecord>, StoreError> {
        sqlx::query_as(self.sql(Query::SendsForAddress))
            .bind(address_hash.to_owned())
            .bind(i64::from(limit))
            .all(self.pool(), "send log for address")
            .await
    }
}
