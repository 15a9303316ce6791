//! Per-user tokens for the end-user inbox API.
//!
//! A browser or a mobile app calls the inbox routes with a token that names
//! one user and expires. The host application's backend gets one from
//! `POST /v1/users/{id}/token` (with its API key), or computes it itself with
//! the shared secret, which needs no round trip:
//!
//! ```text
//! payload = base64url_nopad('{"sub":"<user id>","exp":<unix seconds>}')
//! token   = payload + "." + base64url_nopad(HMAC-SHA256(inbox.token_secret, payload))
//! ```
//!
//! Stateless on purpose: any Herald instance can check any token without a
//! database read, which matters for a thousand open streams. The cost is that
//! a token cannot be revoked before it expires, so lifetimes are short.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::AppState;
use super::problem::ApiError;
use crate::clock::Millis;
use crate::domain::UserId;

#[derive(Clone)]
pub struct TokenKey(Vec<u8>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(…)")
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
}

/// The user a valid token names; handlers read it from the request.
#[derive(Debug, Clone)]
pub struct InboxUser(pub UserId);

/// When the request's token expires: the inbox stream ends then (see
/// `http::credential`), since a token is only checked when a request
/// arrives and a stream lives on after that.
#[derive(Debug, Clone, Copy)]
pub struct TokenExpiry(pub Millis);

impl TokenKey {
    pub fn new(secret: &[u8]) -> TokenKey {
        TokenKey(secret.to_vec())
    }

    /// A key for this process only: tokens die with it and do not work on
    /// other instances. Used when no `inbox.token_secret` is configured.
    pub fn ephemeral() -> TokenKey {
        let mut key = vec![0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
        TokenKey(key)
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(payload.as_bytes());
        mac
    }

    pub fn issue(&self, user: &UserId, expires_at: Millis) -> String {
        let claims = Claims { sub: user.as_str().to_owned(), exp: expires_at.0.div_euclid(1000) };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialise"));
        let sig = URL_SAFE_NO_PAD.encode(self.mac(&payload).finalize().into_bytes());
        format!("{payload}.{sig}")
    }

    /// The user a token names, if it is genuine and not expired. The error
    /// says which, for the 401's detail.
    pub fn verify(&self, token: &str, now: Millis) -> Result<UserId, &'static str> {
        self.verify_until(token, now).map(|(user, _)| user)
    }

    /// [`TokenKey::verify`], with when the token expires.
    pub fn verify_until(&self, token: &str, now: Millis) -> Result<(UserId, Millis), &'static str> {
        let (payload, sig) = token.split_once('.').ok_or("malformed token")?;
        let sig = URL_SAFE_NO_PAD.decode(sig).map_err(|_| "malformed token")?;
        // Constant-time comparison, inside the MAC library.
        self.mac(payload).verify_slice(&sig).map_err(|_| "token signature does not match")?;
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or("malformed token")?;
        let expires_at = Millis(claims.exp.saturating_mul(1000));
        if expires_at <= now {
            return Err("token expired");
        }
        let user = UserId::parse("sub", &claims.sub).map_err(|_| "malformed token")?;
        Ok((user, expires_at))
    }
}

pub async fn require_user_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let token = super::auth::bearer(&req);
    // EventSource cannot set headers, so the stream also takes `?token=`.
    let query_token =
        req.uri().query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")).map(|t| t.to_owned()));
    let Some(token) = token.map(str::to_owned).or(query_token) else {
        return Err(ApiError::Unauthorized {
            detail: "missing user token: send `Authorization: Bearer <token>` (from POST /v1/users/{id}/token)".into(),
        });
    };
    match state.user_tokens.verify_until(&token, state.clock.now()) {
        Ok((user, expires_at)) => {
            req.extensions_mut().insert(InboxUser(user));
            req.extensions_mut().insert(TokenExpiry(expires_at));
            Ok(next.run(req).await)
        }
        Err(why) => Err(ApiError::Unauthorized { detail: why.into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_one_user_until_it_expires() {
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef");
        let ada = UserId::parse("u", "ada").unwrap();
        let token = key.issue(&ada, Millis(10_000_000));
        assert_eq!(key.verify(&token, Millis(9_999_000)).unwrap(), ada);
        assert_eq!(key.verify(&token, Millis(10_000_000)), Err("token expired"));
        let other = TokenKey::new(b"another key, another deployment!");
        assert_eq!(other.verify(&token, Millis(0)), Err("token signature does not match"));
        // Swapping in another user's claims breaks the signature.
        let (_, sig) = token.split_once('.').unwrap();
        let forged = format!("{}.{sig}", URL_SAFE_NO_PAD.encode(br#"{"sub":"bob","exp":99999999999}"#));
        assert_eq!(key.verify(&forged, Millis(0)), Err("token signature does not match"));
        assert_eq!(key.verify("garbage", Millis(0)), Err("malformed token"));
    }

    #[test]
    fn a_signed_expiry_beyond_the_millisecond_range_does_not_overflow() {
        // Only a holder of the key can sign this, but a checked expiry must
        // not panic (debug builds trap on overflow) whatever the claims say.
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef");
        let claims = Claims { sub: "ada".into(), exp: i64::MAX };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        let sig = URL_SAFE_NO_PAD.encode(key.mac(&payload).finalize().into_bytes());
        let token = format!("{payload}.{sig}");
        assert_eq!(key.verify(&token, Millis(0)).unwrap().as_str(), "ada");
    }
}
