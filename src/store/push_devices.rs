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

use async_trait::async_trait;
use serde::Serialize;

use super::StoreError;
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
    /// The same endpoint or token again (`200`, same id): its keys and
    /// label are updated, a removal is lifted, and `moved_from` names the
    /// user it belonged to when that was someone else.
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
