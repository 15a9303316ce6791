//! The `push` channel: one outbox row per user and rule, sent to every
//! device the user has, in parallel.
//!
//! # What a row's outcome is
//! - **No live device**: `suppressed`, "no push subscription for this user",
//!   so "why not" answers it like an opt-out. Nothing was attempted.
//! - **At least one device accepted**: `sent`. The others' fates are in the
//!   detail, device by device; a device that failed for a passing reason
//!   does not hold the row back, because retrying the row would show the
//!   notification again on every device that already has it (a push
//!   service replaces a stored copy by `Topic`, but not one on the screen).
//! - **None accepted, one or more may later**: retried, after the longest
//!   `Retry-After` any provider asked for.
//! - **Every device is gone** (404/410, `UNREGISTERED`, `BadDeviceToken`):
//!   `bounced`, the send log's name for "this address does not exist".
//! - **Otherwise** (too large, a refused credential, an endpoint on a
//!   private address): `failed`, with each device's reason.
//!
//! A gone device is removed at once (kept as a row with who and why, in the
//! audit log too), like a hard bounce suppresses an address: the next
//! message does not try it. A refused credential is reported to
//! [`ChannelHealth`] for `/readyz`.
//!
//! # Per-device record
//! The send log keeps one row per outbox row and attempt (what "did user X
//! get it" reads); the devices' fates are its `detail`, one clause each
//! ("web (Ada's Pixel): accepted; fcm …3f2a: removed, FCM answered 404:
//! UNREGISTERED"). Rejected: a send-log row per device, which would make a
//! user with three browsers look like three messages in every count the
//! send log feeds (the trigger's audience, caps, the screen's totals).
//!
//! # Devices, read a batch at a time
//! The worker hands the channel each claimed batch before delivering it
//! ([`Channel::prefetch`]), and the devices of all its users are read in one
//! statement; each delivery takes its user's from there. A device removed
//! or added in the moment between that read and the delivery (at most the
//! time a batch waits for delivery slots) is missed or pushed to once more,
//! as it would be by a delivery already under way. Rejected: a statement a
//! row, which at thousands of notifications a second cost a round trip
//! each (on SQLite, a hand-over to its connection's thread and back).
//!
//! # Last success, in batches
//! `last_success_at` is written for a batch of devices at a time (every
//! second, or every [`SUCCESS_BATCH`] devices), not per notification: at
//! thousands of notifications a second, a write per device would cost more
//! than the sending. The time written is the batch's, at most a second
//! late; a crash loses at most that second of last-success times, never a
//! delivery record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;

use super::webpush::{EndpointPolicy, WebSubscription};
use super::{DeviceOutcome, PushDevice, PushNotification, PushOptions, Transports};
use crate::clock::Clock;
use crate::delivery::channel::{Channel, Delivery, Outcome};
use crate::delivery::health::ChannelHealth;
use crate::store::{OutboxRow, PushDeviceRow, PushDeviceStore};

/// Devices whose last success is written in one statement at the most.
pub const SUCCESS_BATCH: usize = 500;

/// How often the last successes are written when fewer than a batch wait.
const SUCCESS_FLUSH: Duration = Duration::from_secs(1);

/// The reason a user without a device is not sent to.
pub const NO_DEVICE: &str = "no push subscription for this user";

/// What the channel needs, named so the call site reads.
pub struct PushParts {
    pub devices: Arc<dyn PushDeviceStore + Send + Sync>,
    pub transports: Transports,
    pub policy: EndpointPolicy,
    pub health: ChannelHealth,
    pub clock: Arc<dyn Clock>,
}

pub struct PushChannel {
    inner: Arc<Inner>,
}

struct Inner {
    parts: PushParts,
    succeeded: Mutex<Vec<String>>,
    /// Devices read for a claimed batch ([`Channel::prefetch`]), by user,
    /// taken by each row's delivery. A row whose user is not here (a
    /// delivery outside a batch, or one the cache let go) reads its own.
    prefetched: Mutex<HashMap<String, Vec<PushDeviceRow>>>,
}

/// Users whose prefetched devices are kept at the most: a few batches'.
/// Beyond it the cache is emptied (rows that never came to delivery, after
/// a shutdown, must not pile up).
const MAX_PREFETCHED: usize = 10_000;

impl PushChannel {
    /// Must be called inside a Tokio runtime: it starts the task that
    /// writes last-success times, which ends when the channel is dropped.
    pub fn new(parts: PushParts) -> PushChannel {
        let inner =
            Arc::new(Inner { parts, succeeded: Mutex::new(Vec::new()), prefetched: Mutex::new(HashMap::new()) });
        let weak = Arc::downgrade(&inner);
        tokio::spawn(flush_periodically(weak));
        PushChannel { inner }
    }

    /// Writes the last-success times waiting now (tests, and shutdown).
    pub async fn flush(&self) {
        self.inner.flush().await;
    }
}

async fn flush_periodically(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(SUCCESS_FLUSH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        inner.flush().await;
    }
}

impl Inner {
    async fn flush(&self) {
        let ids = std::mem::take(&mut *self.succeeded.lock().unwrap_or_else(PoisonError::into_inner));
        if ids.is_empty() {
            return;
        }
        let now = self.parts.clock.now();
        if let Err(e) = self.parts.devices.mark_push_success(&ids, now).await {
            // Only the last-success time is lost; the deliveries are recorded.
            tracing::warn!(error = %e, devices = ids.len(), "push: could not record the devices' last success");
        }
    }

    async fn succeeded(&self, ids: Vec<String>) {
        let full = {
            let mut waiting = self.succeeded.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.extend(ids);
            waiting.len() >= SUCCESS_BATCH
        };
        if full {
            self.flush().await;
        }
    }
}

/// The provider a device goes through, as `/readyz` and the detail name it.
fn provider(kind: &str) -> &'static str {
    match kind {
        "web" => "push: Web Push",
        "fcm" => "push: FCM",
        _ => "push: APNs",
    }
}

/// "web (Ada's Pixel)" or "fcm …3f2a1b": how a device is named in a detail.
fn name(device: &PushDeviceRow) -> String {
    match &device.label {
        Some(label) => format!("{} ({label})", device.kind),
        // Herald's ids are UUIDs (ASCII); any other falls back to whole.
        None => {
            let tail = device.id.get(device.id.len().saturating_sub(6)..).unwrap_or(&device.id);
            format!("{} …{tail}", device.kind)
        }
    }
}

/// A stored device as the transports take it; checked again, so a row
/// written before a policy tightened (or by hand) cannot slip through.
fn parse(device: &PushDeviceRow, policy: EndpointPolicy) -> Result<PushDevice, String> {
    let parsed = match device.kind.as_str() {
        "web" => WebSubscription::parse(
            &device.address,
            device.p256dh.as_deref().unwrap_or_default(),
            device.auth.as_deref().unwrap_or_default(),
            policy,
        )
        .map(PushDevice::Web),
        "fcm" => PushDevice::fcm(&device.address),
        "apns" => PushDevice::apns(&device.address),
        other => return Err(format!("unknown device kind {other:?}")),
    };
    parsed.map_err(|e| e.to_string())
}

/// The notification a row carries: the rendered template, or for a row
/// enqueued by hand its payload `{"title", "body", "url", "data"}`.
fn notification(delivery: &Delivery) -> Result<PushNotification, String> {
    let row = &delivery.row;
    let options: PushOptions = delivery.rule_options("push");
    let grace = delivery.rule.as_ref().and_then(|r| r.grace_seconds);
    let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
    if let Some(m) = &delivery.message {
        return Ok(PushNotification::from_rendered(row.id.clone(), m, payload, options, grace));
    }
    let p: crate::delivery::channel::inbox::InboxPayload = serde_json::from_value(payload).map_err(|e| {
        format!(
            "push payload is not usable: {e}; expected a JSON object with \"title\" (string) and optional \"body\", \
             \"url\", \"data\""
        )
    })?;
    Ok(PushNotification {
        id: row.id.clone(),
        title: p.title,
        body: p.body,
        url: p.url,
        data: p.data.unwrap_or(serde_json::Value::Null),
        ttl: options.ttl(grace),
        urgency: options.urgency.unwrap_or_default(),
    })
}

#[async_trait]
impl Channel for PushChannel {
    async fn prefetch(&self, rows: &[&OutboxRow]) {
        let mut users: Vec<&str> = rows.iter().map(|r| r.user_id.as_str()).collect();
        users.sort_unstable();
        users.dedup();
        let devices = match self.inner.parts.devices.live_push_devices_of(&users).await {
            Ok(d) => d,
            // Each row then reads its own, and says so if that fails too.
            Err(e) => return tracing::warn!(error = %e, "push: could not read the batch's devices"),
        };
        let mut cache = self.inner.prefetched.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() + users.len() > MAX_PREFETCHED {
            cache.clear();
        }
        // A user with no device is cached too: "none" is an answer.
        for user in users {
            cache.insert(user.to_owned(), Vec::new());
        }
        for device in devices {
            cache.entry(device.user_id.clone()).or_default().push(device);
        }
    }

    async fn deliver(&self, delivery: &Delivery) -> Outcome {
        let parts = &self.inner.parts;
        let note = match notification(delivery) {
            Ok(n) => n,
            Err(e) => return Outcome::terminal(e),
        };
        // Refused before any device is looked up: every provider would.
        if let Err(e) = note.payload() {
            return Outcome::terminal(e.to_string());
        }
        let prefetched =
            self.inner.prefetched.lock().unwrap_or_else(PoisonError::into_inner).remove(&delivery.row.user_id);
        let devices = match prefetched {
            Some(devices) => Ok(devices),
            None => parts.devices.push_devices(&delivery.row.user_id, false).await,
        };
        let devices = match devices {
            Ok(d) => d,
            Err(e) => return Outcome::retry(format!("could not read the user's push subscriptions: {e}")),
        };
        if devices.is_empty() {
            return Outcome::Suppressed { detail: NO_DEVICE.into(), address_hash: None };
        }
        let sends = devices.iter().map(|device| async {
            match parse(device, parts.policy) {
                Ok(target) => parts.transports.send(&target, &note).await,
                Err(reason) => DeviceOutcome::Refused { reason },
            }
        });
        let outcomes = futures::future::join_all(sends).await;
        self.settle(&devices, &outcomes, &delivery.row.user_id).await
    }
}

impl PushChannel {
    /// Acts on each device's outcome (removal, last success, health) and
    /// sums them up into the row's.
    async fn settle(&self, devices: &[PushDeviceRow], outcomes: &[DeviceOutcome], user_id: &str) -> Outcome {
        let parts = &self.inner.parts;
        let mut clauses = Vec::with_capacity(devices.len());
        let (mut accepted, mut ids) = (Vec::new(), Vec::<String>::new());
        let (mut gone, mut retry, mut retry_after) = (0, 0, None::<Duration>);
        for (device, outcome) in devices.iter().zip(outcomes) {
            let provider = provider(&device.kind);
            let clause = match outcome {
                DeviceOutcome::Accepted { message_id } => {
                    accepted.push(device.id.clone());
                    ids.extend(message_id.clone());
                    parts.health.accepted(provider);
                    match message_id {
                        Some(id) => format!("accepted (id {id})"),
                        None => "accepted".to_owned(),
                    }
                }
                DeviceOutcome::DeviceGone { reason } => {
                    gone += 1;
                    let now = parts.clock.now();
                    if let Err(e) = parts.devices.remove_push_device(user_id, &device.id, "provider", reason, now).await
                    {
                        tracing::warn!(error = %e, device = %device.id, "push: could not remove a gone device");
                    }
                    format!("removed, {reason}")
                }
                DeviceOutcome::Retry { after, reason } => {
                    retry += 1;
                    retry_after = retry_after.max(*after);
                    format!("to retry, {reason}")
                }
                DeviceOutcome::CredentialRejected { reason } => {
                    parts.health.credential_refused(provider, reason);
                    format!("failed, the credential was refused: {reason}")
                }
                DeviceOutcome::TooLarge { reason }
                | DeviceOutcome::Refused { reason }
                | DeviceOutcome::Failed { reason } => format!("failed, {reason}"),
            };
            clauses.push(format!("{}: {clause}", name(device)));
        }
        let detail = clauses.join("; ");
        let total = devices.len();
        if !accepted.is_empty() {
            let count = accepted.len();
            self.inner.succeeded(accepted).await;
            let detail = if total == 1 { detail } else { format!("{count} of {total} devices accepted: {detail}") };
            // Each accepting device's message id, when its service gives
            // one (FCM's name, APNs' apns-id, a Web Push Location).
            let provider_id = (!ids.is_empty()).then(|| ids.join(" "));
            return Outcome::Sent { transport: "push".into(), detail: Some(detail), address_hash: None, provider_id };
        }
        if retry > 0 {
            return Outcome::Retry { detail, address_hash: None, after: retry_after };
        }
        if gone == total {
            let detail = format!("every device of this user is gone: {detail}");
            return Outcome::Bounced { detail, address_hash: None };
        }
        Outcome::terminal(format!("no device accepted it: {detail}"))
    }
}

#[cfg(test)]
mod tests;
