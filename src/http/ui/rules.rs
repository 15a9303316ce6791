//! Rules: the list with each rule's switch, the editor with its rendered
//! preview (every field, the workflow fields included, checked as the API
//! checks them), and the dry run shown before a rule is turned on (with
//! what the send window, digest and cap would do).
//!
//! A rule is created off, whatever the form says: the only way on is the
//! switch, and the switch always shows the dry run first (what the rule would
//! have planned for recent triggers of its type), so nobody turns on a rule
//! without seeing what it would send.

use std::collections::{BTreeMap, HashMap};

use axum::Form;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::rule_workflow::WorkflowForm;
use super::session::Operator;
use super::{Page, Ui, UiError, audit, redirect_with};
use crate::delivery::channel::push::{MAX_PAYLOAD, PushNotification, PushOptions, Urgency};
use crate::domain::UserId;
use crate::http::AppState;
use crate::http::problem::ApiError;
use crate::http::rules::{create_rule, delete_rule, dry_run, load, update_rule};
use crate::planning::rule::{FieldError, RuleInput, RulePatch, RuleView};
use crate::planning::template::{Condition, LocaleTemplate, TemplateSet};

mod preview;
use preview::*;

const ACTIVE: &str = "/ui/rules";

/// The urgencies a push rule may choose, in the editor's order.
const URGENCIES: [Urgency; 4] = [Urgency::VeryLow, Urgency::Low, Urgency::Normal, Urgency::High];

pub async fn list(Ui { state, op }: Ui) -> Result<Response, UiError> {
    let rules: Vec<RuleView> =
        state.store.list_rules().await?.iter().map(|r| RuleView::new(r, &state.channels)).collect();
    Ok(Page::new(&op, ACTIVE, "rules.html", "Rules").with(serde_json::json!({ "rules": rules })).into_response())
}

/// One locale's variant as the form shows it, in the shape of its
/// channel: `subject`, `text` and `html` for email, the inbox and
/// webhooks; `title`, `body` and `url` for a push notification; `text` for
/// a text message; `text` and `blocks` for Slack (see [`LocaleTemplate`]).
/// The page shows the fields of the rule's channel only ([`FIELDS`]).
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct LocaleForm {
    pub(super) tag: String,
    pub(super) subject: String,
    pub(super) text: String,
    pub(super) html: String,
    pub(super) title: String,
    pub(super) body: String,
    pub(super) url: String,
    pub(super) blocks: String,
}

/// A locale block's field as the page lays it out: name, label, and the
/// rows of its textarea (0 for a one-line input).
type Field = (&'static str, &'static str, u8);

/// The fields of a locale block in each shape, keyed as [`shape_of`]
/// names them. One list for the template's blocks and the follow-up's,
/// so the two cannot drift apart; its names are the fields
/// [`TemplateSet::check_shape`] allows each channel.
const FIELDS: [(&str, &[Field]); 4] = [
    ("message", &[("subject", "Subject", 0), ("text", "Text", 5), ("html", "HTML (optional)", 3)]),
    ("push", &[("title", "Title", 0), ("body", "Body (optional)", 3), ("url", "URL a tap opens (optional)", 0)]),
    ("sms", &[("text", "Text", 4)]),
    ("slack", &[("text", "Text (mrkdwn)", 5), ("blocks", "Blocks (optional, a JSON array)", 5)]),
];

/// The shape of a channel's locale blocks: a key of [`FIELDS`].
pub(super) fn shape_of(channel: &str) -> &'static str {
    FIELDS.iter().map(|(shape, _)| *shape).find(|shape| *shape == channel).unwrap_or("message")
}

/// [`FIELDS`] as the page reads them: `{"push": [{"name", "label",
/// "rows"}, …], "message": […], …}`.
fn fields_by_shape() -> serde_json::Value {
    FIELDS
        .iter()
        .map(|(shape, fields)| {
            let fields: Vec<_> = fields
                .iter()
                .map(|(name, label, rows)| serde_json::json!({"name": name, "label": label, "rows": rows}))
                .collect();
            ((*shape).to_owned(), serde_json::Value::from(fields))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

impl LocaleForm {
    /// The form's block for a stored template's variant.
    pub(super) fn of((tag, t): (&String, &LocaleTemplate)) -> LocaleForm {
        LocaleForm {
            tag: tag.clone(),
            subject: t.subject.clone(),
            text: t.text.clone(),
            html: t.html.clone().unwrap_or_default(),
            title: t.title.clone().unwrap_or_default(),
            body: t.body.clone().unwrap_or_default(),
            url: t.url.clone().unwrap_or_default(),
            blocks: t.blocks.clone().unwrap_or_default(),
        }
    }

    /// Nothing typed in the block (its tag included).
    fn is_empty(&self) -> bool {
        self.tag.is_empty() && !self.has_content()
    }

    /// Something typed in any of the block's fields, its tag aside.
    pub(super) fn has_content(&self) -> bool {
        [&self.subject, &self.text, &self.html, &self.title, &self.body, &self.url, &self.blocks]
            .iter()
            .any(|f| !f.is_empty())
    }

    /// The block in `shape` ([`shape_of`]): after the channel was changed
    /// (the page then still posts the other shape's fields), the body
    /// carries over (text to body and back) and so does the one-line field
    /// between email and push, so what was typed is not lost; a field the
    /// new shape has no place for is dropped, so the template holds one
    /// shape only, as [`TemplateSet::check_shape`] asks.
    fn in_shape(mut self, shape: &str) -> LocaleForm {
        if shape == "push" {
            if self.title.is_empty() && self.body.is_empty() {
                self.title = std::mem::take(&mut self.subject);
                self.body = std::mem::take(&mut self.text);
            }
        } else if self.subject.is_empty() && self.text.is_empty() {
            self.subject = std::mem::take(&mut self.title);
            self.text = std::mem::take(&mut self.body);
        }
        let keep = FIELDS.iter().find(|(s, _)| *s == shape).map_or(&[][..], |(_, f)| f);
        let kept = |name: &str| keep.iter().any(|(n, _, _)| *n == name);
        for (name, field) in [
            ("subject", &mut self.subject),
            ("text", &mut self.text),
            ("html", &mut self.html),
            ("title", &mut self.title),
            ("body", &mut self.body),
            ("url", &mut self.url),
            ("blocks", &mut self.blocks),
        ] {
            if !kept(name) {
                field.clear();
            }
        }
        self
    }

    /// The stored variant: an optional field left empty is none (`html`,
    /// `body`, `url`, `blocks`), except a push block's `title`, which a
    /// push rule requires and whose absence its check names. A block is in
    /// one shape ([`in_shape`](Self::in_shape)), so the others' fields are
    /// empty here and stay out.
    fn template(&self, shape: &str) -> LocaleTemplate {
        let some = |s: &str| Some(s.to_owned()).filter(|s| !s.trim().is_empty());
        LocaleTemplate {
            subject: self.subject.clone(),
            text: self.text.clone(),
            html: some(&self.html),
            title: if shape == "push" { Some(self.title.clone()) } else { None },
            body: some(&self.body),
            url: some(&self.url),
            blocks: some(&self.blocks),
        }
    }
}

/// The locale blocks `{prefix}{N}_tag` etc. of a posted form, in `shape`
/// ([`shape_of`]), the empty ones dropped and one empty block added (where
/// a locale is added).
pub(super) fn locale_blocks(f: &HashMap<String, String>, prefix: &str, shape: &str) -> Vec<LocaleForm> {
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let mut locales = Vec::new();
    for i in 0..50 {
        let key = |part: &str| format!("{prefix}{i}_{part}");
        if !f.contains_key(&key("tag")) {
            break;
        }
        let block = LocaleForm {
            tag: get(&key("tag")).trim().to_owned(),
            subject: get(&key("subject")),
            text: get(&key("text")),
            html: get(&key("html")),
            title: get(&key("title")),
            body: get(&key("body")),
            url: get(&key("url")),
            blocks: get(&key("blocks")),
        };
        locales.push(block.in_shape(shape));
    }
    locales.retain(|l| !l.is_empty());
    locales.push(LocaleForm::default());
    locales
}

/// The template's locales from the form's blocks, in `shape`; a block
/// without a tag is an error on `field`.
pub(super) fn locale_map(
    blocks: &[LocaleForm],
    field: &str,
    shape: &str,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<String, LocaleTemplate> {
    let mut locales = BTreeMap::new();
    for l in blocks.iter().filter(|l| !l.is_empty()) {
        if l.tag.is_empty() {
            errors.push(FieldError::new(field, "every variant needs a locale tag such as en or de"));
            continue;
        }
        locales.insert(l.tag.clone(), l.template(shape));
    }
    locales
}

/// The editor's fields, as typed (numbers stay text until saved, so a typo
/// is shown back as it was typed).
#[derive(Debug, Clone, Default, Serialize)]
struct RuleForm {
    name: String,
    trigger_type: String,
    condition: String,
    channel: String,
    delay: String,
    grace: String,
    category: String,
    webhook_url: String,
    fallback_locale: String,
    locales: Vec<LocaleForm>,
    /// A push rule's `push.ttl` and `push.urgency` (empty: the default).
    push_ttl: String,
    push_urgency: String,
    /// The workflow fields, as typed (see [`WorkflowForm`]).
    wf: WorkflowForm,
    sample_user: String,
    sample_payload: String,
    /// Where the sample came from, or why there is none (shown under it).
    sample_note: String,
}

impl RuleForm {
    fn from_input(input: &RuleInput) -> RuleForm {
        let mut locales: Vec<LocaleForm> = input.template.locales.iter().map(LocaleForm::of).collect();
        locales.push(LocaleForm::default());
        RuleForm {
            name: input.name.clone(),
            trigger_type: input.trigger_type.clone(),
            condition: input.condition.clone().unwrap_or_default(),
            channel: input.channel.clone(),
            delay: input.delay.to_string(),
            grace: input.grace.map(|g| g.to_string()).unwrap_or_default(),
            category: input.category.clone(),
            webhook_url: input.webhook_url.clone().unwrap_or_default(),
            fallback_locale: input.template.fallback_locale.clone(),
            locales,
            push_ttl: input.push.and_then(|p| p.ttl).map(|t| t.to_string()).unwrap_or_default(),
            push_urgency: input.push.and_then(|p| p.urgency).map(|u| u.as_str().to_owned()).unwrap_or_default(),
            wf: WorkflowForm::from_input(input),
            sample_user: String::new(),
            sample_payload: String::new(),
            sample_note: String::new(),
        }
    }

    /// Reads the posted fields; locale blocks are `loc{N}_tag` etc.
    fn from_fields(f: &HashMap<String, String>) -> RuleForm {
        let get = |k: &str| f.get(k).cloned().unwrap_or_default();
        let channel = get("channel");
        let locales = locale_blocks(f, "loc", shape_of(&channel));
        RuleForm {
            name: get("name"),
            trigger_type: get("trigger_type").trim().to_owned(),
            condition: get("condition"),
            channel,
            delay: get("delay"),
            grace: get("grace"),
            category: get("category").trim().to_owned(),
            webhook_url: get("webhook_url").trim().to_owned(),
            fallback_locale: get("fallback_locale").trim().to_owned(),
            locales,
            push_ttl: get("push_ttl").trim().to_owned(),
            push_urgency: get("push_urgency").trim().to_owned(),
            wf: WorkflowForm::from_fields(f),
            sample_user: get("sample_user").trim().to_owned(),
            sample_payload: get("sample_payload"),
            sample_note: String::new(),
        }
    }

    /// The rule this form describes, or every field it could not even parse.
    fn to_input(&self) -> Result<RuleInput, Vec<FieldError>> {
        let mut errors = Vec::new();
        let seconds = |field: &str, v: &str, errors: &mut Vec<FieldError>| -> Option<i64> {
            let v = v.trim();
            if v.is_empty() {
                return None;
            }
            v.parse::<i64>()
                .map_err(|_| errors.push(FieldError::new(field, format!("{v:?} is not a whole number of seconds"))))
                .ok()
        };
        let delay = seconds("delay", &self.delay, &mut errors).unwrap_or(0);
        let grace = seconds("grace", &self.grace, &mut errors);
        let push = self.channel == "push";
        let locales = locale_map(&self.locales, "template.locales", shape_of(&self.channel), &mut errors);
        let opt = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let template = TemplateSet { fallback_locale: self.fallback_locale.clone(), locales };
        let (name, category) = (self.name.trim().to_owned(), self.category.clone());
        let mut input = RuleInput {
            condition: opt(&self.condition),
            delay,
            grace,
            webhook_url: opt(&self.webhook_url),
            push: if push { self.push_options(&mut errors) } else { None },
            ..RuleInput::new(name, self.trigger_type.clone(), self.channel.clone(), template, category)
        };
        self.wf.apply(&mut input, &mut errors);
        if errors.is_empty() { Ok(input) } else { Err(errors) }
    }

    /// The push rule's options as typed: none when both fields are empty
    /// (the defaults), so a rule saved from the screen stores what the
    /// operator sees. The page shows them only for a push rule, and they are
    /// read only for one: a rule switched to another channel drops them, as
    /// the API would refuse them there.
    fn push_options(&self, errors: &mut Vec<FieldError>) -> Option<PushOptions> {
        let ttl = match self.push_ttl.as_str() {
            "" => None,
            t => t
                .parse::<u64>()
                .map_err(|_| {
                    errors.push(FieldError::new("push.ttl", format!("{t:?} is not a whole number of seconds")))
                })
                .ok(),
        };
        let urgency = match self.push_urgency.as_str() {
            "" => None,
            u => serde_json::from_value::<Urgency>(serde_json::json!(u))
                .map_err(|_| {
                    errors.push(FieldError::new(
                        "push.urgency",
                        format!("{u:?} is not an urgency; use very-low, low, normal or high"),
                    ))
                })
                .ok(),
        };
        (ttl.is_some() || urgency.is_some()).then_some(PushOptions { ttl, urgency })
    }
}

async fn editor(
    state: &AppState,
    op: &Operator,
    id: Option<&str>,
    form: RuleForm,
    mut errors: Vec<FieldError>,
    status: StatusCode,
) -> Result<Response, UiError> {
    let form = with_sample(state, form).await?;
    let mut sample_errors = Vec::new();
    let mut dry = None;
    let preview = match form.to_input() {
        Ok(input) => {
            let (p, found) = preview(state, &form, &input).await?;
            let valid = found.blocking.is_empty() && errors.is_empty();
            for e in found.blocking {
                if !errors.contains(&e) {
                    errors.push(e);
                }
            }
            sample_errors = found.sample;
            // The rule as typed, against recent triggers: what its send
            // window, digest and cap would do (nothing is saved or planned).
            if valid
                && !input.workflow().is_empty()
                && let Ok(mut row) = input.clone().into_row(state.clock.now(), &state.webhooks)
            {
                if let Some(id) = id {
                    row.id = id.to_owned();
                }
                dry = Some(dry_run(state, &row, None, 20).await?);
            }
            Some(p)
        }
        Err(form_errors) => {
            errors.extend(form_errors);
            None
        }
    };
    let field_errors: HashMap<String, Vec<String>> =
        errors.iter().chain(&sample_errors).fold(HashMap::new(), |mut m, e| {
            // A chain's first step is the one the editor's fields edit.
            let field = match e.field.strip_prefix("escalate[0]") {
                Some(rest) => format!("escalate{rest}"),
                None => e.field.clone(),
            };
            m.entry(field).or_default().push(position(e));
            m
        });
    let title = match id {
        Some(_) => format!("Rule: {}", form.name),
        None => "New rule".to_owned(),
    };
    let rule = match id {
        Some(id) => Some(RuleView::new(&load(state, id).await?, &state.channels)),
        None => None,
    };
    Ok(Page::new(op, ACTIVE, "rule_edit.html", title)
        .status(status)
        .with(serde_json::json!({
            "id": id, "rule": rule, "form": form, "errors": errors.iter().map(|e| serde_json::json!({
                "field": e.field, "where": position(e),
            })).collect::<Vec<_>>(),
            "field_errors": field_errors, "preview": preview, "dry_run": dry,
            "weekdays": crate::planning::workflow::WEEKDAYS,
            "fields": fields_by_shape(), "payload_limit": MAX_PAYLOAD,
            "shape": shape_of(&form.channel), "esc_shape": shape_of(&form.wf.esc_channel),
            "channels": crate::delivery::channel::catalog::KNOWN,
            "urgencies": URGENCIES.map(Urgency::as_str),
        }))
        .into_response())
}

/// `line 2, column 6: message`, or the message alone. Template errors'
/// messages start with their field and position (the API's wording); the
/// page shows those in their own place, so they are not repeated.
fn position(e: &FieldError) -> String {
    let message = match e.message.strip_prefix(e.field.as_str()) {
        Some(rest) => rest.split_once(": ").map_or(rest, |(_, m)| m),
        None => e.message.as_str(),
    };
    match (e.line, e.column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}: {message}"),
        (Some(l), None) => format!("line {l}: {message}"),
        _ => message.to_owned(),
    }
}

/// What the preview refuses, checked again at save with the sample the page
/// showed (or the one [`with_sample`] fills in): the API's own checks
/// cover the rest, but not a push payload that this sample renders over
/// [`MAX_PAYLOAD`], since the API has no sample to render.
async fn refused_by_preview(
    state: &AppState,
    form: RuleForm,
    input: &RuleInput,
) -> Result<(RuleForm, Vec<FieldError>), UiError> {
    let form = with_sample(state, form).await?;
    let (_, found) = preview(state, &form, input).await?;
    Ok((form, found.blocking))
}

pub async fn new_form(Ui { state, op }: Ui) -> Result<Response, UiError> {
    let form = RuleForm {
        channel: "inbox".into(),
        delay: "0".into(),
        fallback_locale: "en".into(),
        locales: vec![LocaleForm { tag: "en".into(), ..Default::default() }, LocaleForm::default()],
        wf: WorkflowForm::blank(),
        ..Default::default()
    };
    editor(&state, &op, None, form, Vec::new(), StatusCode::OK).await
}

pub async fn edit_form(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let rule = load(&state, &id).await.map_err(not_found)?;
    let input = RuleInput::from_row(&rule)
        .map_err(|e| UiError::BadRequest(format!("this rule's stored template is unreadable: {e}")))?;
    editor(&state, &op, Some(&id), RuleForm::from_input(&input), Vec::new(), StatusCode::OK).await
}

fn not_found(e: ApiError) -> UiError {
    match e {
        ApiError::NotFound(m) => UiError::NotFound(m),
        other => UiError::Api(other),
    }
}

pub async fn create(Ui { state, op }: Ui, Form(fields): Form<HashMap<String, String>>) -> Result<Response, UiError> {
    let form = RuleForm::from_fields(&fields);
    if fields.get("action").map(String::as_str) != Some("save") {
        return editor(&state, &op, None, form, Vec::new(), StatusCode::OK).await;
    }
    let input = match form.to_input() {
        Ok(i) => i,
        Err(errors) => return editor(&state, &op, None, form, errors, StatusCode::UNPROCESSABLE_ENTITY).await,
    };
    let (form, refused) = refused_by_preview(&state, form, &input).await?;
    if !refused.is_empty() {
        return editor(&state, &op, None, form, refused, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    match create_rule(&state, input).await {
        Ok(row) => {
            audit(
                &state,
                &op,
                "rule.create",
                &row.id,
                Some(format!("\"{}\" on {}, created off", row.name, row.trigger_type)),
            )
            .await;
            Ok(redirect_with(
                &state,
                &format!("/ui/rules/{}", row.id),
                format!(
                    "Rule \"{}\" created. It is off: turn it on from the rules list when the preview looks right.",
                    row.name
                ),
            ))
        }
        Err(ApiError::Invalid(errors)) => {
            editor(&state, &op, None, form, errors, StatusCode::UNPROCESSABLE_ENTITY).await
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn save(
    Ui { state, op }: Ui,
    Path(id): Path<String>,
    Form(fields): Form<HashMap<String, String>>,
) -> Result<Response, UiError> {
    load(&state, &id).await.map_err(not_found)?;
    let form = RuleForm::from_fields(&fields);
    if fields.get("action").map(String::as_str) != Some("save") {
        return editor(&state, &op, Some(&id), form, Vec::new(), StatusCode::OK).await;
    }
    let input = match form.to_input() {
        Ok(i) => i,
        Err(errors) => return editor(&state, &op, Some(&id), form, errors, StatusCode::UNPROCESSABLE_ENTITY).await,
    };
    let (form, refused) = refused_by_preview(&state, form, &input).await?;
    if !refused.is_empty() {
        return editor(&state, &op, Some(&id), form, refused, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    // Everything but `enabled`: the switch is the only way to change that.
    let patch = RulePatch {
        name: Some(input.name),
        trigger_type: Some(input.trigger_type),
        condition: Some(input.condition),
        channel: Some(input.channel),
        template: Some(input.template),
        delay: Some(input.delay),
        grace: Some(input.grace),
        category: Some(input.category),
        enabled: None,
        webhook_url: Some(input.webhook_url),
        // The editor shows every workflow field: what it posts replaces
        // them, and a group left empty removes that field.
        send_window: Some(input.send_window),
        digest: Some(input.digest),
        throttle: Some(input.throttle),
        escalate: Some(input.escalate),
        display_name: Some(input.display_name),
        description: Some(input.description),
        push: Some(input.push),
        // The editor has no Slack conversation field: what is stored stays.
        slack: None,
    };
    match update_rule(&state, &id, patch).await {
        Ok(changed) => {
            audit(&state, &op, "rule.update", &id, Some(format!("saved \"{}\"", changed.rule.name))).await;
            Ok(redirect_with(&state, &format!("/ui/rules/{id}"), format!("Rule \"{}\" saved.", changed.rule.name)))
        }
        Err(ApiError::Invalid(errors)) => {
            editor(&state, &op, Some(&id), form, errors, StatusCode::UNPROCESSABLE_ENTITY).await
        }
        Err(e) => Err(not_found(e)),
    }
}

/// The dry run, with the button that turns the rule on.
pub async fn confirm_enable(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let rule = load(&state, &id).await.map_err(not_found)?;
    let preview = dry_run(&state, &rule, None, 50).await?;
    let workflow = preview.results.iter().any(|r| r.workflow != Default::default());
    Ok(Page::new(&op, ACTIVE, "rule_enable.html", format!("Turn on \"{}\"?", rule.name))
        .with(serde_json::json!({
            "rule": RuleView::new(&rule, &state.channels), "preview": preview, "workflow": workflow,
        }))
        .into_response())
}

/// What deleting would do, with the button that does it.
pub async fn confirm_delete(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let rule = load(&state, &id).await.map_err(not_found)?;
    let filter = crate::store::OutboxFilter {
        status: Some(crate::domain::OutboxStatus::Scheduled),
        rule_id: Some(id.clone()),
        limit: 10_001,
        ..Default::default()
    };
    let scheduled = state.store.list_outbox(&filter).await?.len();
    Ok(Page::new(&op, ACTIVE, "rule_delete.html", format!("Delete \"{}\"?", rule.name))
        .with(serde_json::json!({ "rule": RuleView::new(&rule, &state.channels), "scheduled": scheduled }))
        .into_response())
}

/// Deletes the rule and cancels what it still had scheduled ("rule
/// deleted"); the send log keeps everything it already sent.
pub async fn delete(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    let (rule, cancelled) = delete_rule(&state, &id).await.map_err(not_found)?;
    let detail = format!("\"{}\" deleted; {cancelled} scheduled message(s) cancelled", rule.name);
    audit(&state, &op, "rule.delete", &id, Some(detail)).await;
    Ok(redirect_with(
        &state,
        "/ui/rules",
        format!("Rule \"{}\" deleted; {cancelled} scheduled message(s) cancelled.", rule.name),
    ))
}

pub async fn enable(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    switch(state, op, id, true).await
}

pub async fn disable(Ui { state, op }: Ui, Path(id): Path<String>) -> Result<Response, UiError> {
    switch(state, op, id, false).await
}

async fn switch(state: AppState, op: Operator, id: String, on: bool) -> Result<Response, UiError> {
    let patch = RulePatch { enabled: Some(on), ..Default::default() };
    let changed = update_rule(&state, &id, patch).await.map_err(not_found)?;
    let name = &changed.rule.name;
    let (action, detail, flash) = if on {
        (
            "rule.enable",
            format!("\"{name}\" turned on"),
            format!("Rule \"{name}\" is on: it plans messages for new triggers."),
        )
    } else {
        (
            "rule.disable",
            format!("\"{name}\" turned off; {} scheduled message(s) cancelled", changed.cancelled),
            format!("Rule \"{name}\" is off; {} scheduled message(s) cancelled.", changed.cancelled),
        )
    };
    audit(&state, &op, action, &id, Some(detail)).await;
    Ok(redirect_with(&state, "/ui/rules", flash))
}
