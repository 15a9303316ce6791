//! RFC 3464 delivery status notifications.
//!
//! The `message/delivery-status` body is one block of per-message fields
//! (`Reporting-MTA`...) followed by one block per recipient (`Final-Recipient`,
//! `Action`, `Status`, `Diagnostic-Code`...), blocks separated by blank lines.
//! The blocks are read here with a small field splitter rather than by
//! feeding them to `mail-parser` as headers: real DSNs omit the blank lines
//! between recipients or put stray text between fields, and a splitter that
//! starts a new recipient at every `Final-Recipient` copes with both.

use std::collections::HashSet;

use super::original::OriginalHeaders;
use super::view::MessageView;
use super::{BounceKind, BounceRecipient, MAX_RECIPIENTS, address, freetext, recipient_entry, status};

/// Longest part of a `Diagnostic-Code` that is searched for codes and words;
/// a real one is a single SMTP reply, a few hundred bytes.
const MAX_DIAGNOSTIC_BYTES: usize = 4096;

/// The largest char boundary of `s` not above `max`.
fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// One `Name: value` field, name lower-cased, continuation lines unfolded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub name: String,
    pub value: String,
}

/// Splits a field block into groups separated by blank lines.
pub(crate) fn field_groups(text: &str) -> Vec<Vec<Field>> {
    let mut groups: Vec<Vec<Field>> = Vec::new();
    let mut current: Vec<Field> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                groups.push(std::mem::take(&mut current));
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(last) = current.last_mut() {
                last.value.push(' ');
                last.value.push_str(line.trim());
            }
            continue;
        }
        if let Some((name, value)) = line.split_once(':') {
            let name = name.trim();
            if !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                current.push(Field { name: name.to_ascii_lowercase(), value: value.trim().to_string() });
            }
        }
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}

/// The fields describing one recipient.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub final_recipient: Option<String>,
    pub original_recipient: Option<String>,
    pub actual_recipient: Option<String>,
    pub action: Option<String>,
    pub status: Option<String>,
    pub diagnostic_code: Option<String>,
    pub remote_mta: Option<String>,
}

impl Record {
    fn has_recipient(&self) -> bool {
        self.final_recipient.is_some() || self.original_recipient.is_some()
    }

    /// The address to report: `Final-Recipient` is where delivery failed;
    /// `Original-Recipient` (what the sender wrote) only when the final one is
    /// missing or holds no address (some MTAs put an X.400 or local name there).
    pub(crate) fn address(&self) -> Option<String> {
        [&self.final_recipient, &self.original_recipient, &self.actual_recipient]
            .into_iter()
            .flatten()
            .find_map(|v| address::from_typed_field(v))
    }
}

/// Per-recipient records of a delivery-status body, in order.
pub(crate) fn records(text: &str) -> Vec<Record> {
    let mut out = Vec::new();
    for group in field_groups(text) {
        let mut record = Record::default();
        for field in group {
            let value = Some(field.value);
            // A recipient field that is already set starts the next recipient:
            // the blank line between the two was left out.
            let starts_next = match field.name.as_str() {
                "final-recipient" => record.final_recipient.is_some(),
                "original-recipient" => record.original_recipient.is_some(),
                _ => false,
            };
            if starts_next {
                if record.has_recipient() {
                    out.push(std::mem::take(&mut record));
                } else {
                    record = Record::default();
                }
            }
            match field.name.as_str() {
                "final-recipient" => record.final_recipient = value,
                "original-recipient" => record.original_recipient = value,
                "x-actual-recipient" => record.actual_recipient = value,
                "action" => record.action = value.map(|v| v.to_ascii_lowercase()),
                "status" => record.status = value,
                "diagnostic-code" => record.diagnostic_code = value,
                "remote-mta" => record.remote_mta = value,
                _ => {}
            }
        }
        if record.has_recipient() {
            out.push(record);
        }
    }
    out
}

/// Strips the diagnostic type (`smtp;`, `X-Postfix;`) from a Diagnostic-Code.
fn diagnostic_text(value: &str) -> &str {
    match value.split_once(';') {
        Some((kind, rest))
            if !kind.trim().is_empty()
                && kind.trim().len() <= 16
                && kind.trim().bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            rest.trim()
        }
        _ => value.trim(),
    }
}

/// Strips the type from `Remote-MTA: dns; mx.example.net`.
fn remote_mta(value: &str) -> String {
    diagnostic_text(value).trim_matches(['[', ']']).to_string()
}

/// Recipients of a DSN: from `message/delivery-status` parts, or from DSN
/// fields pasted into a text part.
pub(crate) fn recipients(view: &MessageView, original: &OriginalHeaders) -> Vec<BounceRecipient> {
    let mut all_records: Vec<Record> = view.delivery_status.iter().flat_map(|t| records(t)).collect();
    if all_records.is_empty() {
        all_records = view.texts.iter().flat_map(|t| records(t)).collect();
    }

    let addressed: Vec<(String, &Record)> = all_records.iter().filter_map(|r| r.address().map(|a| (a, r))).collect();
    if addressed.is_empty() {
        return unaddressed(view, original, &all_records);
    }

    let single = addressed.len() == 1;
    let report = freetext::Report::new(view);
    let mut seen = HashSet::new();
    let mut out: Vec<BounceRecipient> = Vec::new();
    for (addr, record) in addressed.into_iter().take(MAX_RECIPIENTS) {
        if !seen.insert(addr.clone()) {
            continue;
        }
        if let Some(entry) = entry(&report, original, record, addr, single) {
            out.push(entry);
        }
    }
    out
}

/// Records whose recipient is no address (a local file or program such as
/// `/mail/spool/...` or `|procmail`): the text part names the address, and a
/// lone record's status and action still apply to it.
fn unaddressed(view: &MessageView, original: &OriginalHeaders, records: &[Record]) -> Vec<BounceRecipient> {
    let mut found = freetext::recipients(view, original);
    if let ([record], [entry]) = (records, found.as_mut_slice()) {
        let field_status = record.status.as_deref().and_then(status::find_status);
        entry.status = status::prefer(field_status.as_deref(), entry.status.as_deref(), entry.reply_code);
        entry.action.clone_from(&record.action);
        if record.action.as_deref() == Some("delayed") {
            entry.kind = BounceKind::Delayed;
        }
    }
    found
}

/// Turns one record into a recipient entry; `None` for recipients that did
/// not fail (`delivered`, `relayed`, `expanded`, or a 2.X.X status).
fn entry(
    report: &freetext::Report<'_>,
    original: &OriginalHeaders,
    record: &Record,
    addr: String,
    single: bool,
) -> Option<BounceRecipient> {
    let action = record.action.clone();
    // `deliverable` is what address verification (`sendmail -bv`, Postfix
    // `verify`) reports; like the RFC 3464 success actions it is no failure.
    if matches!(action.as_deref(), Some("delivered" | "deliverable" | "relayed" | "expanded")) {
        return None;
    }

    // The human-readable part usually repeats the recipient with the remote
    // server's reply and the SMTP command it answered.
    let block = report.block_for(&addr).unwrap_or_default();
    let diagnostic = record.diagnostic_code.as_deref().map(diagnostic_text).unwrap_or("");
    let diagnostic = diagnostic.get(..floor_char_boundary(diagnostic, MAX_DIAGNOSTIC_BYTES)).unwrap_or("");
    let reason_text = if diagnostic.is_empty() { block.as_str() } else { diagnostic };

    let field_status = record.status.as_deref().and_then(status::find_status);
    let (text_status, mut reply) = status::find_codes(reason_text);
    let mut chosen = status::prefer(field_status.as_deref(), text_status.as_deref(), reply);
    let says_nothing = |s: &str| status::vagueness(s) == 2 || s.ends_with(".4.7");
    if chosen.as_deref().is_none_or(says_nothing) || reply.is_none() {
        // A missing or empty code ("5.0.0", "4.4.7 expired"): the text part
        // may quote the real reply (Sendmail's transcript, Exchange's log of
        // attempts). Only a code of the same class may replace it.
        let wider = if single { report.text() } else { block.clone() };
        let (more_status, more_reply) = status::find_codes(&wider);
        let same_class = |m: &str| chosen.as_deref().is_none_or(|c| c.get(..1) == m.get(..1));
        if chosen.as_deref().is_none_or(says_nothing) && more_status.as_deref().is_some_and(same_class) {
            chosen = status::prefer(chosen.as_deref(), more_status.as_deref(), more_reply);
        }
        reply = reply.or(more_reply);
    }
    if chosen.as_deref().is_some_and(|s| s.starts_with('2')) {
        return None;
    }

    let stage = status::smtp_stage(reason_text)
        .or_else(|| report.transcript_stage(&addr))
        .or_else(|| status::smtp_stage(&block));
    let local_program =
        record.diagnostic_code.as_deref().is_some_and(|d| d.trim_start().to_ascii_lowercase().starts_with("x-unix"));
    let kind = if action.as_deref() == Some("delayed") {
        BounceKind::Delayed
    } else if local_program {
        // `X-Unix`: a local delivery program (procmail, a pipe) failed. Its
        // exit code is mapped to a status by the MTA and says nothing
        // reliable about the address.
        BounceKind::Soft
    } else if action.as_deref() == Some("failed") && status::gave_up_on_missing_mailbox(chosen.as_deref(), reason_text)
    {
        BounceKind::Hard
    } else {
        status::classify_in_context(chosen.as_deref(), reply, reason_text, &block, stage)
    };
    let mut entry = recipient_entry(addr, kind, original);
    entry.status = chosen;
    entry.reply_code = reply;
    entry.reason = reason_text.to_string();
    entry.action = action;
    entry.remote_mta = record.remote_mta.as_deref().map(remote_mta);
    Some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_recipients_without_blank_lines() {
        let text = "Reporting-MTA: dns; mx.example\n\nFinal-Recipient: rfc822; a@x.example\nAction: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1\n  user unknown\nFinal-Recipient: rfc822; b@x.example\nAction: delayed\nStatus: 4.4.1\n";
        let recs = records(text);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].address().as_deref(), Some("a@x.example"));
        assert_eq!(recs[0].diagnostic_code.as_deref(), Some("smtp; 550 5.1.1 user unknown"));
        assert_eq!(recs[1].action.as_deref(), Some("delayed"));
    }

    #[test]
    fn diagnostic_type_is_stripped() {
        assert_eq!(diagnostic_text("smtp; 550 nope"), "550 nope");
        assert_eq!(diagnostic_text("550 5.1.1 <a@b.c>; nope"), "550 5.1.1 <a@b.c>; nope");
    }
}
