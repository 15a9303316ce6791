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
use crate::planning::workflow::{DigestInput, EscalateInput, SendWindowInput, ThrottleInput};

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
    display_name: String,
    description: String,
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
        let (sw, d, t, e) = (&input.send_window, &input.digest, &input.throttle, &input.escalate);
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
            esc_after: num(e.as_ref().map(|e| e.after)),
            esc_unless: e.as_ref().map_or_else(|| "read".to_owned(), |e| e.unless.clone()),
            esc_channel: e.as_ref().map_or_else(|| "email".to_owned(), |e| e.channel.clone()),
            esc_fallback_locale: e.as_ref().map_or_else(|| "en".to_owned(), |e| e.template.fallback_locale.clone()),
            esc_locales,
            display_name: input.display_name.clone().unwrap_or_default(),
            description: input.description.clone().unwrap_or_default(),
        }
    }

    pub(super) fn from_fields(f: &HashMap<String, String>) -> WorkflowForm {
        let get = |k: &str| f.get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
        WorkflowForm {
            sw_days: crate::planning::workflow::WEEKDAYS
                .iter()
                .filter(|d| f.contains_key(&format!("sw_day_{d}")))
                .map(|d| (*d).to_owned())
                .collect(),
            sw_from: get("sw_from"),
            sw_until: get("sw_until"),
            digest_window: get("digest_window"),
            ds_days: crate::planning::workflow::WEEKDAYS
                .iter()
                .filter(|d| f.contains_key(&format!("ds_day_{d}")))
                .map(|d| (*d).to_owned())
                .collect(),
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
        input.escalate = match esc_after {
            Some(after) => {
                let locales =
                    locale_map(&self.esc_locales, "escalate.template.locales", shape_of(&self.esc_channel), errors);
                Some(EscalateInput {
                    after,
                    unless: self.esc_unless.clone(),
                    channel: self.esc_channel.clone(),
                    template: TemplateSet { fallback_locale: self.esc_fallback_locale.clone(), locales },
                })
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
