//! The template engine's setup and its error reporting: the one locked-down
//! minijinja environment every set and condition starts from, the guard that
//! turns an engine panic into an error, the translation of minijinja's
//! errors into a field, line and column, the JSON context's conversion with
//! its depth bound, and the output writer that refuses to grow past the cap.
//! Split from `template.rs` so the template types and their compiling read
//! without the engine's plumbing.

use std::collections::BTreeMap;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::LazyLock;

use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior, Value};

use super::{FUEL_PER_RENDER, MAX_CONTEXT_DEPTH, TemplateError};

/// The one configured environment everything starts from. Each compiled set
/// clones it (cheap: filters/tests/globals are behind `Arc`s) and adds its own
/// templates, so no set can see another's templates. Conditions borrow it
/// directly, which is what lets [`Condition`] hold a `'static` expression.
pub(super) static BASE_ENV: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Debug mode is what makes minijinja name the undefined expression
    // ("`payload.x` is undefined"); its extra cost is paid on errors only.
    env.set_debug(true);
    env.set_fuel(Some(FUEL_PER_RENDER));
    // Escaping is decided by field name rather than minijinja's default
    // file-extension callback, so that only the html body is ever escaped
    // regardless of how the locale tag is spelled.
    env.set_auto_escape_callback(|name| if name.ends_with(".html") { AutoEscape::Html } else { AutoEscape::None });
    env
});

#[derive(Clone, Copy)]
pub(super) enum Phase {
    Compile,
    Render,
}

/// Runs an engine call, turning a panic inside minijinja into an error.
/// Rejected alternative: trusting the engine to never panic on hostile input;
/// a panic would kill the delivery worker for every other message in flight.
pub(super) fn guarded<T>(f: impl FnOnce() -> Result<T, minijinja::Error>) -> Result<T, Option<minijinja::Error>> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Some(e)),
        Err(_) => Err(None),
    }
}

/// 1-based (line, column) of a byte offset; the column counts characters so it
/// matches what an editor shows for non-ASCII templates.
pub(super) fn line_col(source: &str, offset: usize) -> Option<(usize, usize)> {
    let prefix = source.get(..offset)?;
    let line_start = prefix.rfind('\n').map_or(0, |i| i + 1);
    let line = prefix.matches('\n').count() + 1;
    let column = prefix[line_start..].chars().count() + 1;
    Some((line, column))
}

/// Where an undefined error happened when minijinja gave no byte range (it
/// does not for comparisons): the error text names the expression in
/// backticks, and if that text occurs exactly once in the source its position
/// is unambiguous. Ambiguous cases get no column rather than a wrong one.
pub(super) fn locate_named_expression(source: &str, detail: &str) -> Option<usize> {
    let start = detail.find('`')? + 1;
    let len = detail[start..].find('`')?;
    let needle = &detail[start..start + len];
    if needle.is_empty() {
        return None;
    }
    let mut hits = source.match_indices(needle);
    let (offset, _) = hits.next()?;
    hits.next().is_none().then_some(offset)
}

pub(super) fn engine_error(
    phase: Phase,
    field: &str,
    source: &str,
    err: Option<&minijinja::Error>,
    undefined_hint: &str,
) -> TemplateError {
    let Some(err) = err else {
        return TemplateError::render_plain(
            field,
            "internal template engine error (the engine panicked); please report this template",
        );
    };
    let detail = err.detail().unwrap_or("");
    let offset = err.range().map(|r| r.start).or_else(|| match err.kind() {
        ErrorKind::UndefinedError => locate_named_expression(source, detail),
        _ => None,
    });
    let (line, column) = match offset.and_then(|o| line_col(source, o)) {
        Some((l, c)) => (Some(l), Some(c)),
        None => (err.line(), None),
    };
    let message = match err.kind() {
        ErrorKind::OutOfFuel => format!(
            "template does too much work and was stopped after {FUEL_PER_RENDER} fuel units \
             (look for loops over huge ranges or nested loops)"
        ),
        ErrorKind::UndefinedError if detail.is_empty() => {
            format!("undefined value; {undefined_hint}")
        }
        ErrorKind::UndefinedError => format!("{detail}; {undefined_hint}"),
        kind if detail.is_empty() => kind.to_string(),
        kind => format!("{kind}: {detail}"),
    };
    let field = field.to_owned();
    match phase {
        Phase::Compile => TemplateError::Compile { field, line, column, message },
        Phase::Render => TemplateError::Render { field, line, column, message },
    }
}

pub(super) const TEMPLATE_UNDEFINED_HINT: &str = "optional payload fields need a guard such as \
     `{% if payload.x is defined %}` or `payload.x | default(\"...\")`";

pub(super) const CONDITION_UNDEFINED_HINT: &str = "a condition treats a missing attribute as an error; \
     guard optional fields with `payload.x is defined and ...`";

/// Converts the JSON context into engine values.
///
/// Hand-written instead of enabling minijinja's `serde` feature: it bounds the
/// recursion depth (a programmatically built `serde_json::Value` can be nested
/// deeper than any parser would allow) and builds `Value`-keyed maps, which
/// minijinja looks up fastest.
pub(super) fn to_engine_value(v: &serde_json::Value, depth: usize) -> Option<Value> {
    if depth > MAX_CONTEXT_DEPTH {
        return None;
    }
    Some(match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(to_engine_value(item, depth + 1)?);
            }
            Value::from(out)
        }
        serde_json::Value::Object(map) => {
            let mut out = BTreeMap::new();
            for (k, item) in map {
                out.insert(Value::from(k.as_str()), to_engine_value(item, depth + 1)?);
            }
            Value::from(out)
        }
    })
}

pub(super) fn context_value(ctx: &serde_json::Value, field: &str) -> Result<Value, TemplateError> {
    to_engine_value(ctx, 0).ok_or_else(|| {
        TemplateError::render_plain(field, format!("context is nested deeper than {MAX_CONTEXT_DEPTH} levels"))
    })
}

/// Output sink that refuses to grow past `limit`. Writes are all-or-nothing,
/// so the buffer always holds whole `str` chunks and stays valid UTF-8.
pub(super) struct CappedBuf {
    pub(super) buf: Vec<u8>,
    pub(super) limit: usize,
    pub(super) overflowed: bool,
}

impl io::Write for CappedBuf {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            self.overflowed = true;
            return Err(io::Error::other("output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
