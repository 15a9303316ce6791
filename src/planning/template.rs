//! Message templates and rule conditions for engagement rules.
//!
//! Operators author these templates through the API, so every source here is
//! treated as untrusted: it is compiled by a locked-down minijinja environment
//! that has no loader (and no `include`/`extends`/`import`, because the
//! `multi_template` feature is off), strict undefined handling, a fuel budget
//! per render and hard caps on source and output sizes. All engine calls are
//! additionally wrapped in `catch_unwind`, so an engine bug surfaces as a
//! [`TemplateError::Render`] for one message instead of taking a delivery
//! worker down.
//!
//! Errors are reported per *field* (e.g. `template.locales.de.subject`) with
//! 1-based line/column, because the rule API answers a save with a 422 that
//! must point the operator at the exact spot in the exact template.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use minijinja::{Environment, Value};
use serde::{Deserialize, Serialize};

mod condition;
mod engine;
pub use condition::Condition;
use engine::*;

/// Work budget for one render of one template (or one condition evaluation).
///
/// One unit is roughly one VM instruction or 64 bytes of data created, so this
/// allows loops over several thousand payload items while stopping a runaway
/// template within a few milliseconds. minijinja's own `range()` cap (100,000
/// items) alone is not enough: two nested loops already make 10^10 iterations.
pub const FUEL_PER_RENDER: u64 = 200_000;

/// Longest subject after rendering and trimming, in characters. Subjects become
/// an email header and a push title; longer ones are truncated by every client.
pub const MAX_SUBJECT_CHARS: usize = 1_000;

/// Cap on subject + text + html of one rendered message, in bytes. Enforced while
/// rendering (the output writer refuses to grow past it), not after the fact, so
/// a hostile template never allocates more than this for output.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// Cap on one template source (subject, text or html). Generous for inlined-CSS
/// HTML mails, but keeps compile time and the compiled-template cache bounded.
pub const MAX_SOURCE_BYTES: usize = 256 * 1024;

/// Cap on a condition's source; conditions are one-line expressions.
pub const MAX_CONDITION_BYTES: usize = 16 * 1024;

/// Longest accepted locale tag: RFC 5646 asks implementations to support at
/// least 35 characters, and anything longer is a typo or abuse.
pub const MAX_LOCALE_TAG_LEN: usize = 35;

/// Nesting cap when converting the JSON context into engine values; the
/// conversion recurses, and serde_json's own parser stops at 128 as well.
const MAX_CONTEXT_DEPTH: usize = 128;

/// Number of distinct template sets [`TemplateSet::render`] keeps compiled.
const CACHE_CAPACITY: usize = 512;

/// A rule's message: one variant per locale plus the locale to fall back to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateSet {
    /// Locale used when the recipient's locale (or its language) has no variant. Must be a key of `locales`.
    pub fallback_locale: String,
    /// BCP-47-ish tags like "en", "de", "pt-BR" -> variant.
    pub locales: BTreeMap<String, LocaleTemplate>,
}

/// The message in one locale, in one of two shapes: `subject`, `text` and
/// `html` for email and the inbox, or `title`, `body` and `url` for a push
/// notification (the words a phone shows). One struct with both shapes
/// rather than a type per channel: the set does not know its rule's
/// channel, and the rule check ([`TemplateSet::check_shape`]) refuses the
/// wrong shape for it by name, where an untagged enum would answer "did
/// not match any variant".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LocaleTemplate {
    /// Rendered without escaping (it is not HTML), then trimmed; a rendered line
    /// break is refused because the subject becomes an email header, where a
    /// payload value containing "\nBcc: ..." would inject headers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// Plain-text body, rendered without escaping.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Optional HTML body. Auto-escaped, because payload values come from the
    /// triggering system and must not be able to inject markup or scripts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// Push: the notification's title, one line like a subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Push: the notification's text (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Push: what a tap opens; rendered, and refused unless it is an
    /// absolute http(s) URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Slack: Block Kit blocks, a JSON array whose strings are templates
    /// rendered with the same variables as `text` (which stays the
    /// notification's fallback). Given as JSON and kept as its text, so a
    /// set stays hashable; each string is rendered on its own, so a payload
    /// value with a quote cannot break the JSON. Rejected: one template over
    /// the whole JSON text, where `{{ payload.name }}` holding `"` would
    /// turn into invalid (or different) JSON.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "blocks_json")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub blocks: Option<String>,
}

/// `blocks` read as any JSON value and kept as its compact text; written
/// back as the JSON it is.
mod blocks_json {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        let value = v.as_deref().map(|t| serde_json::from_str(t).unwrap_or(serde_json::Value::String(t.to_owned())));
        value.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let v = Option::<serde_json::Value>::deserialize(d)?;
        Ok(v.map(|v| v.to_string()))
    }
}

impl LocaleTemplate {
    /// Whether this variant is written as a push notification.
    pub fn is_push(&self) -> bool {
        self.title.is_some() || self.body.is_some() || self.url.is_some()
    }
}

/// A message ready to hand to a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rendered {
    /// The key of the variant that was used, spelled as in [`TemplateSet::locales`],
    /// so delivery records show which translation a recipient actually got.
    pub locale: String,
    /// Trimmed, single line, at most [`MAX_SUBJECT_CHARS`] characters.
    pub subject: String,
    pub text: String,
    /// `None` when the variant has no HTML body, so channels send text only.
    pub html: Option<String>,
    /// A push variant's `url`, rendered and checked to be http(s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A Slack variant's `blocks`, every string rendered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<serde_json::Value>,
}

/// A problem with a template or condition.
///
/// Serializable (tagged by `kind`) so the rule API can put a list of these
/// straight into its 422 body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TemplateError {
    /// The source does not parse. `field` is a path like "template.locales.de.subject";
    /// line/column are 1-based, the column counts characters, not bytes.
    #[error("{field}{}: {message}", position_suffix(*.line, *.column))]
    Compile { field: String, line: Option<usize>, column: Option<usize>, message: String },
    /// Rendering or evaluation failed for this context (undefined value, fuel,
    /// size limit, subject line break, ...).
    #[error("{field}{}: {message}", position_suffix(*.line, *.column))]
    Render { field: String, line: Option<usize>, column: Option<usize>, message: String },
    /// Structural problem: no locales, unknown fallback, empty subject, bad tag, ...
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

fn position_suffix(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

impl TemplateError {
    pub fn field(&self) -> &str {
        match self {
            TemplateError::Compile { field, .. }
            | TemplateError::Render { field, .. }
            | TemplateError::Invalid { field, .. } => field,
        }
    }

    pub fn line(&self) -> Option<usize> {
        match self {
            TemplateError::Compile { line, .. } | TemplateError::Render { line, .. } => *line,
            TemplateError::Invalid { .. } => None,
        }
    }

    pub fn column(&self) -> Option<usize> {
        match self {
            TemplateError::Compile { column, .. } | TemplateError::Render { column, .. } => *column,
            TemplateError::Invalid { .. } => None,
        }
    }

    /// The human-readable part, without field and position (those are separate
    /// so API clients can highlight the spot themselves).
    pub fn message(&self) -> &str {
        match self {
            TemplateError::Compile { message, .. }
            | TemplateError::Render { message, .. }
            | TemplateError::Invalid { message, .. } => message,
        }
    }

    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        TemplateError::Invalid { field: field.into(), message: message.into() }
    }

    fn render_plain(field: impl Into<String>, message: impl Into<String>) -> Self {
        TemplateError::Render { field: field.into(), line: None, column: None, message: message.into() }
    }
}

// ---------------------------------------------------------------------------
// Locale tags
// ---------------------------------------------------------------------------

fn check_locale_tag(tag: &str) -> Result<(), String> {
    if tag.is_empty() || tag.len() > MAX_LOCALE_TAG_LEN {
        return Err(format!("locale tag must be 1-{MAX_LOCALE_TAG_LEN} characters long"));
    }
    if !tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Err("locale tag may only contain ASCII letters, digits and '-'".into());
    }
    // Stricter than "letters, digits, '-'": an empty subtag would make the
    // language fallback ("de-AT" -> "de") try an empty language.
    if tag.split('-').any(str::is_empty) {
        return Err("locale tag must not start or end with '-' or contain '--'".into());
    }
    Ok(())
}

/// Candidate keys for a recipient locale, most specific first, lowercased.
///
/// RFC 4647 "lookup": drop trailing subtags one at a time ("zh-Hant-TW" ->
/// "zh-hant" -> "zh"), skipping a dangling single-letter extension marker.
/// This covers the required exact / language-part steps and also the
/// three-part tags. POSIX spellings found in user profiles ("de_AT.UTF-8")
/// are normalized first, since those are the same locale.
fn locale_candidates(locale: &str) -> Vec<String> {
    let base = locale.trim();
    let base = base.split(['.', '@']).next().unwrap_or("");
    let mut tag = base.replace('_', "-").to_ascii_lowercase();
    // The recipient's locale is outside data: without this cut, a megabyte of
    // "a-a-a-..." would make quadratically many candidates. No key is longer
    // than MAX_LOCALE_TAG_LEN, so cutting at a subtag boundary loses nothing.
    if tag.len() > MAX_LOCALE_TAG_LEN {
        match tag.get(..=MAX_LOCALE_TAG_LEN).and_then(|head| head.rfind('-')) {
            Some(i) => tag.truncate(i),
            None => tag.clear(),
        }
    }
    let mut out = Vec::new();
    while !tag.is_empty() {
        out.push(tag.clone());
        match tag.rfind('-') {
            Some(i) => {
                tag.truncate(i);
                if let Some(j) = tag.rfind('-')
                    && tag.len() - j == 2
                {
                    tag.truncate(j);
                }
            }
            None => break,
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Compiled template sets
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct Variant {
    tag: String,
    /// The one-line part: `subject`, or a push variant's `title`; absent
    /// for a text-only variant (SMS, Slack).
    subject_field: Option<String>,
    /// `text`, or a push variant's `body` (absent when it has none).
    text_field: Option<String>,
    html_field: Option<String>,
    url_field: Option<String>,
    /// `blocks` parsed, with the prefix its strings' templates are named by
    /// (`{prefix}.N`, N counting strings depth first).
    blocks: Option<(serde_json::Value, String)>,
    /// First problem that makes this variant unrenderable (compile error or
    /// oversized source). Render reports it only when this variant is chosen,
    /// so one broken locale does not stop delivery in the others.
    blocking: Option<TemplateError>,
}

/// A [`TemplateSet`] with every template parsed once.
///
/// Hold one of these per rule when you manage rule lifetimes yourself;
/// [`TemplateSet::render`] keeps an internal cache of them for callers that
/// do not.
pub struct CompiledTemplateSet {
    env: Environment<'static>,
    variants: Vec<Variant>,
    /// Lowercased tag -> index into `variants` (first spelling wins on
    /// case-insensitive duplicates, which `validate` reports).
    index: HashMap<String, usize>,
    fallback: Option<usize>,
    fallback_locale: String,
    has_locales: bool,
    /// Everything `validate` reports, in field order.
    problems: Vec<TemplateError>,
}

impl std::fmt::Debug for CompiledTemplateSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledTemplateSet")
            .field("locales", &self.variants.iter().map(|v| &v.tag).collect::<Vec<_>>())
            .field("fallback_locale", &self.fallback_locale)
            .field("problems", &self.problems)
            .finish_non_exhaustive()
    }
}

impl CompiledTemplateSet {
    /// Compiles everything that can be compiled and records every problem,
    /// instead of stopping at the first one: `validate` needs the full list,
    /// and rendering should still work for the variants that are fine.
    fn build(set: &TemplateSet) -> CompiledTemplateSet {
        let mut env = BASE_ENV.clone();
        let mut problems = Vec::new();
        let mut variants = Vec::with_capacity(set.locales.len());
        let mut index = HashMap::with_capacity(set.locales.len());

        if set.locales.is_empty() {
            problems.push(TemplateError::invalid("template.locales", "at least one locale variant is required"));
        }
        let fallback_key = set.fallback_locale.to_ascii_lowercase();
        let fallback_known = set.locales.keys().any(|k| k.to_ascii_lowercase() == fallback_key);
        if !set.locales.is_empty() && !fallback_known {
            problems.push(TemplateError::invalid(
                "template.fallback_locale",
                format!(
                    "fallback_locale {:?} is not one of the locales ({})",
                    set.fallback_locale,
                    set.locales.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }

        for (tag, tpl) in &set.locales {
            let prefix = format!("template.locales.{tag}");
            if let Err(msg) = check_locale_tag(tag) {
                problems.push(TemplateError::invalid(&prefix, format!("{msg} (got {tag:?})")));
            }
            let key = tag.to_ascii_lowercase();
            if let Some(&first) = index.get(&key) {
                let first: &Variant = &variants[first];
                problems.push(TemplateError::invalid(
                    &prefix,
                    format!("duplicates locale {:?}; tags are matched case-insensitively", first.tag),
                ));
            } else {
                index.insert(key, variants.len());
            }

            let push = tpl.is_push();
            let (one_line, body) = if push { ("title", "body") } else { ("subject", "text") };
            // A variant with neither subject nor html is text-only (SMS,
            // Slack): no subject is rendered. Whether its channel needs one
            // is `check_shape`'s to say, which knows the channel.
            let text_only = !push && tpl.subject.is_empty() && tpl.html.is_none();
            let mut variant = Variant {
                tag: tag.clone(),
                subject_field: (!text_only).then(|| format!("{prefix}.{one_line}")),
                text_field: (!push || tpl.body.is_some()).then(|| format!("{prefix}.{body}")),
                html_field: tpl.html.as_ref().map(|_| format!("{prefix}.html")),
                url_field: tpl.url.as_ref().map(|_| format!("{prefix}.url")),
                blocks: None,
                blocking: None,
            };
            let empty = String::new();
            let mut parts = if push {
                vec![
                    (format!("{prefix}.title"), Some(tpl.title.as_ref().unwrap_or(&empty)), "title"),
                    (format!("{prefix}.body"), tpl.body.as_ref(), "body"),
                    (format!("{prefix}.url"), tpl.url.as_ref(), "url"),
                ]
            } else {
                vec![
                    (format!("{prefix}.subject"), (!text_only).then_some(&tpl.subject), "subject"),
                    (format!("{prefix}.text"), Some(&tpl.text), "text"),
                    (format!("{prefix}.html"), tpl.html.as_ref(), "html"),
                ]
            };
            let mut block_strings = Vec::new();
            if let Some(source) = &tpl.blocks {
                let field = format!("{prefix}.blocks");
                match serde_json::from_str::<serde_json::Value>(source) {
                    Ok(value) => {
                        collect_strings(&value, &mut block_strings);
                        variant.blocks = Some((value, field));
                    }
                    Err(e) => {
                        let err = TemplateError::invalid(&field, format!("blocks is not JSON: {e}"));
                        variant.blocking.get_or_insert_with(|| err.clone());
                        problems.push(err);
                    }
                }
            }
            let block_fields: Vec<String> = (0..block_strings.len()).map(|i| format!("{prefix}.blocks.{i}")).collect();
            for (field, source) in block_fields.iter().zip(&block_strings) {
                parts.push((field.clone(), Some(source), "a string in blocks"));
            }
            for (field, source, what) in parts {
                let Some(source) = source else { continue };
                if source.trim().is_empty() && what != "a string in blocks" {
                    let msg = if matches!(what, "html" | "body" | "url") {
                        format!("{what} must not be empty; leave it out instead")
                    } else {
                        format!("{what} must not be empty")
                    };
                    problems.push(TemplateError::invalid(&field, msg));
                }
                if source.len() > MAX_SOURCE_BYTES {
                    let err = TemplateError::invalid(
                        &field,
                        format!("{what} is {} bytes; the limit is {MAX_SOURCE_BYTES}", source.len()),
                    );
                    variant.blocking.get_or_insert_with(|| err.clone());
                    problems.push(err);
                    continue;
                }
                let added = guarded(|| env.add_template_owned(field.clone(), source.clone()));
                if let Err(e) = added {
                    let err = engine_error(Phase::Compile, &field, source, e.as_ref(), TEMPLATE_UNDEFINED_HINT);
                    variant.blocking.get_or_insert_with(|| err.clone());
                    problems.push(err);
                }
            }
            variants.push(variant);
        }

        let fallback = index.get(&fallback_key).copied();
        CompiledTemplateSet {
            env,
            variants,
            index,
            fallback,
            fallback_locale: set.fallback_locale.clone(),
            has_locales: !set.locales.is_empty(),
            problems,
        }
    }

    /// The variant for a recipient locale: most specific tag match first
    /// (case-insensitive), then `fallback_locale`.
    fn pick(&self, locale: Option<&str>) -> Result<&Variant, TemplateError> {
        let found =
            locale.into_iter().flat_map(locale_candidates).find_map(|c| self.index.get(&c).copied()).or(self.fallback);
        match found {
            Some(i) => Ok(&self.variants[i]),
            None if !self.has_locales => {
                Err(TemplateError::invalid("template.locales", "at least one locale variant is required"))
            }
            None => Err(TemplateError::invalid(
                "template.fallback_locale",
                format!(
                    "no variant for locale {:?} and fallback_locale {:?} is not one of the locales",
                    locale.unwrap_or(""),
                    self.fallback_locale
                ),
            )),
        }
    }

    /// Which tag [`render`](Self::render) would use for this locale.
    pub fn resolve_locale(&self, locale: Option<&str>) -> Result<&str, TemplateError> {
        self.pick(locale).map(|v| v.tag.as_str())
    }

    /// Renders one part into a writer capped at the remaining `budget`, so the
    /// 1 MiB limit holds for subject, text and html together. Rejected: plain
    /// `Template::render` plus a length check afterwards, which would let a
    /// template allocate as much as its fuel allows (~12 MiB) before failing.
    fn render_part(&self, field: &str, ctx: &Value, budget: &mut usize) -> Result<String, TemplateError> {
        let tmpl = self.env.get_template(field).map_err(|e| engine_error(Phase::Render, field, "", Some(&e), ""))?;
        let mut out = CappedBuf { buf: Vec::new(), limit: *budget, overflowed: false };
        let result = guarded(|| tmpl.render_captured_to(ctx.clone(), &mut out).map(drop));
        if out.overflowed {
            return Err(TemplateError::render_plain(
                field,
                format!("rendered message exceeds {MAX_OUTPUT_BYTES} bytes (subject, text and html together)"),
            ));
        }
        if let Err(e) = result {
            return Err(engine_error(Phase::Render, field, tmpl.source(), e.as_ref(), TEMPLATE_UNDEFINED_HINT));
        }
        *budget -= out.buf.len();
        String::from_utf8(out.buf).map_err(|_| TemplateError::render_plain(field, "rendered output is not valid UTF-8"))
    }

    /// Renders the chosen variant. See [`TemplateSet::render`].
    pub fn render(&self, locale: Option<&str>, ctx: &serde_json::Value) -> Result<Rendered, TemplateError> {
        let variant = self.pick(locale)?;
        if let Some(err) = &variant.blocking {
            return Err(err.clone());
        }
        let ctx = context_value(ctx, "context")?;
        let mut budget = MAX_OUTPUT_BYTES;

        let subject = match &variant.subject_field {
            Some(field) => {
                let raw_subject = self.render_part(field, &ctx, &mut budget)?;
                let subject = raw_subject.trim();
                if subject.contains(['\n', '\r']) {
                    return Err(TemplateError::render_plain(field, "subject contains a line break"));
                }
                let subject_chars = subject.chars().count();
                if subject_chars > MAX_SUBJECT_CHARS {
                    return Err(TemplateError::render_plain(
                        field,
                        format!(
                            "subject is {subject_chars} characters after rendering; the limit is {MAX_SUBJECT_CHARS}"
                        ),
                    ));
                }
                subject.to_owned()
            }
            None => String::new(),
        };

        let text = match &variant.text_field {
            Some(field) => self.render_part(field, &ctx, &mut budget)?,
            None => String::new(),
        };
        let html = match &variant.html_field {
            Some(field) => Some(self.render_part(field, &ctx, &mut budget)?),
            None => None,
        };
        let url = match &variant.url_field {
            Some(field) => Some(checked_url(field, self.render_part(field, &ctx, &mut budget)?)?),
            None => None,
        };
        let blocks = match &variant.blocks {
            Some((value, prefix)) => {
                let mut value = value.clone();
                let mut next = 0;
                self.render_strings(&mut value, prefix, &mut next, &ctx, &mut budget)?;
                Some(value)
            }
            None => None,
        };
        Ok(Rendered { locale: variant.tag.clone(), subject, text, html, url, blocks })
    }

    /// Renders every string of `value` in place, depth first, the `n`th
    /// with the template `{prefix}.n`.
    fn render_strings(
        &self,
        value: &mut serde_json::Value,
        prefix: &str,
        next: &mut usize,
        ctx: &Value,
        budget: &mut usize,
    ) -> Result<(), TemplateError> {
        match value {
            serde_json::Value::String(s) => {
                *s = self.render_part(&format!("{prefix}.{next}"), ctx, budget)?;
                *next += 1;
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    self.render_strings(item, prefix, next, ctx, budget)?;
                }
            }
            serde_json::Value::Object(map) => {
                for item in map.values_mut() {
                    self.render_strings(item, prefix, next, ctx, budget)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The strings of a JSON value, depth first (in the order
/// [`CompiledTemplateSet::render_strings`] renders them).
fn collect_strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        serde_json::Value::Object(map) => map.values().for_each(|i| collect_strings(i, out)),
        _ => {}
    }
}

/// A rendered `url`, trimmed, or the error naming its field: a tap on a
/// notification opens it, so `javascript:` or a relative path is refused.
fn checked_url(field: &str, rendered: String) -> Result<String, TemplateError> {
    let url = rendered.trim();
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(url.to_owned()),
        _ => Err(TemplateError::render_plain(
            field,
            format!("url renders as {url:?}, which is not an absolute http:// or https:// URL"),
        )),
    }
}

/// Compiled sets keyed by their full content, for [`TemplateSet::render`].
///
/// Keyed by content rather than by rule id because this module knows no ids,
/// and content keys can never serve a stale template after an edit. When full
/// it is simply cleared: rules change rarely, so a refill costs one compile
/// per active rule. Rejected: an LRU (needs a dependency or list bookkeeping
/// for little gain) and a cache field inside `TemplateSet` (would break its
/// derived `PartialEq`/serde shape and struct-literal construction).
static CACHE: LazyLock<Mutex<HashMap<TemplateSet, Arc<CompiledTemplateSet>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

impl TemplateSet {
    /// Compiles every template; returns ALL problems (not just the first), each naming its field and position. Used when a rule is saved (the API answers 422 with these).
    pub fn validate(&self) -> Result<(), Vec<TemplateError>> {
        let compiled = CompiledTemplateSet::build(self);
        if compiled.problems.is_empty() { Ok(()) } else { Err(compiled.problems) }
    }

    /// Refuses variants written in another channel's shape, each problem
    /// naming the field: a push rule's locales have `title` (and `body`,
    /// `url`); an SMS rule's `text` only; a Slack rule's `text` (and
    /// `blocks`); every other channel's `subject` and `text` (and `html`).
    /// One table of which channel uses which field, rather than a check per
    /// pair of channels, so a field a channel does not use is always named.
    pub fn check_shape(&self, channel: &str) -> Vec<TemplateError> {
        let shape = Shape::of(channel);
        let mut problems = Vec::new();
        for (tag, tpl) in &self.locales {
            let prefix = format!("template.locales.{tag}");
            let present = [
                ("subject", !tpl.subject.is_empty()),
                ("text", !tpl.text.is_empty()),
                ("html", tpl.html.is_some()),
                ("title", tpl.title.is_some()),
                ("body", tpl.body.is_some()),
                ("url", tpl.url.is_some()),
                ("blocks", tpl.blocks.is_some()),
            ];
            let foreign: Vec<&str> =
                present.iter().filter(|(f, on)| *on && !shape.fields.contains(f)).map(|(f, _)| *f).collect();
            // A variant written for another channel is named by its fields;
            // "subject must not be empty" on top would send the author to
            // the wrong fix. A push rule names its title either way.
            let (field, why) = shape.required;
            let has_required = present.iter().any(|(p, on)| *p == field && *on);
            if !has_required && (foreign.is_empty() || channel == "push") {
                problems.push(TemplateError::invalid(format!("{prefix}.{field}"), why));
            }
            let mut push_named = false;
            for what in foreign {
                let message = if channel == "push" {
                    format!("{what} is not used by push; a push notification has title, body and url")
                } else if matches!(what, "title" | "body" | "url") {
                    // One problem for a push variant, at its first field.
                    if std::mem::replace(&mut push_named, true) {
                        continue;
                    }
                    format!("{what} is for push notifications; {}", shape.has(channel))
                } else {
                    format!("{what} is not used by {channel}; {}", shape.has(channel))
                };
                problems.push(TemplateError::invalid(format!("{prefix}.{what}"), message));
            }
            if let (Some(source), "slack") = (&tpl.blocks, channel)
                && let Ok(value) = serde_json::from_str::<serde_json::Value>(source)
                && let Err(e) = crate::delivery::channel::slack::check_blocks(&value)
            {
                problems.push(TemplateError::invalid(format!("{prefix}.blocks"), e.to_string()));
            }
        }
        problems
    }

    /// Compiles the set for repeated rendering; fails exactly when
    /// [`validate`](Self::validate) does.
    pub fn compile(&self) -> Result<CompiledTemplateSet, Vec<TemplateError>> {
        let mut compiled = CompiledTemplateSet::build(self);
        if compiled.problems.is_empty() { Ok(compiled) } else { Err(std::mem::take(&mut compiled.problems)) }
    }

    /// Compiles the set for repeated rendering even when some variants have
    /// problems: those render their first error, the others render (as
    /// [`render`](Self::render) does). What a cache of rules holds, keyed by
    /// rule and version, so rendering skips the content hash `render` pays.
    pub fn compile_for_rendering(&self) -> CompiledTemplateSet {
        CompiledTemplateSet::build(self)
    }

    /// Picks the variant: exact tag match (case-insensitive), then the language part ("de-AT" -> "de"), then fallback_locale. Renders subject, text and html.
    ///
    /// Compiles at most once per distinct set (process-wide cache). A set that
    /// fails `validate` still renders the variants that compiled; the chosen
    /// variant's first compile error is returned otherwise.
    pub fn render(&self, locale: Option<&str>, ctx: &serde_json::Value) -> Result<Rendered, TemplateError> {
        self.cached().render(locale, ctx)
    }

    fn cached(&self) -> Arc<CompiledTemplateSet> {
        // A panic while holding the lock cannot leave the map half-updated
        // (insert/clear are the only mutations), so poisoning is ignored.
        if let Some(hit) = CACHE.lock().unwrap_or_else(PoisonError::into_inner).get(self) {
            return Arc::clone(hit);
        }
        // Compile outside the lock so a large set does not stall other workers;
        // two threads racing on the same set both compile, and one result wins.
        let compiled = Arc::new(CompiledTemplateSet::build(self));
        let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(self.clone(), Arc::clone(&compiled));
        compiled
    }
}

/// Which template fields a channel's locales use, and the one it needs.
struct Shape {
    fields: &'static [&'static str],
    required: (&'static str, &'static str),
}

impl Shape {
    fn of(channel: &str) -> Shape {
        match channel {
            "push" => Shape {
                fields: &["title", "body", "url"],
                required: ("title", "a push notification needs a title (its locales have title, body and url)"),
            },
            "sms" => Shape {
                fields: &["text"],
                required: ("text", "a text message needs text (its locales have text only)"),
            },
            "slack" => Shape {
                fields: &["text", "blocks"],
                required: ("text", "a Slack message needs text (mrkdwn; its locales have text and optional blocks)"),
            },
            _ => Shape { fields: &["subject", "text", "html"], required: ("subject", "subject must not be empty") },
        }
    }

    /// "email messages have subject, text and html".
    fn has(&self, channel: &str) -> String {
        let list = match self.fields {
            [one] => format!("{one} only"),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
            [] => String::new(),
        };
        let who = match channel {
            "sms" => "text messages".to_owned(),
            "slack" => "Slack messages".to_owned(),
            other => format!("{other} messages"),
        };
        format!("{who} have {list}")
    }
}

#[cfg(test)]
mod tests;
