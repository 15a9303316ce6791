//! Compact JWS (RFC 7515) signing for the three tokens push needs: the VAPID
//! token (ES256), the APNs provider token (ES256) and the FCM OAuth grant's
//! assertion (RS256). Signing only: Herald never verifies a JWT here, so
//! none of the algorithm-confusion traps of a general JWT library apply.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

/// A key that signs a JWT, with the `alg` it signs under.
pub enum JwtKey<'a> {
    /// ECDSA P-256 with SHA-256; the signature is `r || s`, 64 bytes
    /// (RFC 7518 §3.4), not DER.
    Es256(&'a p256::ecdsa::SigningKey),
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256(&'a rsa::pkcs1v15::SigningKey<rsa::sha2::Sha256>),
}

impl JwtKey<'_> {
    fn alg(&self) -> &'static str {
        match self {
            JwtKey::Es256(_) => "ES256",
            JwtKey::Rs256(_) => "RS256",
        }
    }
}

#[derive(Serialize)]
struct Header<'a> {
    typ: &'static str,
    alg: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kid: Option<&'a str>,
}

/// Signs `claims` as `header.claims.signature`, each part base64url without
/// padding. Both signers are deterministic (RFC 6979 for ECDSA, PKCS #1
/// v1.5 for RSA), so no random source is needed.
pub fn sign(key: JwtKey<'_>, kid: Option<&str>, claims: &impl Serialize) -> String {
    use rsa::signature::{SignatureEncoding, Signer};
    let header = Header { typ: "JWT", alg: key.alg(), kid };
    let mut token = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("a header serialises"));
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialise")));
    let signature = match key {
        JwtKey::Es256(k) => {
            let sig: p256::ecdsa::Signature = k.sign(token.as_bytes());
            sig.to_bytes().to_vec()
        }
        JwtKey::Rs256(k) => k.sign(token.as_bytes()).to_vec(),
    };
    token.push('.');
    token.push_str(&URL_SAFE_NO_PAD.encode(signature));
    token
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Verifier;

    #[test]
    fn an_es256_token_verifies_with_the_public_key() {
        let key = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let token = sign(JwtKey::Es256(&key), Some("K1"), &serde_json::json!({"iss": "T", "iat": 1}));
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header, serde_json::json!({"typ": "JWT", "alg": "ES256", "kid": "K1"}));
        let sig = p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
        let signed = format!("{}.{}", parts[0], parts[1]);
        key.verifying_key().verify(signed.as_bytes(), &sig).expect("the signature verifies");
        assert!(key.verifying_key().verify(b"something else", &sig).is_err());
    }
}
