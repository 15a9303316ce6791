//! RFC 5965 Abuse Reporting Format (ARF) complaints.
//!
//! A feedback loop (FBL) report is `multipart/report;
//! report-type=feedback-report` with a `message/feedback-report` part of
//! fields and, usually, the complained-about message attached. Providers
//! often redact the recipient, so the address is looked for in the report's
//! `Original-Rcpt-To`, then `Removal-Recipient`, then the attached message's
//! `To`.

use super::dsn::field_groups;
use super::original::OriginalHeaders;
use super::view::MessageView;
use super::{BounceKind, BounceRecipient, address, recipient_entry};

pub(crate) fn recipients(view: &MessageView, original: &OriginalHeaders) -> Vec<BounceRecipient> {
    let fields: Vec<_> = view.feedback_reports.iter().flat_map(|t| field_groups(t)).flatten().collect();
    let value = |name: &str| fields.iter().find(|f| f.name == name && !f.value.is_empty()).map(|f| f.value.clone());
    let addresses_of = |name: &str| -> Vec<String> {
        fields.iter().filter(|f| f.name == name).filter_map(|f| address::from_typed_field(&f.value)).collect()
    };

    let feedback_type = value("feedback-type").map(|t| t.to_ascii_lowercase());
    let mut addrs = addresses_of("original-rcpt-to");
    if addrs.is_empty() {
        addrs = addresses_of("removal-recipient");
    }
    // Without a recipient field (many providers redact it), the copy of the
    // message says who it reached: its envelope-recipient headers (the
    // mailbox itself, even for a list or a Bcc), then its `To`.
    if addrs.is_empty() {
        addrs = original.delivered_to.clone();
    }
    if addrs.is_empty() {
        addrs = original.to.clone();
    }
    addrs.dedup();
    if addrs.is_empty() {
        // Fully redacted: still report the complaint so it can be matched on
        // the outbox id or Message-ID.
        addrs.push(String::new());
    }

    let mut reason = format!("feedback report: {}", feedback_type.as_deref().unwrap_or("unspecified"));
    if let Some(agent) = value("user-agent") {
        reason.push_str(&format!(" (reported by {agent})"));
    }
    addrs
        .into_iter()
        .map(|addr| {
            let mut entry = recipient_entry(addr, BounceKind::Complaint, original);
            entry.feedback_type.clone_from(&feedback_type);
            entry.reason.clone_from(&reason);
            entry
        })
        .collect()
}
