use super::*;
use serde_json::json;
use std::time::{Duration, Instant};

fn variant(subject: &str, text: &str, html: Option<&str>) -> LocaleTemplate {
    LocaleTemplate { subject: subject.into(), text: text.into(), html: html.map(Into::into), ..Default::default() }
}

fn set(fallback: &str, locales: &[(&str, LocaleTemplate)]) -> TemplateSet {
    TemplateSet {
        fallback_locale: fallback.into(),
        locales: locales.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
    }
}

fn ctx(payload: serde_json::Value) -> serde_json::Value {
    json!({
        "payload": payload,
        "user": {"id": "u1", "email": "a@example.com", "name": "Ada", "locale": "de-AT", "timezone": "Europe/Vienna"},
        "trigger": {"type": "order.paid", "occurred_at": "2024-05-01T12:00:00Z"},
    })
}

fn multi_locale() -> TemplateSet {
    set(
        "en",
        &[
            ("en", variant("Hello {{ user.name }}", "en text", None)),
            ("de", variant("Hallo {{ user.name }}", "de text", None)),
            ("pt-BR", variant("Olá {{ user.name }}", "pt text", None)),
            ("zh-Hant", variant("zh-Hant", "zh text", None)),
        ],
    )
}

#[test]
fn locale_exact_match_is_case_insensitive() {
    let s = multi_locale();
    let r = s.render(Some("de"), &ctx(json!({}))).unwrap();
    assert_eq!((r.locale.as_str(), r.subject.as_str()), ("de", "Hallo Ada"));
    let r = s.render(Some("PT-br"), &ctx(json!({}))).unwrap();
    assert_eq!(r.locale, "pt-BR");
    assert_eq!(r.text, "pt text");
}

#[test]
fn locale_falls_back_to_language_part() {
    let s = multi_locale();
    assert_eq!(s.render(Some("de-AT"), &ctx(json!({}))).unwrap().locale, "de");
    // POSIX spelling and three-part tags go through the same lookup.
    assert_eq!(s.render(Some("de_AT.UTF-8"), &ctx(json!({}))).unwrap().locale, "de");
    assert_eq!(s.render(Some("zh-Hant-TW"), &ctx(json!({}))).unwrap().locale, "zh-Hant");
}

#[test]
fn locale_falls_back_to_fallback_locale() {
    let s = multi_locale();
    let r = s.render(Some("fr-FR"), &ctx(json!({}))).unwrap();
    assert_eq!((r.locale.as_str(), r.text.as_str()), ("en", "en text"));
    // "pt" alone must not pick "pt-BR": lookup only ever drops subtags.
    assert_eq!(s.render(Some("pt"), &ctx(json!({}))).unwrap().locale, "en");
}

#[test]
fn locale_none_or_blank_uses_fallback_locale() {
    let s = multi_locale();
    assert_eq!(s.render(None, &ctx(json!({}))).unwrap().locale, "en");
    assert_eq!(s.render(Some("  "), &ctx(json!({}))).unwrap().locale, "en");
    let compiled = s.compile().unwrap();
    assert_eq!(compiled.resolve_locale(None).unwrap(), "en");
    assert_eq!(compiled.resolve_locale(Some("DE-ch")).unwrap(), "de");
}

#[test]
fn hostile_locale_strings_are_cheap() {
    let s = multi_locale();
    let long = "a-".repeat(500_000);
    let start = Instant::now();
    assert_eq!(s.render(Some(&long), &ctx(json!({}))).unwrap().locale, "en");
    assert!(start.elapsed() < Duration::from_secs(2));
    let tail = format!("de-AT-{}", "x".repeat(100));
    assert_eq!(s.render(Some(&tail), &ctx(json!({}))).unwrap().locale, "de");
    assert_eq!(s.render(Some("dé"), &ctx(json!({}))).unwrap().locale, "en");
}

#[test]
fn strict_undefined_is_a_render_error_with_field_and_line() {
    let s = set("en", &[("en", variant("Hi", "Hello\n  {{ payload.missing }}!", None))]);
    assert_eq!(s.validate(), Ok(()));
    let err = s.render(Some("en"), &ctx(json!({"name": "x"}))).unwrap_err();
    assert!(matches!(err, TemplateError::Render { .. }), "{err:?}");
    assert_eq!(err.field(), "template.locales.en.text");
    assert_eq!(err.line(), Some(2));
    assert_eq!(err.column(), Some(6));
    assert!(err.message().contains("`payload.missing` is undefined"), "{err}");
    assert!(err.message().contains("is defined"), "{err}");
    // Filters must not turn undefined into "" either.
    let s = set("en", &[("en", variant("{{ payload.missing | upper }}", "t", None))]);
    let err = s.render(None, &ctx(json!({}))).unwrap_err();
    assert_eq!(err.field(), "template.locales.en.subject");
    assert_eq!(err.line(), Some(1));
}

#[test]
fn syntax_error_has_field_line_and_column() {
    let s = set("en", &[("en", variant("Hi", "Hello\n{{ payload.name ", None))]);
    let errs = s.validate().unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    let err = &errs[0];
    assert!(matches!(err, TemplateError::Compile { .. }), "{err:?}");
    assert_eq!(err.field(), "template.locales.en.text");
    // minijinja points at the last token before the unexpected end: `name`.
    assert_eq!(err.line(), Some(2));
    assert_eq!(err.column(), Some(12));
    assert!(err.message().starts_with("syntax error"), "{err}");
    assert_eq!(err.to_string(), format!("template.locales.en.text:2:12: {}", err.message()));
    // Rendering the broken variant reports the same error.
    assert_eq!(&s.render(None, &ctx(json!({}))).unwrap_err(), err);
}

#[test]
fn column_counts_characters_not_bytes() {
    let s = set("en", &[("en", variant("äöü {{ x + }}", "t", None))]);
    let errs = s.validate().unwrap_err();
    assert_eq!(errs[0].line(), Some(1));
    assert_eq!(errs[0].column(), Some(12)); // the `}}` after `+`
}

#[test]
fn validate_reports_all_errors_across_locales() {
    let s = set(
        "en",
        &[
            ("en", variant("Hi", "ok", Some("<p>{% if %}</p>"))),
            ("de", variant("{{ x", "{% endfor %}", None)),
            ("fr", variant("  ", "Bonjour", Some(""))),
            ("bad tag!", variant("x", "y", None)),
            ("EN", variant("x", "y", None)),
        ],
    );
    let errs = s.validate().unwrap_err();
    let got: Vec<(&str, &str)> = errs
        .iter()
        .map(|e| {
            let kind = match e {
                TemplateError::Compile { .. } => "compile",
                TemplateError::Render { .. } => "render",
                TemplateError::Invalid { .. } => "invalid",
            };
            (e.field(), kind)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("template.locales.bad tag!", "invalid"),
            ("template.locales.de.subject", "compile"),
            ("template.locales.de.text", "compile"),
            ("template.locales.en", "invalid"), // duplicates "EN" (sorted first)
            ("template.locales.en.html", "compile"),
            ("template.locales.fr.subject", "invalid"),
            ("template.locales.fr.html", "invalid"),
        ],
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .filter(|e| matches!(e, TemplateError::Compile { .. }))
            .all(|e| e.line() == Some(1) && e.column().is_some())
    );
    // A broken locale does not stop delivery in the healthy ones.
    assert_eq!(s.render(Some("fr"), &ctx(json!({}))).unwrap().text, "Bonjour");
    assert!(matches!(s.render(Some("de"), &ctx(json!({}))).unwrap_err(), TemplateError::Compile { .. }));
}

#[test]
fn fallback_locale_must_be_a_locale() {
    let s = set("fr", &[("en", variant("Hi", "t", None))]);
    let errs = s.validate().unwrap_err();
    assert_eq!(errs.len(), 1);
    assert!(matches!(&errs[0], TemplateError::Invalid { field, .. } if field == "template.fallback_locale"));
    assert_eq!(errs[0].line(), None);
    // Matching is case-insensitive here too.
    assert_eq!(set("EN", &[("en", variant("Hi", "t", None))]).validate(), Ok(()));
    // Render still works for a direct match but not when it needs the fallback.
    assert_eq!(s.render(Some("en-GB"), &ctx(json!({}))).unwrap().locale, "en");
    let err = s.render(Some("de"), &ctx(json!({}))).unwrap_err();
    assert_eq!(err.field(), "template.fallback_locale");
}

#[test]
fn no_locales_is_invalid() {
    let s = set("en", &[]);
    let errs = s.validate().unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field(), "template.locales");
    assert_eq!(s.render(None, &ctx(json!({}))).unwrap_err().field(), "template.locales");
}

#[test]
fn locale_tags_are_validated() {
    for good in ["en", "pt-BR", "es-419", "zh-Hant-TW", &"a".repeat(35)] {
        assert_eq!(check_locale_tag(good), Ok(()), "{good}");
    }
    for bad in ["", "de_AT", "en ", "-en", "en-", "en--us", "ü", &"a".repeat(36)] {
        assert!(check_locale_tag(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn html_is_escaped_subject_and_text_are_not() {
    let s = set(
        "en",
        &[("en", variant("New: {{ payload.title }}", "Text: {{ payload.title }}", Some("<p>{{ payload.title }}</p>")))],
    );
    let r = s.render(None, &ctx(json!({"title": "<script>&"}))).unwrap();
    assert_eq!(r.subject, "New: <script>&");
    assert_eq!(r.text, "Text: <script>&");
    assert_eq!(r.html.as_deref(), Some("<p>&lt;script&gt;&amp;</p>"));
    let no_html = set("en", &[("en", variant("s", "t", None))]);
    assert_eq!(no_html.render(None, &ctx(json!({}))).unwrap().html, None);
}

#[test]
fn fuel_limit_stops_huge_loops_quickly() {
    let nested = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    let s = set("en", &[("en", variant("s", nested, None))]);
    assert_eq!(s.validate(), Ok(()));
    let start = Instant::now();
    let err = s.render(None, &ctx(json!({}))).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, TemplateError::Render { .. }), "{err:?}");
    assert_eq!(err.field(), "template.locales.en.text");
    assert!(err.message().contains("fuel"), "{err}");
    assert_eq!(err.line(), Some(1));
    assert!(took < Duration::from_secs(5), "took {took:?}");

    // A single giant range is refused by minijinja's own cap, also clearly.
    let s = set("en", &[("en", variant("s", "{% for i in range(10**9) %}x{% endfor %}", None))]);
    let err = s.render(None, &ctx(json!({}))).unwrap_err();
    assert!(err.message().contains("range has too many elements"), "{err}");
    // A huge string is refused before it is allocated.
    let s = set("en", &[("en", variant("s", "{{ 'x' * 10**12 }}", None))]);
    assert!(s.render(None, &ctx(json!({}))).unwrap_err().message().contains("fuel"));
}

#[test]
fn output_size_is_bounded() {
    let s = set("en", &[("en", variant("{{ 'x' * 1001 }}", "t", None))]);
    let err = s.render(None, &ctx(json!({}))).unwrap_err();
    assert_eq!(err.field(), "template.locales.en.subject");
    assert!(err.message().contains("limit is 1000"), "{err}");
    // 1000 characters (not bytes) is fine.
    let s = set("en", &[("en", variant("{{ 'ä' * 1000 }}", "t", None))]);
    assert_eq!(s.render(None, &ctx(json!({}))).unwrap().subject.chars().count(), 1000);

    let big = "{% for i in range(30) %}{{ 'y' * 20000 }}{% endfor %}"; // 600 kB
    let s = set("en", &[("en", variant("s", big, Some(big)))]);
    let err = s.render(None, &ctx(json!({}))).unwrap_err();
    assert_eq!(err.field(), "template.locales.en.html");
    assert!(err.message().contains("exceeds 1048576 bytes"), "{err}");
    let s = set("en", &[("en", variant("s", big, None))]);
    assert_eq!(s.render(None, &ctx(json!({}))).unwrap().text.len(), 600_000);
}

#[test]
fn subject_is_trimmed_and_line_breaks_are_refused() {
    let s = set("en", &[("en", variant("  Hi {{ payload.name }}\n", "t", None))]);
    assert_eq!(s.render(None, &ctx(json!({"name": "Bo"}))).unwrap().subject, "Hi Bo");
    for evil in ["a\nBcc: x@example.com", "a\rb"] {
        let err = s.render(None, &ctx(json!({"name": evil}))).unwrap_err();
        assert!(matches!(err, TemplateError::Render { .. }));
        assert_eq!(err.field(), "template.locales.en.subject");
        assert_eq!(err.message(), "subject contains a line break");
    }
}

#[test]
fn templates_cannot_reach_other_templates_or_files() {
    for src in ["{% include '/etc/passwd' %}", "{% extends 'x' %}", "{% import 'x' as y %}"] {
        let s = set("en", &[("en", variant("s", src, None))]);
        let errs = s.validate().unwrap_err();
        assert!(matches!(errs[0], TemplateError::Compile { .. }), "{src}: {errs:?}");
    }
}

#[test]
fn oversized_sources_are_invalid() {
    let huge = "x".repeat(MAX_SOURCE_BYTES + 1);
    let s = set("en", &[("en", variant("s", &huge, None))]);
    let errs = s.validate().unwrap_err();
    assert_eq!(errs[0].field(), "template.locales.en.text");
    assert!(s.render(None, &ctx(json!({}))).is_err());
}

#[test]
fn condition_true_and_false() {
    let c = Condition::compile(r#"payload.amount > 100 and user.locale == "de-AT""#).unwrap();
    assert_eq!(c.source(), r#"payload.amount > 100 and user.locale == "de-AT""#);
    assert_eq!(c.eval(&ctx(json!({"amount": 150}))), Ok(true));
    assert_eq!(c.eval(&ctx(json!({"amount": 50}))), Ok(false));
    // Truthiness, not just booleans.
    let c = Condition::compile("payload.tags").unwrap();
    assert_eq!(c.eval(&ctx(json!({"tags": []}))), Ok(false));
    assert_eq!(c.eval(&ctx(json!({"tags": ["vip"]}))), Ok(true));
    // The documented guard works for optional fields.
    let c = Condition::compile("payload.x is defined and payload.x > 1").unwrap();
    assert_eq!(c.eval(&ctx(json!({}))), Ok(false));
    assert_eq!(c.eval(&ctx(json!({"x": 2}))), Ok(true));
}

#[test]
fn condition_missing_attribute_is_an_error() {
    let c = Condition::compile("payload.amount > 100").unwrap();
    let err = c.eval(&ctx(json!({}))).unwrap_err();
    assert!(matches!(err, TemplateError::Render { .. }), "{err:?}");
    assert_eq!(err.field(), "condition");
    assert!(err.message().contains("`payload.amount` is undefined"), "{err}");
    assert!(err.message().contains("payload.x is defined and"), "{err}");
    assert_eq!((err.line(), err.column()), (Some(1), Some(1)));
    // A bare missing attribute is not silently false.
    let c = Condition::compile("payload.vip").unwrap();
    let err = c.eval(&ctx(json!({}))).unwrap_err();
    assert!(err.message().contains("is defined and"), "{err}");
    let c = Condition::compile("payload.amount > 1 and payload.flag").unwrap();
    assert!(c.eval(&ctx(json!({"amount": 5}))).is_err());
}

#[test]
fn condition_syntax_error_has_column() {
    let err = Condition::compile("payload.amount > 100 and )").unwrap_err();
    assert!(matches!(err, TemplateError::Compile { .. }), "{err:?}");
    assert_eq!(err.field(), "condition");
    assert_eq!((err.line(), err.column()), (Some(1), Some(26)));
    let err = Condition::compile("payload.a > 1\n  and (").unwrap_err();
    assert_eq!((err.line(), err.column()), (Some(2), Some(7)));
    assert!(matches!(Condition::compile(" "), Err(TemplateError::Invalid { .. })));
}

#[test]
fn condition_fuel_is_limited() {
    let c = Condition::compile("range(100000) | map('string') | join | length > 0").unwrap();
    let start = Instant::now();
    let _ = c.eval(&ctx(json!({})));
    assert!(start.elapsed() < Duration::from_secs(5));
    let c = Condition::compile("('x' * 10**12) | length > 0").unwrap();
    assert!(c.eval(&ctx(json!({}))).unwrap_err().message().contains("fuel"));
}

#[test]
fn nothing_panics_on_hostile_input() {
    let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000));
    let deep_ifs = format!("{}x{}", "{% if true %}".repeat(2000), "{% endif %}".repeat(2000));
    let deep_list = format!("{{{{ {}{} }}}}", "[".repeat(5000), "]".repeat(5000));
    let sources = [
        deep_parens.as_str(),
        deep_ifs.as_str(),
        deep_list.as_str(),
        "{{",
        "}}",
        "{%",
        "{% for %}",
        "{% set x = x %}{{ x }}",
        "{{ payload | tojson }}",
        "{{ debug() }}",
        "{{ 1 / 0 }}",
        "{{ 9223372036854775807 + 1 }}",
        "{{ -9223372036854775808 // -1 }}",
        "{{ 'a' * -1 }}",
        "{{ range(0, 10, 0) }}",
        "{{ payload.list[99999999999999999999] }}",
        "{{ '%s' % payload }}",
        "{% raw %}",
        "\u{0}\u{feff}\u{202e}",
        "{{ namespace() }}",
        "{% for x in payload.list recursive %}{{ loop(payload.list) }}{% endfor %}",
    ];
    let payload = json!({"list": [1, 2, 3], "s": "x"});
    for src in sources {
        let s = set("en", &[("en", variant(src, src, Some(src)))]);
        let _ = s.validate();
        let _ = s.render(None, &ctx(payload.clone()));
        let _ = Condition::compile(src).map(|c| c.eval(&ctx(payload.clone())));
    }
    // Context nesting is bounded too.
    let mut deep = json!(1);
    for _ in 0..(MAX_CONTEXT_DEPTH + 10) {
        deep = json!([deep]);
    }
    let s = set("en", &[("en", variant("s", "t", None))]);
    assert!(s.render(None, &deep).is_err());
}

#[test]
fn serde_shape_is_strict() {
    let s: TemplateSet = serde_json::from_value(json!({
        "fallback_locale": "en",
        "locales": {"en": {"subject": "s", "text": "t"}}
    }))
    .unwrap();
    assert_eq!(s.locales["en"].html, None);
    let bad = serde_json::from_value::<TemplateSet>(json!({
        "fallback_locale": "en",
        "locales": {"en": {"subject": "s", "text": "t", "bodyy": "x"}}
    }));
    assert!(bad.is_err());
    let err = TemplateError::Compile { field: "f".into(), line: Some(1), column: Some(2), message: "m".into() };
    assert_eq!(
        serde_json::to_value(&err).unwrap(),
        json!({"kind": "compile", "field": "f", "line": 1, "column": 2, "message": "m"})
    );
}

#[test]
fn shared_types_are_thread_safe() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Condition>();
    assert_send_sync::<CompiledTemplateSet>();
    assert_send_sync::<TemplateError>();
}

#[test]
fn render_10k_messages_timing() {
    let s = set(
        "en",
        &[
            (
                "en",
                variant(
                    "Your order {{ payload.order_id }} is paid",
                    "Hi {{ user.name }},\n{% for item in payload.items %}- {{ item.name }} x{{ item.qty }}\n{% endfor %}Total: {{ payload.total }}",
                    Some(
                        "<p>Hi {{ user.name }}</p><ul>{% for item in payload.items %}<li>{{ item.name }}</li>{% endfor %}</ul>",
                    ),
                ),
            ),
            ("de", variant("Bestellung {{ payload.order_id }}", "Hallo {{ user.name }}", None)),
        ],
    );
    let c = ctx(json!({
        "order_id": "A-1", "total": 42.5,
        "items": [{"name": "Tea", "qty": 2}, {"name": "Cup", "qty": 1}],
    }));
    let start = Instant::now();
    for _ in 0..10_000 {
        s.render(Some("en-US"), &c).unwrap();
    }
    let cached = start.elapsed();
    let compiled = s.compile().unwrap();
    let start = Instant::now();
    for _ in 0..10_000 {
        compiled.render(Some("en-US"), &c).unwrap();
    }
    let direct = start.elapsed();
    let cond = Condition::compile("payload.total > 10 and user.locale == 'de-AT'").unwrap();
    let start = Instant::now();
    for _ in 0..10_000 {
        assert_eq!(cond.eval(&c), Ok(true));
    }
    let conds = start.elapsed();
    println!(
        "10,000 renders: {cached:?} via TemplateSet::render (cache), {direct:?} via CompiledTemplateSet; 10,000 conditions: {conds:?}"
    );
}

fn push_set(title: &str, body: Option<&str>, url: Option<&str>) -> TemplateSet {
    let variant = LocaleTemplate {
        title: Some(title.into()),
        body: body.map(Into::into),
        url: url.map(Into::into),
        ..Default::default()
    };
    set("en", &[("en", variant)])
}

#[test]
fn a_push_variant_renders_title_body_and_a_checked_url() {
    let s = push_set("Export {{ payload.name }} ready", None, Some("https://app.example/e/{{ payload.id }}"));
    s.validate().unwrap();
    let r = s.render(None, &ctx(json!({"name": "Q3", "id": 7}))).unwrap();
    assert_eq!(r.subject, "Export Q3 ready");
    assert_eq!(r.text, "", "no body: none rendered");
    assert_eq!(r.url.as_deref(), Some("https://app.example/e/7"));

    let s = push_set("t", Some("b"), Some("{{ payload.to }}"));
    for bad in ["javascript:alert(1)", "/relative", "ftp://x.example/"] {
        let err = s.render(None, &ctx(json!({"to": bad}))).unwrap_err();
        assert_eq!(err.field(), "template.locales.en.url");
        assert!(err.message().contains("not an absolute http:// or https:// URL"), "{err}");
    }
    // The title is a line, like a subject.
    let err = push_set("{{ payload.t }}", None, None).render(None, &ctx(json!({"t": "a\nb"}))).unwrap_err();
    assert_eq!(err.field(), "template.locales.en.title");
}

#[test]
fn each_channel_refuses_the_other_shape_by_field() {
    let push = push_set("t", Some("b"), None);
    assert!(push.check_shape("push").is_empty());
    let wrong = push.check_shape("email");
    assert_eq!(wrong.len(), 1);
    assert_eq!(wrong[0].field(), "template.locales.en.title");
    assert!(wrong[0].message().contains("email messages have subject, text and html"), "{}", wrong[0]);

    let email = set("en", &[("en", variant("s", "t", Some("<p>h</p>")))]);
    assert!(email.check_shape("email").is_empty());
    let fields: Vec<String> = email.check_shape("push").iter().map(|e| e.field().to_owned()).collect();
    assert_eq!(
        fields,
        [
            "template.locales.en.title",
            "template.locales.en.subject",
            "template.locales.en.text",
            "template.locales.en.html"
        ]
    );
    // An empty body or url is refused like an empty html: leave it out.
    let errs = push_set("t", Some(" "), Some("")).validate().unwrap_err();
    let fields: Vec<&str> = errs.iter().map(TemplateError::field).collect();
    assert_eq!(fields, ["template.locales.en.body", "template.locales.en.url"]);
}

#[test]
fn sms_and_slack_locales_are_text_only_and_refuse_other_fields_by_name() {
    let sms = set("en", &[("en", variant("", "Code {{ payload.n }}", None))]);
    assert!(sms.validate().is_ok(), "{:?}", sms.validate());
    assert!(sms.check_shape("sms").is_empty());
    let r = sms.render(None, &ctx(json!({"n": 7}))).unwrap();
    assert_eq!((r.subject.as_str(), r.text.as_str(), r.blocks), ("", "Code 7", None));
    // A text-only variant on email still needs its subject, as before.
    let errs = sms.check_shape("email");
    assert_eq!(errs.iter().map(TemplateError::field).collect::<Vec<_>>(), ["template.locales.en.subject"]);
    assert_eq!(errs[0].message(), "subject must not be empty");

    let email = set("en", &[("en", variant("s", "t", Some("<p>h</p>")))]);
    let errs = email.check_shape("sms");
    let fields: Vec<&str> = errs.iter().map(TemplateError::field).collect();
    assert_eq!(fields, ["template.locales.en.subject", "template.locales.en.html"]);
    assert!(errs[0].message().contains("text messages have text only"), "{}", errs[0]);
    let errs = push_set("t", None, None).check_shape("slack");
    assert_eq!(errs.iter().map(TemplateError::field).collect::<Vec<_>>(), ["template.locales.en.title"]);
    assert!(errs[0].message().contains("Slack messages have text and blocks"), "{}", errs[0]);
    let missing = set("en", &[("en", LocaleTemplate { html: Some("<p>h</p>".into()), ..Default::default() })]);
    let fields: Vec<String> = missing.check_shape("sms").iter().map(|e| e.field().to_owned()).collect();
    assert_eq!(fields, ["template.locales.en.html"], "a foreign field is named, not the missing text");
}

fn slack_set(blocks: serde_json::Value) -> TemplateSet {
    let variant = LocaleTemplate {
        text: "Order {{ payload.id }}".into(),
        blocks: Some(blocks.to_string()),
        ..Default::default()
    };
    set("en", &[("en", variant)])
}

#[test]
fn slack_blocks_render_each_string_and_are_checked_at_save() {
    let s = slack_set(
        json!([{"type": "section", "text": {"type": "mrkdwn", "text": "*{{ payload.id }}* by {{ payload.who }}"}}]),
    );
    assert!(s.validate().is_ok() && s.check_shape("slack").is_empty());
    // A quote in a value stays inside its JSON string.
    let r = s.render(None, &ctx(json!({"id": 42, "who": "A \"B\""}))).unwrap();
    assert_eq!(r.blocks, Some(json!([{"type": "section", "text": {"type": "mrkdwn", "text": "*42* by A \"B\""}}])));
    // Given as JSON, written back as JSON (not as a string).
    let back = serde_json::to_value(&s).unwrap();
    assert!(back["locales"]["en"]["blocks"].is_array(), "{back}");
    let parsed: TemplateSet = serde_json::from_value(back).unwrap();
    assert_eq!(parsed, s);

    let too_many = slack_set(json!((0..51).map(|_| json!({"type": "divider"})).collect::<Vec<_>>()));
    let errs = too_many.check_shape("slack");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field(), "template.locales.en.blocks");
    assert!(errs[0].message().contains("51 blocks"), "{}", errs[0]);
    let untyped = slack_set(json!([{"text": "x"}]));
    assert!(untyped.check_shape("slack")[0].message().contains("block 0"), "{:?}", untyped.check_shape("slack"));
    assert!(slack_set(json!({"type": "section"})).check_shape("slack")[0].message().contains("JSON array"));
    // A template error in a block's string names the field it is in.
    let broken = slack_set(json!([{"type": "section", "text": {"type": "mrkdwn", "text": "{{ payload.id "}}]));
    let errs = broken.validate().unwrap_err();
    assert_eq!(errs[0].field(), "template.locales.en.blocks.0");
    // Blocks are Slack's: other channels refuse them.
    assert_eq!(slack_set(json!([])).check_shape("sms")[0].field(), "template.locales.en.blocks");
}
