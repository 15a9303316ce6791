//! Settings: defaults, overridden by a TOML file, by `HERALD_*` environment
//! variables, and by command-line flags, in that order.
//!
//! Every field is documented here, where it is declared, and `herald serve
//! --help` and the README point at this one place. A bad value is refused at
//! start with the key, the value and what would be accepted: a typo found at
//! deploy time is cheaper than one found when the first message is late.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::store::Dialect;

mod sections;
pub use crate::delivery::settings::{
    ApnsSection, EmailSettings, FcmSection, PushSettings, SlackSettings, SmsSettings, WebhookSettings,
};
pub use sections::*;

/// `HERALD_*` variables that are not configuration keys.
const NOT_KEYS: [&str; 2] = ["HERALD_CONFIG", "HERALD_LOG"];

/// The file read when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "herald.toml";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where Herald keeps its tables: `sqlite://PATH` (created on first
    /// start), `postgres://USER@HOST/DB` or `mysql://USER@HOST/DB`
    /// (`mariadb://` also accepted). Default `sqlite://herald.db`.
    pub database_url: String,
    /// Apply pending migrations when `serve` starts. Turn off when a deploy
    /// step runs `herald migrate` itself.
    pub migrate_on_start: bool,
    pub database: DatabaseSettings,
    pub http: HttpSettings,
    pub worker: WorkerSettings,
    pub planner: PlannerSettings,
    pub webhook: WebhookSettings,
    pub inbox: InboxSettings,
    /// Where Herald keeps files of its own: today only the generated
    /// address secret (`herald-secret`, mode 0600) when `email.address_secret`
    /// is not set. Default "." (the working directory).
    pub data_dir: PathBuf,
    pub email: EmailSettings,
    pub push: PushSettings,
    pub sms: SmsSettings,
    pub slack: SlackSettings,
    pub bounces: BounceSettings,
    pub ui: UiSettings,
    pub retention: RetentionSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: "sqlite://herald.db".into(),
            migrate_on_start: true,
            database: DatabaseSettings::default(),
            http: HttpSettings::default(),
            worker: WorkerSettings::default(),
            planner: PlannerSettings::default(),
            webhook: WebhookSettings::default(),
            inbox: InboxSettings::default(),
            data_dir: PathBuf::from("."),
            email: EmailSettings::default(),
            push: PushSettings::default(),
            sms: SmsSettings::default(),
            slack: SlackSettings::default(),
            bounces: BounceSettings::default(),
            ui: UiSettings::default(),
            retention: RetentionSettings::default(),
        }
    }
}

/// A setting Herald refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Parse(String),
    #[error("configuration key `{key}`: {value} is not accepted; expected {expected}")]
    Invalid { key: &'static str, value: String, expected: String },
    #[error("configuration file {path}: not found")]
    MissingFile { path: PathBuf },
}

/// Values given as command-line flags; `None` leaves the lower layers' value.
#[derive(Debug, Default, Clone, Serialize)]
pub struct FlagOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migrate_on_start: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpFlags>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HttpFlags {
    pub listen: SocketAddr,
}

impl Config {
    /// Reads the layers and validates the result. `file` is `--config`;
    /// without it `herald.toml` in the working directory is read if present.
    /// `env` is the process environment (a parameter so tests need not
    /// mutate the real one).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &FlagOverrides,
    ) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        match file {
            Some(path) if !path.exists() => {
                return Err(ConfigError::MissingFile { path: path.to_owned() });
            }
            Some(path) => figment = figment.merge(Toml::file(path)),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => figment = figment.merge(Toml::file(DEFAULT_CONFIG_FILE)),
            None => {}
        }
        // HERALD_WORKER__BATCH=50 sets worker.batch. HERALD_CONFIG names the
        // file, HERALD_LOG is the log filter (read before configuration, so
        // a configuration error can be logged), and HERALD_TEST_* belong to
        // the test suite; none of them is a key.
        let vars: Vec<(String, String)> = env
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("HERALD_") && !NOT_KEYS.contains(&k.as_str()) && !k.starts_with("HERALD_TEST_")
            })
            .collect();
        figment = figment.merge(EnvSnapshot { vars });
        figment = figment.merge(Serialized::defaults(flags));
        let config: Config = figment.extract().map_err(|e| ConfigError::Parse(describe(e)))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        fn invalid(key: &'static str, value: impl ToString, expected: impl Into<String>) -> ConfigError {
            ConfigError::Invalid { key, value: value.to_string(), expected: expected.into() }
        }
        if Dialect::from_url(&self.database_url).is_none() {
            return Err(invalid(
                "database_url",
                format!("{:?}", redact_url_password(&self.database_url)),
                "sqlite://PATH, postgres://USER@HOST/DB or mysql://USER@HOST/DB",
            ));
        }
        let db = &self.database;
        if !(1..=1000).contains(&db.max_connections) {
            return Err(invalid("database.max_connections", db.max_connections, "1 to 1000"));
        }
        if !(1024..=64 * 1024 * 1024).contains(&self.http.max_body_bytes) {
            return Err(invalid("http.max_body_bytes", self.http.max_body_bytes, "1024 to 67108864"));
        }
        let h = self.http.header_read_timeout;
        if h < Duration::from_secs(1) || h > Duration::from_secs(600) {
            return Err(invalid("http.header_read_timeout", humantime::format_duration(h), "1s to 10m"));
        }
        if !(1..=1_000_000).contains(&self.http.max_connections) {
            return Err(invalid("http.max_connections", self.http.max_connections, "1 to 1000000"));
        }
        let r = &self.retention;
        if !(10..=100_000).contains(&r.batch) {
            return Err(invalid("retention.batch", r.batch, "10 to 100000"));
        }
        if r.interval < Duration::from_secs(1) {
            return Err(invalid("retention.interval", humantime::format_duration(r.interval), "at least 1s"));
        }
        for table in crate::store::Prunable::ALL {
            if let Some(p) = r.period(table)
                && p < Duration::from_secs(3600)
            {
                return Err(invalid(
                    table.retention_key(),
                    humantime::format_duration(p),
                    "\"0s\" (keep for ever) or at least 1h",
                ));
            }
        }
        // The soft-bounce policy counts an address's bounces of the last
        // `soft_bounce_window` from the bounce evidence: pruned sooner, the
        // count never reaches the limit and the policy silently does
        // nothing. Refused rather than the window quietly shortened or the
        // retention quietly lengthened: either would run a policy other
        // than the one written down.
        let soft = &self.bounces;
        if r.enabled && soft.soft_bounce_limit > 0 && !r.bounces.is_zero() && r.bounces < soft.soft_bounce_window {
            return Err(invalid(
                "retention.bounces",
                humantime::format_duration(r.bounces),
                format!(
                    "at least bounces.soft_bounce_window ({}), whose soft bounces the policy counts; or \"0s\" \
                     (keep for ever), or bounces.soft_bounce_limit = 0 (no soft-bounce policy)",
                    humantime::format_duration(soft.soft_bounce_window)
                ),
            ));
        }
        if !(1..=10_000).contains(&self.planner.batch) {
            return Err(invalid("planner.batch", self.planner.batch, "1 to 10000"));
        }
        if !(100..=100_000).contains(&self.planner.fan_out_chunk) {
            return Err(invalid("planner.fan_out_chunk", self.planner.fan_out_chunk, "100 to 100000"));
        }
        if self.planner.poll < Duration::from_millis(10) {
            return Err(invalid("planner.poll", humantime::format_duration(self.planner.poll), "at least 10ms"));
        }
        if let Some(secrets) = &self.webhook.signing_secret
            && let Err(e) = crate::delivery::channel::signing::SigningSecrets::parse(secrets)
        {
            return Err(invalid(
                "webhook.signing_secret",
                e.shown(),
                format!("a Standard Webhooks secret, or a list of them: {e}"),
            ));
        }
        self.within_delivery("webhook.timeout", self.webhook.timeout)?;
        if let Some(secret) = &self.inbox.token_secret
            && secret.len() < 32
        {
            return Err(invalid("inbox.token_secret", "(hidden)", "at least 32 characters of random text"));
        }
        if self.inbox.token_ttl < Duration::from_secs(60) || self.inbox.token_ttl > Duration::from_secs(30 * 86_400) {
            return Err(invalid("inbox.token_ttl", humantime::format_duration(self.inbox.token_ttl), "1m to 30days"));
        }
        if let Some(bad) =
            self.inbox.cors_origins.iter().find(|o| {
                o.as_str() != "*" && !(o.starts_with("https://") || o.starts_with("http://")) || o.ends_with('/')
            })
        {
            return Err(invalid(
                "inbox.cors_origins",
                format!("{bad:?}"),
                "origins like \"https://app.example.com\" (no path, no trailing slash) or \"*\"",
            ));
        }
        if let Some(k) = &self.bounces.sendgrid_public_key
            && let Err(e) = crate::feedback::providers::sendgrid::SendGridKey::parse(k)
        {
            return Err(invalid(
                "bounces.sendgrid_public_key",
                "(hidden)",
                format!("SendGrid's verification key: {e}"),
            ));
        }
        if let Some(path) = &self.bounces.ses_certificate_file {
            let pem = std::fs::read_to_string(path).map_err(|e| {
                invalid("bounces.ses_certificate_file", path.display(), format!("a readable PEM certificate ({e})"))
            })?;
            crate::feedback::providers::ses::key_from_pem(&pem).map_err(|e| {
                invalid("bounces.ses_certificate_file", path.display(), format!("an RSA certificate: {e}"))
            })?;
        }
        if self.bounces.postmark_user.is_some() != self.bounces.postmark_password.is_some() {
            return Err(invalid("bounces.postmark_password", "(hidden)", "set together with bounces.postmark_user"));
        }
        let ui = &self.ui;
        if ui.session_ttl < Duration::from_secs(300) || ui.session_ttl > Duration::from_secs(30 * 86_400) {
            return Err(invalid("ui.session_ttl", humantime::format_duration(ui.session_ttl), "5m to 30days"));
        }
        if !(1..=1000).contains(&ui.login_max_failures) {
            return Err(invalid("ui.login_max_failures", ui.login_max_failures, "1 to 1000"));
        }
        if !(1..=100_000).contains(&ui.login_max_failures_per_email) {
            return Err(invalid("ui.login_max_failures_per_email", ui.login_max_failures_per_email, "1 to 100000"));
        }
        if !(1..=64).contains(&ui.login_concurrency) {
            return Err(invalid("ui.login_concurrency", ui.login_concurrency, "1 to 64"));
        }
        if !(1..=100_000).contains(&ui.login_max_failures_per_ip) {
            return Err(invalid("ui.login_max_failures_per_ip", ui.login_max_failures_per_ip, "1 to 100000"));
        }
        if ui.login_window < Duration::from_secs(60) || ui.login_window > Duration::from_secs(86_400) {
            return Err(invalid("ui.login_window", humantime::format_duration(ui.login_window), "1m to 1day"));
        }
        let w = &self.worker;
        if !(1..=10_000).contains(&w.batch) {
            return Err(invalid("worker.batch", w.batch, "1 to 10000"));
        }
        if !(1..=100).contains(&w.max_attempts) {
            return Err(invalid("worker.max_attempts", w.max_attempts, "1 to 100"));
        }
        if w.poll < Duration::from_millis(10) {
            return Err(invalid("worker.poll", humantime::format_duration(w.poll), "at least 10ms"));
        }
        if w.deliver_timeout.is_zero() {
            return Err(invalid("worker.deliver_timeout", "0s", "a positive duration such as \"60s\""));
        }
        if w.stale <= w.deliver_timeout {
            return Err(invalid(
                "worker.stale",
                humantime::format_duration(w.stale),
                format!(
                    "longer than worker.deliver_timeout ({}), or a delivery still in flight would be taken back and sent twice",
                    humantime::format_duration(w.deliver_timeout)
                ),
            ));
        }
        if w.lease < Duration::from_secs(3) {
            return Err(invalid("worker.lease", humantime::format_duration(w.lease), "at least 3s"));
        }
        if w.default_concurrency == 0 {
            return Err(invalid("worker.default_concurrency", 0, "1 or more"));
        }
        if let Some((name, _)) = w.concurrency.iter().find(|(_, n)| **n == 0) {
            let _ = name;
            return Err(invalid("worker.concurrency", format!("{name} = 0"), "1 or more per channel"));
        }
        if crate::planning::workflow::parse_zone(&w.default_timezone).is_none() {
            return Err(invalid(
                "worker.default_timezone",
                &w.default_timezone,
                "a time zone of the tz database, e.g. \"UTC\" or \"Europe/Berlin\"",
            ));
        }
        self.public_url()?;
        self.validate_email()?;
        self.validate_push()?;
        let setting = |e: crate::delivery::settings::SettingError| ConfigError::Invalid {
            key: e.key,
            value: e.value,
            expected: e.expected,
        };
        self.sms.check().map_err(setting)?;
        self.slack.check().map_err(setting)?;
        Ok(())
    }

    /// The public base URL links and callbacks are built from:
    /// `http.public_url`, or `email.public_url`, its older name (without a
    /// trailing `/`). Both set to different URLs is refused, naming both:
    /// picking one would send half the links somewhere the operator did not
    /// mean. Rejected: deprecating the old key with a warning only, which
    /// leaves that case to a guess.
    pub fn public_url(&self) -> Result<Option<&str>, ConfigError> {
        fn trimmed(u: &Option<String>) -> Option<&str> {
            u.as_deref().map(|u| u.trim_end_matches('/'))
        }
        let (new, old) = (trimmed(&self.http.public_url), trimmed(&self.email.public_url));
        for (key, url) in [("http.public_url", new), ("email.public_url", old)] {
            if let Some(url) = url
                && !(url.starts_with("https://") || url.starts_with("http://"))
            {
                return Err(ConfigError::Invalid {
                    key,
                    value: format!("{url:?}"),
                    expected: "an https:// (or http://) base URL".into(),
                });
            }
        }
        match (new, old) {
            (Some(n), Some(o)) if n != o => Err(ConfigError::Invalid {
                key: "http.public_url",
                value: format!("{n:?}"),
                expected: format!(
                    "the same URL as email.public_url ({o:?}), its older name, or only one of http.public_url and \
                     email.public_url set"
                ),
            }),
            (n, o) => Ok(n.or(o)),
        }
    }

    /// A per-request timeout must leave the delivery its own: one as long
    /// as `worker.deliver_timeout` would be cut off by it, and counted as a
    /// timeout of the whole delivery instead of the provider's.
    fn within_delivery(&self, key: &'static str, timeout: Duration) -> Result<(), ConfigError> {
        if timeout.is_zero() || timeout >= self.worker.deliver_timeout {
            return Err(ConfigError::Invalid {
                key,
                value: humantime::format_duration(timeout).to_string(),
                expected: format!(
                    "above zero and shorter than worker.deliver_timeout ({})",
                    humantime::format_duration(self.worker.deliver_timeout)
                ),
            });
        }
        Ok(())
    }

    /// `[push]`, checked by building its transports: the keys parse, the
    /// files are read, the half-set sections are named. Building them, HTTP
    /// clients and all, rather than a parse-only check beside the builder:
    /// one code path decides what is valid, so a start cannot accept a
    /// section that the worker's build would then refuse.
    fn validate_push(&self) -> Result<(), ConfigError> {
        // Only a configured provider sends: a deployment without push may
        // shorten worker.deliver_timeout below push.timeout's default.
        if self.push.is_configured() {
            self.within_delivery("push.timeout", self.push.timeout)?;
        }
        self.push.transports().map(drop).map_err(|e| ConfigError::Invalid {
            key: e.key,
            value: e.value,
            expected: e.expected,
        })
    }

    fn validate_email(&self) -> Result<(), ConfigError> {
        use crate::delivery::channel::email::transport::TransportUrl;
        fn invalid(key: &'static str, value: impl ToString, expected: impl Into<String>) -> ConfigError {
            ConfigError::Invalid { key, value: value.to_string(), expected: expected.into() }
        }
        let e = &self.email;
        if !(1..=1000).contains(&e.concurrency) {
            return Err(invalid("email.concurrency", e.concurrency, "1 to 1000"));
        }
        if e.timeout.is_zero() || e.timeout >= self.worker.deliver_timeout {
            return Err(invalid(
                "email.timeout",
                humantime::format_duration(e.timeout),
                format!(
                    "a positive duration shorter than worker.deliver_timeout ({})",
                    humantime::format_duration(self.worker.deliver_timeout)
                ),
            ));
        }
        if let Some(s) = &e.address_secret
            && s.trim().len() < 16
        {
            return Err(invalid("email.address_secret", "(hidden)", "at least 16 characters"));
        }
        if let Some(m) = &e.unsubscribe_mailto
            && crate::address::normalize(m).is_none()
        {
            return Err(invalid("email.unsubscribe_mailto", format!("{m:?}"), "an email address"));
        }
        if let Some(d) = &e.bounce_domain
            && (d.is_empty() || d.contains('@') || d.contains(char::is_whitespace))
        {
            return Err(invalid("email.bounce_domain", format!("{d:?}"), "a domain name such as bounces.example.com"));
        }
        if e.dkim_selector.is_some() != e.dkim_private_key_file.is_some() {
            return Err(invalid(
                "email.dkim_selector",
                format!("{:?}", e.dkim_selector),
                "set together with email.dkim_private_key_file, or neither",
            ));
        }
        if let Some(path) = &e.tls_ca_file {
            crate::delivery::channel::email::transport::read_ca_file(path).map_err(|why| {
                invalid("email.tls_ca_file", path.display(), format!("a PEM file of CA certificates: {why}"))
            })?;
        }
        let Some(url) = &e.transport else { return Ok(()) };
        let transport =
            TransportUrl::parse(url).map_err(|why| invalid("email.transport", TransportUrl::redacted(url), why))?;
        let from = e.from.as_deref().unwrap_or("");
        if from.parse::<lettre::message::Mailbox>().is_err() {
            return Err(invalid(
                "email.from",
                format!("{from:?}"),
                "an address such as \"Herald <news@example.com>\" (required with email.transport)",
            ));
        }
        if self.public_url()?.is_none() && !transport.is_file() {
            return Err(invalid(
                "http.public_url",
                "(unset)",
                "the public https:// URL of this server (or email.public_url, its older name), required with an \
                 SMTP transport for unsubscribe links",
            ));
        }
        Ok(())
    }
}

/// `url` with its password (if it has one) replaced by `***`, for errors
/// and logs.
pub fn redact_url_password(url: &str) -> String {
    if let Ok(mut u) = url::Url::parse(url)
        && u.password().is_some()
    {
        let _ = u.set_password(Some("***"));
        return u.to_string();
    }
    // Not a URL with a password to the parser (`bob:secret@db` parses as
    // scheme `bob`), but a `user:secret@` part all the same: hide it.
    match url.rfind('@') {
        Some(at) => {
            let start = url.find("://").map_or(0, |i| i + 3);
            if at >= start { format!("{}***@{}", &url[..start], &url[at + 1..]) } else { url.to_owned() }
        }
        None => url.to_owned(),
    }
}

/// Figment's own messages already name the key and where it came from; this
/// only makes the wording a little plainer.
fn describe(e: figment::Error) -> String {
    let mut parts = Vec::new();
    for err in e {
        let key = err.path.join(".");
        let source = err.metadata.as_ref().map(|m| m.name.to_string()).unwrap_or_default();
        let what = err.kind.to_string();
        if key.is_empty() {
            parts.push(format!("{what} (from {source})"));
        } else {
            parts.push(format!("key `{key}` (from {source}): {what}"));
        }
    }
    parts.join("; ")
}

/// `HERALD_*` variables as a figment provider. Figment's own `Env` reads the
/// real process environment; this reads a snapshot, so tests can hand in
/// theirs without mutating the process's (which is unsafe under threads).
struct EnvSnapshot {
    vars: Vec<(String, String)>,
}

impl figment::Provider for EnvSnapshot {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("HERALD_* environment variable(s)")
    }

    fn data(&self) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let mut dict = figment::value::Dict::new();
        for (k, v) in &self.vars {
            let key = k["HERALD_".len()..].to_ascii_lowercase();
            let value = env_value(v);
            let mut path: Vec<&str> = key.split("__").collect();
            let last = path.pop().unwrap_or_default().to_owned();
            let mut cursor = &mut dict;
            for seg in path {
                let entry = cursor
                    .entry(seg.to_owned())
                    .or_insert_with(|| figment::value::Value::from(figment::value::Dict::new()));
                cursor = match entry {
                    figment::value::Value::Dict(_, d) => d,
                    _ => {
                        return Err(figment::Error::from(format!(
                            "HERALD_{}: {seg} is not a table",
                            key.to_uppercase()
                        )));
                    }
                };
            }
            cursor.insert(last, value);
        }
        Ok(figment::Profile::Default.collect(dict))
    }
}

/// A variable's value as figment reads it (`100` a number, `true` a
/// boolean, `[a, b]` a list), unless reading it so would change its text:
/// `HERALD_SMS__FROM=+14155550100` read as the number 14155550100 lost its
/// `+` and was refused for a string setting, and `007` would become 7.
/// Those stay the text they were given.
fn env_value(text: &str) -> figment::value::Value {
    use figment::value::{Num, Value};
    let value: Value = text.parse().expect("figment parses any string");
    let same = match &value {
        Value::Num(_, Num::F32(_) | Num::F64(_)) => !text.starts_with('+'),
        Value::Num(_, n) => {
            let whole = n.to_u128().map(|u| u.to_string()).or_else(|| n.to_i128().map(|i| i.to_string()));
            whole.is_some_and(|w| w == text)
        }
        _ => true,
    };
    if same { value } else { Value::from(text.to_owned()) }
}

/// For a text setting whose value may be all digits (`sms.from` as a short
/// code, `HERALD_SMS__FROM=12345`): figment reads such a variable as a
/// number, which a `String` setting would refuse.
pub(crate) fn text_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Text {
        Text(String),
        Whole(u64),
    }
    Ok(Option::<Text>::deserialize(d)?.map(|t| match t {
        Text::Text(s) => s,
        Text::Whole(n) => n.to_string(),
    }))
}

#[cfg(test)]
mod tests;
