//! API keys: `Authorization: Bearer <key>` on every `/v1` route.
//!
//! A key is shown once, when created, and only its SHA-256 is stored: a
//! leaked database does not leak working keys. (A slow password hash such as
//! argon2 buys nothing here: the keys are 256 random bits, not guessable
//! words, and a slow hash on every request would cost every request.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::AppState;
use super::problem::ApiError;
use crate::clock::Millis;
use crate::store::{ApiKeyRow, new_id};

/// Keys start with this, so a key pasted into a chat or a log is recognisable
/// (and a secret scanner can look for it).
pub const KEY_PREFIX: &str = "hrld_";

pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new key: the secret to show once, and the row to store.
pub fn generate(name: &str, now: Millis) -> (String, ApiKeyRow) {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let key = format!("{KEY_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
    let row = ApiKeyRow {
        id: new_id(),
        name: name.to_owned(),
        key_hash: hash_key(&key),
        prefix: key.chars().take(12).collect(),
        created_at: now,
        revoked_at: None,
    };
    (key, row)
}

/// The caller, once authenticated; handlers that record who did what read it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    pub key_name: String,
    /// The key's SHA-256, so a long-lived response can look the key up
    /// again (see `http::credential`) without holding the key itself.
    pub key_hash: String,
}

/// How long a key's lookup is reused. A key revoked (on any instance, or
/// with `herald keys revoke`) stops working everywhere within this time,
/// open event streams included.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

/// Keys seen recently, by hash, so a busy client costs one lookup every
/// [`KEY_CACHE_TTL`] instead of one per request. Unknown keys are not
/// remembered: a key created a moment ago works at once.
///
/// Ages are read on the service's clock (`AppState::clock`), not
/// `Instant`, so a test moves past the staleness with a manual clock
/// instead of waiting it out.
#[derive(Clone, Default)]
pub struct KeyCache {
    seen: Arc<Mutex<HashMap<String, (Millis, ApiKeyRow)>>>,
}

/// Most keys remembered; past that the cache starts afresh.
const KEY_CACHE_CAPACITY: usize = 10_000;

/// A key as the cache knows it.
#[derive(Debug, Clone)]
pub enum KeyStatus {
    /// It works; the answer may change once `fresh_until` has passed.
    Active {
        row: ApiKeyRow,
        fresh_until: Millis,
    },
    Revoked,
    Unknown,
}

impl KeyCache {
    /// The key with this hash, from the cache while its lookup is younger
    /// than [`KEY_CACHE_TTL`], from the database otherwise.
    pub async fn status(&self, state: &AppState, hash: &str) -> Result<KeyStatus, ApiError> {
        let now = state.clock.now();
        let cached = self.seen.lock().unwrap_or_else(PoisonError::into_inner).get(hash).cloned();
        // A lookup "from the future" (the clock was set back) is stale too.
        let (at, row) = match cached {
            Some((at, row)) if at <= now && now.since(at) < KEY_CACHE_TTL => (at, row),
            _ => {
                let Some(row) = state.store.api_key_by_hash(hash).await? else { return Ok(KeyStatus::Unknown) };
                let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
                if seen.len() >= KEY_CACHE_CAPACITY {
                    seen.clear();
                }
                seen.insert(hash.to_owned(), (now, row.clone()));
                (now, row)
            }
        };
        Ok(match row.revoked_at {
            Some(_) => KeyStatus::Revoked,
            None => KeyStatus::Active { row, fresh_until: at.plus(KEY_CACHE_TTL) },
        })
    }
}

impl Caller {
    /// Who this caller is in the audit log and in send-log details.
    pub fn audit_name(&self) -> String {
        format!("api key \"{}\"", self.key_name)
    }
}

/// Why a key is refused, for the 401's detail.
pub const REVOKED: &str = "this API key was revoked";
pub const UNKNOWN: &str = "API key not recognised";

/// The credential of an `Authorization: Bearer …` header, trimmed: an API
/// key here, a user token for [`super::user_auth`].
pub fn bearer(req: &Request) -> Option<&str> {
    let header = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim)
}

pub async fn require_api_key(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(key) = bearer(&req) else {
        return Err(ApiError::Unauthorized {
            detail: "missing API key: send the header `Authorization: Bearer <key>` (create a key with `herald keys create --name NAME`)".into(),
        });
    };
    let key_hash = hash_key(key);
    match state.api_keys.status(&state, &key_hash).await? {
        KeyStatus::Active { row, .. } => {
            req.extensions_mut().insert(Caller { key_id: row.id, key_name: row.name, key_hash });
            Ok(next.run(req).await)
        }
        KeyStatus::Revoked => Err(ApiError::Unauthorized { detail: REVOKED.into() }),
        KeyStatus::Unknown => Err(ApiError::Unauthorized { detail: UNKNOWN.into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_prefixed_and_stored_only_as_a_hash() {
        let (a, row) = generate("ci", Millis(0));
        let (b, _) = generate("ci", Millis(0));
        assert!(a.starts_with(KEY_PREFIX) && a.len() == KEY_PREFIX.len() + 43);
        assert_ne!(a, b);
        assert_eq!(row.key_hash, hash_key(&a));
        assert!(!row.key_hash.contains(&a[5..]));
        assert_eq!(row.prefix, &a[..12]);
    }
}
