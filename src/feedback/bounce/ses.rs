//! Amazon SES notifications delivered by e-mail (SNS e-mail subscriptions).
//!
//! When an outbox sends through SES, bounces and complaints may arrive as a
//! JSON document in a plain-text mail rather than as a DSN. Only the fields
//! Herald needs are read, through `serde_json::Value`: typed structs were
//! rejected because SES adds fields and sub-types over time and a strict
//! schema would turn a harmless addition into a parse failure.

use serde_json::Value;

use super::original::OriginalHeaders;
use super::view::MessageView;
use super::{BounceKind, BounceRecipient, BounceReport, recipient_entry, status};

/// A decoded SES notification.
pub(crate) struct Notification {
    recipients: Vec<BounceRecipient>,
    original: OriginalHeaders,
}

impl Notification {
    /// Puts the notification's findings into `report`.
    pub(crate) fn apply(self, report: &mut BounceReport) {
        if report.original_message_id.is_none() {
            report.original_message_id = self.original.message_id;
        }
        if report.herald_outbox_id.is_none() {
            report.herald_outbox_id = self.original.herald_outbox_id;
        }
        if report.original_to.is_none() {
            report.original_to = self.original.to.into_iter().next();
        }
        report.recipients = self.recipients;
    }
}

/// Finds and decodes an SES notification in the message's text parts.
pub(crate) fn find(view: &MessageView) -> Option<Notification> {
    view.texts.iter().find_map(|text| {
        // Inside an SNS envelope the SES document is a JSON string, so its
        // keys appear with escaped quotes (`\"notificationType\"`).
        if !text.contains("notificationType") {
            return None;
        }
        let value = parse_json(text)?;
        // An SNS envelope carries the SES document as a string in "Message".
        let value = match value.get("Message").and_then(Value::as_str) {
            Some(inner) => parse_json(inner)?,
            None => value,
        };
        decode(&value)
    })
}

/// Parses the first JSON object in `text`. Mail systems fold over-long lines
/// (sendmail inserts `!` + newline + space at ~990 characters), which breaks
/// the JSON, so a failed parse is retried with that folding undone.
fn parse_json(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let first = |s: &str| serde_json::Deserializer::from_str(s).into_iter::<Value>().next().and_then(Result::ok);
    let body = text.get(start..)?;
    first(body)
        .or_else(|| first(&body.replace("!\r\n ", "").replace("!\n ", "")))
        .or_else(|| first(&body.replace("\r\n ", "").replace("\n ", "")))
}

fn decode(value: &Value) -> Option<Notification> {
    let kind = value.get("notificationType").and_then(Value::as_str)?;
    let original = original_headers(value.get("mail"));
    let recipients = match kind {
        "Bounce" => bounces(value.get("bounce")?, &original),
        "Complaint" => complaints(value.get("complaint")?, &original),
        _ => Vec::new(),
    };
    Some(Notification { recipients, original })
}

fn bounces(bounce: &Value, original: &OriginalHeaders) -> Vec<BounceRecipient> {
    let bounce_type = bounce.get("bounceType").and_then(Value::as_str).unwrap_or("");
    let sub_type = bounce.get("bounceSubType").and_then(Value::as_str).unwrap_or("");
    list(bounce, "bouncedRecipients")
        .filter_map(|r| {
            let addr = r.get("emailAddress").and_then(Value::as_str)?;
            let addr = super::address::first(addr)?;
            let diagnostic = r.get("diagnosticCode").and_then(Value::as_str).unwrap_or("");
            let diagnostic = diagnostic.split_once(';').map_or(diagnostic, |(_, rest)| rest).trim();
            let field = r.get("status").and_then(Value::as_str).and_then(status::find_status);
            let (in_text, reply) = status::find_codes(diagnostic);
            let chosen = status::prefer(field.as_deref(), in_text.as_deref(), reply);
            // SES's own verdict settles what the text leaves open: it knows
            // whether it will retry (Transient) and whether the address is
            // already known-bad (NoEmail, suppression lists).
            let kind = match (bounce_type, sub_type) {
                ("Transient", _) => BounceKind::Soft,
                (_, "NoEmail" | "Suppressed" | "OnAccountSuppressionList") => BounceKind::Hard,
                _ => status::classify(chosen.as_deref(), reply, diagnostic, status::smtp_stage(diagnostic)),
            };
            let mut entry = recipient_entry(addr, kind, original);
            entry.status = chosen;
            entry.reply_code = reply;
            entry.reason = if diagnostic.is_empty() {
                format!("SES {bounce_type} bounce ({sub_type})")
            } else {
                diagnostic.to_string()
            };
            entry.action = r.get("action").and_then(Value::as_str).map(str::to_ascii_lowercase);
            Some(entry)
        })
        .collect()
}

fn complaints(complaint: &Value, original: &OriginalHeaders) -> Vec<BounceRecipient> {
    let feedback_type = complaint.get("complaintFeedbackType").and_then(Value::as_str).map(str::to_ascii_lowercase);
    list(complaint, "complainedRecipients")
        .filter_map(|r| {
            let addr = super::address::first(r.get("emailAddress").and_then(Value::as_str)?)?;
            let mut entry = recipient_entry(addr, BounceKind::Complaint, original);
            entry.feedback_type.clone_from(&feedback_type);
            entry.reason = format!("SES complaint: {}", feedback_type.as_deref().unwrap_or("unspecified"));
            Some(entry)
        })
        .collect()
}

fn list<'v>(value: &'v Value, key: &str) -> impl Iterator<Item = &'v Value> {
    value.get(key).and_then(Value::as_array).map(|a| a.iter()).into_iter().flatten()
}

/// Message-ID, outbox id and To of the sent message, from `mail.headers`
/// (present when the SES identity includes original headers) or
/// `mail.commonHeaders`.
fn original_headers(mail: Option<&Value>) -> OriginalHeaders {
    let mut out = OriginalHeaders::default();
    let Some(mail) = mail else {
        return out;
    };
    for header in list(mail, "headers") {
        let name = header.get("name").and_then(Value::as_str).unwrap_or("");
        let value = header.get("value").and_then(Value::as_str).unwrap_or("").trim();
        if name.eq_ignore_ascii_case("Message-ID") && out.message_id.is_none() {
            out.message_id = Some(value.trim_matches(['<', '>']).to_string());
        } else if name.eq_ignore_ascii_case("X-Herald-Outbox-Id") && !value.is_empty() {
            out.herald_outbox_id = Some(value.to_string());
        }
    }
    let common = mail.get("commonHeaders");
    if out.message_id.is_none() {
        out.message_id = common
            .and_then(|c| c.get("messageId"))
            .and_then(Value::as_str)
            .map(|id| id.trim().trim_matches(['<', '>']).to_string());
    }
    if let Some(to) = common.and_then(|c| c.get("to")).and_then(Value::as_array) {
        out.to = to.iter().filter_map(Value::as_str).filter_map(super::address::first).collect();
    }
    out
}
