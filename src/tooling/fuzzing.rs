//! Entry points for the fuzz targets in `fuzz/` and for their replay in
//! `tests/fuzz_regressions.rs`.
//!
//! Each function takes the raw bytes a fuzzer produces and runs them through
//! the same parsing and validation the HTTP handlers and the worker run,
//! asserting invariants on the way. They live in the library, not in the fuzz
//! crate, so that every crash a fuzzer finds is replayed by an ordinary
//! `cargo test` through the same code path, without a sanitizer build.
//! Rejected: copying the handlers' checks into the fuzz crate, which would
//! fuzz a copy that drifts from what the server runs.
//!
//! Input formats are plain bytes with a few separators rather than
//! `arbitrary`-derived structures, so that the seed corpus and the kept
//! crashing inputs under `tests/data/fuzz/` can be read and edited by hand.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;

use crate::address::AddressKeys;
use crate::clock::Millis;
use crate::delivery::channel::webhook::WebhookPolicy;
use crate::domain::UserId;
use crate::feedback::bounce;
use crate::feedback::providers::{mailgun, postmark, sendgrid, ses};
use crate::planning::planner;
use crate::planning::recipient::{Preferences, RecipientInput, RecipientView};
use crate::planning::rule::{RuleInput, RulePatch, RuleView};
use crate::planning::template::{
    Condition, LocaleTemplate, MAX_OUTPUT_BYTES, MAX_SUBJECT_CHARS, Rendered, TemplateError, TemplateSet,
};
use crate::store::{RecipientRow, RuleRow};

/// A fixed "now" (2026-12-02T10:00:00Z), so a run does not depend on the
/// wall clock and a kept input replays the same way next year.
const NOW: Millis = Millis(1_796_205_600_000);

/// The separator between the parts of a structured input.
const SEP: u8 = 0;

/// Splits `data` at NUL bytes into at most `n` parts (the last takes the rest).
fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |b| *b == SEP).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------
// bounce_parse
// ---------------------------------------------------------------------------

/// `POST /v1/bounces/mail` and `herald bounce import`: the parser and the
/// VERP lookup, on arbitrary bytes.
pub fn bounce_parse(data: &[u8]) {
    let _ = crate::feedback::ingest::verp_outbox_id(data);
    if let Ok(report) = bounce::parse(data) {
        // Cheap invariants that hold for every report.
        for r in &report.recipients {
            check_status(r.status.as_deref());
            assert!(r.reason.chars().count() <= bounce::MAX_REASON_CHARS);
            assert_eq!(r.recipient, r.recipient.to_lowercase());
        }
    }
}

/// A bounce's status is an RFC 3463 code (`5.1.1`) or nothing: it is stored
/// in a `VARCHAR(16)` column and compared with codes.
fn check_status(status: Option<&str>) {
    let Some(s) = status else { return };
    let p: Vec<&str> = s.split('.').collect();
    assert!(
        s.len() <= 16
            && p.len() == 3
            && p.iter().all(|x| !x.is_empty() && x.len() <= 3 && x.bytes().all(|b| b.is_ascii_digit())),
        "not an enhanced status code: {s:?}"
    );
}

// ---------------------------------------------------------------------------
// template_render
// ---------------------------------------------------------------------------

/// What a template sees when the fuzzer gives no valid JSON context.
fn default_context() -> serde_json::Value {
    serde_json::json!({
        "payload": {"name": "q4", "rows": 3, "items": [{"name": "Tea", "qty": 2}], "amount": 150, "s": "x"},
        "trigger": {"id": "t-1", "type": "export.ready", "occurred_at": "2026-12-02T10:00:00.000Z"},
        "user": {"id": "u-1", "email": "ann@example.com", "name": "Ann", "locale": "de-AT", "timezone": null},
    })
}

/// Template compile + render and rule conditions, on operator-authored source.
///
/// Input: `subject \0 text \0 html \0 context-json \0 condition \0 locale`.
/// Missing parts fall back: a lone part is used as subject, text, html and
/// condition at once (so unstructured mutations reach every engine entry),
/// an empty html means none, a context that is not JSON means the default
/// context, a missing locale means the recipient has none.
///
/// A hang is caught by the fuzzer's `-timeout` and by the replay test's
/// deadline; the fuel budget in [`crate::planning::template`] is what must prevent it.
pub fn template_render(data: &[u8]) {
    let p = parts(data, 6);
    let source = |i: usize| p.get(i).map(|b| text(b)).unwrap_or_else(|| text(p[0]));
    let subject = source(0);
    let body = source(1);
    let html = source(2);
    let ctx = p
        .get(3)
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .map(|payload| {
            let mut ctx = default_context();
            ctx["payload"] = payload;
            ctx
        })
        .unwrap_or_else(default_context);
    let condition = source(4);
    let locale = p.get(5).map(|b| text(b));

    let set = TemplateSet {
        fallback_locale: "en".into(),
        locales: BTreeMap::from([
            (
                "en".to_owned(),
                LocaleTemplate {
                    subject,
                    text: body,
                    html: (!html.is_empty()).then_some(html.clone()),
                    ..Default::default()
                },
            ),
            // A second variant with the html as its text, so locale picking
            // and a partly broken set are exercised too.
            (
                "de".to_owned(),
                LocaleTemplate {
                    subject: "s".into(),
                    text: if html.is_empty() { "t".into() } else { html },
                    html: None,
                    ..Default::default()
                },
            ),
        ]),
    };
    let validated = set.validate();
    let compiled = set.compile();
    assert_eq!(validated.is_ok(), compiled.is_ok(), "validate and compile disagree");
    for e in validated.err().into_iter().flatten() {
        check_error(&e);
    }
    let rendered = set.render(locale.as_deref(), &ctx);
    if let Ok(c) = &compiled {
        let direct = c.render(locale.as_deref(), &ctx);
        assert_eq!(direct.is_ok(), rendered.is_ok(), "cached and direct render disagree");
    }
    match &rendered {
        Ok(r) => check_rendered(r),
        Err(e) => check_error(e),
    }

    match Condition::compile(&condition) {
        Ok(c) => match c.eval(&ctx) {
            Ok(_) => {}
            Err(e) => check_error(&e),
        },
        Err(e) => check_error(&e),
    }
}

fn check_rendered(r: &Rendered) {
    assert!(!r.subject.contains(['\n', '\r']), "a rendered subject holds a line break: {:?}", r.subject);
    assert!(r.subject.chars().count() <= MAX_SUBJECT_CHARS);
    let total = r.subject.len() + r.text.len() + r.html.as_ref().map_or(0, String::len);
    assert!(total <= MAX_OUTPUT_BYTES, "rendered {total} bytes");
}

/// Every error names a field and says something: the rule API puts these in
/// a 422 an operator has to act on.
fn check_error(e: &TemplateError) {
    assert!(!e.field().is_empty(), "an error without a field: {e:?}");
    assert!(!e.message().is_empty(), "an error without a message: {e:?}");
    assert!(serde_json::to_value(e).is_ok());
}

// ---------------------------------------------------------------------------
// json_body
// ---------------------------------------------------------------------------

/// The request bodies the HTTP API parses, selected by the first byte (`'0'`
/// to `'9'` in the seed corpus; every other byte maps onto one of them too).
const BODY_KINDS: [fn(&[u8]); 10] = [
    trigger_body,     // 0: POST /v1/triggers
    rule_body,        // 1: POST /v1/rules
    rule_patch_body,  // 2: PATCH /v1/rules/{id}
    user_body,        // 3: PUT /v1/users/{user_id}
    suppression_body, // 4: POST /v1/suppressions
    sendgrid_body,    // 5: POST /v1/bounces/sendgrid
    mailgun_body,     // 6: POST /v1/bounces/mailgun
    postmark_body,    // 7: POST /v1/bounces/postmark
    ses_body,         // 8: POST /v1/bounces/ses
    token_body,       // 9: /u/{token} and the inbox API's user tokens
];

/// Every JSON body the API accepts (and the two signed tokens it reads from
/// paths and headers): deserialised as axum would, then validated as the
/// handler does. Input: one selector byte, then the body; the provider
/// webhooks take `header lines \0 body`.
pub fn json_body(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else { return };
    let kind = usize::from(selector.wrapping_sub(b'0')) % BODY_KINDS.len();
    BODY_KINDS[kind](body);
}

/// A string a handler stores as given must fit its column on every backend:
/// no U+0000 (PostgreSQL `text` refuses it) and at most `max_chars`
/// characters (the tightest of the three schemas: MariaDB's `VARCHAR(n)`,
/// or 65,535 bytes for its `TEXT`). Either failure is a 500 on one backend
/// for a request another accepts.
fn check_column(field: &str, value: &str, max_chars: usize) {
    assert!(!value.contains('\0'), "{field} would be stored with a NUL: {value:?}");
    assert!(value.chars().count() <= max_chars, "{field} is longer than its column ({max_chars})");
    if max_chars == TEXT {
        assert!(value.len() <= TEXT, "{field} is longer than a MariaDB TEXT column");
    }
}

/// MariaDB's `TEXT`: 65,535 bytes.
const TEXT: usize = 65_535;

/// The handlers' `Json` extractor is serde_json over the whole body.
fn from_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Option<T> {
    serde_json::from_slice(body).ok()
}

fn trigger_body(body: &[u8]) {
    let Some(input) = from_body::<crate::http::triggers::TriggerInput>(body) else { return };
    use crate::http::triggers::Validated;
    let Ok(validated) = crate::http::triggers::validate(&input, NOW) else { return };
    // The same request again hashes the same: that is what tells an
    // idempotent replay from a reused key.
    let again = crate::http::triggers::validate(&input, NOW).expect("validation is deterministic");
    assert_eq!(validated.request_hash(), again.request_hash());
    let trigger = match validated {
        Validated::One(trigger) => trigger,
        Validated::Many(many) => {
            assert!(many.payload.is_object());
            check_column("type", &many.trigger_type, 128);
            if let crate::store::Audience::Users(ids) = &many.audience {
                assert!((1..=crate::http::triggers::MAX_USER_IDS).contains(&ids.len()));
                ids.iter().for_each(|id| check_column("user_ids[]", id.as_str(), 255));
            }
            return;
        }
    };
    assert!(trigger.payload.is_object());
    check_column("type", &trigger.trigger_type, 128);
    check_column("user_id", trigger.user_id.as_str(), 255);
    if let Some(k) = &trigger.idempotency_key {
        check_column("idempotency_key", k, 255);
    }
    // Every accepted payload can be planned against a rule with a condition
    // and rendered by a template that reads it.
    let row = trigger.unplanned_row(NOW);
    let plan = planner::evaluate(&row, std::slice::from_ref(&SAMPLE_RULE), None, chrono_tz::Tz::UTC);
    assert_eq!(plan.decisions.len(), 1);
    let _ = plan.detail(&row.trigger_type);
    let ctx = planner::context(&row, None);
    let template: TemplateSet = serde_json::from_value(SAMPLE_RULE.template.clone()).expect("the sample template");
    let _ = template.render(None, &ctx);
}

/// A valid, enabled inbox rule with a condition, as a stored row.
static SAMPLE_RULE: LazyLock<RuleRow> = LazyLock::new(|| {
    let input: RuleInput = serde_json::from_value(serde_json::json!({
        "name": "Export ready",
        "trigger_type": "export.ready",
        "condition": "payload.rows is defined and payload.rows > 0",
        "channel": "inbox",
        "template": {"fallback_locale": "en", "locales": {"en": {
            "subject": "Export {{ payload.name | default('?') }} is ready",
            "text": "{% for k, v in payload | items %}{{ k }}={{ v }}\n{% endfor %}",
            "html": "<p>{{ payload | tojson }}</p>",
        }}},
        "delay": 60,
        "grace": 3600,
        "category": "exports",
        "enabled": true,
    }))
    .expect("the sample rule parses");
    input.into_row(NOW, &WebhookPolicy::default()).expect("the sample rule is valid")
});

/// What `POST /v1/rules` and `PATCH` store must read back, or every later
/// `PATCH` of that rule and every delivery of it would fail.
fn check_stored_rule(row: &RuleRow) {
    check_column("name", &row.name, 255);
    check_column("trigger_type", &row.trigger_type, 128);
    check_column("channel", &row.channel, 64);
    check_column("category", &row.category, 64);
    if let Some(c) = &row.condition {
        check_column("condition", c, TEXT);
    }
    if let Some(u) = &row.webhook_url {
        check_column("webhook_url", u, TEXT);
    }
    let back = RuleInput::from_row(row).expect("a stored template reads back");
    crate::planning::rule::validate(&back, &WebhookPolicy::default()).expect("a stored rule still validates");
    assert!(serde_json::to_value(RuleView::from(row)).is_ok());
    let template: TemplateSet = serde_json::from_value(row.template.clone()).expect("a stored template reads back");
    let _ = template.render(Some("en"), &default_context());
    if let Some(c) = &row.condition {
        let _ = Condition::compile(c).expect("a stored condition compiles").eval(&default_context());
    }
}

fn rule_body(body: &[u8]) {
    let Some(input) = from_body::<RuleInput>(body) else { return };
    if let Ok(row) = input.into_row(NOW, &WebhookPolicy::default()) {
        check_stored_rule(&row);
    }
}

fn rule_patch_body(body: &[u8]) {
    let Some(patch) = from_body::<RulePatch>(body) else { return };
    let mut input = RuleInput::from_row(&SAMPLE_RULE).expect("the sample rule reads back");
    input.apply(patch);
    if let Ok(row) = input.into_row(NOW, &WebhookPolicy::default()) {
        check_stored_rule(&row);
    }
}

fn user_body(body: &[u8]) {
    let Some(input) = from_body::<RecipientInput>(body) else { return };
    let prefs = input.preferences.clone();
    let user = UserId::parse("user_id", "fuzz-user").expect("a valid user id");
    let Ok(row) = input.into_row(&user, NOW) else { return };
    check_recipient(&row, &prefs);
}

/// The stored preferences read back as given: `RecipientView` and the
/// worker's opt-out check both fall back to "no opt-outs" when they do not,
/// which would silently send what a user opted out of.
fn check_recipient(row: &RecipientRow, given: &Preferences) {
    for (field, value, max) in [("email", &row.email, 320), ("name", &row.name, 255), ("locale", &row.locale, 35)] {
        if let Some(v) = value {
            check_column(field, v, max);
        }
    }
    if let Some(tz) = &row.timezone {
        check_column("timezone", tz, 64);
    }
    let read: Preferences = serde_json::from_value(row.preferences.clone()).expect("stored preferences read back");
    assert_eq!(&read, given);
    assert_eq!(&RecipientView::from(row).preferences, given);
    let _ = planner::user_context(&row.user_id, Some(row));
}

fn suppression_body(body: &[u8]) {
    let Some(input) = from_body::<crate::http::suppressions::SuppressionInput>(body) else { return };
    let given = input.email.clone().or_else(|| input.phone.clone());
    let Ok(row) = crate::http::suppressions::validate(&KEYS, input, NOW) else { return };
    let given = given.expect("an address is required");
    assert_eq!(KEYS.hash_either(&given).ok().map(|(_, h)| h).as_deref(), Some(row.address_hash.as_str()));
    assert_eq!(row.address_hash.len(), 64);
    check_column("category", &row.category, 64);
    if let Some(d) = &row.detail {
        check_column("detail", d, TEXT);
    }
}

static KEYS: LazyLock<AddressKeys> = LazyLock::new(|| AddressKeys::from_secret(b"fuzzing-secret-not-a-real-one"));

/// `header lines \0 body`: the headers a provider sends beside the body.
fn headers_and_body(data: &[u8]) -> (Vec<String>, &[u8]) {
    match data.iter().position(|b| *b == SEP) {
        Some(i) => (text(&data[..i]).lines().map(str::to_owned).collect(), &data[i + 1..]),
        None => (Vec::new(), data),
    }
}

/// What any provider's events become must be something `ingest::record`
/// can file: a bounded reason, and an address hash when there is an address.
fn check_recipients(recipients: &[bounce::BounceRecipient]) {
    for r in recipients {
        check_status(r.status.as_deref());
        assert!(r.reason.chars().count() <= bounce::MAX_REASON_CHARS);
        if !r.recipient.is_empty() {
            let _ = KEYS.hash(&r.recipient);
        }
    }
}

/// The SendGrid key of the official SDK test vector.
const SENDGRID_TEST_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==";

fn sendgrid_body(data: &[u8]) {
    let (headers, body) = headers_and_body(data);
    let key = sendgrid::SendGridKey::parse(SENDGRID_TEST_KEY).expect("the test vector key");
    let header = |i: usize| headers.get(i).map(String::as_str);
    // The only messages signed with this key are the SDKs' test vector,
    // whose timestamp is years before `NOW`: nothing may verify.
    assert!(
        sendgrid::verify(&key, header(0), header(1), body, NOW, true).is_err(),
        "a SendGrid webhook verified that nobody signed recently"
    );
    if let Ok(recipients) = sendgrid::recipients(body) {
        check_recipients(&recipients);
    }
}

fn mailgun_body(body: &[u8]) {
    let Ok(payload) = mailgun::parse(body) else { return };
    let _ = mailgun::verify("test-webhook-signing-key-NOT-REAL", &payload.signature, NOW, true);
    check_recipients(&mailgun::recipients(&payload));
}

fn postmark_body(data: &[u8]) {
    let (headers, body) = headers_and_body(data);
    let header = headers.first().map(String::as_str);
    if postmark::verify(header, "herald", "fuzzing-password").is_ok() {
        let given = header.and_then(|h| h.strip_prefix("Basic ")).and_then(|b| base64_decode(b.trim()));
        assert_eq!(given.as_deref(), Some(&b"herald:fuzzing-password"[..]), "Postmark accepted other credentials");
    }
    if let Ok(recipients) = postmark::recipients(body) {
        check_recipients(&recipients);
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// The throwaway certificate the SES test envelopes are signed with.
static SES_KEY: LazyLock<rsa::RsaPublicKey> = LazyLock::new(|| {
    ses::key_from_pem(include_str!("../../tests/data/webhooks/ses/test-sns-signing-cert.pem")).expect("the test cert")
});

fn ses_body(body: &[u8]) {
    let Ok(envelope) = ses::parse(body) else { return };
    let _ = ses::trusted_cert_url(&envelope.signing_cert_url);
    let _ = ses::trusted_sns_url(envelope.subscribe_url.as_deref().unwrap_or(""));
    let _ = ses::string_to_sign(&envelope);
    let _ = ses::verify(&envelope, &SES_KEY);
    if let Ok(recipients) = ses::recipients(&envelope) {
        check_recipients(&recipients);
    }
}

/// The unsubscribe token in `/u/{token}` and the inbox API's bearer token:
/// neither may be accepted unless this deployment signed it.
fn token_body(body: &[u8]) {
    let token = text(body);
    if let Some(t) = KEYS.verify_unsubscribe(&token) {
        assert_eq!(KEYS.sign_unsubscribe(&t), token, "an unsubscribe token verified that was not signed here");
    }
    let user_tokens = crate::http::user_auth::TokenKey::new(b"fuzzing-secret-not-a-real-one");
    let _ = user_tokens.verify(&token, NOW);
}
