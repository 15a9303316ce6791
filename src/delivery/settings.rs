//! The `[email]`, `[webhook]`, `[push]`, `[sms]` and `[slack]` sections of
//! herald.toml: the channels' own settings, declared beside the channels that use them so that the
//! delivery code never reads the whole configuration (`config` re-exports
//! them and checks them with the rest at start).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::channel::push::apns::{Apns, ApnsSettings};
use super::channel::push::fcm::Fcm;
use super::channel::push::vapid::VapidKey;
use super::channel::push::webpush::{EndpointPolicy, WebPush};
use super::channel::push::{PushError, Transports};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Standard Webhooks signing secret, `whsec_` + base64 of at least 24
    /// random bytes (`openssl rand -base64 32`), or a list of them while
    /// receivers move from one to the next: every delivery is signed with
    /// each (see `delivery::channel::signing`). Without it the webhook
    /// channel cannot deliver, and its rows end `failed` saying so.
    pub signing_secret: Option<super::channel::signing::SecretList>,
    /// Allow rules to target loopback and private addresses. Off by default,
    /// so a rule cannot be used to reach internal services.
    pub allow_private_networks: bool,
    /// Longest a receiver may take to answer before it counts as a
    /// transient failure. Default "10s".
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

/// The email channel. Without `transport` the channel is known by name but
/// cannot deliver: its rows end `failed` saying so.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmailSettings {
    /// Where messages go: `smtp://USER:PASS@HOST:PORT?tls=required|starttls|none`
    /// (STARTTLS; `required` is the default and refuses a server without
    /// it, `starttls` uses it when offered, `none` is plain text for a relay
    /// on the same host), `smtps://USER:PASS@HOST:PORT` (implicit TLS), or
    /// `file:///DIR` (development: one `.eml` file per message, nothing
    /// leaves the machine). Unset: no email is sent.
    pub transport: Option<String>,
    /// The From address, e.g. `Herald <news@example.com>`. Required with a
    /// transport. Its domain also names Message-IDs (`<OUTBOX-ID@DOMAIN>`).
    pub from: Option<String>,
    /// The deployment secret keying address hashes and unsubscribe tokens.
    /// Unset: generated into `data_dir` on first start. Instances sharing a
    /// database must share it.
    pub address_secret: Option<String>,
    /// Public base URL of this Herald's HTTP server, e.g.
    /// `https://herald.example.com`: unsubscribe links are
    /// `PUBLIC_URL/u/TOKEN`. Required with an `smtp`/`smtps` transport;
    /// with `file://` it defaults to `http://` + `http.listen`.
    pub public_url: Option<String>,
    /// An address that takes unsubscribe requests by mail, added to
    /// List-Unsubscribe as `mailto:` when set.
    pub unsubscribe_mailto: Option<String>,
    /// When set, the envelope sender (Return-Path) is
    /// `bounce+OUTBOX-ID@BOUNCE_DOMAIN` (VERP), so an asynchronous bounce
    /// names the message it is about.
    pub bounce_domain: Option<String>,
    /// DKIM selector (`SELECTOR._domainkey.DOMAIN` holds the public key).
    /// Set together with `dkim_private_key_file` to sign every message;
    /// the signature covers From, To, Subject, Date, Message-ID,
    /// List-Unsubscribe, List-Unsubscribe-Post and X-Herald-Outbox-Id.
    pub dkim_selector: Option<String>,
    /// The signing domain (`d=`). Default: the domain of `email.from`.
    pub dkim_domain: Option<String>,
    /// A file holding the DKIM private key: PKCS#1 PEM RSA
    /// (`-----BEGIN RSA PRIVATE KEY-----`) or a base64 Ed25519 seed.
    pub dkim_private_key_file: Option<PathBuf>,
    /// A PEM file of CA certificates to trust for the SMTP server's TLS
    /// certificate (STARTTLS and `smtps://`), for a relay whose certificate
    /// a private CA issued. Trusted in addition to the operating system's
    /// store and the built-in (Mozilla) roots, which are always trusted.
    /// `HERALD_EMAIL__TLS_CA_FILE`. Default unset.
    pub tls_ca_file: Option<PathBuf>,
    /// Reuse SMTP connections between messages (a pool of up to
    /// `concurrency`). Off: one connection per message. Default true.
    pub pool: bool,
    /// Most messages in flight to the transport at once, and the pool's
    /// size (1 to 1000). Default 8.
    pub concurrency: u32,
    /// Most messages started per second on this transport (0: no limit).
    /// Default 0.
    pub rate_per_second: u32,
    /// Longest one message's SMTP exchange may take (`smtp://`: connect to
    /// the reply after the data; `smtps://`: each command). Must be shorter
    /// than `worker.deliver_timeout`. Default "30s".
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings { signing_secret: None, allow_private_networks: false, timeout: Duration::from_secs(10) }
    }
}

impl WebhookSettings {
    pub fn policy(&self) -> super::channel::webhook::WebhookPolicy {
        super::channel::webhook::WebhookPolicy { allow_private_networks: self.allow_private_networks }
    }
}

impl Default for EmailSettings {
    fn default() -> Self {
        EmailSettings {
            transport: None,
            from: None,
            address_secret: None,
            public_url: None,
            unsubscribe_mailto: None,
            bounce_domain: None,
            dkim_selector: None,
            dkim_domain: None,
            dkim_private_key_file: None,
            tls_ca_file: None,
            pool: true,
            concurrency: 8,
            rate_per_second: 0,
            timeout: Duration::from_secs(30),
        }
    }
}

/// The `[push]` section: Web Push (VAPID), FCM and APNs, each on when its
/// credential is set. Checked at start by building the transports
/// ([`PushSettings::transports`]): a key that does not parse or a file that
/// cannot be read stops `serve` with the key named, rather than failing
/// every push row later.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushSettings {
    /// The application server's VAPID private key: the base64url raw
    /// 32-byte key `herald push vapid-keys` (or `npx web-push
    /// generate-vapid-keys`) prints, so keys made for a Node server keep
    /// their subscriptions. Turns Web Push on; needs `vapid_subject`.
    /// `HERALD_PUSH__VAPID_PRIVATE_KEY` keeps it out of the file.
    pub vapid_private_key: Option<String>,
    /// A contact for the push services' operators: `mailto:ops@example.com`
    /// or an `https://` page (RFC 8292 §2.1). Required with the key.
    pub vapid_subject: Option<String>,
    /// Accept Web Push endpoints on `http://`, loopback and private
    /// addresses (a test push service). Off: a browser's subscription can
    /// name any URL, and this is what keeps it from reaching internal
    /// services. Default false.
    pub allow_private_networks: bool,
    /// Longest a push service may take to answer one request before it
    /// counts as a transient failure; shorter than
    /// `worker.deliver_timeout`. Default "10s".
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub fcm: FcmSection,
    pub apns: ApnsSection,
}

/// `[push.fcm]`: Firebase Cloud Messaging, HTTP v1 API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FcmSection {
    /// The service-account JSON file from the Firebase console (Project
    /// settings, Service accounts, Generate new private key). Turns FCM on.
    pub service_account_file: Option<PathBuf>,
    /// Where `messages:send` goes. Default "https://fcm.googleapis.com".
    pub endpoint: String,
}

/// `[push.apns]`: the Apple Push Notification service with a `.p8` token
/// key. The four credentials are set together or not at all.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApnsSection {
    /// The `.p8` key file from the Apple developer account (Keys). Turns
    /// APNs on.
    pub key_file: Option<PathBuf>,
    /// The key's 10-character Key ID.
    pub key_id: Option<String>,
    /// The developer account's 10-character Team ID.
    pub team_id: Option<String>,
    /// The app's bundle id (`apns-topic`), e.g. `com.example.app`.
    pub topic: Option<String>,
    /// Default "https://api.push.apple.com" (production); apps built for
    /// development use "https://api.sandbox.push.apple.com".
    pub endpoint: String,
}

impl Default for PushSettings {
    fn default() -> Self {
        PushSettings {
            vapid_private_key: None,
            vapid_subject: None,
            allow_private_networks: false,
            timeout: Duration::from_secs(10),
            fcm: FcmSection::default(),
            apns: ApnsSection::default(),
        }
    }
}

impl Default for FcmSection {
    fn default() -> Self {
        FcmSection { service_account_file: None, endpoint: "https://fcm.googleapis.com".into() }
    }
}

impl Default for ApnsSection {
    fn default() -> Self {
        ApnsSection {
            key_file: None,
            key_id: None,
            team_id: None,
            topic: None,
            endpoint: "https://api.push.apple.com".into(),
        }
    }
}

/// A channel setting Herald refuses to start with, in the words of
/// `config::ConfigError::Invalid`.
#[derive(Debug, thiserror::Error)]
#[error("configuration key `{key}`: {value} is not accepted; expected {expected}")]
pub struct SettingError {
    pub key: &'static str,
    pub value: String,
    pub expected: String,
}

fn refused(key: &'static str, value: impl Into<String>, expected: impl Into<String>) -> SettingError {
    SettingError { key, value: value.into(), expected: expected.into() }
}

/// `endpoint` as an http(s) URL; `http://` is for a local test server.
fn endpoint_url(key: &'static str, endpoint: &str) -> Result<(), SettingError> {
    match url::Url::parse(endpoint) {
        Ok(u) if matches!(u.scheme(), "https" | "http") && u.host().is_some() => Ok(()),
        _ => Err(refused(key, format!("{endpoint:?}"), "an https:// URL (http:// for a local test server)")),
    }
}

impl PushSettings {
    /// The endpoint policy Web Push subscriptions are checked against, at
    /// registration and at delivery.
    pub fn policy(&self) -> EndpointPolicy {
        EndpointPolicy { allow_private_networks: self.allow_private_networks }
    }

    /// Whether any provider is configured: without one, no push row can
    /// be delivered.
    pub fn is_configured(&self) -> bool {
        self.vapid_private_key.is_some() || self.fcm.service_account_file.is_some() || self.apns.key_file.is_some()
    }

    /// The VAPID identity, or `None` when Web Push is off.
    pub fn vapid_key(&self) -> Result<Option<VapidKey>, SettingError> {
        let (key, subject) = match (&self.vapid_private_key, &self.vapid_subject) {
            (None, None) => return Ok(None),
            (Some(_), None) => {
                return Err(refused(
                    "push.vapid_subject",
                    "(unset)",
                    "a mailto: or https:// contact, required with push.vapid_private_key",
                ));
            }
            (None, Some(_)) => {
                return Err(refused(
                    "push.vapid_private_key",
                    "(unset)",
                    "a key from `herald push vapid-keys`, required with push.vapid_subject (or neither)",
                ));
            }
            (Some(k), Some(s)) => (k, s),
        };
        let contact = ["mailto:", "https://"].iter().any(|p| has_after(subject, p));
        if !contact {
            return Err(refused(
                "push.vapid_subject",
                format!("{subject:?}"),
                "a mailto: or https:// contact for the push services, e.g. \"mailto:ops@example.com\"",
            ));
        }
        VapidKey::new(key, subject).map(Some).map_err(|e| {
            let why = cause(e);
            // The key is a secret: never echoed.
            refused(
                "push.vapid_private_key",
                "(hidden)",
                format!(
                    "the base64url raw 32-byte P-256 key `herald push vapid-keys` or `npx web-push \
                     generate-vapid-keys` prints ({why})"
                ),
            )
        })
    }

    /// The transports this section configures, each `None` when its
    /// credential is unset: what the push channel delivers with.
    pub fn transports(&self) -> Result<Transports, SettingError> {
        let web = self.vapid_key()?.map(|k| WebPush::new(Arc::new(k), self.policy(), self.timeout));
        Ok(Transports { web, fcm: self.fcm()?, apns: self.apns()? })
    }

    fn fcm(&self) -> Result<Option<Fcm>, SettingError> {
        endpoint_url("push.fcm.endpoint", &self.fcm.endpoint)?;
        let Some(path) = &self.fcm.service_account_file else { return Ok(None) };
        Fcm::from_file(path, &self.fcm.endpoint, self.timeout).map(Some).map_err(|e| {
            let why = cause(e);
            refused(
                "push.fcm.service_account_file",
                path.display().to_string(),
                format!("a readable service-account JSON file from the Firebase console: {why}"),
            )
        })
    }

    fn apns(&self) -> Result<Option<Apns>, SettingError> {
        let a = &self.apns;
        endpoint_url("push.apns.endpoint", &a.endpoint)?;
        let set = [
            ("push.apns.key_file", a.key_file.is_some()),
            ("push.apns.key_id", a.key_id.is_some()),
            ("push.apns.team_id", a.team_id.is_some()),
            ("push.apns.topic", a.topic.is_some()),
        ];
        if set.iter().all(|(_, on)| !on) {
            return Ok(None);
        }
        if let Some((missing, _)) = set.iter().find(|(_, on)| !on) {
            return Err(refused(
                missing,
                "(unset)",
                "set together with the rest of [push.apns]: key_file, key_id, team_id and topic (or none of them)",
            ));
        }
        let (Some(path), Some(key_id), Some(team_id), Some(topic)) = (&a.key_file, &a.key_id, &a.team_id, &a.topic)
        else {
            unreachable!("all four are set")
        };
        for (key, value, what) in [
            ("push.apns.key_id", key_id, "the 10-character Key ID Apple shows beside the .p8 key"),
            ("push.apns.team_id", team_id, "the 10-character Team ID of the Apple developer account"),
        ] {
            if value.len() != 10 || !value.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(refused(key, format!("{value:?}"), what));
            }
        }
        if topic.is_empty() || topic.contains(char::is_whitespace) {
            return Err(refused("push.apns.topic", format!("{topic:?}"), "the app's bundle id, e.g. com.example.app"));
        }
        let shown = path.display().to_string();
        let pem = std::fs::read_to_string(path)
            .map_err(|e| refused("push.apns.key_file", shown.clone(), format!("a readable .p8 file ({e})")))?;
        Apns::new(&ApnsSettings { key_pem: &pem, key_id, team_id, topic, endpoint: &a.endpoint, timeout: self.timeout })
            .map(Some)
            .map_err(|e| {
                let why = cause(e);
                refused("push.apns.key_file", shown, format!("the .p8 key Apple hands out, an EC P-256 key ({why})"))
            })
    }
}

/// What a transport said was wrong, without the setting's name (the
/// error names it already).
fn cause(e: PushError) -> String {
    match e {
        PushError::Credential { why, .. } => why,
        other => other.to_string(),
    }
}

/// `value` starts with `prefix` and has something after it.
fn has_after(value: &str, prefix: &str) -> bool {
    value.strip_prefix(prefix).is_some_and(|rest| !rest.trim().is_empty())
}

/// The `[sms]` section. Without `transport` the channel cannot deliver.
/// Checked at start ([`SmsSettings::check`]) with the transports' own
/// parsers, so what starts is what the channel will send with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmsSettings {
    /// Where texts go, one URL naming the provider and its credentials:
    /// `twilio://ACCOUNT_SID:AUTH_TOKEN@api.twilio.com` (Twilio's Messages
    /// API), `twilio+http://SID:TOKEN@127.0.0.1:PORT` (a local double),
    /// `kannel://USER:PASS@HOST:13013` (Kannel's `sendsms`; port 13013 when
    /// none is given) or `kannel+https://USER:PASS@HOST:PORT`.
    /// `HERALD_SMS__TRANSPORT` keeps the credentials out of the file.
    /// Unset: no text is sent.
    pub transport: Option<String>,
    /// Who texts come from, required with a transport: a number with its
    /// country code (`+14155550100`), an alphanumeric sender ID of at most
    /// 11 letters, digits and spaces (`Herald`; one-way, and refused in the
    /// US and Canada), a short code (`12345`), or with Twilio
    /// `messaging_service_sid=MG…`.
    #[serde(deserialize_with = "crate::config::text_or_number")]
    pub from: Option<String>,
    /// Most segments one text may cost (1 to 10): a rule whose sample
    /// renders longer is refused at save. Default 3.
    pub max_segments: u32,
    /// Most texts per second through the transport, shared by every
    /// instance (long codes are held to about 1/s by the carriers).
    /// Unset: no limit.
    pub rate: Option<f64>,
    /// The answer to an inbound `HELP` (at most `max_segments` segments).
    /// Unset: `HELP` is not answered.
    pub help_text: Option<String>,
}

impl Default for SmsSettings {
    fn default() -> Self {
        SmsSettings {
            transport: None,
            from: None,
            max_segments: super::channel::sms::segments::DEFAULT_MAX_SEGMENTS as u32,
            rate: None,
            help_text: None,
        }
    }
}

/// `[sms]` as the channel will use it, once checked.
#[derive(Debug, Clone)]
pub struct SmsConfig {
    pub transport: super::channel::sms::transport::SmsTransport,
    pub from: super::channel::sms::sender::Sender,
}

impl SmsSettings {
    /// Whether a transport is configured: without one, no SMS row can be
    /// delivered.
    pub fn is_configured(&self) -> bool {
        self.transport.is_some()
    }

    /// Checks every key, and gives the transport and sender when a
    /// transport is set (`None` when it is not).
    pub fn check(&self) -> Result<Option<SmsConfig>, SettingError> {
        use super::channel::sms::sender::Sender;
        use super::channel::sms::transport::SmsTransport;
        if !(1..=10).contains(&self.max_segments) {
            return Err(refused("sms.max_segments", self.max_segments.to_string(), "1 to 10"));
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(refused("sms.rate", rate.to_string(), "messages per second above 0, such as 1 or 0.5"));
        }
        if let Some(help) = &self.help_text {
            if help.trim().is_empty() {
                return Err(refused("sms.help_text", format!("{help:?}"), "the text that answers HELP, or unset"));
            }
            if let Err(e) = super::channel::sms::segments::within(help, self.max_segments as usize) {
                return Err(refused(
                    "sms.help_text",
                    format!("{} characters", help.chars().count()),
                    format!("a text of at most sms.max_segments ({}) segments: {e}", self.max_segments),
                ));
            }
        }
        let from = match &self.from {
            Some(f) => Some(Sender::parse(f).map_err(|e| {
                refused(
                    "sms.from",
                    format!("{f:?}"),
                    format!("{}; expected {}", e.why, super::channel::sms::sender::EXPECTED),
                )
            })?),
            None => None,
        };
        let Some(url) = &self.transport else { return Ok(None) };
        // The URL holds a credential: shown redacted.
        let transport = SmsTransport::parse(url).map_err(|e| {
            let expected = format!("{}: {}", super::channel::sms::transport::EXPECTED, e.why);
            refused("sms.transport", SmsTransport::redacted(url), expected)
        })?;
        let Some(from) = from else {
            return Err(refused(
                "sms.from",
                "(unset)",
                "the sender, required with sms.transport: a number such as \"+14155550100\", a sender ID such as \"Herald\", or messaging_service_sid=MG… for Twilio",
            ));
        };
        if matches!(from, Sender::MessagingService(_)) && !matches!(transport, SmsTransport::Twilio(_)) {
            return Err(refused(
                "sms.from",
                format!("{from}"),
                "a number, sender ID or short code: a Messaging Service (messaging_service_sid=) is Twilio's, and sms.transport is not Twilio",
            ));
        }
        Ok(Some(SmsConfig { transport, from }))
    }
}

/// The `[slack]` section. Without `bot_token` the channel cannot deliver.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackSettings {
    /// The Slack app's bot token, `xoxb-…` (OAuth & Permissions; needs the
    /// `chat:write` scope). `HERALD_SLACK__BOT_TOKEN` keeps it out of the
    /// file. Unset: no Slack message is sent.
    pub bot_token: Option<String>,
    /// Slack's Web API base. Default "https://slack.com/api"; an `http://`
    /// URL is for a local test server.
    pub api_url: String,
}

impl Default for SlackSettings {
    fn default() -> Self {
        SlackSettings { bot_token: None, api_url: "https://slack.com/api".into() }
    }
}

/// `[slack]` as the channel will use it, once checked.
#[derive(Debug, Clone)]
pub struct SlackConfig {
    pub bot_token: super::channel::slack::BotToken,
    pub api_url: url::Url,
}

impl SlackSettings {
    /// Whether a bot token is configured: without one, no Slack row can be
    /// delivered.
    pub fn is_configured(&self) -> bool {
        self.bot_token.is_some()
    }

    /// Checks both keys, and gives them parsed when a token is set.
    pub fn check(&self) -> Result<Option<SlackConfig>, SettingError> {
        endpoint_url("slack.api_url", &self.api_url)?;
        let api_url = url::Url::parse(&self.api_url)
            .map_err(|e| refused("slack.api_url", format!("{:?}", self.api_url), e.to_string()))?;
        let Some(token) = &self.bot_token else { return Ok(None) };
        let bot_token = super::channel::slack::BotToken::parse(token)
            .map_err(|e| refused("slack.bot_token", e.value, e.expected))?;
        Ok(Some(SlackConfig { bot_token, api_url }))
    }
}
