//! Long-lived responses and the credential they were opened with.
//!
//! A request is authenticated when it arrives; a stream
//! (`/v1/events/stream`, `/v1/inbox/stream`) then lives for hours. An
//! outside review kept receiving outcome events on a stream opened with an
//! API key after `herald keys revoke`, and inbox messages on a stream whose
//! token had expired: a check at the door is not enough for a response
//! without an end. So each stream holds its [`Credential`] and ends when it
//! stops working ([`Credential::lapsed`]): an API key within the key cache's
//! staleness ([`KEY_CACHE_TTL`](super::auth::KEY_CACHE_TTL)) of its revocation, exactly like any other
//! request with it; a user token at its `exp`. Before closing, the stream
//! sends an `end` event saying why; the client's reconnect is then refused
//! with `401`, which a browser's `EventSource` takes as final (the inbox
//! widget then asks its page for a fresh token).
//!
//! Rejected: a database read per stream per interval (a thousand open
//! streams would each read the key table), where the shared key cache
//! costs one read per key per five seconds; and sleeping until the
//! token's `exp` in one go, which a clock moved by a test (or the database
//! clock's refresh) would not wake.

use std::time::Duration;

use axum::response::sse::Event;

use super::AppState;
use super::auth::{KeyStatus, REVOKED, UNKNOWN};
use crate::clock::Millis;

/// What a stream was opened with.
#[derive(Debug, Clone)]
pub enum Credential {
    /// An API key, by its hash.
    ApiKey { hash: String },
    /// A user token, by its expiry.
    UserToken { expires_at: Millis },
}

/// Why a stream's credential stopped working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapsed {
    /// `key_revoked`, `key_unknown` or `token_expired`.
    pub reason: &'static str,
    /// What the client should do, in words.
    pub detail: String,
}

impl Lapsed {
    /// The stream's last event: `event: end`, `data: {"reason", "detail"}`.
    pub fn event(&self) -> Event {
        let data = serde_json::json!({ "reason": self.reason, "detail": self.detail });
        Event::default().event("end").data(data.to_string())
    }
}

/// The longest a stream goes without looking at its credential. The real
/// clock wakes it on time anyway (it sleeps until the deadline when that is
/// nearer); this bounds how late it notices a clock that jumped, and a
/// cached key lookup that went stale while it slept.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

impl Credential {
    /// Resolves when the credential stops working, with why. Meant to be
    /// polled next to the stream's other wake-ups, for as long as it lives.
    pub async fn lapsed(&self, state: &AppState) -> Lapsed {
        loop {
            let wait = match self.check(state).await {
                Ok(wait) => wait,
                Err(lapsed) => return lapsed,
            };
            tokio::time::sleep(wait.min(LOOK_AGAIN)).await;
        }
    }

    /// `Ok(how long the answer holds)`, or why it no longer works.
    async fn check(&self, state: &AppState) -> Result<Duration, Lapsed> {
        match self {
            Credential::UserToken { expires_at } => {
                let now = state.clock.now();
                if now >= *expires_at {
                    return Err(Lapsed {
                        reason: "token_expired",
                        detail: format!("the token expired at {expires_at}: connect again with a fresh one"),
                    });
                }
                Ok(expires_at.since(now))
            }
            Credential::ApiKey { hash } => match state.api_keys.status(state, hash).await {
                Ok(KeyStatus::Active { fresh_until, .. }) => Ok(fresh_until.since(state.clock.now())),
                Ok(KeyStatus::Revoked) => Err(Lapsed { reason: "key_revoked", detail: REVOKED.into() }),
                Ok(KeyStatus::Unknown) => Err(Lapsed { reason: "key_unknown", detail: UNKNOWN.into() }),
                // The database is away: the stream cannot read events
                // either. Ask again rather than end every stream at once.
                Err(e) => {
                    tracing::debug!(error = %e, "could not look up an open stream's API key; asking again");
                    Ok(LOOK_AGAIN)
                }
            },
        }
    }
}
