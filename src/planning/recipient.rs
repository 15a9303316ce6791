//! Recipients: who a user is, for messages, and what they opted out of.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::delivery::channel::slack::SlackUserId;
use crate::delivery::channel::sms::phone::PhoneNumber;
use crate::domain::UserId;
use crate::planning::rule::FieldError;
use crate::planning::workflow::{QuietHoursInput, Span};
use crate::store::RecipientRow;

/// The body of `PUT /v1/users/{user_id}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecipientInput {
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// BCP 47 tag such as `de` or `pt-BR`; picks the template variant.
    #[serde(default)]
    pub locale: Option<String>,
    /// IANA zone such as `Europe/Berlin`.
    #[serde(default)]
    pub timezone: Option<String>,
    #[serde(default)]
    pub preferences: Preferences,
    /// `{"from": "22:00", "until": "07:00"}` in the user's `timezone`: every
    /// message of a non-transactional rule falling due then waits until
    /// they end.
    #[serde(default)]
    pub quiet_hours: Option<QuietHoursInput>,
    /// For SMS: a number with its country code, `+1 (415) 555-0101` or
    /// `+14155550101`; stored in E.164. No country is assumed for a number
    /// without one (see `delivery::channel::sms::phone`).
    #[serde(default)]
    pub phone: Option<String>,
    /// For Slack: the user's Slack id, `U…` or `W…`; a Slack message to the
    /// user is a direct message.
    #[serde(default)]
    pub slack_user_id: Option<String>,
}

/// What a user opted out of. `false` means "do not send me these"; anything
/// not listed is allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Preferences {
    #[serde(default)]
    pub categories: BTreeMap<String, bool>,
    #[serde(default)]
    pub channels: BTreeMap<String, bool>,
}

impl Preferences {
    /// The opt-out that stops this message, in words, if there is one.
    pub fn opt_out(&self, category: &str, channel: &str) -> Option<String> {
        if self.channels.get(channel) == Some(&false) {
            return Some(format!(
                "the user opted out of the {channel} channel (preferences.channels.{channel} = false)"
            ));
        }
        if self.categories.get(category) == Some(&false) {
            return Some(format!(
                "the user opted out of category \"{category}\" (preferences.categories.{category} = false)"
            ));
        }
        None
    }
}

/// The end user's own choices from the preference center: category ->
/// channel -> on (`true`) or off. They take precedence over the host's
/// [`Preferences`]: a host sync (`PUT /v1/users`) replaces the host's
/// preferences and never touches these.
pub type UserChoices = BTreeMap<String, BTreeMap<String, bool>>;

/// The user's own "off" for this category and channel, in words. Only for
/// a channel that reaches a person: a choice stored for a webhook before
/// the preference center stopped offering it does not stop the host's
/// integration.
pub fn user_opt_out(choices: &UserChoices, category: &str, channel: &str) -> Option<String> {
    if category == crate::delivery::channel::email::message::TRANSACTIONAL
        || crate::delivery::channel::catalog::personal_name(channel).is_none()
    {
        return None;
    }
    (choices.get(category).and_then(|c| c.get(channel)) == Some(&false))
        .then(|| format!("the user turned off \"{category}\" by {channel} in their preference center"))
}

/// What starts the key under which [`UserChoices`] keeps a topic's mute.
/// A category may hold `:` (`promo:spring`), so the preference center
/// refuses a category starting with this (`http::preferences`): the
/// user's choices for `topic:doc:42` are only ever a topic's.
pub const TOPIC_CHOICE_PREFIX: &str = "topic:";

/// The channel a topic's choice is stored under: it holds on every channel.
pub const EVERY_CHANNEL: &str = "*";

/// The key under which [`UserChoices`] keeps a topic's mute.
pub fn topic_choice_key(topic: &str) -> String {
    format!("{TOPIC_CHOICE_PREFIX}{topic}")
}

/// The user's "mute" of one topic, in words: `{"topic:doc:42": {"*":
/// false}}` in their choices. Muting a topic silences the triggers to it
/// on every channel, whatever their category; the user stays subscribed.
pub fn topic_muted(choices: &UserChoices, topic: &str) -> Option<String> {
    let muted = choices.get(&topic_choice_key(topic)).and_then(|c| c.get(EVERY_CHANNEL)) == Some(&false);
    muted.then(|| format!("the user muted topic \"{topic}\""))
}

/// Whether the user's own choice turns this category and channel on
/// explicitly (which overrides a host's opt-out).
pub fn user_opt_in(choices: &UserChoices, category: &str, channel: &str) -> bool {
    crate::delivery::channel::catalog::personal_name(channel).is_some()
        && choices.get(category).and_then(|c| c.get(channel)) == Some(&true)
}

fn valid_tag(s: &str) -> bool {
    !s.is_empty() && s.len() <= 35 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn valid_zone(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'))
}

/// Whether the email channel can mail `address`, checked when it is
/// stored rather than found out at every send: an address by RFC 5322
/// (`email_address`), one lettre will put on an envelope, one the address
/// hash can be taken of (`address::normalize`), and without a quoted local
/// part. `"a b"@example.com` passed the first check alone and was stored,
/// and then every email to it failed (the hash refuses the space); quoted
/// local parts are refused outright, since the ones without a space are
/// also what receiving servers reject most often.
pub fn mailable(address: &str) -> Result<(), String> {
    if address.starts_with('"') {
        return Err(format!(
            "{address:?} has a quoted local part (\"...\"@domain), which Herald cannot mail; expected an address \
             like name@example.com"
        ));
    }
    let valid = address.len() <= 320
        && address.parse::<email_address::EmailAddress>().is_ok()
        && address.parse::<lettre::Address>().is_ok()
        && crate::address::normalize(address).is_some();
    if valid { Ok(()) } else { Err(format!("{address:?} is not an email address like name@example.com")) }
}

impl RecipientInput {
    pub fn into_row(self, user_id: &UserId, now: Millis) -> Result<RecipientRow, Vec<FieldError>> {
        let mut errors = Vec::new();
        let email = self.email.map(|e| e.trim().to_owned()).filter(|e| !e.is_empty());
        if let Some(Err(message)) = email.as_deref().map(mailable) {
            errors.push(FieldError::new("email", message));
        }
        // Blank is none, as for `email`: absent, `null` and `""` all leave
        // the user without one (a PUT replaces the recipient).
        let blank_is_none = |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        let phone = match blank_is_none(self.phone).map(|p| PhoneNumber::parse("phone", &p)) {
            None => None,
            Some(Ok(p)) => Some(p.as_str().to_owned()),
            Some(Err(e)) => {
                errors.push(FieldError::new("phone", e.unnamed()));
                None
            }
        };
        let slack_user_id = match blank_is_none(self.slack_user_id).map(|s| SlackUserId::parse("slack_user_id", &s)) {
            None => None,
            Some(Ok(id)) => Some(id.as_str().to_owned()),
            Some(Err(e)) => {
                errors.push(FieldError::new("slack_user_id", format!("{:?} is not {}", e.value, e.expected)));
                None
            }
        };
        if let Some(n) = &self.name
            && (n.len() > 255 || n.chars().any(char::is_control))
        {
            errors.push(FieldError::new("name", "must be at most 255 characters without control characters"));
        }
        if let Some(l) = &self.locale
            && !valid_tag(l)
        {
            errors.push(FieldError::new("locale", format!("{l:?} is not a locale tag like \"en\" or \"pt-BR\"")));
        }
        if let Some(z) = &self.timezone
            && (!valid_zone(z) || crate::planning::workflow::parse_zone(z).is_none())
        {
            errors.push(FieldError::new(
                "timezone",
                format!("{z:?} is not a time zone of the tz database like \"Europe/Berlin\" or \"UTC\""),
            ));
        }
        if let Some(q) = &self.quiet_hours
            && let Err(e) = Span::parse("quiet_hours", q)
        {
            errors.extend(e);
        }
        // A category as a rule names it (`product.updates`, `promo:spring`):
        // the host must be able to turn off whatever a rule sends.
        for key in self.preferences.categories.keys() {
            if let Err(e) = crate::planning::category::check("preferences.categories", key) {
                errors.push(e);
            }
        }
        for key in self.preferences.channels.keys() {
            if !valid_tag(key) {
                errors.push(FieldError::new(
                    "preferences.channels",
                    format!(
                        "{key:?} is not a channel name; the channels are {}",
                        crate::delivery::channel::catalog::known_list()
                    ),
                ));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(RecipientRow {
            user_id: user_id.as_str().to_owned(),
            email,
            name: self.name,
            locale: self.locale,
            timezone: self.timezone,
            preferences: serde_json::to_value(&self.preferences).expect("preferences serialise"),
            quiet_hours: self.quiet_hours,
            phone,
            // Keyed with the deployment secret, which the caller holds
            // (`http::users::put_recipient`).
            phone_hash: None,
            slack_user_id,
            user_choices: UserChoices::new(),
            created_at: now,
            updated_at: now,
        })
    }
}

/// The recipient as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RecipientView {
    pub user_id: String,
    pub email: Option<String>,
    pub name: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    pub preferences: Preferences,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quiet_hours: Option<QuietHoursInput>,
    /// E.164, as stored.
    pub phone: Option<String>,
    pub slack_user_id: Option<String>,
    /// The user's own choices from the preference center (category ->
    /// channel -> on/off). Read-only here: they win over `preferences`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub user_preferences: UserChoices,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&RecipientRow> for RecipientView {
    fn from(r: &RecipientRow) -> Self {
        RecipientView {
            user_id: r.user_id.clone(),
            email: r.email.clone(),
            name: r.name.clone(),
            locale: r.locale.clone(),
            timezone: r.timezone.clone(),
            preferences: serde_json::from_value(r.preferences.clone()).unwrap_or_default(),
            quiet_hours: r.quiet_hours.clone(),
            phone: r.phone.clone(),
            slack_user_id: r.slack_user_id.clone(),
            user_preferences: r.user_choices.clone(),
            created_at: r.created_at.to_rfc3339(),
            updated_at: r.updated_at.to_rfc3339(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_address_the_email_channel_can_mail_is_stored() {
        for ok in ["ada@example.com", "a.b+tag@sub.example.co.uk"] {
            assert_eq!(super::mailable(ok), Ok(()), "{ok}");
        }
        for bad in ["\"a b\"@example.com", "\"ab\"@example.com", "a b@example.com", "no-at-sign", "a@", "@b"] {
            let said = super::mailable(bad).unwrap_err();
            assert!(said.contains("name@example.com"), "{bad}: {said}");
        }
        assert!(super::mailable("\"a b\"@example.com").unwrap_err().contains("quoted local part"));
    }

    #[test]
    fn opt_outs_name_the_preference() {
        let mut p = Preferences::default();
        assert_eq!(p.opt_out("marketing", "email"), None);
        p.categories.insert("marketing".into(), false);
        assert!(p.opt_out("marketing", "inbox").unwrap().contains("category \"marketing\""));
        p.channels.insert("email".into(), false);
        assert!(p.opt_out("billing", "email").unwrap().contains("email channel"));
        p.categories.insert("billing".into(), true);
        assert_eq!(p.opt_out("billing", "inbox"), None);
    }

    #[test]
    fn a_users_choice_governs_only_channels_that_reach_them() {
        let mut choices = UserChoices::new();
        choices.entry("news".into()).or_default().insert("webhook".into(), false);
        choices.entry("news".into()).or_default().insert("email".into(), false);
        assert_eq!(user_opt_out(&choices, "news", "webhook"), None, "the host's integration is not the user's");
        assert!(user_opt_out(&choices, "news", "email").is_some());
    }

    #[test]
    fn bad_fields_are_all_reported() {
        let input =
            RecipientInput { email: Some("not-an-address".into()), locale: Some("en US".into()), ..Default::default() };
        let errors = input.into_row(&UserId::parse("u", "u1").unwrap(), Millis(0)).unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["email", "locale"]);
    }
}
