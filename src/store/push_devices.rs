//! `engagement_push_devices`: the browsers and phones a user can be pushed
//! to, one row per Web Push subscription, FCM registration token or APNs
//! device token.
//!
//! A device is keyed by what identifies it to its provider (the endpoint
//! URL, or the token), not by the user: a phone that changes hands, or a
//! browser profile another person signs into, registers the same endpoint
//! for someone else, and the row moves to them (the alternative, one row per
//! user and endpoint, would push the first user's messages to the second
//! user's screen). The key is stored as `device_hash`, a SHA-256 of kind and
//! address, because MariaDB cannot put a unique index on a TEXT column of
//! endpoint length.
//!
//! A removed device stays as a row with `removed_at`, who removed it and
//! why (the provider said it is gone, the user or the host deleted it),
//! so the send-log page can show "removed on … because FCM said
//! UNREGISTERED" the way a hard bounce shows as a suppression. Registering
//! it again brings the same row back.
//!
//! # Concurrency
//! Two instances registering one endpoint at once (a browser that retries,
//! two tabs) must end with one row. Registration inserts unless the
//! `device_hash` is taken, in one statement the database arbitrates on the
//! unique key, then reads (and on PostgreSQL and MariaDB locks) the row
//! that holds the hash in the same transaction: the loser of the insert
//! waits for the winner's commit and finds its row. Rejected: "read, then
//! insert if missing", which let both find nothing and failed the second on
//! the key; and each dialect's upsert returning the row, which MariaDB
//! cannot do (no `RETURNING` on `INSERT … ON DUPLICATE KEY`).
//!
//! # Retention
//! None: a device is state (where the user can be reached), not history,
//! and a removed one is a single row per device that a later registration
//! brings back. Deleting the user (`RecipientStore::erase_user`) deletes
//! their devices, removed ones too.

use async_trait::async_trait;
use serde::Serialize;
use sha2::Digest;

use super::json_rows::keys_json;
use super::operators::{AuditEntry, append_audit_in};
use super::queries::Query;
use super::race::retry_lost_race;
use super::rows::{Fetch, from_columns};
use super::{SqlStore, Store, StoreError, new_id};
use crate::clock::Millis;

/// A device as the API and the channel see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PushDeviceRow {
    pub id: String,
    pub user_id: String,
    /// `web`, `fcm` or `apns`.
    pub kind: String,
    /// The Web Push endpoint URL, or the FCM/APNs token.
    pub address: String,
    /// Web Push only: the browser's P-256 public key, base64url.
    pub p256dh: Option<String>,
    /// Web Push only: the 16-byte authentication secret, base64url.
    pub auth: Option<String>,
    pub label: Option<String>,
    pub created_at: Millis,
    /// The last time a provider accepted a notification for it.
    pub last_success_at: Option<Millis>,
    pub removed_at: Option<Millis>,
    /// `provider`, `user` (the inbox token's owner), `api` or an operator's name.
    pub removed_by: Option<String>,
    pub removed_reason: Option<String>,
}

impl PushDeviceRow {
    /// The device without its credentials (endpoint, token, keys): what
    /// `herald push devices --json` prints and the operator screen shows.
    pub fn shown(&self) -> serde_json::Value {
        let time = |t: Option<Millis>| t.map(|t| t.to_rfc3339());
        serde_json::json!({
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "created_at": self.created_at.to_rfc3339(),
            "last_success_at": time(self.last_success_at),
            "removed_at": time(self.removed_at),
            "removed_by": self.removed_by,
            "removed_reason": self.removed_reason,
        })
    }
}

/// A device to register, already validated (the endpoint is https and
/// public, the keys are a P-256 point and a 16-byte secret, the token is
/// not empty): the store only files it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPushDevice {
    pub kind: String,
    pub address: String,
    pub p256dh: Option<String>,
    pub auth: Option<String>,
    pub label: Option<String>,
}

/// What registering did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// A device Herald had not seen (`201`).
    Created(PushDeviceRow),
    /// The same endpoint or token again (`200`, same id): its keys are
    /// updated, and its label when one is given (a browser registering
    /// itself again keeps the label the host gave it), a removal is
    /// lifted, and `moved_from` names the user it belonged to when that
    /// was someone else.
    Existing { device: PushDeviceRow, moved_from: Option<String> },
}

#[async_trait]
pub trait PushDeviceStore {
    /// Files a device for `user_id`, or finds it by its endpoint or token
    /// (whoever it belonged to) and gives it to `user_id`.
    async fn register_push_device(
        &self,
        user_id: &str,
        device: &NewPushDevice,
        now: Millis,
    ) -> Result<Registered, StoreError>;

    /// A user's devices, oldest first; removed ones only with
    /// `include_removed` (the send-log page shows them, delivery does not).
    async fn push_devices(&self, user_id: &str, include_removed: bool) -> Result<Vec<PushDeviceRow>, StoreError>;

    /// The live devices of several users, oldest first, in one statement:
    /// what a claimed batch of push rows needs, read once for the batch.
    async fn live_push_devices_of(&self, user_ids: &[&str]) -> Result<Vec<PushDeviceRow>, StoreError>;

    /// Marks one of `user_id`'s devices removed, with who and why, and
    /// appends the removal to the audit log (target `user:{user_id}`).
    /// `Ok(false)`: no such live device for this user.
    async fn remove_push_device(
        &self,
        user_id: &str,
        device_id: &str,
        by: &str,
        reason: &str,
        now: Millis,
    ) -> Result<bool, StoreError>;

    /// Records that providers accepted a notification for these devices.
    async fn mark_push_success(&self, device_ids: &[String], now: Millis) -> Result<(), StoreError>;
}

/// The key a device is found by: the hex SHA-256 of its kind, a newline and
/// its address (the kind keeps an FCM token from matching an APNs token
/// that happens to be spelled the same).
pub fn device_hash(kind: &str, address: &str) -> String {
    let mut h = sha2::Sha256::new();
    h.update(kind.as_bytes());
    h.update(b"\n");
    h.update(address.as_bytes());
    hex::encode(h.finalize())
}

from_columns!(PushDeviceRow: id, user_id, kind, address, p256dh, auth, label, created_at, last_success_at,
    removed_at, removed_by, removed_reason);

/// The audit row's words for a removal: which device, and why.
fn removal_detail(device: &PushDeviceRow, reason: &str) -> String {
    match &device.label {
        Some(label) => format!("{} device {} ({label:?}) removed: {reason}", device.kind, device.id),
        None => format!("{} device {} removed: {reason}", device.kind, device.id),
    }
}

impl SqlStore {
    /// One attempt of [`PushDeviceStore::register_push_device`], in one
    /// transaction (see the module's "Concurrency").
    async fn register_once(&self, user_id: &str, d: &NewPushDevice, now: Millis) -> Result<Registered, StoreError> {
        let db = StoreError::db;
        let id = new_id();
        let hash = device_hash(&d.kind, &d.address);
        let mut tx = self.begin_write().await.map_err(db("register push device: begin"))?;
        sqlx::query(self.sql(Query::InsertPushDevice))
            .bind(id.clone())
            .bind(user_id.to_owned())
            .bind(d.kind.clone())
            .bind(d.address.clone())
            .bind(hash.clone())
            .bind(d.p256dh.clone())
            .bind(d.auth.clone())
            .bind(d.label.clone())
            .bind(now.0)
            .execute(&mut *tx)
            .await
            .map_err(db("register push device: insert"))?;
        let found: PushDeviceRow = sqlx::query_as(self.sql(Query::LockPushDeviceByHash))
            .bind(hash)
            .one(&mut *tx, "register push device: read")
            .await?;
        if found.id == id {
            tx.commit().await.map_err(db("register push device: commit"))?;
            return Ok(Registered::Created(found));
        }
        sqlx::query(self.sql(Query::ReclaimPushDevice))
            .bind(user_id.to_owned())
            .bind(d.p256dh.clone())
            .bind(d.auth.clone())
            .bind(d.label.clone())
            .bind(found.id.clone())
            .execute(&mut *tx)
            .await
            .map_err(db("register push device: reclaim"))?;
        let device = self.push_device_in(&mut tx, &found.id).await?;
        tx.commit().await.map_err(db("register push device: commit"))?;
        let moved_from = (found.user_id != user_id).then_some(found.user_id);
        Ok(Registered::Existing { device, moved_from })
    }

    /// One device, read on the caller's transaction.
    async fn push_device_in(&self, conn: &mut sqlx::AnyConnection, id: &str) -> Result<PushDeviceRow, StoreError> {
        sqlx::query_as(self.sql(Query::PushDeviceById)).bind(id.to_owned()).one(&mut *conn, "read push device").await
    }
}

#[async_trait]
impl PushDeviceStore for SqlStore {
    async fn register_push_device(
        &self,
        user_id: &str,
        device: &NewPushDevice,
        now: Millis,
    ) -> Result<Registered, StoreError> {
        retry_lost_race("register push device", || self.register_once(user_id, device, now)).await
    }

    async fn push_devices(&self, user_id: &str, include_removed: bool) -> Result<Vec<PushDeviceRow>, StoreError> {
        let query = if include_removed { Query::AllPushDevices } else { Query::LivePushDevices };
        sqlx::query_as(self.sql(query)).bind(user_id.to_owned()).all(self.pool(), "list push devices").await
    }

    async fn live_push_devices_of(&self, user_ids: &[&str]) -> Result<Vec<PushDeviceRow>, StoreError> {
        if user_ids.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query_as(self.sql(Query::LivePushDevicesOf))
            .bind(keys_json(user_ids.iter().copied())?)
            .all(self.pool(), "push devices of a batch")
            .await
    }

    async fn remove_push_device(
        &self,
        user_id: &str,
        device_id: &str,
        by: &str,
        reason: &str,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let db = StoreError::db;
        let mut tx = self.begin_write().await.map_err(db("remove push device: begin"))?;
        let removed = sqlx::query(self.sql(Query::RemovePushDevice))
            .bind(now.0)
            .bind(by.to_owned())
            .bind(reason.to_owned())
            .bind(device_id.to_owned())
            .bind(user_id.to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("remove push device"))?
            .rows_affected();
        if removed != 1 {
            tx.rollback().await.map_err(db("remove push device: rollback"))?;
            return Ok(false);
        }
        let device = self.push_device_in(&mut tx, device_id).await?;
        let entry = AuditEntry {
            operator_email: by.to_owned(),
            action: "push_device.removed".into(),
            target: format!("user:{user_id}"),
            detail: Some(removal_detail(&device, reason)),
        };
        append_audit_in(&mut tx, self.dialect(), &entry, now).await?;
        tx.commit().await.map_err(db("remove push device: commit"))?;
        Ok(true)
    }

    async fn mark_push_success(&self, device_ids: &[String], now: Millis) -> Result<(), StoreError> {
        if device_ids.is_empty() {
            return Ok(());
        }
        sqlx::query(self.sql(Query::MarkPushSuccess))
            .bind(now.0)
            .bind(keys_json(device_ids.iter().map(String::as_str))?)
            .execute(self.writer())
            .await
            .map_err(StoreError::db("mark push success"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_hash_is_the_sha256_of_kind_newline_address() {
        // `printf 'fcm\ntoken' | sha256sum`
        assert_eq!(device_hash("fcm", "token"), "8b993cac26017214bd24032bf5c60b9971b270c55c598933cb359e6e49e78bd3");
        assert_ne!(device_hash("fcm", "abcd"), device_hash("apns", "abcd"));
        assert_eq!(device_hash("web", "https://x").len(), 64);
    }
}
