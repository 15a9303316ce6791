//! A rule's condition: a minijinja expression over the same context as
//! the templates, compiled by the same locked-down environment (no loader,
//! strict undefined, fuel, `catch_unwind`), so a condition can neither read
//! anything a template cannot nor take a worker down.

use std::sync::Arc;

use minijinja::{Environment, Expression};

use super::{
    BASE_ENV, CONDITION_UNDEFINED_HINT, MAX_CONDITION_BYTES, Phase, TemplateError, context_value, engine_error, guarded,
};

/// A rule's optional condition: a minijinja *expression* over the same context, e.g. `payload.amount > 100 and user.locale == "de"`.
///
/// Compiled once against the shared base environment, so evaluating it is
/// just a VM run. Cloning is cheap (shared compiled expression).
#[derive(Clone)]
pub struct Condition {
    source: Arc<str>,
    expr: Arc<Expression<'static, 'static>>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Condition").field(&self.source).finish()
    }
}

impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Condition {}

const CONDITION_FIELD: &str = "condition";

impl Condition {
    /// Errors use field "condition". A blank source is refused rather than
    /// treated as "always true", so that a rule without a condition is stored
    /// as `None` and there is only one way to say "always".
    pub fn compile(source: &str) -> Result<Condition, TemplateError> {
        if source.len() > MAX_CONDITION_BYTES {
            return Err(TemplateError::invalid(
                CONDITION_FIELD,
                format!("condition is {} bytes; the limit is {MAX_CONDITION_BYTES}", source.len()),
            ));
        }
        if source.trim().is_empty() {
            return Err(TemplateError::invalid(
                CONDITION_FIELD,
                "condition must not be empty; leave it out to always match",
            ));
        }
        let env: &'static Environment<'static> = &BASE_ENV;
        let owned = source.to_owned();
        let expr = guarded(|| env.compile_expression_owned(owned))
            .map_err(|e| engine_error(Phase::Compile, CONDITION_FIELD, source, e.as_ref(), CONDITION_UNDEFINED_HINT))?;
        Ok(Condition { source: Arc::from(source), expr: Arc::new(expr) })
    }

    /// The expression's value as text (a digest key): strings as they are,
    /// anything else as JSON. Undefined is an error, as for [`Self::eval`].
    pub fn eval_value(&self, ctx: &serde_json::Value) -> Result<String, TemplateError> {
        let value = self.defined(ctx, || {
            "the expression evaluated to an undefined value (a missing attribute or variable)".into()
        })?;
        Ok(match value.as_str() {
            Some(s) => s.to_owned(),
            None => value.to_string(),
        })
    }

    /// Truthiness of the expression's result.
    ///
    /// An undefined *result* (e.g. the bare `payload.flag` when `flag` is
    /// missing) is an error too, not `false`: strict mode already rejects
    /// comparisons with undefined, and silently treating a typo'd attribute as
    /// "no match" would make a rule never fire without anyone noticing.
    pub fn eval(&self, ctx: &serde_json::Value) -> Result<bool, TemplateError> {
        let value = self.defined(ctx, || {
            format!(
                "condition evaluated to an undefined value (a missing attribute or variable); \
                 {CONDITION_UNDEFINED_HINT}"
            )
        })?;
        Ok(value.is_true())
    }

    /// The expression's value over `ctx`. An engine error is a render
    /// error; so is an undefined value, with the message `undefined` gives.
    fn defined(
        &self,
        ctx: &serde_json::Value,
        undefined: impl FnOnce() -> String,
    ) -> Result<minijinja::Value, TemplateError> {
        let ctx = context_value(ctx, CONDITION_FIELD)?;
        let value = guarded(|| self.expr.eval(ctx)).map_err(|e| {
            engine_error(Phase::Render, CONDITION_FIELD, &self.source, e.as_ref(), CONDITION_UNDEFINED_HINT)
        })?;
        if value.is_undefined() {
            return Err(TemplateError::Render {
                field: CONDITION_FIELD.to_owned(),
                line: None,
                column: None,
                message: undefined(),
            });
        }
        Ok(value)
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}
