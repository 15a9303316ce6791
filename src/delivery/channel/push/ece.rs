//! Message encryption for Web Push (RFC 8291, the `aes128gcm` content coding
//! of RFC 8188): the push service carries the message but cannot read it.
//!
//! Each message gets a fresh ephemeral P-256 key and a random salt; ECDH
//! with the browser's `p256dh` key, mixed with its `auth` secret through
//! HKDF, gives the AES-128-GCM key and nonce. The whole payload is one
//! record (a notification is at most 4 KB, far under the 4,096-byte record
//! size announced), so there is one nonce and no sequence number to get
//! wrong. Only `aes128gcm`: the older `aesgcm` draft coding that some
//! libraries still offer is not what RFC 8291 specifies, and every browser
//! that supports VAPID also decrypts `aes128gcm`.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes128Gcm, Nonce};
use hkdf::Hkdf;
use sha2::Sha256;

/// The record size written in the header: the largest record a receiver
/// must accept, which every one-record notification fits.
const RECORD_SIZE: u32 = 4096;

/// Bytes the encryption adds to the plaintext: the header (16-byte salt,
/// 4-byte record size, 1-byte key-id length, 65-byte key), the padding
/// delimiter and the 16-byte GCM tag.
pub const OVERHEAD: usize = 16 + 4 + 1 + 65 + 1 + 16;

/// Encrypts `plaintext` for the subscription whose public key is `ua_public`
/// and whose authentication secret is `auth`.
///
/// The ephemeral key and the ECDH come from `ring` (already linked in as
/// rustls's provider), not from `p256`: the two scalar multiplications are
/// nearly all of a message's cost, and `ring`'s assembly does them several
/// times faster than `p256`'s portable code (see the module doc of
/// `channel::push` for the figures). `p256` still parses and checks the
/// subscription's key, and does the ECDH of the RFC's worked example in the
/// tests, where the ephemeral key must be a given one (`ring` only uses
/// keys it generated).
pub fn encrypt(plaintext: &[u8], ua_public: &p256::PublicKey, auth: &[u8; 16]) -> Vec<u8> {
    use ring::agreement::{ECDH_P256, EphemeralPrivateKey, UnparsedPublicKey, agree_ephemeral};
    let rng = ring::rand::SystemRandom::new();
    let ephemeral = EphemeralPrivateKey::generate(&ECDH_P256, &rng).expect("the system's random source works");
    let as_public = ephemeral.compute_public_key().expect("a generated key has a public key");
    let ua_bytes = p256::EncodedPoint::from(ua_public);
    let peer = UnparsedPublicKey::new(&ECDH_P256, ua_bytes.as_bytes());
    let salt: [u8; 16] = rand::random();
    agree_ephemeral(ephemeral, &peer, |shared| {
        seal(plaintext, ua_bytes.as_bytes(), as_public.as_ref(), shared, auth, &salt)
    })
    .expect("a point p256 accepted is one ring accepts")
}

/// Everything after the ECDH: the keys from the shared secret, the
/// subscription's secret and the salt, and the one encrypted record with
/// its header. `ua_public` and `as_public` are uncompressed points.
fn seal(
    plaintext: &[u8],
    ua_public: &[u8],
    as_public: &[u8],
    shared: &[u8],
    auth: &[u8; 16],
    salt: &[u8; 16],
) -> Vec<u8> {
    // RFC 8291 §3.3: IKM = HKDF(auth, ecdh_secret, "WebPush: info" || 0 || ua_public || as_public, 32)
    let mut key_info = Vec::with_capacity(14 + 65 + 65);
    key_info.extend_from_slice(b"WebPush: info\0");
    key_info.extend_from_slice(ua_public);
    key_info.extend_from_slice(as_public);
    let mut ikm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(auth), shared)
        .expand(&key_info, &mut ikm)
        .expect("32 bytes is a valid HKDF-SHA-256 length");

    // RFC 8188 §2.2, 2.3: the content-encryption key and the nonce.
    let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
    let mut cek = [0u8; 16];
    let mut nonce = [0u8; 12];
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).expect("16 bytes is a valid length");
    prk.expand(b"Content-Encoding: nonce\0", &mut nonce).expect("12 bytes is a valid length");

    // One record, the last: the plaintext followed by the delimiter 0x02
    // and no padding.
    let mut record = Vec::with_capacity(plaintext.len() + 1);
    record.extend_from_slice(plaintext);
    record.push(2);
    let cipher = Aes128Gcm::new_from_slice(&cek).expect("a 16-byte key");
    let sealed = cipher.encrypt(Nonce::from_slice(&nonce), record.as_slice()).expect("AES-GCM takes any length here");

    let mut body = Vec::with_capacity(OVERHEAD + plaintext.len());
    body.extend_from_slice(salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(as_public.len() as u8);
    body.extend_from_slice(as_public);
    body.extend_from_slice(&sealed);
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    fn b64(s: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(s).unwrap()
    }

    /// The worked example of RFC 8291 Appendix A, byte for byte.
    #[test]
    fn reproduces_the_rfc_8291_example() {
        let plaintext = b"When I grow up, I want to be a watermelon";
        let ua_public = p256::PublicKey::from_sec1_bytes(&b64(
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
        ))
        .unwrap();
        let auth: [u8; 16] = b64("BTBZMqHH6r4Tts7J_aSIgg").try_into().unwrap();
        let ephemeral = p256::SecretKey::from_slice(&b64("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")).unwrap();
        let salt: [u8; 16] = b64("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let shared = p256::ecdh::diffie_hellman(ephemeral.to_nonzero_scalar(), ua_public.as_affine());
        let ua_bytes = p256::EncodedPoint::from(&ua_public);
        let as_public = ephemeral.public_key().to_sec1_bytes();
        let body = seal(plaintext, ua_bytes.as_bytes(), &as_public, shared.raw_secret_bytes(), &auth, &salt);
        assert_eq!(
            URL_SAFE_NO_PAD.encode(&body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
        assert_eq!(body.len(), OVERHEAD + plaintext.len());
    }
}
