//! Workflows on a rule: *when* its messages may go (a send window in the
//! recipient's time zone, and the recipient's quiet hours) and *how often*
//! (a frequency cap), plus the fields the API accepts for digests and
//! escalation (each in its own module: `digest`, `escalation`).
//!
//! What the API receives is kept as given (`WorkflowInput`, stored as JSON
//! in `engagement_rules.workflow`) and parsed once per rule version into
//! [`RuleWorkflow`], which the worker holds in its rule cache; a rule with
//! none of these fields costs the worker nothing.
//!
//! Times of day are read in the recipient's zone through the tz database
//! (`chrono-tz`), so a window of 09:00 to 18:00 opens at 09:00 local time
//! on both sides of a daylight-saving change. A local time that does not
//! exist (the hour skipped in spring) opens at the first instant after the
//! gap; one that occurs twice (autumn) opens at its first occurrence.

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, Days, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::domain::HoldReason;
use crate::planning::rule::FieldError;

/// The weekdays a send window names, Monday first.
pub const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// `"send_window": {"days": ["mon", …], "from": "09:00", "until": "18:00"}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendWindowInput {
    /// Days the window opens on (`mon` … `sun`); every day when left out.
    /// A window that runs past midnight belongs to the day it opens.
    #[serde(default = "every_day")]
    pub days: Vec<String>,
    /// Local time the window opens, `HH:MM` (24-hour).
    pub from: String,
    /// Local time it closes, `HH:MM`; earlier than `from` means the next day.
    pub until: String,
}

pub(crate) fn every_day() -> Vec<String> {
    WEEKDAYS.iter().map(|d| (*d).to_owned()).collect()
}

/// Weekday names as a bit set (bit `i`: weekday `i`, Monday = 0); errors
/// name `field`.
pub(crate) fn parse_days(field: &str, names: &[String]) -> Result<u8, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut days = 0u8;
    if names.is_empty() {
        errors.push(FieldError::new(field, "must name at least one day (mon, tue, wed, thu, fri, sat, sun)"));
    }
    for d in names {
        match WEEKDAYS.iter().position(|w| *w == d.as_str()) {
            Some(i) => days |= 1 << i,
            None => errors.push(FieldError::new(
                field,
                format!("{d:?} is not a weekday; expected mon, tue, wed, thu, fri, sat or sun"),
            )),
        }
    }
    if errors.is_empty() { Ok(days) } else { Err(errors) }
}

/// Whether a [`parse_days`] set holds `date`'s weekday.
pub(crate) fn on_day(days: u8, date: NaiveDate) -> bool {
    days & (1 << date.weekday().num_days_from_monday()) != 0
}

/// The days of a [`parse_days`] set, as `mon,tue`.
pub(crate) fn day_names(days: u8) -> String {
    (0..7).filter(|i| days & (1 << i) != 0).map(|i| WEEKDAYS[i]).collect::<Vec<_>>().join(",")
}

/// `t` as local time in `tz`.
pub(crate) fn local_time(tz: Tz, t: Millis) -> NaiveDateTime {
    match tz.timestamp_millis_opt(t.0).single() {
        Some(local) => local.naive_local(),
        None => chrono::DateTime::from_timestamp_millis(t.0).unwrap_or_default().naive_utc(),
    }
}

/// The instant a local time happens in `tz`: the first of two (autumn),
/// or the end of the gap for one that does not exist (spring).
pub(crate) fn local_instant(tz: Tz, local: NaiveDateTime) -> Option<Millis> {
    let mut t = local;
    for _ in 0..=24 * 60 {
        match tz.from_local_datetime(&t) {
            chrono::LocalResult::Single(x) | chrono::LocalResult::Ambiguous(x, _) => {
                return Some(Millis(x.timestamp_millis()));
            }
            chrono::LocalResult::None => t += chrono::Duration::minutes(1),
        }
    }
    None
}

/// `"quiet_hours": {"from": "22:00", "until": "07:00"}` on a recipient.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuietHoursInput {
    /// Local time quiet hours start, `HH:MM`.
    pub from: String,
    /// Local time they end, `HH:MM`; earlier than `from` means the next day.
    pub until: String,
}

pub use crate::planning::digest::{Digest, DigestInput};
use crate::planning::escalation::validate_escalation;
pub use crate::planning::escalation::{
    Escalate, EscalateInput, EscalateStep, EscalationInput, FOLLOW_UP_PREFIX, MAX_ESCALATION_STEPS, follow_up_key,
    follow_up_of, follow_up_step,
};

/// `"throttle": {"limit": 3, "per": 86400, "scope": "rule"}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ThrottleInput {
    /// Most messages to one user in any `per` seconds (1 to 1000).
    pub limit: i64,
    /// The sliding window, in seconds (1 to 366 days).
    pub per: i64,
    /// `rule` (this rule's messages) or `category` (every rule's messages
    /// in this rule's category). Default `rule`.
    #[serde(default = "rule_scope")]
    pub scope: String,
}

fn rule_scope() -> String {
    "rule".to_owned()
}

/// The workflow fields of a rule, as the API received them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct WorkflowInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_window: Option<SendWindowInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<DigestInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate: Option<EscalationInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A push rule's TTL and urgency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<crate::delivery::channel::push::PushOptions>,
    /// A Slack rule's conversation (instead of each user's DM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<crate::delivery::channel::slack::SlackOptions>,
}

impl WorkflowInput {
    pub fn is_empty(&self) -> bool {
        *self == WorkflowInput::default()
    }
}

/// Longest cap window and escalation delay: a year, as for `delay`.
pub(crate) const MAX_PERIOD: i64 = 366 * 24 * 3600;
/// The longest `per` a cap may have: a frequency-cap slot last used longer
/// ago than this counts for no rule (retention prunes it).
pub const MAX_THROTTLE_PER: std::time::Duration = std::time::Duration::from_secs(MAX_PERIOD as u64);
/// Most messages a cap allows per window: each allowed message is a row
/// Herald keeps per user (see `store::throttle`).
pub const MAX_THROTTLE_LIMIT: i64 = 1000;

/// A time of day as `HH:MM`, or the error naming `field`.
pub fn parse_hhmm(field: &str, s: &str) -> Result<NaiveTime, FieldError> {
    let bad = || FieldError::new(field, format!("{s:?} is not a time of day as HH:MM (00:00 to 23:59)"));
    let b = s.as_bytes();
    if b.len() != 5 || b[2] != b':' || !b.iter().enumerate().all(|(i, c)| i == 2 || c.is_ascii_digit()) {
        return Err(bad());
    }
    let h = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
    let m = u32::from(b[3] - b'0') * 10 + u32::from(b[4] - b'0');
    NaiveTime::from_hms_opt(h, m, 0).ok_or_else(bad)
}

/// Checks the workflow fields of a rule on `channel` in `category`, adding
/// an error naming the field for each problem. `known_channel` says whether
/// a channel name exists, and why not.
pub fn validate(
    w: &WorkflowInput,
    channel: &str,
    known_channel: impl Fn(&str) -> Result<(), String>,
    errors: &mut Vec<FieldError>,
) {
    if let Some(sw) = &w.send_window {
        let _ = SendWindow::parse(sw).map_err(|e| errors.extend(e));
    }
    if let Some(d) = &w.digest {
        crate::planning::digest::validate(d, errors);
    }
    if let Some(t) = &w.throttle {
        let _ = Throttle::parse(t).map_err(|e| errors.extend(e));
    }
    if let Some(e) = &w.escalate {
        validate_escalation(e, channel, &known_channel, errors);
        if w.digest.is_some() {
            errors.push(FieldError::new("escalate", "cannot be combined with digest on one rule"));
        }
    }
    for (field, value, max) in [("display_name", &w.display_name, 100), ("description", &w.description, 500)] {
        if let Some(v) = value
            && (v.trim().is_empty() || v.chars().count() > max || v.chars().any(char::is_control))
        {
            errors.push(FieldError::new(field, format!("must be 1 to {max} characters without control characters")));
        }
    }
}

/// A span of local time, `from` inclusive to `until` exclusive; `until`
/// before `from` runs past midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: NaiveTime,
    pub until: NaiveTime,
}

impl Span {
    fn contains(self, t: NaiveTime) -> bool {
        if self.from < self.until { self.from <= t && t < self.until } else { t >= self.from || t < self.until }
    }

    /// Quiet hours, parsed; errors name `field.from` / `field.until`.
    pub fn parse(field: &str, q: &QuietHoursInput) -> Result<Span, Vec<FieldError>> {
        let from = parse_hhmm(&format!("{field}.from"), &q.from);
        let until = parse_hhmm(&format!("{field}.until"), &q.until);
        match (from, until) {
            (Ok(from), Ok(until)) if from == until => {
                Err(vec![FieldError::new(format!("{field}.until"), "must differ from \"from\" (an empty span)")])
            }
            (Ok(from), Ok(until)) => Ok(Span { from, until }),
            (a, b) => Err([a.err(), b.err()].into_iter().flatten().collect()),
        }
    }

    pub fn to_input(self) -> QuietHoursInput {
        QuietHoursInput { from: self.from.format("%H:%M").to_string(), until: self.until.format("%H:%M").to_string() }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}–{}", self.from.format("%H:%M"), self.until.format("%H:%M"))
    }
}

/// A rule's send window, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWindow {
    /// Bit `i` set: the window opens on weekday `i` (Monday = 0).
    days: u8,
    span: Span,
}

impl SendWindow {
    pub fn parse(input: &SendWindowInput) -> Result<SendWindow, Vec<FieldError>> {
        let days = parse_days("send_window.days", &input.days);
        let span =
            Span::parse("send_window", &QuietHoursInput { from: input.from.clone(), until: input.until.clone() });
        match (days, span) {
            (Ok(days), Ok(span)) => Ok(SendWindow { days, span }),
            (days, span) => Err([days.err(), span.err()].into_iter().flatten().flatten().collect()),
        }
    }

    fn opens_on(self, date: NaiveDate) -> bool {
        on_day(self.days, date)
    }

    fn contains(self, local: NaiveDateTime) -> bool {
        let (date, time) = (local.date(), local.time());
        let Span { from, until } = self.span;
        if from < until {
            self.opens_on(date) && from <= time && time < until
        } else {
            // Past midnight: the hours after `from` belong to today's
            // window, those before `until` to yesterday's.
            (time >= from && self.opens_on(date)) || (time < until && date.pred_opt().is_some_and(|y| self.opens_on(y)))
        }
    }
}

impl fmt::Display for SendWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", day_names(self.days), self.span)
    }
}

/// What a cap counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleScope {
    Rule,
    Category,
}

/// A rule's frequency cap, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    pub limit: u32,
    pub per_seconds: i64,
    pub scope: ThrottleScope,
}

impl Throttle {
    pub fn parse(t: &ThrottleInput) -> Result<Throttle, Vec<FieldError>> {
        let mut errors = Vec::new();
        if !(1..=MAX_THROTTLE_LIMIT).contains(&t.limit) {
            errors.push(FieldError::new("throttle.limit", format!("must be 1 to {MAX_THROTTLE_LIMIT}")));
        }
        if !(1..=MAX_PERIOD).contains(&t.per) {
            errors.push(FieldError::new("throttle.per", format!("must be 1 to {MAX_PERIOD} seconds")));
        }
        let scope = match t.scope.as_str() {
            "rule" => Some(ThrottleScope::Rule),
            "category" => Some(ThrottleScope::Category),
            other => {
                errors.push(FieldError::new(
                    "throttle.scope",
                    format!("{other:?} is not accepted; expected rule or category"),
                ));
                None
            }
        };
        match scope {
            Some(scope) if errors.is_empty() => Ok(Throttle { limit: t.limit as u32, per_seconds: t.per, scope }),
            _ => Err(errors),
        }
    }

    /// "3 per day", "10 per 2 hours".
    pub fn describe(&self) -> String {
        let per = match self.per_seconds {
            60 => "minute".to_owned(),
            3600 => "hour".to_owned(),
            86_400 => "day".to_owned(),
            604_800 => "week".to_owned(),
            s => humantime::format_duration(std::time::Duration::from_secs(s as u64)).to_string(),
        };
        format!("{} per {per}", self.limit)
    }
}

/// The workflow of a rule as the worker holds it, parsed once per version.
#[derive(Debug, Clone, Default)]
pub struct RuleWorkflow {
    pub send_window: Option<SendWindow>,
    pub throttle: Option<Throttle>,
    pub digest: Option<Digest>,
    pub escalate: Option<Escalate>,
}

impl RuleWorkflow {
    /// Parses the stored JSON; `Err` holds the detail to record for the
    /// rule's rows (a stored workflow that no longer reads).
    pub fn from_stored(value: Option<&serde_json::Value>) -> Result<RuleWorkflow, String> {
        let Some(value) = value else { return Ok(RuleWorkflow::default()) };
        let input: WorkflowInput = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        let describe =
            |e: Vec<FieldError>| e.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ");
        Ok(RuleWorkflow {
            send_window: input.send_window.as_ref().map(SendWindow::parse).transpose().map_err(describe)?,
            throttle: input.throttle.as_ref().map(Throttle::parse).transpose().map_err(describe)?,
            digest: input.digest.as_ref().map(Digest::parse).transpose().map_err(describe)?,
            escalate: input.escalate.map(Escalate::from_input),
        })
    }
}

/// A time zone name, checked against the tz database.
pub fn parse_zone(s: &str) -> Option<Tz> {
    Tz::from_str(s).ok()
}

/// When a message may go: the rule's send window and the recipient's quiet
/// hours (either may be absent), read in `tz`.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    pub window: Option<SendWindow>,
    pub quiet: Option<Span>,
    pub tz: Tz,
}

/// What the gate says about a row.
#[derive(Debug, Clone, PartialEq)]
pub enum GateDecision {
    /// It may go now.
    Go,
    /// Not now: due again at `until`, its grace window moved along with it.
    Hold { until: Millis, expires_at: Option<Millis>, reason: HoldReason, detail: String },
    /// Its grace window, counted from when the gate let it go, is over.
    Expired { detail: String },
}

impl Gate {
    fn local(&self, t: Millis) -> NaiveDateTime {
        local_time(self.tz, t)
    }

    fn instant(&self, local: NaiveDateTime) -> Option<Millis> {
        local_instant(self.tz, local)
    }

    fn window_open(&self, local: NaiveDateTime) -> bool {
        self.window.is_none_or(|w| w.contains(local))
    }

    fn quiet_now(&self, local: NaiveDateTime) -> bool {
        self.quiet.is_some_and(|q| q.contains(local.time()))
    }

    pub fn is_open(&self, t: Millis) -> bool {
        let local = self.local(t);
        self.window_open(local) && !self.quiet_now(local)
    }

    /// The first instant at or after `t` when a message may go. When the
    /// recipient's quiet hours cover the rule's whole window, the window
    /// alone decides (the operator's window wins over a user's setting that
    /// would otherwise hold the message for ever).
    pub fn next_open(&self, t: Millis) -> Millis {
        if self.is_open(t) {
            return t;
        }
        let today = self.local(t).date();
        let mut boundaries: Vec<NaiveTime> = Vec::with_capacity(2);
        if let Some(w) = self.window {
            boundaries.push(w.span.from);
        }
        if let Some(q) = self.quiet {
            boundaries.push(q.until);
        }
        let mut candidates: Vec<Millis> = (0..=8u64)
            .filter_map(|d| today.checked_add_days(Days::new(d)))
            .flat_map(|date| boundaries.iter().map(move |b| date.and_time(*b)))
            .filter_map(|local| self.instant(local))
            .filter(|c| *c > t)
            .collect();
        candidates.sort_unstable();
        if let Some(open) = candidates.into_iter().find(|c| self.is_open(*c)) {
            return open;
        }
        if self.quiet.is_some() && self.window.is_some() {
            return Gate { quiet: None, ..*self }.next_open(t);
        }
        t
    }

    /// Whether a row due at `due_at` (expiring at `expires_at`) may go at
    /// `now`. The grace window counts from when the gate lets the row go:
    /// a row held overnight is not expired by the night.
    pub fn decide(&self, due_at: Millis, expires_at: Option<Millis>, now: Millis) -> GateDecision {
        let release = self.next_open(due_at);
        if let Some(expires) = expires_at {
            let effective = expires.plus(release.since(due_at));
            if now > effective {
                return GateDecision::Expired {
                    detail: format!(
                        "not delivered before its grace window ended at {effective} (counted from {release}, when \
                         {} let it go; due {due_at}); it is no longer relevant",
                        self.what_held(due_at)
                    ),
                };
            }
        }
        if self.is_open(now) {
            return GateDecision::Go;
        }
        // Closed means one of the two holds it.
        let Some(reason) = self.holder(now) else { return GateDecision::Go };
        let until = self.next_open(now);
        GateDecision::Hold {
            until,
            expires_at: expires_at.map(|e| e.plus(until.since(due_at))),
            reason,
            detail: format!("held by {} until {until}", self.what_held(now)),
        }
    }

    /// Which of the two holds a message at `t`: the one that is closed (the
    /// window first), else the one that is set; `None` with neither.
    fn holder(&self, t: Millis) -> Option<HoldReason> {
        let local = self.local(t);
        match (self.window, self.quiet) {
            (Some(_), _) if !self.window_open(local) => Some(HoldReason::SendWindow),
            (_, Some(_)) if self.quiet_now(local) => Some(HoldReason::QuietHours),
            (Some(_), _) => Some(HoldReason::SendWindow),
            (None, Some(_)) => Some(HoldReason::QuietHours),
            (None, None) => None,
        }
    }

    /// [`Gate::holder`] in words, as the hold's detail says it.
    fn what_held(&self, t: Millis) -> String {
        match (self.holder(t), self.window, self.quiet) {
            (Some(r @ HoldReason::SendWindow), Some(w), _) => format!("{} ({w}, {})", r.words(), self.tz),
            (Some(r @ HoldReason::QuietHours), _, Some(q)) => format!("{} ({q}, {})", r.words(), self.tz),
            _ => "nothing".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Millis {
        Millis(chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis())
    }

    fn window(days: &[&str], from: &str, until: &str) -> SendWindow {
        SendWindow::parse(&SendWindowInput {
            days: days.iter().map(|d| (*d).to_owned()).collect(),
            from: from.into(),
            until: until.into(),
        })
        .unwrap()
    }

    const WEEKDAYS_ONLY: &[&str] = &["mon", "tue", "wed", "thu", "fri"];

    fn gate(w: Option<SendWindow>, q: Option<(&str, &str)>, tz: &str) -> Gate {
        let quiet =
            q.map(|(f, u)| Span::parse("quiet_hours", &QuietHoursInput { from: f.into(), until: u.into() }).unwrap());
        Gate { window: w, quiet, tz: parse_zone(tz).unwrap() }
    }

    #[test]
    fn hhmm_is_strict_and_names_the_field() {
        assert_eq!(parse_hhmm("f", "09:05").unwrap(), NaiveTime::from_hms_opt(9, 5, 0).unwrap());
        for bad in ["9:00", "24:00", "12:60", "ab:cd", "12:00:00", "", "１２:00"] {
            let e = parse_hhmm("send_window.from", bad).unwrap_err();
            assert_eq!(e.field, "send_window.from", "{bad}");
        }
    }

    #[test]
    fn an_unknown_weekday_and_an_empty_span_are_refused_by_name() {
        let e = SendWindow::parse(&SendWindowInput {
            days: vec!["mon".into(), "funday".into()],
            from: "09:00".into(),
            until: "9:00".into(),
        })
        .unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["send_window.days", "send_window.until"]);
        assert!(e[0].message.contains("funday"));
        let e = SendWindow::parse(&SendWindowInput { days: every_day(), from: "09:00".into(), until: "09:00".into() })
            .unwrap_err();
        assert_eq!(e[0].field, "send_window.until");
    }

    #[test]
    fn inside_the_window_a_message_goes_at_once() {
        let g = gate(Some(window(WEEKDAYS_ONLY, "09:00", "18:00")), None, "UTC");
        let t = at("2026-03-04T10:00:00Z"); // a Wednesday
        assert_eq!(g.next_open(t), t);
        assert_eq!(g.decide(t, None, t), GateDecision::Go);
    }

    #[test]
    fn after_friday_closing_the_next_opening_is_monday() {
        let g = gate(Some(window(WEEKDAYS_ONLY, "09:00", "18:00")), None, "UTC");
        assert_eq!(g.next_open(at("2026-03-06T18:00:00Z")), at("2026-03-09T09:00:00Z"));
        assert_eq!(g.next_open(at("2026-03-07T12:00:00Z")), at("2026-03-09T09:00:00Z"));
    }

    #[test]
    fn a_window_across_midnight_belongs_to_the_day_it_opens() {
        // Friday and Saturday nights, 22:00 to 02:00.
        let g = gate(Some(window(&["fri", "sat"], "22:00", "02:00")), None, "UTC");
        assert!(g.is_open(at("2026-03-06T23:30:00Z")), "Friday 23:30");
        assert!(g.is_open(at("2026-03-07T01:59:00Z")), "Saturday 01:59 is Friday's window");
        assert!(!g.is_open(at("2026-03-07T02:00:00Z")), "closed at 02:00");
        assert!(g.is_open(at("2026-03-08T01:00:00Z")), "Sunday 01:00 is Saturday's window");
        assert!(!g.is_open(at("2026-03-09T01:00:00Z")), "Monday 01:00: Sunday has no window");
        assert_eq!(g.next_open(at("2026-03-08T03:00:00Z")), at("2026-03-13T22:00:00Z"), "next Friday");
    }

    #[test]
    fn the_window_opens_at_local_time_across_spring_dst_in_two_zones() {
        let w = window(WEEKDAYS_ONLY, "09:00", "18:00");
        // New York moves to EDT (UTC-4) on Sunday 2026-03-08. Saturday 20:00 EST.
        let ny = gate(Some(w), None, "America/New_York");
        assert_eq!(ny.next_open(at("2026-03-08T01:00:00Z")), at("2026-03-09T13:00:00Z"), "09:00 EDT, not EST");
        assert_eq!(ny.next_open(at("2026-03-06T12:00:00Z")), at("2026-03-06T14:00:00Z"), "09:00 EST the Friday before");
        // Berlin moves to CEST (UTC+2) on Sunday 2026-03-29.
        let berlin = gate(Some(w), None, "Europe/Berlin");
        assert_eq!(berlin.next_open(at("2026-03-28T19:00:00Z")), at("2026-03-30T07:00:00Z"), "09:00 CEST");
        assert_eq!(berlin.next_open(at("2026-03-27T06:00:00Z")), at("2026-03-27T08:00:00Z"), "09:00 CET");
    }

    #[test]
    fn the_window_opens_at_local_time_across_autumn_dst_in_two_zones() {
        let w = window(&["sun", "mon"], "09:00", "18:00");
        // New York back to EST on Sunday 2026-11-01 (at 02:00 EDT).
        let ny = gate(Some(w), None, "America/New_York");
        assert_eq!(ny.next_open(at("2026-11-01T03:00:00Z")), at("2026-11-01T14:00:00Z"), "09:00 EST");
        // Berlin back to CET on Sunday 2026-10-25.
        let berlin = gate(Some(w), None, "Europe/Berlin");
        assert_eq!(berlin.next_open(at("2026-10-24T20:00:00Z")), at("2026-10-25T08:00:00Z"), "09:00 CET");
    }

    #[test]
    fn a_window_opening_in_the_skipped_hour_opens_when_the_gap_ends() {
        // 02:30 does not exist in Berlin on 2026-03-29 (02:00 -> 03:00 CEST).
        let g = gate(Some(window(&["sun"], "02:30", "05:00")), None, "Europe/Berlin");
        assert_eq!(g.next_open(at("2026-03-28T23:00:00Z")), at("2026-03-29T01:00:00Z"), "03:00 CEST");
    }

    #[test]
    fn quiet_hours_across_midnight_hold_until_they_end() {
        let g = gate(None, Some(("22:00", "07:00")), "Europe/Berlin");
        // 23:00 CET on a winter night -> 07:00 CET.
        let t = at("2026-01-14T22:00:00Z");
        assert!(!g.is_open(t));
        assert_eq!(g.next_open(t), at("2026-01-15T06:00:00Z"));
        let GateDecision::Hold { until, detail, .. } = g.decide(t, None, t) else { panic!() };
        assert_eq!(until, at("2026-01-15T06:00:00Z"));
        assert!(detail.contains("quiet hours (22:00–07:00, Europe/Berlin)"), "{detail}");
        assert!(g.is_open(at("2026-01-15T06:00:00Z")));
    }

    #[test]
    fn quiet_hours_and_a_window_together_take_the_first_time_both_allow() {
        // Window 06:00-10:00 every day, quiet until 08:00: opens at 08:00.
        let g = gate(Some(window(&WEEKDAYS, "06:00", "10:00")), Some(("22:00", "08:00")), "UTC");
        assert_eq!(g.next_open(at("2026-01-14T23:00:00Z")), at("2026-01-15T08:00:00Z"));
        // Quiet hours that cover the whole window: the window alone decides.
        let g = gate(Some(window(&WEEKDAYS, "06:00", "07:00")), Some(("05:00", "08:00")), "UTC");
        assert_eq!(g.next_open(at("2026-01-14T23:00:00Z")), at("2026-01-15T06:00:00Z"));
    }

    #[test]
    fn grace_counts_from_the_window_opening() {
        let g = gate(Some(window(WEEKDAYS_ONLY, "09:00", "18:00")), None, "UTC");
        let due = at("2026-03-04T20:00:00Z");
        let expires = Some(at("2026-03-04T21:00:00Z"));
        // Held at due time: until 09:00, expiring at 10:00.
        let GateDecision::Hold { until, expires_at, .. } = g.decide(due, expires, due) else { panic!() };
        assert_eq!((until, expires_at), (at("2026-03-05T09:00:00Z"), Some(at("2026-03-05T10:00:00Z"))));
        // A worker that only looks at 09:30 (it was down overnight) still delivers.
        assert_eq!(g.decide(due, expires, at("2026-03-05T09:30:00Z")), GateDecision::Go);
        // Past the grace counted from the opening: expired, saying so.
        let GateDecision::Expired { detail } = g.decide(due, expires, at("2026-03-05T10:00:01Z")) else { panic!() };
        assert!(detail.contains("counted from 2026-03-05T09:00:00.000Z"), "{detail}");
    }

    #[test]
    fn a_retry_that_lands_outside_the_window_waits_for_the_next_opening() {
        let g = gate(Some(window(WEEKDAYS_ONLY, "09:00", "18:00")), None, "UTC");
        let due = at("2026-03-04T18:04:00Z"); // a retry five minutes after 17:59
        let GateDecision::Hold { until, expires_at, reason, detail } =
            g.decide(due, Some(at("2026-03-04T18:59:00Z")), due)
        else {
            panic!()
        };
        assert_eq!(reason, HoldReason::SendWindow);
        assert_eq!(until, at("2026-03-05T09:00:00Z"));
        assert_eq!(expires_at, Some(at("2026-03-05T09:55:00Z")), "the grace left moves with it");
        assert!(detail.contains("send window (mon,tue,wed,thu,fri 09:00–18:00, UTC)"), "{detail}");
    }

    #[test]
    fn a_hold_is_told_apart_from_a_retry_error() {
        use HoldReason::{Escalation, QuietHours, SendWindow};
        // The reason is carried; the stored detail, read back, says the same.
        let hold = |g: &Gate, t: &str| {
            let GateDecision::Hold { reason, detail, .. } = g.decide(at(t), None, at(t)) else { panic!("{t}") };
            assert_eq!(HoldReason::of_stored(&detail), Some(reason), "{detail}");
            reason
        };
        let g = gate(Some(window(WEEKDAYS_ONLY, "09:00", "18:00")), Some(("22:00", "07:00")), "UTC");
        assert_eq!(hold(&g, "2026-03-07T12:00:00Z"), SendWindow);
        assert_eq!(hold(&g, "2026-03-04T23:00:00Z"), SendWindow, "outside the window first");
        let q = gate(None, Some(("22:00", "07:00")), "UTC");
        assert_eq!(hold(&q, "2026-03-04T23:00:00Z"), QuietHours);
        assert_eq!(
            HoldReason::of_stored("waiting until 2026-03-04T10:00:00.000Z for the inbox message x to be read"),
            Some(Escalation)
        );
        assert_eq!(HoldReason::of_stored("smtp: 421 try again later"), None);
    }

    #[test]
    fn throttle_fields_are_checked_by_name() {
        let e = Throttle::parse(&ThrottleInput { limit: 0, per: 0, scope: "user".into() }).unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["throttle.limit", "throttle.per", "throttle.scope"]);
        let t = Throttle::parse(&ThrottleInput { limit: 3, per: 86_400, scope: "rule".into() }).unwrap();
        assert_eq!(t.describe(), "3 per day");
    }
}
