//! Which channels exist, and which of them can deliver on this instance.
//!
//! A rule names its channel by a string, and the worker finds it in the
//! [`Registry`](super::Registry) only when a message is due, possibly days
//! later. Checking the name there alone meant a typo (`"emial"`) was accepted,
//! could be turned on, and every message it planned ended `failed`; and a
//! channel whose setting is missing (webhooks without a signing secret) looked
//! like a gap in the build. So the name is checked where it is chosen (a rule
//! saved through the API or the screen, `herald enqueue`), against this
//! catalogue, built from the same configuration the worker's registry is.

use serde::Serialize;

use crate::delivery::settings::{EmailSettings, PushSettings, SlackSettings, SmsSettings, WebhookSettings};

/// Every channel Herald has: the only names a rule or an enqueue may choose.
pub const KNOWN: [&str; 6] = ["email", "inbox", "push", "slack", "sms", "webhook"];

/// The channels that reach a person, each with the name a person reads:
/// the only ones the preference center offers. A webhook is the host's own
/// integration (its system is told), not a way to reach the user, so a user
/// neither sees it nor can switch it off; the host's `preferences` still
/// can. Rejected: offering every channel a category is sent on, which put a
/// "webhook" box in front of end users.
pub const PERSONAL: [(&str, &str); 5] = [
    ("email", "Email"),
    ("inbox", "In the app"),
    ("push", "Push notifications"),
    ("sms", "Text messages"),
    ("slack", "Slack"),
];

/// The name a person reads for a channel that reaches them (see
/// [`PERSONAL`]); `None` for one that does not.
pub fn personal_name(channel: &str) -> Option<&'static str> {
    PERSONAL.iter().find(|(c, _)| *c == channel).map(|(_, name)| *name)
}

/// `"email, inbox, push, slack, sms, webhook"`, for messages that list the choices.
pub fn known_list() -> String {
    KNOWN.join(", ")
}

/// Refuses a channel name Herald does not have, listing those it has.
pub fn check_known(name: &str) -> Result<(), String> {
    if KNOWN.contains(&name) {
        Ok(())
    } else {
        Err(format!("unknown channel {name:?}; Herald's channels are {}", known_list()))
    }
}

/// One channel's state on this instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ChannelState {
    pub name: &'static str,
    /// Configured: messages on it are delivered.
    pub live: bool,
    /// How it delivers, or why it cannot, in plain words.
    pub detail: String,
    /// The configuration key that turns it on, when it is not live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setting: Option<&'static str>,
}

impl ChannelState {
    /// What an operator is told about a channel that is not live: why not
    /// and which setting fixes it.
    pub fn not_live_message(&self) -> String {
        match self.setting {
            Some(setting) => format!(
                "channel \"{}\" is not configured on this instance: {}; set {setting} (or HERALD_{}) to turn it on",
                self.name,
                self.detail,
                setting.to_ascii_uppercase().replace('.', "__")
            ),
            None => format!("channel \"{}\" is not configured on this instance: {}", self.name, self.detail),
        }
    }
}

/// The state of every known channel, from one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channels {
    states: Vec<ChannelState>,
}

/// Why email cannot deliver without a transport (the registry's reason too).
pub const EMAIL_NOT_CONFIGURED: &str = "no email transport is configured";
/// Why push cannot deliver without a provider (the registry's reason too).
pub const PUSH_NOT_CONFIGURED: &str = "no push provider is configured";
/// Why SMS cannot deliver without a transport (the registry's reason too).
pub const SMS_NOT_CONFIGURED: &str = "no SMS transport is configured";
/// Why Slack cannot deliver without a bot token (the registry's reason too).
pub const SLACK_NOT_CONFIGURED: &str = "no Slack bot token is configured";
/// Why webhooks cannot deliver without a secret (the registry's reason too).
pub const WEBHOOK_NOT_CONFIGURED: &str = "no webhook signing secret is configured";

impl Channels {
    /// From the `[email]` and `[webhook]` settings: what the registry is
    /// built from too.
    pub fn from_settings(email: &EmailSettings, webhook: &WebhookSettings) -> Channels {
        use crate::delivery::channel::email::transport::TransportUrl;
        let email_state = match email.transport.as_deref() {
            Some(url) => {
                let how = match TransportUrl::parse(url) {
                    Ok(t) if t.is_file() => {
                        format!("writes .eml files ({}); nothing leaves this machine", t.describe())
                    }
                    Ok(t) => format!("sends through {}", t.describe()),
                    Err(_) => format!("sends through {}", TransportUrl::redacted(url)),
                };
                ChannelState { name: "email", live: true, detail: how, setting: None }
            }
            None => ChannelState {
                name: "email",
                live: false,
                detail: EMAIL_NOT_CONFIGURED.into(),
                setting: Some("email.transport"),
            },
        };
        let webhook_state = if webhook.signing_secret.is_some() {
            ChannelState {
                name: "webhook",
                live: true,
                detail: "posts signed events (webhook.signing_secret is set)".into(),
                setting: None,
            }
        } else {
            ChannelState {
                name: "webhook",
                live: false,
                detail: WEBHOOK_NOT_CONFIGURED.into(),
                setting: Some("webhook.signing_secret"),
            }
        };
        let inbox = ChannelState {
            name: "inbox",
            live: true,
            detail: "writes to the in-app inbox (always available)".into(),
            setting: None,
        };
        let push = ChannelState {
            name: "push",
            live: false,
            detail: PUSH_NOT_CONFIGURED.into(),
            setting: Some("push.vapid_private_key"),
        };
        let sms = ChannelState {
            name: "sms",
            live: false,
            detail: SMS_NOT_CONFIGURED.into(),
            setting: Some("sms.transport"),
        };
        let slack = ChannelState {
            name: "slack",
            live: false,
            detail: SLACK_NOT_CONFIGURED.into(),
            setting: Some("slack.bot_token"),
        };
        Channels { states: vec![email_state, inbox, push, slack, sms, webhook_state] }
    }

    /// Everything a configuration says: [`from_settings`](Self::from_settings)
    /// with `[push]`, `[sms]` and `[slack]`.
    pub fn from_config(config: &crate::config::Config) -> Channels {
        Channels::from_settings(&config.email, &config.webhook)
            .with_push(&config.push)
            .with_sms(&config.sms)
            .with_slack(&config.slack)
    }

    /// Marks `name` live with `detail`.
    fn live(mut self, name: &'static str, detail: String) -> Channels {
        if let Some(state) = self.states.iter_mut().find(|s| s.name == name) {
            *state = ChannelState { name, live: true, detail, setting: None };
        }
        self
    }

    /// With the SMS channel as `[sms]` configures it: live with a
    /// transport, naming the provider (never its credentials).
    pub fn with_sms(self, sms: &SmsSettings) -> Channels {
        use crate::delivery::channel::sms::transport::SmsTransport;
        let Some(url) = sms.transport.as_deref() else { return self };
        let provider = match SmsTransport::parse(url) {
            Ok(SmsTransport::Twilio(_)) => "Twilio".to_owned(),
            Ok(SmsTransport::Kannel(k)) => format!("Kannel at {}", k.base),
            Err(_) => SmsTransport::redacted(url),
        };
        self.live("sms", format!("sends texts through {provider}"))
    }

    /// With the Slack channel as `[slack]` configures it: live with a bot
    /// token, naming the API it posts to.
    pub fn with_slack(self, slack: &SlackSettings) -> Channels {
        if !slack.is_configured() {
            return self;
        }
        self.live("slack", format!("posts with chat.postMessage to {}", slack.api_url))
    }

    /// With the push channel as `[push]` configures it: live when any
    /// provider is, naming which.
    pub fn with_push(self, push: &PushSettings) -> Channels {
        let providers: Vec<&str> = [
            (push.vapid_private_key.is_some(), "Web Push"),
            (push.fcm.service_account_file.is_some(), "FCM"),
            (push.apns.key_file.is_some(), "APNs"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if providers.is_empty() {
            return self;
        }
        self.live("push", format!("sends through {}", providers.join(", ")))
    }

    pub fn all(&self) -> &[ChannelState] {
        &self.states
    }

    pub fn get(&self, name: &str) -> Option<&ChannelState> {
        self.states.iter().find(|s| s.name == name)
    }

    /// The message for a known channel that cannot deliver here; `None` for
    /// a live channel or an unknown name (which [`check_known`] refuses).
    pub fn not_live(&self, name: &str) -> Option<String> {
        self.get(name).filter(|s| !s.live).map(ChannelState::not_live_message)
    }
}

impl Default for Channels {
    /// The defaults' channels: the inbox only.
    fn default() -> Self {
        Channels::from_settings(&EmailSettings::default(), &WebhookSettings::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_are_refused_with_the_known_ones_listed() {
        assert!(check_known("email").is_ok());
        let err = check_known("emial").unwrap_err();
        assert_eq!(err, "unknown channel \"emial\"; Herald's channels are email, inbox, push, slack, sms, webhook");
    }

    #[test]
    fn a_channel_without_its_setting_says_which_setting_turns_it_on() {
        let channels = Channels::default();
        assert_eq!(channels.not_live("inbox"), None);
        let msg = channels.not_live("webhook").unwrap();
        assert!(msg.contains("webhook.signing_secret") && msg.contains("HERALD_WEBHOOK__SIGNING_SECRET"), "{msg}");
        let email = EmailSettings {
            transport: Some("file:///tmp/x".into()),
            from: Some("a@b.c".into()),
            ..EmailSettings::default()
        };
        let channels = Channels::from_settings(&email, &WebhookSettings::default());
        assert_eq!(channels.not_live("email"), None);
        assert!(channels.get("email").unwrap().detail.contains("nothing leaves this machine"));
    }

    #[test]
    fn push_is_live_only_with_a_provider_and_names_it() {
        let off = Channels::default();
        let msg = off.not_live("push").unwrap();
        assert!(msg.contains("no push provider") && msg.contains("push.vapid_private_key"), "{msg}");
        let mut push = PushSettings::default();
        push.fcm.service_account_file = Some("/etc/herald/fcm.json".into());
        let on = Channels::default().with_push(&push);
        assert_eq!(on.not_live("push"), None);
        assert_eq!(on.get("push").unwrap().detail, "sends through FCM");
    }

    #[test]
    fn sms_and_slack_are_live_only_when_configured_and_name_their_setting() {
        let off = Channels::default();
        let sms = off.not_live("sms").unwrap();
        assert!(sms.contains("no SMS transport") && sms.contains("sms.transport"), "{sms}");
        let slack = off.not_live("slack").unwrap();
        assert!(slack.contains("no Slack bot token") && slack.contains("HERALD_SLACK__BOT_TOKEN"), "{slack}");
        let sms_settings = SmsSettings {
            transport: Some("twilio://AC0123456789abcdef0123456789abcdef:secret1@api.twilio.com".into()),
            from: Some("+14155550100".into()),
            ..SmsSettings::default()
        };
        let slack_settings = SlackSettings { bot_token: Some("xoxb-1-2".into()), ..SlackSettings::default() };
        let on = Channels::default().with_sms(&sms_settings).with_slack(&slack_settings);
        assert_eq!((on.not_live("sms"), on.not_live("slack")), (None, None));
        assert_eq!(on.get("sms").unwrap().detail, "sends texts through Twilio");
        assert!(!format!("{on:?}").contains("secret1"));
        assert_eq!(personal_name("sms"), Some("Text messages"));
        assert_eq!(personal_name("slack"), Some("Slack"));
    }
}
