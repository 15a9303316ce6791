//! Email addresses without keeping them: the address hash, the deployment
//! secret it is keyed with, and the tokens signed with keys derived from it
//! (unsubscribe links, preference links, SMS delivery-report URLs).
//!
//! # Normalisation
//! An address is trimmed and its domain lowercased (domains are
//! case-insensitive, RFC 5321 §2.4). The local part is lowercased too, even
//! though RFC 5321 lets a server treat `Ann@x` and `ann@x` as different
//! mailboxes: no mainstream provider does, host applications store what the
//! user typed, and a bounce or an unsubscribe for `Ann@x` that failed to
//! match a later message to `ann@x` would mail someone who asked us to stop.
//! Matching too widely can only ever suppress a message; matching too
//! narrowly can send one that should not go. Nothing else is rewritten
//! (no dot or `+tag` folding: those are one provider's rules, not the
//! standard's).
//!
//! # The hash
//! `address_hash = hex(HMAC-SHA256(k_addr, normalised address))`, where
//! `k_addr` is derived from the deployment secret. Keyed, so that the send
//! log and the suppression list cannot be reversed by hashing a list of
//! known addresses without the secret; stable for the life of the secret,
//! so a bounce arriving weeks later finds its rows. Changing the secret
//! orphans every existing hash (suppressions included): keep it with the
//! database backups.
//!
//! # The secret
//! `email.address_secret` (or `HERALD_EMAIL__ADDRESS_SECRET`) when set; else
//! `<data_dir>/herald-secret`, created on first start with 32 random bytes
//! (hex) and mode 0600. Several instances sharing one database must share
//! the secret: set it in configuration for them.

use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The file the generated secret lives in, inside `data_dir`.
pub const SECRET_FILE: &str = "herald-secret";

/// Trims and lowercases an address; `None` when it is not `local@domain`.
pub fn normalize(address: &str) -> Option<String> {
    let a = address.trim();
    let (local, domain) = a.rsplit_once('@')?;
    if local.is_empty() || domain.is_empty() || a.chars().any(char::is_whitespace) {
        return None;
    }
    Some(format!("{}@{}", local.to_lowercase(), domain.to_lowercase()))
}

/// Makes an existing secret file private to its owner if others can read it.
fn tighten(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                match std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
                    Ok(()) => {
                        tracing::warn!(path = %path.display(), was = format!("{mode:o}"), "made the address secret file 0600")
                    }
                    Err(e) => tracing::warn!(
                        path = %path.display(),
                        error = %e,
                        "the address secret file is readable by others and could not be made 0600"
                    ),
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// What an address hash is the hash of. The hash cannot say, and the
/// suppressions list must (`engagement_suppressions.address_kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AddressKind {
    /// An email address, normalised by [`normalize`].
    #[default]
    Email,
    /// A phone number in E.164 (`delivery::channel::sms::phone`).
    Phone,
}

impl AddressKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AddressKind::Email => "email",
            AddressKind::Phone => "phone",
        }
    }

    /// A stored value; anything unknown reads as `email`, what every row
    /// written before the column existed is.
    pub fn parse(s: &str) -> AddressKind {
        if s == "phone" { AddressKind::Phone } else { AddressKind::Email }
    }
}

impl std::fmt::Display for AddressKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Keys derived from the deployment secret, one per purpose, so that an
/// address hash can never double as a valid token signature.
#[derive(Clone)]
pub struct AddressKeys {
    hash_key: Vec<u8>,
    token_key: Vec<u8>,
    /// Signs the hosted preference page's links (`/p/{token}`).
    preferences_key: Vec<u8>,
    /// Signs the outbox id in an SMS gateway's delivery-report URL (Kannel's
    /// `dlr-url`), which the gateway calls back unsigned.
    delivery_report_key: Vec<u8>,
}

impl std::fmt::Debug for AddressKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AddressKeys(..)")
    }
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// `base64url(text) . base64url(mac)`: a token that names one value.
fn sign_text(key: &[u8], text: &str) -> String {
    format!("{}.{}", URL_SAFE_NO_PAD.encode(text), URL_SAFE_NO_PAD.encode(mac(key, text.as_bytes())))
}

/// The value a [`sign_text`] token names, if its signature holds under
/// `key` (compared in constant time); `None` for anything else.
fn verify_text(key: &[u8], token: &str) -> Option<String> {
    let (text_b64, sig_b64) = token.split_once('.')?;
    let text = URL_SAFE_NO_PAD.decode(text_b64).ok()?;
    let sig = URL_SAFE_NO_PAD.decode(sig_b64).ok()?;
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(&text);
    m.verify_slice(&sig).ok()?;
    String::from_utf8(text).ok()
}

/// What an unsubscribe token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubscribeToken {
    pub address_hash: String,
    pub category: String,
    pub user_id: String,
}

impl AddressKeys {
    pub fn from_secret(secret: &[u8]) -> AddressKeys {
        AddressKeys {
            hash_key: mac(secret, b"herald address hash v1"),
            token_key: mac(secret, b"herald unsubscribe token v1"),
            preferences_key: mac(secret, b"herald preferences link v1"),
            delivery_report_key: mac(secret, b"herald delivery report v1"),
        }
    }

    /// Loads the configured secret, or the one in `data_dir` (creating it,
    /// mode 0600; an existing file others can read is made 0600, with a
    /// warning: the secret forges unsubscribe links and un-hashes nothing,
    /// but it is what makes the hashes unguessable).
    pub fn load(configured: Option<&str>, data_dir: &Path) -> std::io::Result<AddressKeys> {
        if let Some(s) = configured {
            return Ok(AddressKeys::from_secret(s.as_bytes()));
        }
        let path = data_dir.join(SECRET_FILE);
        match std::fs::read_to_string(&path) {
            Ok(s) if !s.trim().is_empty() => {
                tighten(&path);
                return Ok(AddressKeys::from_secret(s.trim().as_bytes()));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("reading {}: {e}", path.display()))),
        }
        std::fs::create_dir_all(data_dir)?;
        let secret = hex::encode(rand::random::<[u8; 32]>());
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        match opts.open(&path) {
            Ok(mut f) => {
                f.write_all(secret.as_bytes())?;
                f.sync_all()?;
                tracing::warn!(path = %path.display(), "generated a new address secret; keep it with your backups");
                Ok(AddressKeys::from_secret(secret.as_bytes()))
            }
            // Another process created it between our read and our create.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let s = std::fs::read_to_string(&path)?;
                Ok(AddressKeys::from_secret(s.trim().as_bytes()))
            }
            Err(e) => Err(std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))),
        }
    }

    /// The address hash of an already normalised address.
    pub fn hash_normalized(&self, normalized: &str) -> String {
        hex::encode(mac(&self.hash_key, normalized.as_bytes()))
    }

    /// The address hash of a phone number: its E.164 form is already the
    /// normalised one, so `+1 (415) 555-0101` and `+14155550101` hash
    /// alike, and a STOP finds the rows sent to either.
    pub fn hash_phone(&self, phone: &crate::delivery::channel::sms::phone::PhoneNumber) -> String {
        self.hash_normalized(phone.as_str())
    }

    /// The address hash of an address as given; `None` when it is not one.
    pub fn hash(&self, address: &str) -> Option<String> {
        normalize(address).map(|n| self.hash_normalized(&n))
    }

    /// The hash of what a search box or a command line was given where
    /// either kind is taken: a phone number when it starts with `+` (E.164
    /// always does, and no email address can), an email address otherwise.
    /// The error says what was expected. Rejected: guessing a phone number
    /// from digits alone, which would take a national number and so a
    /// country Herald would have to guess (see `sms::phone`).
    pub fn hash_either(&self, text: &str) -> Result<(AddressKind, String), String> {
        let t = text.trim();
        if t.starts_with('+') {
            let phone = crate::delivery::channel::sms::phone::PhoneNumber::parse("phone", t)
                .map_err(|e| format!("{t:?} is not a phone number: {}", e.problem))?;
            return Ok((AddressKind::Phone, self.hash_phone(&phone)));
        }
        self.hash(t).map(|h| (AddressKind::Email, h)).ok_or_else(|| {
            format!("{t:?} is neither an email address (local@domain) nor a phone number with its country code (+14155550101)")
        })
    }

    /// `base64url(address_hash \n category \n user_id) . base64url(mac)`.
    pub fn sign_unsubscribe(&self, t: &UnsubscribeToken) -> String {
        let payload = format!("{}\n{}\n{}", t.address_hash, t.category, t.user_id);
        let sig = mac(&self.token_key, payload.as_bytes());
        format!("{}.{}", URL_SAFE_NO_PAD.encode(payload), URL_SAFE_NO_PAD.encode(sig))
    }

    /// `base64url(user_id) . base64url(mac)`: the hosted preference page's
    /// link for one user (like an unsubscribe link, it does not expire).
    pub fn sign_preferences(&self, user_id: &str) -> String {
        sign_text(&self.preferences_key, user_id)
    }

    /// The user a preference link names, if its signature holds.
    pub fn verify_preferences(&self, token: &str) -> Option<String> {
        verify_text(&self.preferences_key, token)
    }

    /// `base64url(outbox_id) . base64url(mac)`: the token in the
    /// delivery-report URL an SMS gateway calls back (Kannel's `dlr-url`).
    /// Like a preference link it does not expire: a report can come days
    /// later, and all it can do is add history to the row it names.
    pub fn sign_delivery_report(&self, outbox_id: &str) -> String {
        sign_text(&self.delivery_report_key, outbox_id)
    }

    /// The outbox id a delivery-report token names, if its signature holds.
    pub fn verify_delivery_report(&self, token: &str) -> Option<String> {
        verify_text(&self.delivery_report_key, token)
    }

    /// The token's contents if its signature holds; `None` for anything
    /// forged, altered or malformed.
    pub fn verify_unsubscribe(&self, token: &str) -> Option<UnsubscribeToken> {
        let (payload_b64, sig_b64) = token.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload_b64).ok()?;
        let sig = URL_SAFE_NO_PAD.decode(sig_b64).ok()?;
        let mut m = HmacSha256::new_from_slice(&self.token_key).expect("HMAC takes a key of any length");
        m.update(&payload);
        m.verify_slice(&sig).ok()?;
        let text = String::from_utf8(payload).ok()?;
        let mut parts = text.splitn(3, '\n');
        let (address_hash, category, user_id) = (parts.next()?, parts.next()?, parts.next()?);
        Some(UnsubscribeToken {
            address_hash: address_hash.to_owned(),
            category: category.to_owned(),
            user_id: user_id.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_trims_and_lowercases() {
        assert_eq!(normalize("  Ann.Lee+x@Example.COM \n").as_deref(), Some("ann.lee+x@example.com"));
        assert_eq!(normalize("no-at-sign"), None);
        assert_eq!(normalize("@x.com"), None);
        assert_eq!(normalize("a b@x.com"), None);
    }

    #[test]
    fn hash_is_keyed_and_stable() {
        let a = AddressKeys::from_secret(b"one");
        let b = AddressKeys::from_secret(b"two");
        assert_eq!(a.hash("Ann@Example.com"), a.hash("ann@example.com"));
        assert_ne!(a.hash("ann@example.com"), b.hash("ann@example.com"));
        assert_eq!(a.hash("ann@example.com").unwrap().len(), 64);
    }

    #[test]
    fn tokens_verify_and_refuse_tampering() {
        let k = AddressKeys::from_secret(b"s");
        let t = UnsubscribeToken { address_hash: "ab".into(), category: "news".into(), user_id: "u1".into() };
        let s = k.sign_unsubscribe(&t);
        assert_eq!(k.verify_unsubscribe(&s), Some(t.clone()));
        let (p, sig) = s.split_once('.').unwrap();
        let other = URL_SAFE_NO_PAD.encode("ab\nmarketing\nu1");
        assert_eq!(k.verify_unsubscribe(&format!("{other}.{sig}")), None);
        assert_eq!(k.verify_unsubscribe(&format!("{p}.{}", URL_SAFE_NO_PAD.encode([0u8; 32]))), None);
        assert_eq!(AddressKeys::from_secret(b"t").verify_unsubscribe(&s), None);
        assert_eq!(k.verify_unsubscribe("garbage"), None);
    }

    #[test]
    fn a_phone_hashes_as_its_e164_form() {
        use crate::delivery::channel::sms::phone::PhoneNumber;
        let k = AddressKeys::from_secret(b"s");
        let a = PhoneNumber::parse("phone", "+1 (415) 555-0101").unwrap();
        let b = PhoneNumber::parse("phone", "+14155550101").unwrap();
        assert_eq!(k.hash_phone(&a), k.hash_phone(&b));
        assert_eq!(k.hash_phone(&a), k.hash_normalized("+14155550101"));
        assert_ne!(k.hash_phone(&a), AddressKeys::from_secret(b"t").hash_phone(&a));
    }

    #[test]
    fn either_kind_is_told_apart_by_the_plus() {
        let k = AddressKeys::from_secret(b"s");
        let (kind, h) = k.hash_either(" +1 (415) 555-0101 ").unwrap();
        assert_eq!((kind, h), (AddressKind::Phone, k.hash_normalized("+14155550101")));
        assert_eq!(k.hash_either("Ann@X.org").unwrap(), (AddressKind::Email, k.hash("ann@x.org").unwrap()));
        assert!(k.hash_either("+12345").unwrap_err().contains("not a phone number"));
        assert!(k.hash_either("14155550101").unwrap_err().contains("neither an email address"));
    }

    #[test]
    fn delivery_report_tokens_are_their_own_purpose() {
        let k = AddressKeys::from_secret(b"s");
        let t = k.sign_delivery_report("01J0OUTBOX");
        assert_eq!(k.verify_delivery_report(&t).as_deref(), Some("01J0OUTBOX"));
        // Neither a preference link for the same text nor another secret's
        // token is accepted.
        assert_eq!(k.verify_delivery_report(&k.sign_preferences("01J0OUTBOX")), None);
        assert_eq!(k.verify_preferences(&t), None);
        assert_eq!(AddressKeys::from_secret(b"t").verify_delivery_report(&t), None);
        assert_eq!(k.verify_delivery_report("01J0OUTBOX"), None);
    }

    #[test]
    fn generated_secret_is_kept_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = AddressKeys::load(None, dir.path()).unwrap();
        let b = AddressKeys::load(None, dir.path()).unwrap();
        assert_eq!(a.hash("x@y.z"), b.hash("x@y.z"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(SECRET_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
