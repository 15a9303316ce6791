//! What a category name is: the kind of message a rule sends
//! (`product_updates`, `promo:spring`), which users turn on and off. Any
//! name but one starting with `topic:`: that is how a user's mute of a
//! topic is kept.
//!
//! One definition for every place a category comes in: a rule's
//! `category`, the keys of a host's `preferences.categories`
//! (`PUT /v1/users`), a suppression's `category`. Before, rules took 1 to 64
//! characters of any text while a host's preferences took only 1 to 35 of
//! `A-Z a-z 0-9 - _`, so a category a rule sent (`product.updates`,
//! `promo:spring`, a 40-character name) could not be turned off by the
//! host. The broader rule is the one kept: narrowing it would refuse rules
//! that exist. Where a category travels inside other text (the preference
//! forms, `herald preferences --set`), that text's encoding must carry any
//! of these characters; see `crate::http::preference_form`.

use crate::planning::rule::FieldError;

/// Longest category name, in bytes (the rules table's column holds 64).
pub const MAX_LEN: usize = 64;

/// What a category name may be, for error messages.
pub const EXPECTED: &str = "1 to 64 characters without control characters, not blank, not \"*\" and not starting with \"topic:\" (for example \"product_updates\")";

/// Checks a category name coming in through `field`.
pub fn check(field: impl Into<String>, value: &str) -> Result<(), FieldError> {
    if value.trim().is_empty() || value.len() > MAX_LEN || value.chars().any(char::is_control) {
        return Err(FieldError::new(field, format!("{:?} is not a category name: {EXPECTED}", shorten(value))));
    }
    if value.trim() == crate::store::ALL_CATEGORIES {
        // A suppression for `*` covers every category, transactional mail
        // included: a rule in category `*` put that in every unsubscribe
        // link it sent.
        return Err(FieldError::new(
            field,
            "\"*\" is reserved (in suppressions it means every category); name the kind of message, e.g. \"newsletter\"",
        ));
    }
    if value.starts_with(crate::planning::recipient::TOPIC_CHOICE_PREFIX) {
        // A user's mute of topic `doc:42` is kept as their choice for
        // `topic:doc:42`, and the preference center refuses a category
        // spelled so: a rule in such a category would send messages its
        // recipients could not turn off.
        return Err(FieldError::new(
            field,
            format!(
                "{:?} is reserved: \"topic:\" names a topic's mute, which users set per topic; \
                 name the kind of message, e.g. \"doc_comments\", and send to a topic with a trigger's \"topic\"",
                shorten(value)
            ),
        ));
    }
    Ok(())
}

/// A name readable by the person it is shown to, for a category whose
/// rules set no `display_name`: `product_updates` is "Product updates".
/// Separators (`_`, `-`, `.`) become spaces and the first letter a capital;
/// anything else is kept as written.
pub fn readable(category: &str) -> String {
    let spaced: String = category.chars().map(|c| if matches!(c, '_' | '-' | '.') { ' ' } else { c }).collect();
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let joined = words.join(" ");
    let mut chars = joined.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => category.to_owned(),
    }
}

fn shorten(value: &str) -> String {
    crate::domain::InvalidValue::new("category", value, EXPECTED).value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_rules_accept_is_a_category_everywhere() {
        for ok in ["news", "product.updates", "promo:spring", "Promo Spring", &"x".repeat(64), "ünïcode"] {
            assert!(check("category", ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "   ", "*", " * ", "tab\there", &"x".repeat(65)] {
            assert!(check("category", bad).is_err(), "{bad:?}");
        }
        let e = check("category", "topic:doc:42").unwrap_err();
        assert!(e.message.contains("reserved") && e.message.contains("\"topic\""), "{}", e.message);
        assert!(check("category", "topics").is_ok() && check("category", "my topic:x").is_ok());
        let e = check("preferences.categories", "a\u{7}").unwrap_err();
        assert_eq!(e.field, "preferences.categories");
        assert!(e.message.contains("1 to 64 characters"), "{}", e.message);
    }

    #[test]
    fn a_readable_name_for_a_bare_key() {
        assert_eq!(readable("product_updates"), "Product updates");
        assert_eq!(readable("security-alerts"), "Security alerts");
        assert_eq!(readable("promo:spring"), "Promo:spring");
        assert_eq!(readable("news"), "News");
        assert_eq!(readable("__"), "__");
    }
}
