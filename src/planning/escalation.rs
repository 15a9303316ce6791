//! Escalation: an inbox message followed up on another channel if it was
//! not read (or seen) in time, by one follow-up or a chain of up to three
//! ("in the inbox; if unread after 30 min, push; if still unread after 2 h,
//! email"): what the API accepts ([`EscalationInput`]), how it is checked,
//! what the worker holds ([`Escalate`]), and the dedupe keys that tie each
//! follow-up to its original. When a follow-up is planned and decided is
//! `delivery::worker::follow_ups` and `delivery::compose`.

use serde::{Deserialize, Serialize};

use crate::planning::rule::FieldError;
use crate::planning::template::TemplateSet;
use crate::planning::workflow::MAX_PERIOD;

/// One follow-up of an escalation: `{"after": 1800, "unless": "read",
/// "channel": "email", "template": {…}}`, alone or as a step of a chain.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EscalateInput {
    /// Seconds after the inbox message is delivered (1 or more). In a chain,
    /// each step's counts from the inbox delivery too, and is greater than
    /// the step before's.
    pub after: i64,
    /// What cancels the follow-up: `read` (only reading the message) or
    /// `seen` (seeing it in a list, or reading it, which also sees it).
    /// Required on a single follow-up and on a chain's first step; a later
    /// step may leave it out or repeat it: one condition holds for the
    /// whole chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unless: Option<String>,
    /// The follow-up's channel: `email`, `push`, `sms` or `slack`. Not
    /// `inbox`, and not `webhook`: a follow-up has no URL to post to (an
    /// inbox rule has no `webhook_url`).
    pub channel: String,
    pub template: TemplateSet,
}

/// `"escalate"`: one follow-up (an object, as rules had before chains, and
/// stored as given) or a chain of up to 3 (a list):
/// "in the inbox; if unread after 30 min, push; if still unread after 2 h,
/// email".
///
/// A chain has one `unless`, on its first step, rather than one per step:
/// every step asks about the same thing, the ORIGINAL inbox message (a push
/// or an email has no read state of its own), and a chain whose second step
/// waited for "read" after a first that stopped at "seen" would send the
/// second after the chain looked answered. Accepting the later steps'
/// `unless` only when it repeats the first keeps a chain written out in full
/// valid without letting it say two things.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EscalationInput {
    /// One follow-up.
    One(EscalateInput),
    /// A chain of 1 to 3 follow-ups, each `after` greater than the last.
    Chain(Vec<EscalateInput>),
}

/// Read by the shape of the JSON (a list is a chain) rather than serde's
/// untagged guessing, whose only error is "did not match any variant": a
/// step with a misspelt field is refused saying which field.
impl<'de> Deserialize<'de> for EscalationInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(d)?;
        if value.is_array() {
            serde_json::from_value(value).map(EscalationInput::Chain).map_err(D::Error::custom)
        } else {
            serde_json::from_value(value).map(EscalationInput::One).map_err(D::Error::custom)
        }
    }
}

impl EscalationInput {
    /// The follow-ups, in order.
    pub fn steps(&self) -> &[EscalateInput] {
        match self {
            EscalationInput::One(step) => std::slice::from_ref(step),
            EscalationInput::Chain(steps) => steps,
        }
    }

    /// The chain's condition: the first step's.
    pub fn unless(&self) -> Option<&str> {
        self.steps().first().and_then(|s| s.unless.as_deref())
    }

    /// The API's name for step `i` (0-based): `escalate` for a single
    /// follow-up, `escalate[i]` in a chain.
    pub fn field(&self, i: usize) -> String {
        step_field(matches!(self, EscalationInput::Chain(_)), i)
    }
}

pub(crate) fn step_field(chained: bool, i: usize) -> String {
    if chained { format!("escalate[{i}]") } else { "escalate".to_owned() }
}

/// Most steps a chain may have. The dedupe keys of steps 2 and 3 and the
/// retention statements that keep an original while a step is pending
/// (`store/queries/*/retention.sql`) name the steps one by one.
pub const MAX_ESCALATION_STEPS: usize = 3;

/// What `escalate.channel` accepts, in words.
const FOLLOW_UP_CHANNELS: &str =
    "must be \"email\", \"push\", \"sms\" or \"slack\", the channels a follow-up of an inbox message can go on";

/// Checks an escalation, one follow-up or a chain, naming each step's
/// fields `escalate.…` or `escalate[i].…` as the rule gave them.
pub(crate) fn validate_escalation(
    e: &EscalationInput,
    channel: &str,
    known_channel: impl Fn(&str) -> Result<(), String>,
    errors: &mut Vec<FieldError>,
) {
    if channel != "inbox" {
        errors.push(FieldError::new("escalate", "only an inbox rule can escalate (its channel must be \"inbox\")"));
    }
    let steps = e.steps();
    if steps.is_empty() || steps.len() > MAX_ESCALATION_STEPS {
        errors.push(FieldError::new(
            "escalate",
            format!(
                "a chain has 1 to {MAX_ESCALATION_STEPS} steps, not {}: a follow-up as an object, or a list of up to \
                 {MAX_ESCALATION_STEPS}",
                steps.len()
            ),
        ));
    }
    let first_unless = e.unless();
    let mut previous_after = None;
    for (i, step) in steps.iter().enumerate() {
        let field = e.field(i);
        if !(1..=MAX_PERIOD).contains(&step.after) {
            errors.push(FieldError::new(format!("{field}.after"), format!("must be 1 to {MAX_PERIOD} seconds")));
        } else if let Some(before) = previous_after.filter(|before| step.after <= *before) {
            errors.push(FieldError::new(
                format!("{field}.after"),
                format!(
                    "must be greater than escalate[{}].after ({before}): every step counts from the inbox delivery, \
                     so each comes later than the one before; {} is not",
                    i - 1,
                    step.after
                ),
            ));
        }
        // An `after` refused for its range is not compared again.
        previous_after = (1..=MAX_PERIOD).contains(&step.after).then_some(step.after);
        match (i, step.unless.as_deref()) {
            (0, None) => errors.push(FieldError::new(
                format!("{field}.unless"),
                "required: seen or read (what cancels the follow-up)",
            )),
            (0, Some("seen" | "read")) => {}
            (0, Some(other)) => errors.push(FieldError::new(
                format!("{field}.unless"),
                format!("{other:?} is not accepted; expected seen or read"),
            )),
            (_, None) => {}
            (_, Some(u)) if Some(u) == first_unless => {}
            (_, Some(u)) => errors.push(FieldError::new(
                format!("{field}.unless"),
                format!(
                    "{u:?} differs from escalate[0].unless: a chain has one condition, given on its first step \
                     (leave it out here, or repeat {:?})",
                    first_unless.unwrap_or_default()
                ),
            )),
        }
        // A webhook follow-up was once accepted, and every one then failed
        // with "no webhook URL": the URL belongs to a rule whose own channel
        // is webhook, and an escalating rule's channel is inbox. Refused at
        // save rather than letting the escalation carry a URL of its own,
        // which would need its own checks, secrets and screen fields.
        let channel_field = format!("{field}.channel");
        match step.channel.as_str() {
            "inbox" => errors.push(FieldError::new(channel_field, FOLLOW_UP_CHANNELS)),
            "webhook" => errors.push(FieldError::new(
                channel_field,
                format!("\"webhook\" is not accepted: a follow-up has no webhook URL (webhook_url belongs to a rule whose own channel is webhook); {FOLLOW_UP_CHANNELS}"),
            )),
            other => {
                if let Err(why) = known_channel(other) {
                    errors.push(FieldError::new(channel_field, why));
                }
            }
        }
        // The follow-up's template in its own channel's shape: a push
        // follow-up has a title, an email one a subject.
        let mut template_errors = step.template.validate().err().unwrap_or_default();
        template_errors.extend(step.template.check_shape(&step.channel));
        errors.extend(template_errors.iter().map(|te| {
            let mut fe = FieldError::from(te);
            fe.field = format!("{field}.{}", fe.field);
            fe
        }));
    }
}

/// A rule's escalation: one follow-up, or a chain of them, each on its
/// `channel` `after` seconds after the inbox message was delivered, unless
/// the message was read (`unless: read`), or seen or read (`unless:
/// seen`), by then.
#[derive(Debug, Clone, PartialEq)]
pub struct Escalate {
    /// `unless: "read"`; otherwise `seen` (reading a message also sees it).
    pub unless_read: bool,
    /// Given as a list (errors and screens name `escalate[i]`), not as one
    /// object (`escalate`).
    pub chained: bool,
    /// In order, each `after` greater than the last (checked at save).
    pub steps: Vec<EscalateStep>,
}

/// One follow-up of an [`Escalate`].
#[derive(Debug, Clone, PartialEq)]
pub struct EscalateStep {
    pub after_seconds: i64,
    pub channel: String,
    pub template: TemplateSet,
}

impl Escalate {
    /// As the worker holds it, from what the API accepted (and checked).
    pub fn from_input(e: EscalationInput) -> Escalate {
        Escalate {
            unless_read: e.unless() == Some("read"),
            chained: matches!(e, EscalationInput::Chain(_)),
            steps: e
                .steps()
                .iter()
                .map(|s| EscalateStep {
                    after_seconds: s.after.max(1),
                    channel: s.channel.clone(),
                    template: s.template.clone(),
                })
                .collect(),
        }
    }

    /// What cancels the follow-up, in words, for the planner's decision
    /// and the screens: they once said "seen or read" whatever the rule said.
    pub fn cancelled_by(&self) -> &'static str {
        if self.unless_read { "read" } else { "seen or read" }
    }

    /// Step `n`, counted from 1 as dedupe keys and screens count them.
    pub fn step(&self, n: usize) -> Option<&EscalateStep> {
        n.checked_sub(1).and_then(|i| self.steps.get(i))
    }

    /// The API's name for step `n` (from 1): `escalate` or `escalate[n-1]`.
    pub fn field(&self, n: usize) -> String {
        step_field(self.chained, n.saturating_sub(1))
    }
}

/// The dedupe key of an escalation follow-up, naming its original: step 1's
/// is this and the original's outbox id (the key single follow-ups always
/// had, so rows planned before chains still read), step 2's and 3's add
/// `:2` and `:3`.
pub const FOLLOW_UP_PREFIX: &str = "escalate:";

/// The dedupe key of step `step` (from 1) of the follow-ups of `original`.
pub fn follow_up_key(original: &str, step: usize) -> String {
    if step <= 1 { format!("{FOLLOW_UP_PREFIX}{original}") } else { format!("{FOLLOW_UP_PREFIX}{original}:{step}") }
}

/// The original inbox message's outbox id and the step (from 1), for a
/// follow-up's dedupe key.
pub fn follow_up_step(dedupe_key: &str) -> Option<(&str, usize)> {
    let rest = dedupe_key.strip_prefix(FOLLOW_UP_PREFIX)?;
    // Outbox ids are UUIDs: a colon can only be the step's.
    match rest.rsplit_once(':') {
        Some((original, step)) => step.parse().ok().filter(|n| *n >= 2).map(|n| (original, n)),
        None => Some((rest, 1)),
    }
}

/// The original inbox message's outbox id, for a follow-up's dedupe key.
pub fn follow_up_of(dedupe_key: &str) -> Option<&str> {
    follow_up_step(dedupe_key).map(|(original, _)| original)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::workflow::{RuleWorkflow, WorkflowInput, validate};

    #[test]
    fn a_single_follow_up_reads_and_stores_as_it_always_did() {
        let mut single = step(1800, "email");
        single["unless"] = "read".into();
        let w: WorkflowInput = serde_json::from_value(serde_json::json!({ "escalate": single })).unwrap();
        assert!(matches!(w.escalate, Some(EscalationInput::One(_))));
        assert_eq!(serde_json::to_value(&w).unwrap()["escalate"], single, "stored JSON unchanged");
        assert!(escalation_errors(single.clone()).is_empty());
        let parsed = RuleWorkflow::from_stored(Some(&serde_json::json!({ "escalate": single }))).unwrap();
        let e = parsed.escalate.unwrap();
        assert_eq!((e.steps.len(), e.unless_read, e.field(1)), (1, true, "escalate".to_owned()));
        // Without `unless`, refused by name (as it always was, now as a 422).
        let errors = escalation_errors(step(1800, "email"));
        assert_eq!(errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["escalate.unless"]);
    }

    #[test]
    fn a_chain_is_checked_step_by_step_by_name() {
        let mut first = step(1800, "push");
        first["unless"] = "seen".into();
        let good = serde_json::json!([first, step(7200, "email")]);
        assert!(escalation_errors(good.clone()).is_empty(), "{:?}", escalation_errors(good));

        // Not later than the step before.
        let errors = escalation_errors(serde_json::json!([first, step(1800, "email")]));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "escalate[1].after");
        assert!(errors[0].message.contains("greater than escalate[0].after (1800)"), "{}", errors[0].message);
        // Four steps.
        let four = serde_json::json!([first, step(3600, "email"), step(7200, "sms"), step(9000, "slack")]);
        let errors = escalation_errors(four);
        assert_eq!(errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["escalate"], "{errors:?}");
        assert!(errors[0].message.contains("1 to 3 steps, not 4"), "{}", errors[0].message);
        assert_eq!(escalation_errors(serde_json::json!([]))[0].field, "escalate");
        // A webhook step, and a template in another channel's shape.
        let mut hook = step(3600, "webhook");
        hook["template"] = serde_json::json!({"fallback_locale": "en", "locales": {"en": {"text": "t"}}});
        let errors = escalation_errors(serde_json::json!([first, hook]));
        assert!(
            errors.iter().any(|e| e.field == "escalate[1].channel" && e.message.contains("no webhook URL")),
            "{errors:?}"
        );
        let mut email_shaped_push = step(3600, "push");
        email_shaped_push["template"] = step(0, "email")["template"].clone();
        let errors = escalation_errors(serde_json::json!([first, email_shaped_push]));
        assert!(errors.iter().all(|e| e.field.starts_with("escalate[1].template.")), "{errors:?}");
        assert!(errors.iter().any(|e| e.field == "escalate[1].template.locales.en.title"), "{errors:?}");
        // One condition for the chain: on the first step; a later one may
        // repeat it, not contradict it.
        let mut again = step(7200, "email");
        again["unless"] = "seen".into();
        assert!(escalation_errors(serde_json::json!([first, again])).is_empty());
        again["unless"] = "read".into();
        let errors = escalation_errors(serde_json::json!([first, again]));
        assert_eq!(errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["escalate[1].unless"]);
        let errors = escalation_errors(serde_json::json!([step(60, "push"), step(120, "email")]));
        assert_eq!(errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), ["escalate[0].unless"]);
    }

    #[test]
    fn each_step_has_its_own_dedupe_key_and_step_one_keeps_the_old_one() {
        let original = "0190a5b2-7c3e-7def-8123-456789abcdef";
        assert_eq!(follow_up_key(original, 1), format!("escalate:{original}"), "rows planned before chains");
        for n in 1..=MAX_ESCALATION_STEPS {
            let key = follow_up_key(original, n);
            assert_eq!(follow_up_step(&key), Some((original, n)), "{key}");
            assert_eq!(follow_up_of(&key), Some(original));
        }
        assert_ne!(follow_up_key(original, 2), follow_up_key(original, 3));
        assert_eq!(follow_up_step(&format!("escalate:{original}:1")), None, "step 1 has no suffix");
        assert_eq!(follow_up_step("trigger:rule:email"), None);
    }

    fn escalation_errors(escalate: serde_json::Value) -> Vec<FieldError> {
        let w: WorkflowInput = serde_json::from_value(serde_json::json!({ "escalate": escalate })).unwrap();
        let mut errors = Vec::new();
        validate(&w, "inbox", |_| Ok(()), &mut errors);
        errors
    }

    fn step(after: i64, channel: &str) -> serde_json::Value {
        let template = match channel {
            "push" => serde_json::json!({"fallback_locale": "en", "locales": {"en": {"title": "Unread"}}}),
            "sms" | "slack" => serde_json::json!({"fallback_locale": "en", "locales": {"en": {"text": "Unread"}}}),
            _ => serde_json::json!({"fallback_locale": "en", "locales": {"en": {"subject": "Unread", "text": "t"}}}),
        };
        serde_json::json!({"after": after, "channel": channel, "template": template})
    }
}
