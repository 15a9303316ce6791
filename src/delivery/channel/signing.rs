//! The webhook channel's Standard Webhooks signing secrets, and their
//! rotation.
//!
//! A receiver verifies each delivery with the secret it was given. To change
//! that secret without a gap, Standard Webhooks lets a sender sign with
//! several at once: `webhook-signature` holds one `v1,<signature>` per
//! secret, separated by spaces, and a receiver accepts the delivery when any
//! of them verifies with the secret it holds. So `webhook.signing_secret`
//! takes a list (a single string still works): add the new secret next to
//! the old one, move receivers to the new one at their own pace, then drop
//! the old one. Rejected: a "previous secret" setting with a grace period,
//! which fixes the number of secrets at two and has Herald decide when a
//! receiver must have moved; the list leaves that to the operator, who
//! knows.

use std::fmt;

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Sha256;

/// A Standard Webhooks signing secret: `whsec_` + base64 of the key bytes.
#[derive(Clone)]
pub struct SigningSecret(Vec<u8>);

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(…)")
    }
}

impl SigningSecret {
    pub fn parse(s: &str) -> Result<SigningSecret, String> {
        let b64 = s.strip_prefix("whsec_").ok_or("must start with \"whsec_\"")?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("the part after \"whsec_\" must be base64 ({e})"))?;
        if key.len() < 24 {
            return Err("the key must be at least 24 bytes (32 random bytes recommended)".into());
        }
        Ok(SigningSecret(key))
    }

    /// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// Every secret a delivery is signed with, in the configured order; never
/// empty.
#[derive(Debug, Clone)]
pub struct SigningSecrets(Vec<SigningSecret>);

impl SigningSecrets {
    /// Parses the configured secrets; the error names the one at fault by
    /// its place in the list, never by its value.
    pub fn parse(list: &SecretList) -> Result<SigningSecrets, BadSecret> {
        let texts = list.texts();
        if texts.is_empty() {
            return Err(BadSecret { item: None, why: "an empty list signs nothing".into() });
        }
        let item = |i: usize| matches!(list, SecretList::Many(_)).then_some(i);
        texts
            .iter()
            .enumerate()
            .map(|(i, s)| SigningSecret::parse(s).map_err(|why| BadSecret { item: item(i), why }))
            .collect::<Result<Vec<_>, _>>()
            .map(SigningSecrets)
    }

    /// The `webhook-signature` header: one `v1,…` per secret, separated by
    /// spaces.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        self.0.iter().map(|s| s.sign(id, timestamp, body)).collect::<Vec<_>>().join(" ")
    }
}

/// A configured secret that is not a Standard Webhooks secret.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.why)]
pub struct BadSecret {
    /// Its place in the list (from 0); `None` for a single secret.
    pub item: Option<usize>,
    pub why: String,
}

impl BadSecret {
    /// What the configuration error shows in place of the value.
    pub fn shown(&self) -> String {
        match self.item {
            Some(i) => format!("item [{i}] of the list (hidden)"),
            None => "(hidden)".into(),
        }
    }
}

impl From<SigningSecret> for SigningSecrets {
    fn from(secret: SigningSecret) -> Self {
        SigningSecrets(vec![secret])
    }
}

/// `webhook.signing_secret` as configured: one `whsec_…` string, or a list
/// of them (TOML `["whsec_new…", "whsec_old…"]`; in the environment
/// `HERALD_WEBHOOK__SIGNING_SECRET='["whsec_new…", "whsec_old…"]'`).
/// Checked by [`SigningSecrets::parse`] when the configuration loads.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretList {
    One(String),
    Many(Vec<String>),
}

impl SecretList {
    pub fn texts(&self) -> &[String] {
        match self {
            SecretList::One(s) => std::slice::from_ref(s),
            SecretList::Many(v) => v,
        }
    }
}

/// Never prints the secrets.
impl fmt::Debug for SecretList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretList({} hidden)", self.texts().len())
    }
}

impl From<&str> for SecretList {
    fn from(s: &str) -> Self {
        SecretList::One(s.to_owned())
    }
}

impl From<String> for SecretList {
    fn from(s: String) -> Self {
        SecretList::One(s)
    }
}

impl Serialize for SecretList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SecretList::One(one) => s.serialize_str(one),
            SecretList::Many(many) => many.serialize(s),
        }
    }
}

/// A string or a list of strings. Written out rather than
/// `#[serde(untagged)]`, whose error ("did not match any variant") does not
/// say what is accepted.
impl<'de> Deserialize<'de> for SecretList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Expect;
        impl<'de> Visitor<'de> for Expect {
            type Value = SecretList;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a \"whsec_…\" secret, or a list of them")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<SecretList, E> {
                Ok(SecretList::One(v.to_owned()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SecretList, A::Error> {
                let mut all = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    all.push(s);
                }
                Ok(SecretList::Many(all))
            }
        }
        d.deserialize_any(Expect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn secrets_must_be_standard_webhooks_secrets() {
        assert!(SigningSecret::parse(A).is_ok());
        assert!(SigningSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(SigningSecret::parse("whsec_short").is_err());
    }

    /// The example from the Standard Webhooks specification.
    #[test]
    fn signature_matches_the_specification_example() {
        let secret = SigningSecret::parse(A).unwrap();
        let sig = secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_list_names_the_bad_secret_by_its_place() {
        let list = SecretList::Many(vec![A.into(), "whsec_c2hvcnQ=".into()]);
        let bad = SigningSecrets::parse(&list).unwrap_err();
        assert_eq!(bad.shown(), "item [1] of the list (hidden)");
        assert!(bad.why.contains("24 bytes"), "{bad}");
        assert!(SigningSecrets::parse(&SecretList::Many(vec![])).unwrap_err().why.contains("empty"));
        assert_eq!(SigningSecrets::parse(&SecretList::One("x".into())).unwrap_err().shown(), "(hidden)");
        assert_eq!(format!("{list:?}"), "SecretList(2 hidden)");
    }
}
