//! The rule editor's workflow fields (send window, digest, frequency cap,
//! escalation, the preference center's names), as the form shows and posts
//! them, turned into the API's fields. Kept apart from the editor's page
//! handling (`ui::rules`) so each stays a file one can read through.

use std::collections::HashMap;

use serde::Serialize;

use super::rules::{LocaleForm, locale_blocks, locale_map, shape_of};
use crate::planning::digest::DigestScheduleInput;
use crate::planning::rule::{FieldError, RuleInput};
use crate::planning::template::TemplateSet;
use crate::planning::workflow::{DigestInput, EscalateInput, EscalationInput, SendWindowInput, ThrottleInput};

/// The workflow fields of the editor, as typed. A group left empty is no
/// such field on the rule (saving removes it); the days of a send window
/// are one checkbox each (`sw_day_mon` …), none ticked meaning every day,
/// as leaving `days` out does in the API.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct WorkflowForm {
    sw_days: Vec<String>,
    sw_from: String,
    sw_until: String,
    digest_window: String,
    /// A digest schedule's days (`ds_day_mon` …; none ticked: every day)
    /// and time.
    ds_days: Vec<String>,
    ds_at: String,
    digest_key: String,
    digest_max_items: String,
    throttle_limit: String,
    throttle_per: String,
    throttle_scope: String,
    esc_after: String,
    esc_unless: String,
    pub(super) esc_channel: String,
    esc_fallback_locale: String,
    esc_locales: Vec<LocaleForm>,
    /// A chain's steps after the first, as the API's JSON list, carried in
    /// a hidden field: the editor edits the first step and shows these
    /// read-only ([`WorkflowForm::esc_later`]), and a save keeps them as
    /// they were. Editing every step would need a block of fields per step
    /// and its template; dropping them on save is how a Slack rule once
    /// lost its blocks.
    esc_more: String,
    /// [`WorkflowForm::esc_more`] read, for the page to show.
    esc_later: Vec<LaterStep>,
    display_name: String,
    description: String,
}

/// A chain's step after the first, as the editor shows it (read-only).
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct LaterStep {
    /// From 1, as the send log counts steps.
    step: usize,
    after: i64,
    channel: String,
    /// The step's template, as JSON.
    template: String,
}

/// The steps in `more` (a JSON list of steps 2, 3, …), for the page; none
/// when it does not read (the save says so, naming the field).
fn later_steps(more: &str) -> Vec<LaterStep> {
    let steps: Vec<EscalateInput> = serde_json::from_str(more).unwrap_or_default();
    steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| LaterStep {
            step: i + 2,
            after: s.after,
            channel: s.channel,
            template: serde_json::to_string_pretty(&s.template).unwrap_or_default(),
        })
        .collect()
}

impl WorkflowForm {
    /// No workflow field, with the escalation's choices on their defaults
    /// and an empty block to write its template in.
    pub(super) fn blank() -> WorkflowForm {
        WorkflowForm {
            throttle_scope: "rule".into(),
            esc_unless: "read".into(),
            esc_channel: "email".into(),
            esc_fallback_locale: "en".into(),
            esc_locales: vec![LocaleForm { tag: "en".into(), ..Default::default() }],
            ..Default::default()
        }
    }

    pub(super) fn from_input(input: &RuleInput) -> WorkflowForm {
        let (sw, d, t) = (&input.send_window, &input.digest, &input.throttle);
        let steps = input.escalate.as_ref().map(EscalationInput::steps).unwrap_or_default();
        let e = steps.first();
        let esc_more = match steps.get(1..) {
            Some(later) if !later.is_empty() => serde_json::to_string(later).unwrap_or_default(),
            _ => String::new(),
        };
        let num = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_default();
        let mut esc_locales: Vec<LocaleForm> =
            e.iter().flat_map(|e| e.template.locales.iter()).map(LocaleForm::of).collect();
        if esc_locales.is_empty() {
            esc_locales = WorkflowForm::blank().esc_locales;
        }
        esc_locales.push(LocaleForm::default());
        WorkflowForm {
            // Every day is shown as no day ticked: the same window.
            sw_days: sw.as_ref().map(|w| w.days.clone()).filter(|d| d.len() < 7).unwrap_or_default(),
            sw_from: sw.as_ref().map(|w| w.from.clone()).unwrap_or_default(),
            sw_until: sw.as_ref().map(|w| w.until.clone()).unwrap_or_default(),
            digest_window: num(d.as_ref().and_then(|d| d.window)),
            ds_days: d
                .as_ref()
                .and_then(|d| d.schedule.as_ref())
                .map(|s| s.days.clone())
                .filter(|d| d.len() < 7)
                .unwrap_or_default(),
            ds_at: d.as_ref().and_then(|d| d.schedule.as_ref()).map(|s| s.at.clone()).unwrap_or_default(),
            digest_key: d.as_ref().and_then(|d| d.key.clone()).unwrap_or_default(),
            digest_max_items: num(d.as_ref().and_then(|d| d.max_items)),
            throttle_limit: num(t.as_ref().map(|t| t.limit)),
            throttle_per: num(t.as_ref().map(|t| t.per)),
            throttle_scope: t.as_ref().map_or_else(|| "rule".to_owned(), |t| t.scope.clone()),
            esc_after: num(e.map(|e| e.after)),
            esc_unless: e.and_then(|e| e.unless.clone()).unwrap_or_else(|| "read".to_owned()),
            esc_channel: e.map_or_else(|| "email".to_owned(), |e| e.channel.clone()),
            esc_fallback_locale: e.map_or_else(|| "en".to_owned(), |e| e.template.fallback_locale.clone()),
            esc_locales,
            esc_later: later_steps(&esc_more),
            esc_more,
            display_name: input.display_name.clone().unwrap_or_default(),
            description: input.description.clone().unwrap_or_default(),
        }
    }

    pub(super) fn from_fields(f: &HashMap<String, String>) -> WorkflowForm {
        let get = |k: &str| f.get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
        // The weekdays whose box `{prefix}{day}` is ticked.
        let days = |prefix: &str| -> Vec<String> {
            let ticked = crate::planning::workflow::WEEKDAYS.iter().filter(|d| f.contains_key(&format!("{prefix}{d}")));
            ticked.map(|d| (*d).to_owned()).collect()
        };
        WorkflowForm {
            sw_days: days("sw_day_"),
            sw_from: get("sw_from"),
            sw_until: get("sw_until"),
            digest_window: get("digest_window"),
            ds_days: days("ds_day_"),
            ds_at: get("ds_at"),
            digest_key: get("digest_key"),
            digest_max_items: get("digest_max_items"),
            throttle_limit: get("throttle_limit"),
            throttle_per: get("throttle_per"),
            throttle_scope: get("throttle_scope"),
            esc_after: get("esc_after"),
            esc_unless: get("esc_unless"),
            esc_channel: get("esc_channel"),
            esc_fallback_locale: get("esc_fallback_locale"),
            esc_locales: locale_blocks(f, "esc", shape_of(&get("esc_channel"))),
            esc_more: get("esc_more"),
            esc_later: later_steps(&get("esc_more")),
            display_name: get("display_name"),
            description: get("description"),
        }
    }

    /// Fills the workflow fields of `input`, adding an error naming the
    /// API's field for what cannot even be read (a number that is not one,
    /// a group given in part). The rest is checked by the API's validation.
    pub(super) fn apply(&self, input: &mut RuleInput, errors: &mut Vec<FieldError>) {
        let mut number = |field: &str, v: &str, what: &str| -> Option<i64> {
            if v.is_empty() {
                return None;
            }
            v.parse::<i64>()
                .map_err(|_| errors.push(FieldError::new(field, format!("{v:?} is not a whole number{what}"))))
                .ok()
        };
        let secs = " of seconds";
        let digest_window = number("digest.window", &self.digest_window, secs);
        let digest_max = number("digest.max_items", &self.digest_max_items, "");
        let throttle_limit = number("throttle.limit", &self.throttle_limit, "");
        let throttle_per = number("throttle.per", &self.throttle_per, secs);
        let esc_after = number("escalate.after", &self.esc_after, secs);
        let opt = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());

        input.send_window = match (self.sw_from.is_empty(), self.sw_until.is_empty(), self.sw_days.is_empty()) {
            (true, true, true) => None,
            (true, _, _) | (_, true, _) => {
                let field = if self.sw_from.is_empty() { "send_window.from" } else { "send_window.until" };
                errors
                    .push(FieldError::new(field, "required for a send window (HH:MM); leave the group empty for none"));
                None
            }
            (false, false, no_days) => Some(SendWindowInput {
                days: if no_days {
                    crate::planning::workflow::WEEKDAYS.iter().map(|d| (*d).to_owned()).collect()
                } else {
                    self.sw_days.clone()
                },
                from: self.sw_from.clone(),
                until: self.sw_until.clone(),
            }),
        };
        // A window or a schedule (the API's checks refuse both, or a
        // schedule without its time, naming the field).
        let schedule = (!self.ds_at.is_empty() || !self.ds_days.is_empty()).then(|| DigestScheduleInput {
            days: if self.ds_days.is_empty() {
                crate::planning::workflow::WEEKDAYS.iter().map(|d| (*d).to_owned()).collect()
            } else {
                self.ds_days.clone()
            },
            at: self.ds_at.clone(),
        });
        let rest_empty = self.digest_key.is_empty() && self.digest_max_items.is_empty();
        input.digest = match (&digest_window, schedule) {
            (None, None) if self.digest_window.is_empty() && rest_empty => None,
            (None, None) => {
                if self.digest_window.is_empty() {
                    errors.push(FieldError::new("digest.window", "required for a digest (seconds), or a schedule"));
                }
                None
            }
            (window, schedule) => {
                Some(DigestInput { window: *window, schedule, key: opt(&self.digest_key), max_items: digest_max })
            }
        };
        input.throttle = match (throttle_limit, throttle_per) {
            (Some(limit), Some(per)) => Some(ThrottleInput { limit, per, scope: self.throttle_scope.clone() }),
            _ if self.throttle_limit.is_empty() && self.throttle_per.is_empty() => None,
            (l, p) => {
                if l.is_none() && self.throttle_limit.is_empty() {
                    errors.push(FieldError::new("throttle.limit", "required for a frequency cap"));
                }
                if p.is_none() && self.throttle_per.is_empty() {
                    errors.push(FieldError::new("throttle.per", "required for a frequency cap (seconds)"));
                }
                None
            }
        };
        let esc_template_given = self.esc_locales.iter().any(LocaleForm::has_content);
        let later: Vec<EscalateInput> = match self.esc_more.as_str() {
            "" => Vec::new(),
            more => serde_json::from_str(more).unwrap_or_else(|e| {
                errors.push(FieldError::new(
                    "escalate",
                    format!(
                        "the escalation's later steps (a hidden field of this page) do not read: {e}; reload the rule"
                    ),
                ));
                Vec::new()
            }),
        };
        input.escalate = match esc_after {
            Some(after) => {
                let locales =
                    locale_map(&self.esc_locales, "escalate.template.locales", shape_of(&self.esc_channel), errors);
                let first = EscalateInput {
                    after,
                    unless: Some(self.esc_unless.clone()),
                    channel: self.esc_channel.clone(),
                    template: TemplateSet { fallback_locale: self.esc_fallback_locale.clone(), locales },
                };
                if later.is_empty() {
                    Some(EscalationInput::One(first))
                } else {
                    Some(EscalationInput::Chain(std::iter::once(first).chain(later).collect()))
                }
            }
            None if self.esc_after.is_empty() && !later.is_empty() => {
                errors.push(FieldError::new(
                    "escalate.after",
                    "required: this rule's escalation has later steps (shown below), which follow the first; remove \
                     the chain through the API (PATCH escalate) to have none",
                ));
                None
            }
            None if self.esc_after.is_empty() && esc_template_given => {
                errors.push(FieldError::new("escalate.after", "required for escalation (seconds)"));
                None
            }
            None => None,
        };
        input.display_name = opt(&self.display_name);
        input.description = opt(&self.description);
    }
}
