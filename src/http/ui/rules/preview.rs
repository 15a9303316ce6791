//! The rule editor's preview: each locale rendered against the sample
//! payload (a push variant with its payload's size against the 4,096-byte
//! limit, an SMS variant with its encoding and segments), every field
//! checked as the API checks it, and what the workflow fields would do.
//! Split from `rules.rs`, which keeps the pages and the form.

use super::*;

/// One locale rendered against the sample, or its error. A push
/// variant's title and body are `subject` and `text`, as the renderer
/// returns them.
#[derive(Debug, Default, Serialize)]
pub(super) struct Rendered {
    locale: String,
    subject: Option<String>,
    text: Option<String>,
    html: Option<String>,
    /// A push variant's `url`, rendered.
    url: Option<String>,
    /// A push notification's payload in bytes, as it would be sent (see
    /// [`payload_bytes`]).
    payload_bytes: Option<usize>,
    /// For an SMS rule: "GSM-7, 1 segment (42 septets)".
    sms: Option<String>,
    error: Option<FieldError>,
    /// The error's position and message, as [`position`] words it.
    error_where: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub(super) struct Preview {
    condition: Option<String>,
    rendered: Vec<Rendered>,
}

/// What the editor shows about the form: problems that stop a save (the
/// template does not compile, a field is refused), and problems with the
/// sample only (its JSON, its user id), which say nothing about the rule.
#[derive(Debug, Default)]
pub(super) struct Findings {
    pub(super) blocking: Vec<FieldError>,
    pub(super) sample: Vec<FieldError>,
}

/// Renders every locale of the form's template against the sample payload
/// and user, with the same context the worker builds at delivery time.
/// Compile errors block a save and are reported with their line and column;
/// a render error (a field this sample lacks) is shown in the preview only:
/// the rule may be fine for the payloads it will really see.
pub(super) async fn preview(
    state: &AppState,
    form: &RuleForm,
    input: &RuleInput,
) -> Result<(Preview, Findings), UiError> {
    let mut found = Findings::default();
    if let Err(template_errors) = input.template.validate() {
        found.blocking.extend(template_errors.iter().map(FieldError::from));
    }
    // The fields the channel uses, as a save checks them (an email's empty
    // subject is found here, not by `validate`, which knows no channel).
    found.blocking.extend(input.template.check_shape(&input.channel).iter().map(FieldError::from));
    if let Some(c) = &input.condition
        && let Err(e) = Condition::compile(c)
    {
        found.blocking.push(FieldError::from(&e));
    }
    // The workflow fields as the API checks them, so a preview shows what
    // a save would refuse.
    crate::planning::workflow::validate(
        &input.workflow(),
        &input.channel,
        |name| crate::delivery::channel::catalog::check_known(name).map_err(|e| e.to_string()),
        &mut found.blocking,
    );
    let payload: serde_json::Value = match form.sample_payload.trim() {
        "" => serde_json::json!({}),
        p => match serde_json::from_str(p) {
            Ok(v) => v,
            Err(e) => {
                found.sample.push(FieldError {
                    field: "sample_payload".into(),
                    message: format!("not JSON: {e}"),
                    line: Some(e.line()),
                    column: Some(e.column()),
                });
                return Ok((Preview::default(), found));
            }
        },
    };
    let user_id = if form.sample_user.is_empty() { "preview-user" } else { &form.sample_user };
    let recipient = match UserId::parse("sample_user", user_id) {
        Ok(u) => state.store.get_recipient(&u).await?,
        Err(e) => {
            found.sample.push(e.into());
            None
        }
    };
    let now = state.clock.now();
    let ctx = serde_json::json!({
        "payload": payload,
        "trigger": { "id": "preview", "type": input.trigger_type, "occurred_at": now.to_rfc3339() },
        "user": crate::planning::planner::user_context(user_id, recipient.as_ref()),
    });
    let condition = input.condition.as_ref().map(|c| match Condition::compile(c).and_then(|c| c.eval(&ctx)) {
        Ok(true) => "true: this sample would plan a message".to_owned(),
        Ok(false) => "false: this sample would plan nothing".to_owned(),
        Err(e) => format!("could not be evaluated for this sample: {}", position(&FieldError::from(&e))),
    });
    // A digest rule's template renders with `digest` at delivery (and a
    // payload of `{}`: the triggers' payloads are its items), so the
    // preview gives it one, the sample as its only trigger. Without it
    // every digest rule showed "`digest` is undefined", an error its
    // deliveries never have.
    let mut render_ctx = ctx.clone();
    if input.digest.is_some() {
        let sample = crate::store::DigestItemRow {
            outbox_id: "preview".into(),
            trigger_id: "preview".into(),
            payload: ctx["payload"].clone(),
            occurred_at: now,
        };
        render_ctx["digest"] = crate::planning::digest::context(&[sample]);
        render_ctx["payload"] = serde_json::json!({});
    }
    let mut rendered = Vec::new();
    for tag in input.template.locales.keys() {
        rendered.push(match input.template.render(Some(tag), &render_ctx) {
            Ok(r) => {
                let payload_bytes = (input.channel == "push").then(|| payload_bytes(&r, &render_ctx["payload"]));
                let sms = (input.channel == "sms").then(|| crate::planning::rule::sms_measure(&r.text));
                if let Some(size) = payload_bytes.filter(|size| *size > MAX_PAYLOAD) {
                    found.blocking.push(FieldError::new(
                        format!("template.locales.{tag}"),
                        format!(
                            "with this sample the push payload is {size} bytes, over the {MAX_PAYLOAD}-byte limit \
                             every provider sets (the title, body and url, and the trigger's payload as data): \
                             every such message would fail; shorten the template, or send less in the payload"
                        ),
                    ));
                }
                Rendered {
                    locale: r.locale,
                    subject: Some(r.subject),
                    text: Some(r.text),
                    html: r.html,
                    url: r.url,
                    payload_bytes,
                    sms,
                    ..Default::default()
                }
            }
            Err(e) => {
                let fe = FieldError::from(&e);
                let error_where = Some(position(&fe));
                Rendered { locale: tag.clone(), error: Some(fe), error_where, ..Default::default() }
            }
        });
    }
    // A sample over `sms.max_segments` stops the save: the message it
    // stands for would cost more than the deployment allows.
    if input.channel == "sms" {
        found.blocking.extend(crate::planning::rule::sms_segment_problems(
            &input.template,
            &render_ctx,
            state.sms_max_segments,
            "with the sample",
        ));
    }
    Ok((Preview { condition, rendered }, found))
}

/// The size of the payload a push notification rendered as `r` carries:
/// the JSON the channel sends, with an outbox id (any new one has the same
/// length) and the trigger's payload as `data`. Over [`MAX_PAYLOAD`],
/// [`PushNotification::payload`] refuses it and the row fails without
/// anything sent, so the editor refuses to save a rule whose sample is over.
pub(super) fn payload_bytes(r: &crate::planning::template::Rendered, payload: &serde_json::Value) -> usize {
    let note = PushNotification::from_rendered(crate::store::new_id(), r, payload.clone(), Default::default(), None);
    serde_json::to_vec(&note).map_or(0, |json| json.len())
}

/// Fills in a sample from the newest trigger of the rule's type, so the
/// preview shows a real payload without the operator typing one. An empty
/// sample, or the `{}` a blank editor used to start with, counts as none:
/// otherwise the first preview after typing the trigger type rendered with
/// `{}` and failed on the first `payload.x`. Without a trigger of that type
/// yet, the note under the sample says so.
pub(super) async fn with_sample(state: &AppState, mut form: RuleForm) -> Result<RuleForm, UiError> {
    let typed = form.sample_payload.trim();
    if !(typed.is_empty() || typed == "{}") {
        return Ok(form);
    }
    let kind = form.trigger_type.trim().to_owned();
    if kind.is_empty() {
        form.sample_payload.clear();
        form.sample_note =
            "Give the trigger type and press Preview: the sample is filled from the newest trigger of that type."
                .into();
        return Ok(form);
    }
    match state.store.recent_triggers(&kind, 1).await?.into_iter().next() {
        Some(t) => {
            form.sample_payload = serde_json::to_string_pretty(&t.payload).unwrap_or_default();
            if form.sample_user.is_empty() {
                form.sample_user = t.user_id.clone();
            }
            form.sample_note =
                format!("Filled from the newest {kind} trigger ({}, for {}).", t.occurred_at.to_rfc3339(), t.user_id);
        }
        None => {
            form.sample_payload.clear();
            form.sample_note = format!(
                "No {kind} trigger has arrived yet, so there is no real payload to preview with: type a sample (JSON) \
                 shaped like the ones your application will send."
            );
        }
    }
    Ok(form)
}
