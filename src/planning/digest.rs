//! Digests as a rule states them and as the planner and the templates use
//! them: when a digest closes (a rolling `window`, or a calendar
//! `schedule` read in the recipient's zone) and the `digest` variable its
//! message renders with.
//!
//! **A digest's window is Herald's clock, not the trigger's.** It opens
//! when its first trigger is planned and closes on the same clock (the
//! database's, see [`crate::clock`]) the worker reads to find its message
//! due; `occurred_at` orders the items and is shown in them but moves no
//! window. The windows used to open at the first trigger's `occurred_at`,
//! which mixed the caller's clock with Herald's: one trigger dated 30 days
//! ahead opened a digest due in 30 days, and every trigger after it joined
//! that digest, so nothing reached the user for a month. Refusing future
//! dates alone would not do: a host writes `engagement_triggers` rows
//! itself and gets no `422` (see [`crate::planning::planner::OCCURRED_AT_SKEW`]).
//!
//! **A schedule** (`{"days": ["mon"], "at": "09:00"}`) closes the digest at
//! the schedule's first time after the digest opened, in the recipient's
//! zone (`worker.default_timezone` for a recipient without one, as for
//! send windows), with the tz database's daylight-saving rules: 09:00 is
//! 09:00 local time on both sides of a change; a time in the skipped hour
//! is the end of the gap, one in the repeated hour its first occurrence.
//! The rejected alternative, a cron expression, would be one more language
//! for operators to learn for what "Mondays at 09:00" says, and the send
//! window already names days and times this way.

use std::fmt;
use std::time::Duration;

use chrono::{Days, NaiveTime};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::planning::rule::FieldError;
use crate::planning::template::Condition;
use crate::planning::workflow::{day_names, every_day, local_instant, local_time, on_day, parse_days, parse_hhmm};
use crate::store::DigestItemRow;

/// Longest digest window: a month.
const MAX_WINDOW: i64 = 31 * 24 * 3600;
/// Most triggers in one digest, and the default `max_items`.
const MAX_ITEMS: i64 = 1000;

/// `"digest": {"window": 3600, "key": "payload.thread_id", "max_items": 50}`,
/// or `"digest": {"schedule": {"days": ["mon"], "at": "09:00"}}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DigestInput {
    /// Seconds from a digest's first trigger until it closes (1 to 31
    /// days). Give this or `schedule`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<i64>,
    /// Close on a calendar instead: at the next of these local times
    /// after the digest's first trigger, in the recipient's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<DigestScheduleInput>,
    /// Optional minijinja expression (like `condition`): triggers with
    /// different values go into different digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The digest closes early when it holds this many triggers (1 to 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<i64>,
}

/// `"schedule": {"days": ["mon"], "at": "09:00"}`: a weekly digest on
/// Monday morning.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DigestScheduleInput {
    /// Days the digest goes out (`mon` … `sun`); every day when left out.
    #[serde(default = "every_day")]
    pub days: Vec<String>,
    /// Local time it goes out, `HH:MM` (24-hour), in the recipient's zone.
    pub at: String,
}

/// Checks a rule's digest fields, adding an error naming the field for
/// each problem.
pub fn validate(d: &DigestInput, errors: &mut Vec<FieldError>) {
    match (d.window, &d.schedule) {
        (None, None) => errors.push(FieldError::new(
            "digest.window",
            "a digest needs a window (seconds) or a schedule ({\"days\": [\"mon\"], \"at\": \"09:00\"})",
        )),
        (Some(_), Some(_)) => errors.push(FieldError::new(
            "digest.schedule",
            "give either window (a rolling window) or schedule (a calendar), not both",
        )),
        (Some(w), None) if !(1..=MAX_WINDOW).contains(&w) => {
            errors.push(FieldError::new("digest.window", format!("must be 1 to {MAX_WINDOW} seconds")));
        }
        (_, Some(s)) => {
            let _ = DigestSchedule::parse(s).map_err(|e| errors.extend(e));
        }
        _ => {}
    }
    if let Some(key) = &d.key {
        if key.contains('\0') {
            errors.push(FieldError::new("digest.key", crate::domain::NUL_REFUSED));
        } else if let Err(e) = Condition::compile(key) {
            let mut fe = FieldError::from(&e);
            fe.field = "digest.key".into();
            fe.message = fe.message.replacen("condition", "digest.key", 1);
            errors.push(fe);
        }
    }
    if let Some(m) = d.max_items
        && !(1..=MAX_ITEMS).contains(&m)
    {
        errors.push(FieldError::new("digest.max_items", format!("must be 1 to {MAX_ITEMS}")));
    }
}

/// A digest schedule, parsed: the weekdays and the local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestSchedule {
    /// Bit `i` set: goes out on weekday `i` (Monday = 0).
    days: u8,
    at: NaiveTime,
}

impl DigestSchedule {
    /// Errors name `digest.schedule.days` and `digest.schedule.at`.
    pub fn parse(input: &DigestScheduleInput) -> Result<DigestSchedule, Vec<FieldError>> {
        let days = parse_days("digest.schedule.days", &input.days);
        let at = parse_hhmm("digest.schedule.at", &input.at).map_err(|e| vec![e]);
        match (days, at) {
            (Ok(days), Ok(at)) => Ok(DigestSchedule { days, at }),
            (days, at) => Err([days.err(), at.err()].into_iter().flatten().flatten().collect()),
        }
    }

    /// The schedule's first time strictly after `t`, read in `tz`.
    pub fn next_after(&self, t: Millis, tz: Tz) -> Millis {
        let today = local_time(tz, t).date();
        (0..=8u64)
            .filter_map(|d| today.checked_add_days(Days::new(d)))
            .filter(|date| on_day(self.days, *date))
            .filter_map(|date| local_instant(tz, date.and_time(self.at)))
            .find(|c| *c > t)
            // Unreachable: a parsed schedule names a day, and every day
            // comes within eight; a week later is the honest fallback.
            .unwrap_or(t.plus(Duration::from_secs(7 * 24 * 3600)))
    }
}

impl fmt::Display for DigestSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", day_names(self.days), self.at.format("%H:%M"))
    }
}

/// What closes a rule's digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestEvery {
    /// `window` seconds after it opened.
    Window(i64),
    /// At the schedule's next time after it opened.
    Schedule(DigestSchedule),
}

/// A rule's digest, as the planner uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    pub every: DigestEvery,
    pub key: Option<String>,
    /// `max_items`, or 1000 when not given.
    pub max_items: i64,
}

impl Digest {
    /// A stored digest, parsed; errors as [`validate`] names them.
    pub fn parse(d: &DigestInput) -> Result<Digest, Vec<FieldError>> {
        let every = match (d.window, &d.schedule) {
            (Some(w), None) => DigestEvery::Window(w.clamp(1, MAX_WINDOW)),
            (None, Some(s)) => DigestEvery::Schedule(DigestSchedule::parse(s)?),
            _ => {
                let mut errors = Vec::new();
                validate(d, &mut errors);
                return Err(errors);
            }
        };
        Ok(Digest { every, key: d.key.clone(), max_items: d.max_items.unwrap_or(MAX_ITEMS).clamp(1, MAX_ITEMS) })
    }

    /// When a digest of this rule for a recipient in `tz` closes.
    pub fn close(&self, tz: Tz) -> DigestClose {
        match self.every {
            DigestEvery::Window(s) => DigestClose::After(Duration::from_secs(s.max(1) as u64)),
            DigestEvery::Schedule(s) => DigestClose::Schedule(s, tz),
        }
    }

    /// Whether the recipient's zone matters (a schedule).
    pub fn needs_zone(&self) -> bool {
        matches!(self.every, DigestEvery::Schedule(_))
    }
}

/// When one recipient's digest closes, counted from its opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestClose {
    After(Duration),
    Schedule(DigestSchedule, Tz),
}

impl DigestClose {
    pub fn closes_at(&self, opened_at: Millis) -> Millis {
        match self {
            DigestClose::After(window) => opened_at.plus(*window),
            DigestClose::Schedule(s, tz) => s.next_after(opened_at, *tz),
        }
    }
}

impl fmt::Display for DigestClose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DigestClose::After(w) => write!(f, "window {} s", w.as_secs()),
            DigestClose::Schedule(s, tz) => write!(f, "schedule {s} in {tz}"),
        }
    }
}

/// The `digest` variable of a digest message's template: `count`, and
/// `items` (oldest first) each with `payload`, `trigger_id` and
/// `occurred_at`. Delivery, the lists' subjects and the editor's preview
/// all build it here, so a subject that renders at delivery renders in
/// the send log too.
pub fn context(items: &[DigestItemRow]) -> serde_json::Value {
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|i| {
            serde_json::json!({
                "payload": i.payload, "trigger_id": i.trigger_id, "occurred_at": i.occurred_at.to_rfc3339(),
            })
        })
        .collect();
    serde_json::json!({ "count": items.len(), "items": items })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Millis {
        Millis(chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis())
    }

    fn schedule(days: &[&str], at: &str) -> DigestSchedule {
        DigestSchedule::parse(&DigestScheduleInput {
            days: days.iter().map(|d| (*d).to_owned()).collect(),
            at: at.into(),
        })
        .unwrap()
    }

    #[test]
    fn monday_nine_is_local_time_across_the_spring_change() {
        let monday = schedule(&["mon"], "09:00");
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        // Friday before the change (CET, UTC+1) -> Monday after it (CEST, UTC+2).
        assert_eq!(monday.next_after(at("2026-03-27T12:00:00Z"), berlin), at("2026-03-30T07:00:00Z"));
        // The Monday before: 09:00 CET.
        assert_eq!(monday.next_after(at("2026-03-20T12:00:00Z"), berlin), at("2026-03-23T08:00:00Z"));
        // At 09:00 itself the next one is a week on.
        assert_eq!(monday.next_after(at("2026-03-23T08:00:00Z"), berlin), at("2026-03-30T07:00:00Z"));
        assert_eq!(monday.to_string(), "mon 09:00");
    }

    #[test]
    fn a_time_in_the_skipped_hour_is_the_end_of_the_gap() {
        let g = schedule(&["sun"], "02:30");
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(g.next_after(at("2026-03-28T12:00:00Z"), berlin), at("2026-03-29T01:00:00Z"), "03:00 CEST");
    }

    #[test]
    fn bad_fields_are_named_and_exactly_one_of_window_and_schedule_is_taken() {
        let mut errors = Vec::new();
        let bad = DigestInput {
            window: None,
            schedule: Some(DigestScheduleInput { days: vec!["mon".into(), "someday".into()], at: "9am".into() }),
            key: None,
            max_items: None,
        };
        validate(&bad, &mut errors);
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["digest.schedule.days", "digest.schedule.at"]);
        for (window, schedule, field) in [
            (None, None, "digest.window"),
            (Some(60), Some(DigestScheduleInput { days: every_day(), at: "09:00".into() }), "digest.schedule"),
        ] {
            let mut errors = Vec::new();
            validate(&DigestInput { window, schedule, key: None, max_items: None }, &mut errors);
            assert_eq!(errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), [field]);
        }
    }
}
