//! What a message is about, in one line, for the lists that show many of
//! them: the outbox (API, screen), the send log (screen, `herald sends`).
//! An id alone answers "which row" but not "which message".
//!
//! The outbox does not keep the rendered message (a rule's row holds the
//! trigger's payload, and the message is rendered when it is delivered), so
//! a rule's row is given its rule's subject rendered again, here, for the
//! recipient's locale; a row enqueued by hand shows its payload's `subject`
//! (email) or `title` (inbox). The alternative, storing each rendered
//! subject, needs a column and a write on every delivery; a list page renders
//! at most a page of subjects. A rule edited since shows its new wording,
//! and a subject that cannot be rendered shows nothing rather than a guess.
//! A digest message's subject is rendered with its `digest` (the triggers
//! it holds, read once for the page), as at delivery: without it, every
//! digest subject failed to render and the lists showed none.

use std::collections::HashMap;

use crate::domain::UserId;
use crate::planning::planner::user_context;
use crate::planning::template::TemplateSet;
use crate::planning::workflow::RuleWorkflow;
use crate::store::{DigestItemRow, OutboxRow, RecipientRow, RuleRow, Store, StoreError};

/// Longest headline shown; a subject is one line, a payload title need not be.
const MAX_CHARS: usize = 200;

/// Subjects (or titles) by outbox id, for the rows that have one. One read
/// per distinct rule and per distinct recipient among rule rows, not per row.
pub async fn subjects(store: &dyn Store, rows: &[OutboxRow]) -> Result<HashMap<String, String>, StoreError> {
    let mut rules: HashMap<&str, Option<(RuleRow, TemplateSet)>> = HashMap::new();
    let mut recipients: HashMap<&str, Option<RecipientRow>> = HashMap::new();
    for r in rows {
        let Some(rule_id) = r.rule_id.as_deref() else { continue };
        if !rules.contains_key(rule_id) {
            let rule = store.get_rule(rule_id).await?.and_then(|rule| {
                let template = serde_json::from_value::<TemplateSet>(rule.template.clone()).ok()?;
                Some((rule, template))
            });
            rules.insert(rule_id, rule);
        }
        if !recipients.contains_key(r.user_id.as_str()) {
            let recipient = match UserId::parse("user_id", &r.user_id) {
                Ok(u) => store.get_recipient(&u).await?,
                Err(_) => None,
            };
            recipients.insert(r.user_id.as_str(), recipient);
        }
    }
    // The triggers of the digest messages among them, in one read.
    let digest_rows: Vec<&str> = rows
        .iter()
        .filter(|r| r.rule_id.as_deref().and_then(|id| rules.get(id)).and_then(Option::as_ref).is_some_and(is_digest))
        .map(|r| r.id.as_str())
        .collect();
    let mut digests: HashMap<String, Vec<DigestItemRow>> = HashMap::new();
    for item in store.digest_items(&digest_rows).await? {
        digests.entry(item.outbox_id.clone()).or_default().push(item);
    }
    let mut out = HashMap::new();
    for r in rows {
        let payload: serde_json::Value = serde_json::from_str(&r.payload).unwrap_or_default();
        let subject = match r.rule_id.as_deref().and_then(|id| rules.get(id)).and_then(Option::as_ref) {
            Some(rule_and_template) => {
                let (rule, template) = rule_and_template;
                let recipient = recipients.get(r.user_id.as_str()).and_then(Option::as_ref);
                let mut ctx = serde_json::json!({
                    "payload": payload,
                    "trigger": { "id": r.trigger_id, "type": rule.trigger_type, "occurred_at": null },
                    "user": user_context(&r.user_id, recipient),
                });
                if is_digest(rule_and_template) {
                    let items = digests.get(&r.id).map(Vec::as_slice).unwrap_or_default();
                    ctx["digest"] = crate::planning::digest::context(items);
                }
                let locale = recipient.and_then(|p| p.locale.as_deref());
                template.render(locale, &ctx).ok().map(|m| m.subject)
            }
            None if r.rule_id.is_none() => {
                ["subject", "title"].iter().find_map(|k| payload.get(k).and_then(|v| v.as_str()).map(str::to_owned))
            }
            None => None,
        };
        if let Some(s) = subject.map(|s| one_line(&s)).filter(|s| !s.is_empty()) {
            out.insert(r.id.clone(), s);
        }
    }
    Ok(out)
}

/// Whether a rule has a digest: its messages render with `digest`.
fn is_digest((rule, _): &(RuleRow, TemplateSet)) -> bool {
    RuleWorkflow::from_stored(rule.workflow.as_ref()).is_ok_and(|w| w.digest.is_some())
}

/// The whole message of one rule row, rendered as [`subjects`] renders the
/// subject (for the recipient's locale, with the rule as it is now), for the
/// row's detail page: `None` for a row enqueued by hand (its payload is the
/// message) or whose rule is gone; `Some(Err)` with the reason when it does
/// not render.
pub async fn render_row(
    store: &dyn Store,
    row: &OutboxRow,
) -> Result<Option<Result<crate::planning::template::Rendered, String>>, StoreError> {
    let Some(rule_id) = row.rule_id.as_deref() else { return Ok(None) };
    let Some(rule) = store.get_rule(rule_id).await? else { return Ok(None) };
    let template = match serde_json::from_value::<TemplateSet>(rule.template.clone()) {
        Ok(t) => t,
        Err(e) => return Ok(Some(Err(format!("the rule's stored template is unreadable: {e}")))),
    };
    let recipient = match UserId::parse("user_id", &row.user_id) {
        Ok(u) => store.get_recipient(&u).await?,
        Err(_) => None,
    };
    let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
    let occurred_at = match &row.trigger_id {
        Some(id) => store.get_trigger(id).await?.map(|t| t.occurred_at.to_rfc3339()),
        None => None,
    };
    let mut ctx = serde_json::json!({
        "payload": payload,
        "trigger": { "id": row.trigger_id, "type": rule.trigger_type, "occurred_at": occurred_at },
        "user": user_context(&row.user_id, recipient.as_ref()),
    });
    if RuleWorkflow::from_stored(rule.workflow.as_ref()).is_ok_and(|w| w.digest.is_some()) {
        ctx["digest"] = crate::planning::digest::context(&store.digest_items(&[row.id.as_str()]).await?);
    }
    let locale = recipient.as_ref().and_then(|r| r.locale.as_deref());
    Ok(Some(template.render(locale, &ctx).map_err(|e| e.to_string())))
}

/// Subjects by outbox id for send-log rows (which keep no payload): one read
/// of each distinct outbox row, then [`subjects`].
pub async fn for_sends(
    store: &dyn Store,
    sends: &[crate::store::SendRecord],
) -> Result<HashMap<String, String>, StoreError> {
    let mut seen = std::collections::HashSet::new();
    let mut rows = Vec::new();
    for s in sends {
        if seen.insert(s.outbox_id.as_str())
            && let Some(row) = store.get_outbox(&s.outbox_id).await?
        {
            rows.push(row);
        }
    }
    subjects(store, &rows).await
}

/// Whitespace folded to single spaces, cut at [`MAX_CHARS`] with an ellipsis.
fn one_line(s: &str) -> String {
    let folded = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= MAX_CHARS {
        return folded;
    }
    let mut cut: String = folded.chars().take(MAX_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn headlines_are_one_bounded_line() {
        assert_eq!(one_line("  Your export\n  is ready "), "Your export is ready");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), 200);
        assert!(one_line(&long).ends_with('…'));
    }
}
