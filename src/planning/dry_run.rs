//! What a rule's workflow would do with the messages of a dry run: for
//! each recent trigger the rule would plan for, whether the send window (and
//! the recipient's quiet hours) would hold its message and until when, in
//! which zone; which digest it would open or join and when that digest
//! would be due; and how much of the frequency cap it would use, or that it
//! would be capped.
//!
//! A simulation over the triggers of the preview, oldest first, as if the
//! rule had been on for them: the same gate, digest grouping and sliding
//! cap window the planner and worker apply, but nothing is read from the
//! digests or cap slots in the database (a preview of a rule that is off
//! has none) and a `scope: category` cap counts only this rule's messages
//! of the preview. Pure, so it is tested without a database.

use std::collections::HashMap;
use std::time::Duration;

use chrono::TimeZone;
use chrono_tz::Tz;
use serde::Serialize;

use crate::clock::Millis;
use crate::planning::digest::DigestEvery;
use crate::planning::workflow::{Gate, GateDecision, RuleWorkflow, Span, parse_zone};
use crate::store::RecipientRow;

/// One message the rule would plan, oldest trigger first.
#[derive(Debug, Clone)]
pub struct Step<'a> {
    pub trigger_id: &'a str,
    pub user_id: &'a str,
    pub occurred_at: Millis,
    /// When Herald recorded it: a digest's window runs on Herald's clock
    /// (see `crate::planning::digest`), not on `occurred_at`.
    pub arrived_at: Millis,
    /// The message's due time (a rule without a digest).
    pub due_at: Option<Millis>,
    /// The digest bucket the trigger would go into (a rule with a digest).
    pub digest_bucket: Option<&'a str>,
    pub recipient: Option<&'a RecipientRow>,
}

/// What the workflow would do with one step's message, in words; `None`
/// where the rule has no such field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WorkflowNotes {
    /// The send window and quiet hours: goes at its due time, or held
    /// until when (UTC and local time), in which zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// Opens a new digest (due when), or joins the digest opened by which
    /// trigger (with how many items, due when).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// How much of the frequency cap the message would use, or that it
    /// would be capped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap: Option<String>,
}

struct OpenDigest {
    opener: String,
    closes_at: Millis,
    items: i64,
    due_at: Millis,
}

/// The notes for each step, in the steps' order.
pub fn simulate(
    category: &str,
    delay_seconds: i64,
    workflow: &RuleWorkflow,
    default_tz: Tz,
    steps: &[Step<'_>],
) -> Vec<WorkflowNotes> {
    let delay = Duration::from_secs(delay_seconds.max(0) as u64);
    let mut digests: HashMap<&str, OpenDigest> = HashMap::new();
    let mut sent: HashMap<&str, Vec<Millis>> = HashMap::new();
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let mut notes = WorkflowNotes::default();
        // When this step's message would be due, or `None` when the
        // trigger joins a digest that is already planned.
        let mut message_due = step.due_at;
        let tz = step.recipient.and_then(|r| r.timezone.as_deref()).and_then(parse_zone).unwrap_or(default_tz);
        if let (Some(d), Some(bucket)) = (&workflow.digest, step.digest_bucket) {
            let now = step.arrived_at;
            let open = digests.get_mut(bucket).filter(|o| now < o.closes_at && o.items < d.max_items);
            match open {
                Some(o) => {
                    o.items += 1;
                    if o.items >= d.max_items {
                        o.due_at = o.due_at.min(now);
                    }
                    notes.digest = Some(format!(
                        "would join the digest opened by trigger {} ({} of at most {} items), due {}{}",
                        o.opener,
                        o.items,
                        d.max_items,
                        o.due_at,
                        if o.items >= d.max_items { " (full: due at once)" } else { "" }
                    ));
                    message_due = None;
                }
                None => {
                    let close = d.close(tz);
                    let closes_at = if d.max_items <= 1 { now } else { close.closes_at(now) };
                    let due_at = closes_at.plus(delay);
                    let when = match d.every {
                        DigestEvery::Window(s) => format!("when its {s} s window closes"),
                        DigestEvery::Schedule(s) => format!("at its schedule ({s} in {tz})"),
                    };
                    notes.digest =
                        Some(format!("would open a new digest, due {due_at} ({when}, or at {} items)", d.max_items));
                    digests
                        .insert(bucket, OpenDigest { opener: step.trigger_id.to_owned(), closes_at, items: 1, due_at });
                    message_due = Some(due_at);
                }
            }
        }
        let Some(due) = message_due else {
            if workflow.throttle.is_some() {
                notes.cap = Some("counted with the digest it joins".into());
            }
            out.push(notes);
            continue;
        };
        // The gate: the rule's window and the recipient's quiet hours.
        let quiet = match step.recipient.and_then(|r| r.quiet_hours.as_ref()) {
            Some(q) if category != crate::delivery::channel::email::message::TRANSACTIONAL => {
                Span::parse("quiet_hours", q).ok()
            }
            _ => None,
        };
        let mut goes_at = due;
        if workflow.send_window.is_some() || quiet.is_some() {
            let gate = Gate { window: workflow.send_window, quiet, tz };
            notes.window = Some(match gate.decide(due, None, due) {
                GateDecision::Hold { until, detail, .. } => {
                    goes_at = until;
                    let local = tz
                        .timestamp_millis_opt(until.0)
                        .single()
                        .map(|t| t.format("%a %Y-%m-%d %H:%M").to_string())
                        .unwrap_or_default();
                    format!("due {due}: would be {detail} ({local} in {tz})")
                }
                _ => {
                    let what = match (workflow.send_window, quiet) {
                        (Some(w), _) => format!("inside the send window ({w}, {tz})"),
                        (None, _) => format!("outside the recipient's quiet hours ({tz})"),
                    };
                    format!("due {due}: {what}, goes at once")
                }
            });
        }
        if let Some(cap) = &workflow.throttle {
            let per = Duration::from_secs(cap.per_seconds.max(1) as u64);
            let times = sent.entry(step.user_id).or_default();
            let in_window = times.iter().filter(|t| **t > goes_at.minus(per) && **t <= goes_at).count() as u32;
            notes.cap = Some(if in_window >= cap.limit {
                format!(
                    "would be capped: {in_window} already sent to {} in the cap's window before {goes_at} (cap {})",
                    step.user_id,
                    cap.describe()
                )
            } else {
                times.push(goes_at);
                format!("{} of {} used (cap {})", in_window + 1, cap.limit, cap.describe())
            });
        }
        out.push(notes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::digest::{Digest, DigestEvery};
    use crate::planning::workflow::{SendWindow, SendWindowInput, Throttle, ThrottleScope};

    fn at(s: &str) -> Millis {
        Millis(chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis())
    }

    fn step<'a>(id: &'a str, user: &'a str, t: &str, bucket: Option<&'a str>) -> Step<'a> {
        let occurred_at = at(t);
        Step {
            trigger_id: id,
            user_id: user,
            occurred_at,
            arrived_at: occurred_at,
            due_at: bucket.is_none().then_some(occurred_at),
            digest_bucket: bucket,
            recipient: None,
        }
    }

    #[test]
    fn the_window_says_until_when_and_in_which_zone() {
        let window = SendWindow::parse(&SendWindowInput {
            days: vec!["mon".into(), "tue".into(), "wed".into(), "thu".into(), "fri".into()],
            from: "09:00".into(),
            until: "18:00".into(),
        })
        .unwrap();
        let w = RuleWorkflow { send_window: Some(window), ..Default::default() };
        let berlin = parse_zone("Europe/Berlin").unwrap();
        let notes = simulate(
            "news",
            0,
            &w,
            berlin,
            &[step("t1", "u1", "2026-03-04T20:00:00Z", None), step("t2", "u1", "2026-03-05T10:00:00Z", None)],
        );
        let held = notes[0].window.as_deref().unwrap();
        assert!(held.contains("held by the rule's send window"), "{held}");
        assert!(held.contains("until 2026-03-05T08:00:00.000Z"), "{held}");
        assert!(held.contains("Thu 2026-03-05 09:00 in Europe/Berlin"), "{held}");
        let goes = notes[1].window.as_deref().unwrap();
        assert!(goes.contains("inside the send window"), "{goes}");
        assert_eq!((notes[0].digest.as_deref(), notes[0].cap.as_deref()), (None, None));
    }

    #[test]
    fn a_digest_opens_then_is_joined_and_the_cap_counts_digests() {
        let w = RuleWorkflow {
            digest: Some(Digest { every: DigestEvery::Window(3600), key: None, max_items: 3 }),
            throttle: Some(Throttle { limit: 1, per_seconds: 86_400, scope: ThrottleScope::Rule }),
            ..Default::default()
        };
        let steps = [
            step("t1", "u1", "2026-03-04T10:00:00Z", Some("b1")),
            step("t2", "u1", "2026-03-04T10:10:00Z", Some("b1")),
            step("t3", "u2", "2026-03-04T10:20:00Z", Some("b2")),
            step("t4", "u1", "2026-03-04T12:00:00Z", Some("b1")),
        ];
        let notes = simulate("news", 0, &w, Tz::UTC, &steps);
        assert_eq!(
            notes[0].digest.as_deref(),
            Some(
                "would open a new digest, due 2026-03-04T11:00:00.000Z (when its 3600 s window closes, or at 3 items)"
            )
        );
        assert!(notes[1].digest.as_deref().unwrap().starts_with("would join the digest opened by trigger t1 (2 of"));
        assert!(notes[2].digest.as_deref().unwrap().starts_with("would open a new digest"), "another user's bucket");
        assert!(notes[3].digest.as_deref().unwrap().starts_with("would open a new digest"), "the window closed");
        assert_eq!(notes[0].cap.as_deref(), Some("1 of 1 used (cap 1 per day)"));
        assert_eq!(notes[1].cap.as_deref(), Some("counted with the digest it joins"));
        assert_eq!(notes[2].cap.as_deref(), Some("1 of 1 used (cap 1 per day)"), "u2 has a cap of their own");
        let capped = notes[3].cap.as_deref().unwrap();
        assert!(capped.starts_with("would be capped: 1 already sent to u1"), "{capped}");
    }

    #[test]
    fn quiet_hours_hold_unless_transactional() {
        let recipient = RecipientRow {
            user_id: "u1".into(),
            email: None,
            name: None,
            locale: None,
            timezone: Some("America/New_York".into()),
            preferences: serde_json::json!({}),
            quiet_hours: Some(crate::planning::workflow::QuietHoursInput {
                from: "22:00".into(),
                until: "07:00".into(),
            }),
            phone: None,
            phone_hash: None,
            slack_user_id: None,
            user_choices: Default::default(),
            created_at: Millis(0),
            updated_at: Millis(0),
        };
        let mut s = step("t1", "u1", "2026-01-14T04:30:00Z", None);
        s.recipient = Some(&recipient);
        let w = RuleWorkflow::default();
        let notes = simulate("news", 0, &w, Tz::UTC, std::slice::from_ref(&s));
        let held = notes[0].window.as_deref().unwrap();
        assert!(held.contains("quiet hours (22:00–07:00, America/New_York) until 2026-01-14T12:00:00.000Z"), "{held}");
        let notes = simulate("transactional", 0, &w, Tz::UTC, &[s]);
        assert_eq!(notes[0], WorkflowNotes::default());
    }
}
