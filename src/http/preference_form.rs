//! The preference form's fields: the hosted page (`/p/{token}`) and the
//! operator screen's form on a user's send-log page post the same boxes.
//!
//! # Encoding
//! A box is named by a JSON array, `["CATEGORY","CHANNEL"]`, in each field
//! that lists it. A category may hold any character but control characters
//! (`promo:spring`, see [`crate::planning::category`]); the former
//! `CATEGORY:CHANNEL` split on the first `:` read `promo:spring` on email as
//! category `promo` on channel `spring:email`, and the 422 that followed
//! refused the whole form, for every user, as soon as one rule used such a
//! category. Rejected: splitting on the last `:` (right only while no
//! channel name holds one), and percent-encoding each part (a second
//! escaping inside the form's own, written by hand). JSON is parsed by
//! serde_json; the form's own encoding by `url`.
//!
//! A topic the user follows is a box too, `["topic:KEY","*"]`: the key
//! and "every channel" under which the user's choices keep its mute (see
//! [`crate::planning::recipient::topic_muted`]). Ticked is "notify me",
//! unticked is muted. [`FormBoxes::change`] turns such a box into the
//! change's `topics`, where the key is checked as a topic key; no category
//! starts with `topic:`.
//!
//! # Fields
//! `shown` names every box the form drew that can change (not the locked
//! transactional ones), `was` each of those drawn ticked, `on` each box
//! ticked when sent. Any other field (`csrf`, `user`) is the caller's.
//!
//! # Only what the user changed
//! A box is a change only where `on` differs from `was`, as the widget
//! sends one change per checkbox clicked. Saving every box shown recorded
//! each as the user's own choice, and a user's choice wins over the host's
//! preferences: after one save, a host's later `channels.email = false`
//! was ignored for every category on the page. Rejected: comparing with
//! what is stored when the form comes back (a host change made while the
//! page was open would then be undone by a user who never touched it).

use std::collections::BTreeSet;

use super::preferences::PreferenceChange;
use crate::delivery::channel::email::message::TRANSACTIONAL;
use crate::planning::recipient::{EVERY_CHANNEL, TOPIC_CHOICE_PREFIX};
use crate::planning::rule::FieldError;

/// A box: (category, channel).
type FormBox = (String, String);

/// The value that names a box in the form's fields.
pub fn box_value(category: &str, channel: &str) -> String {
    serde_json::to_string(&[category, channel]).expect("two strings serialise")
}

/// The value that names a topic's box (ticked: not muted).
pub fn topic_box_value(topic: &str) -> String {
    box_value(&crate::planning::recipient::topic_choice_key(topic), EVERY_CHANNEL)
}

/// The boxes a posted form names, by field.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FormBoxes {
    shown: BTreeSet<FormBox>,
    was: BTreeSet<FormBox>,
    on: BTreeSet<FormBox>,
}

impl FormBoxes {
    /// Reads the `shown`, `was` and `on` fields (others are left to the
    /// caller).
    /// A value this form does not write (a page saved before this encoding,
    /// or altered) is refused naming its field, so nothing is half applied.
    pub fn from_fields<K: AsRef<str>, V: AsRef<str>>(
        fields: impl IntoIterator<Item = (K, V)>,
    ) -> Result<FormBoxes, Vec<FieldError>> {
        let mut boxes = FormBoxes::default();
        let mut errors = Vec::new();
        for (name, value) in fields {
            let (name, value) = (name.as_ref(), value.as_ref());
            let set = match name {
                "shown" => &mut boxes.shown,
                "was" => &mut boxes.was,
                "on" => &mut boxes.on,
                _ => continue,
            };
            match serde_json::from_str::<(String, String)>(value) {
                Ok(b) => {
                    set.insert(b);
                }
                Err(_) => errors.push(FieldError::new(
                    name,
                    format!(
                        "{value:?} is not a box of this form, which writes [\"CATEGORY\",\"CHANNEL\"]; \
                         load the page again and save from there"
                    ),
                )),
            }
        }
        if errors.is_empty() { Ok(boxes) } else { Err(errors) }
    }

    /// The boxes the user changed, as a change: each box shown whose
    /// ticking differs from how it was drawn (transactional is never
    /// changed). A topic's box is a change of `topics`.
    pub fn change(&self) -> PreferenceChange {
        let mut change = PreferenceChange::default();
        for b @ (category, channel) in &self.shown {
            let on = self.on.contains(b);
            if category == TRANSACTIONAL || on == self.was.contains(b) {
                continue;
            }
            match category.strip_prefix(TOPIC_CHOICE_PREFIX) {
                Some(topic) if channel == EVERY_CHANNEL => {
                    change.topics.insert(topic.to_owned(), on);
                }
                _ => {
                    change.categories.entry(category.clone()).or_default().insert(channel.clone(), on);
                }
            }
        }
        change
    }

    /// Parses a posted `application/x-www-form-urlencoded` body.
    pub fn from_body(body: &[u8]) -> Result<FormBoxes, Vec<FieldError>> {
        FormBoxes::from_fields(url::form_urlencoded::parse(body))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn form(fields: &[(&str, String)]) -> Vec<u8> {
        url::form_urlencoded::Serializer::new(String::new()).extend_pairs(fields).finish().into_bytes()
    }

    #[test]
    fn a_category_with_a_colon_survives_the_round_trip() {
        let body = form(&[
            ("csrf", "x".into()),
            ("shown", box_value("promo:spring", "email")),
            ("was", box_value("promo:spring", "email")),
            ("shown", box_value("a \"quoted\" one", "inbox")),
            ("on", box_value("a \"quoted\" one", "inbox")),
        ]);
        let change = FormBoxes::from_body(&body).unwrap().change();
        assert!(!change.categories["promo:spring"]["email"]);
        assert!(change.categories["a \"quoted\" one"]["inbox"]);
        assert_eq!(change.categories.len(), 2);
    }

    #[test]
    fn a_box_left_as_drawn_is_no_change() {
        let body = form(&[
            ("shown", box_value("news", "email")),
            ("was", box_value("news", "email")),
            ("on", box_value("news", "email")),
            ("shown", box_value("tips", "email")),
        ]);
        assert!(FormBoxes::from_body(&body).unwrap().change().categories.is_empty());
    }

    #[test]
    fn the_old_encoding_is_refused_by_field() {
        let errors = FormBoxes::from_body(&form(&[("shown", "news:email".into())])).unwrap_err();
        assert_eq!(errors[0].field, "shown");
        assert!(errors[0].message.contains("load the page again"), "{}", errors[0].message);
    }

    #[test]
    fn a_topic_box_is_a_change_of_topics() {
        let body = form(&[
            ("shown", topic_box_value("doc:42")),
            ("was", topic_box_value("doc:42")),
            ("shown", topic_box_value("team.7")),
            ("on", topic_box_value("team.7")),
            // Not every channel: left as a category, which the check refuses.
            ("shown", box_value("topic:doc:9", "email")),
            ("was", box_value("topic:doc:9", "email")),
        ]);
        let change = FormBoxes::from_body(&body).unwrap().change();
        assert_eq!(change.topics, BTreeMap::from([("doc:42".into(), false), ("team.7".into(), true)]));
        assert_eq!(change.categories.keys().collect::<Vec<_>>(), ["topic:doc:9"]);
    }

    #[test]
    fn transactional_is_never_changed() {
        let body = form(&[("shown", box_value(TRANSACTIONAL, "email"))]);
        assert!(FormBoxes::from_body(&body).unwrap().change().categories.is_empty());
    }
}
