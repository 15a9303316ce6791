//! Bounce ingestion: a raw message that came back on the return path becomes
//! evidence, a send-log row on the message it belongs to, and, for hard
//! bounces and complaints, a suppression.
//!
//! Matching, most certain first: the VERP return path the email channel sets
//! (`bounce+OUTBOX-ID@…`), an `X-Herald-Outbox-Id` in the bounced message's
//! headers, its Message-ID (`<OUTBOX-ID@…>`), and last the address hash among
//! recent sends. A bounce matched to nothing is still kept, and still
//! suppresses: the address is as dead either way.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::address::AddressKeys;
use crate::clock::Millis;
use crate::domain::storable_text;
use crate::feedback::bounce::{self, BounceKind};
use crate::store::{
    ALL_CATEGORIES, MatchedSend, NewBounce, OutboxRow, Store, StoreError, SuppressionReason, SuppressionRow,
};

/// When soft bounces add up to a suppression: `limit` of them for one
/// address within `window` suppress it for `window` (a full mailbox or a
/// flaky server deserves a rest, not a permanent ban). `limit` 0: never.
#[derive(Debug, Clone, Copy)]
pub struct SoftBouncePolicy {
    pub limit: u32,
    pub window: std::time::Duration,
}

impl Default for SoftBouncePolicy {
    fn default() -> Self {
        SoftBouncePolicy { limit: 3, window: std::time::Duration::from_secs(7 * 86_400) }
    }
}

/// How much of the raw message is kept as evidence.
const RAW_EXCERPT_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Parse(#[from] bounce::ParseError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
pub struct IngestReport {
    /// Recipients the message reported on.
    pub recipients: usize,
    /// Newly recorded (the rest had been recorded before).
    pub recorded: usize,
    pub duplicates: usize,
    /// Matched to a message Herald sent.
    pub matched: usize,
    /// Hard bounces and complaints that suppressed their address.
    pub suppressed: usize,
    pub items: Vec<IngestItem>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IngestItem {
    /// hard, soft, complaint, auto_reply or delayed
    pub kind: String,
    pub status: Option<String>,
    pub outbox_id: Option<String>,
    pub matched_by: Option<String>,
    /// What was done, in words.
    pub action: String,
}

/// The outbox id in a VERP return path (`bounce+ID@domain`) among the
/// bounce's own recipient headers. Public for the fuzz targets
/// ([`crate::tooling::fuzzing`]), which feed it the same hostile bytes as the parser.
pub fn verp_outbox_id(raw: &[u8]) -> Option<String> {
    let head = &raw[..raw.len().min(64 * 1024)];
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let headers = text.split("\r\n\r\n").next().unwrap_or(&text).split("\n\n").next().unwrap_or("");
    for line in headers.lines() {
        let is_rcpt = ["to:", "delivered-to:", "x-original-to:", "envelope-to:", "x-envelope-to:"]
            .iter()
            .any(|h| line.starts_with(h));
        if let (true, Some(i)) = (is_rcpt, line.find("bounce+")) {
            let id: String = line[i + 7..].chars().take_while(|c| c.is_ascii_hexdigit() || *c == '-').collect();
            if id.len() == 36 {
                return Some(id);
            }
        }
    }
    None
}

fn as_outbox_id(s: &str) -> Option<String> {
    let id = s.trim_matches(|c| c == '<' || c == '>').split('@').next()?.to_ascii_lowercase();
    uuid::Uuid::parse_str(&id).ok().map(|_| id)
}

async fn find_send(
    store: &dyn Store,
    verp: Option<&str>,
    r: &bounce::BounceRecipient,
    address_hash: Option<&str>,
) -> Result<Option<(OutboxRow, &'static str)>, StoreError> {
    let candidates = [
        (verp.map(str::to_owned), "verp"),
        (r.herald_outbox_id.as_deref().and_then(as_outbox_id), "outbox_id_header"),
        (r.original_message_id.as_deref().and_then(as_outbox_id), "message_id"),
    ];
    for (id, how) in candidates {
        if let Some(id) = id
            && let Some(row) = store.get_outbox(&id).await?
        {
            return Ok(Some((row, how)));
        }
    }
    if let Some(hash) = address_hash
        && let Some(send) = store.sends_for_address(hash, 1).await?.into_iter().next()
        && let Some(row) = store.get_outbox(&send.outbox_id).await?
    {
        return Ok(Some((row, "address_hash")));
    }
    Ok(None)
}

/// Parses and records one raw message. `provider` names the source in the
/// evidence (`mail` for a forwarded mailbox or an imported file).
pub async fn ingest_mail(
    store: &dyn Store,
    keys: &AddressKeys,
    policy: SoftBouncePolicy,
    raw: &[u8],
    provider: &str,
    now: Millis,
) -> Result<IngestReport, IngestError> {
    let report = bounce::parse(raw)?;
    let verp = verp_outbox_id(raw);
    Ok(record(store, keys, policy, &report.recipients, provider, verp.as_deref(), raw, now).await?)
}

/// Records what a bounce source reported, one recipient at a time: the raw
/// message's parse, or a provider webhook's events turned into the same
/// shape. `raw` is kept (bounded) as evidence and seeds the fingerprints.
#[allow(clippy::too_many_arguments)]
pub async fn record(
    store: &dyn Store,
    keys: &AddressKeys,
    policy: SoftBouncePolicy,
    recipients: &[bounce::BounceRecipient],
    provider: &str,
    verp: Option<&str>,
    raw: &[u8],
    now: Millis,
) -> Result<IngestReport, StoreError> {
    // Raw bytes and provider strings may hold U+0000, which PostgreSQL
    // cannot store: the evidence would be lost to a 500 on that backend only.
    let excerpt = storable_text(&String::from_utf8_lossy(&raw[..raw.len().min(RAW_EXCERPT_BYTES)])).into_owned();
    let mut out = IngestReport { recipients: recipients.len(), ..Default::default() };
    for r in recipients {
        let kind = serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        let address_hash = if r.recipient.is_empty() { None } else { keys.hash(&r.recipient) };
        let matched = find_send(store, verp, r, address_hash.as_deref()).await?;
        let detail = [r.status.clone(), r.reply_code.map(|c| c.to_string()), Some(r.reason.clone())]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let detail = storable_text(&detail).into_owned();
        let (send_status, reason) = match r.kind {
            BounceKind::Hard => (Some("bounced"), Some(SuppressionReason::HardBounce)),
            BounceKind::Complaint => (Some("complained"), Some(SuppressionReason::Complaint)),
            // Evidence only: a soft bounce, an auto-reply or a delay says
            // nothing final about the address.
            BounceKind::Soft | BounceKind::AutoReply | BounceKind::Delayed => (None, None),
        };
        let mut suppress = match (reason, &address_hash) {
            (Some(reason), Some(hash)) => Some(SuppressionRow {
                address_hash: hash.clone(),
                address_kind: crate::address::AddressKind::Email,
                category: ALL_CATEGORIES.to_owned(),
                reason,
                detail: Some(format!("{kind} bounce report: {detail}")),
                created_at: now,
                expires_at: None,
            }),
            _ => None,
        };
        if let (BounceKind::Soft, Some(hash), true) = (r.kind, &address_hash, policy.limit > 0) {
            let earlier = store.count_bounces(hash, "soft", now.minus(policy.window)).await?;
            if earlier + 1 >= i64::from(policy.limit) {
                suppress = Some(SuppressionRow {
                    address_hash: hash.clone(),
                    address_kind: crate::address::AddressKind::Email,
                    category: ALL_CATEGORIES.to_owned(),
                    reason: SuppressionReason::SoftBounce,
                    detail: Some(format!(
                        "{} soft bounces within {}; latest: {detail}",
                        earlier + 1,
                        humantime::format_duration(policy.window)
                    )),
                    created_at: now,
                    expires_at: Some(now.plus(policy.window)),
                });
            }
        }
        let mut fp = Sha256::new();
        fp.update(raw);
        fp.update(b"\n");
        fp.update(r.recipient.as_bytes());
        fp.update(kind.as_bytes());
        let bounce = NewBounce {
            fingerprint: hex::encode(fp.finalize()),
            provider: provider.to_owned(),
            kind: kind.clone(),
            address_hash: address_hash.clone(),
            status: r.status.clone(),
            reply_code: r.reply_code.map(i64::from),
            detail: detail.clone(),
            raw_excerpt: excerpt.clone(),
            matched: matched.as_ref().map(|(row, how)| MatchedSend {
                outbox_id: row.id.clone(),
                rule_id: row.rule_id.clone(),
                trigger_id: row.trigger_id.clone(),
                user_id: row.user_id.clone(),
                channel: row.channel.clone(),
                matched_by: how,
            }),
            send_status,
            provider_id: None,
            suppress: suppress.clone(),
        };
        let new = store.record_bounce(&bounce, now).await?;
        let action = match (new, send_status, &suppress) {
            (false, _, _) => "already recorded; nothing changed".to_owned(),
            (true, Some(s), Some(_)) if matched.is_some() => format!("send log: {s}; address suppressed"),
            (true, Some(_), Some(_)) => "address suppressed (no matching send found)".to_owned(),
            (true, None, Some(s)) => format!(
                "kept as evidence; address suppressed until {}",
                s.expires_at.map_or("lifted".into(), |t| t.to_rfc3339())
            ),
            (true, _, _) => "kept as evidence".to_owned(),
        };
        if new {
            out.recorded += 1;
            out.matched += usize::from(matched.is_some());
            out.suppressed += usize::from(suppress.is_some());
        } else {
            out.duplicates += 1;
        }
        out.items.push(IngestItem {
            kind,
            status: r.status.clone(),
            outbox_id: matched.as_ref().map(|(row, _)| row.id.clone()),
            matched_by: matched.as_ref().map(|(_, how)| (*how).to_owned()),
            action,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verp_return_path_names_the_outbox_row() {
        let raw = b"Delivered-To: bounce+01a23720-c5ee-76eb-bb34-dc5abfe75cd5@bounces.example.com\r\n\
                    Subject: Undelivered\r\n\r\nbody mentioning bounce+ffffffff-ffff-ffff-ffff-ffffffffffff@x";
        assert_eq!(verp_outbox_id(raw).as_deref(), Some("01a23720-c5ee-76eb-bb34-dc5abfe75cd5"));
        assert_eq!(verp_outbox_id(b"To: someone@example.com\r\n\r\n"), None);
    }

    #[test]
    fn message_ids_made_by_herald_name_their_row() {
        assert_eq!(
            as_outbox_id("<01A23720-C5EE-76EB-BB34-DC5ABFE75CD5@example.com>").as_deref(),
            Some("01a23720-c5ee-76eb-bb34-dc5abfe75cd5")
        );
        assert_eq!(as_outbox_id("<CAF=abc@mail.gmail.com>"), None);
    }
}
