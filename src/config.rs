//! Settings: defaults, overridden by a TOML file, by `HERALD_*` environment
//! variables, and by command-line flags, in that order.
//!
//! Every field is documented here, where it is declared, and `herald serve
//! --help` and the README point at this one place. A bad value is refused at
//! start with the key, the value and what would be accepted: a typo found at
//! deploy time is cheaper than one found when the first message is late.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use crate::delivery::worker::WorkerConfig;
use crate::store::Dialect;

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
    pub bounces: BounceSettings,
    pub ui: UiSettings,
    pub retention: RetentionSettings,
}

/// How long each table keeps its rows (`"0s"`: for ever). Pruned in small
/// batches by every `serve` instance (see [`crate::retention`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// Prune in `serve`. Default true.
    pub enabled: bool,
    /// Outbox rows in a terminal status (sent, failed, suppressed, expired,
    /// cancelled), counted from their last change. Default "90days".
    #[serde(with = "humantime_serde")]
    pub outbox: Duration,
    /// The send log, which answers "did user X get it". Default "180days".
    #[serde(with = "humantime_serde")]
    pub sends: Duration,
    /// Outcome events (`GET /v1/events`). Default "90days".
    #[serde(with = "humantime_serde")]
    pub events: Duration,
    /// Inbox messages the user archived, counted from the archiving.
    /// Default "90days".
    #[serde(with = "humantime_serde")]
    pub archived_inbox: Duration,
    /// Bounce and complaint evidence (never the suppressions it caused).
    /// Default "180days".
    #[serde(with = "humantime_serde")]
    pub bounces: Duration,
    /// Planned triggers, once none of their messages is still to be
    /// delivered; their idempotency keys go with them. Default "90days".
    #[serde(with = "humantime_serde")]
    pub triggers: Duration,
    /// How often each instance looks for rows to prune. Default "1m".
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Most rows deleted per statement (10 to 100000). Default 1000.
    pub batch: u32,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        const DAY: u64 = 86_400;
        RetentionSettings {
            enabled: true,
            outbox: Duration::from_secs(90 * DAY),
            sends: Duration::from_secs(180 * DAY),
            events: Duration::from_secs(90 * DAY),
            archived_inbox: Duration::from_secs(90 * DAY),
            bounces: Duration::from_secs(180 * DAY),
            triggers: Duration::from_secs(90 * DAY),
            interval: Duration::from_secs(60),
            batch: 1000,
        }
    }
}

impl RetentionSettings {
    /// How long `table` keeps its rows; `None`: for ever.
    pub fn period(&self, table: crate::store::Prunable) -> Option<Duration> {
        use crate::store::Prunable::*;
        let d = match table {
            Outbox => self.outbox,
            Sends => self.sends,
            Events => self.events,
            ArchivedInbox => self.archived_inbox,
            Bounces => self.bounces,
            Triggers => self.triggers,
            // Digests and the triggers they held live as long as the
            // digest messages' outbox rows.
            Digests | DigestItems => self.outbox,
            // A slot counts for a cap while its last use is within the
            // cap's `per`; no rule can have a `per` longer than this (the
            // validation's maximum), so an older slot counts for no rule,
            // not even one edited later to a longer `per`. Not a setting:
            // shorter would let a cap be exceeded.
            ThrottleSlots => crate::planning::workflow::MAX_THROTTLE_PER,
        };
        (!d.is_zero()).then_some(d)
    }
}

/// The operator screen under `/ui` (accounts: `herald operators add`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiSettings {
    /// How long a login lasts, counted from the login (not from the last
    /// page view: a stolen cookie stops working on schedule). Default "12h",
    /// a working day.
    #[serde(with = "humantime_serde")]
    pub session_ttl: Duration,
    /// Mark the session cookie `Secure` (sent over https only). Turn on when
    /// operators reach Herald through https, which they should whenever it
    /// is not on their own machine. A setting rather than trusting an
    /// `X-Forwarded-Proto` header: Herald cannot tell a trusted proxy's
    /// header from one a client made up. Default false.
    pub secure_cookies: bool,
    /// Failed logins for one email from one client address within
    /// `login_window` after which that address's logins for it are refused
    /// until the window has passed. Counted per email *and* address, so a
    /// guesser elsewhere cannot lock the real operator out with five wrong
    /// passwords. Default 5.
    pub login_max_failures: u32,
    /// Failed logins for one email from all addresses together within
    /// `login_window` after which logins for it are refused from every
    /// address but those it logged in from successfully in the last 30
    /// days: the ceiling on guessing spread over many addresses, which the
    /// operator's own usual address rides out. Default 50.
    pub login_max_failures_per_email: u32,
    /// Password checks (Argon2id, 19 MiB and a few tens of milliseconds of
    /// CPU each) running at once in this process (1 to 64). A login beyond
    /// it is answered 503 at once instead of queueing, so a burst of logins
    /// cannot take the memory or the CPU. Default 2.
    pub login_concurrency: u32,
    /// Failed logins from one client address within `login_window` after
    /// which its logins are refused. Higher than the per-email limit because
    /// a team behind one NAT (or a load balancer that hides client
    /// addresses) shares it. Default 20.
    pub login_max_failures_per_ip: u32,
    /// Default "15m".
    #[serde(with = "humantime_serde")]
    pub login_window: Duration,
}

impl Default for UiSettings {
    fn default() -> Self {
        UiSettings {
            session_ttl: Duration::from_secs(12 * 3600),
            secure_cookies: false,
            login_max_failures: 5,
            login_max_failures_per_email: 50,
            login_concurrency: 2,
            login_max_failures_per_ip: 20,
            login_window: Duration::from_secs(15 * 60),
        }
    }
}

/// Provider bounce webhooks. Each provider's route refuses every request
/// (401) until its credential is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BounceSettings {
    /// SendGrid's Event Webhook verification key (base64, as SendGrid
    /// shows it) for `POST /v1/bounces/sendgrid`.
    pub sendgrid_public_key: Option<String>,
    /// Mailgun's HTTP webhook signing key for `POST /v1/bounces/mailgun`.
    pub mailgun_signing_key: Option<String>,
    /// The SNS topics (ARNs) whose SES notifications `POST /v1/bounces/ses`
    /// accepts; setting any turns the route on. Others are refused.
    pub ses_topic_arns: Vec<String>,
    /// A PEM certificate to verify SNS signatures with, instead of fetching
    /// the one at each message's `SigningCertURL` (only ever from
    /// `https://sns.<region>.amazonaws.com`). For tests and pinning.
    pub ses_certificate_file: Option<PathBuf>,
    /// Confirm SNS subscriptions by visiting their SubscribeURL. Off: the
    /// URL is logged for an operator to visit. Default true.
    pub ses_confirm_subscriptions: bool,
    /// Basic-auth user and password Postmark sends to `POST /v1/bounces/postmark`.
    pub postmark_user: Option<String>,
    pub postmark_password: Option<String>,
    /// Soft bounces of one address within `soft_bounce_window` that suppress
    /// it (for the window). 0 turns the policy off. Default 3.
    pub soft_bounce_limit: u32,
    /// Default "7d".
    #[serde(with = "humantime_serde")]
    pub soft_bounce_window: Duration,
}

impl Default for BounceSettings {
    fn default() -> Self {
        BounceSettings {
            sendgrid_public_key: None,
            mailgun_signing_key: None,
            postmark_user: None,
            postmark_password: None,
            ses_topic_arns: Vec::new(),
            ses_certificate_file: None,
            ses_confirm_subscriptions: true,
            soft_bounce_limit: 3,
            soft_bounce_window: Duration::from_secs(7 * 86_400),
        }
    }
}

impl BounceSettings {
    pub fn soft_bounce_policy(&self) -> crate::feedback::ingest::SoftBouncePolicy {
        crate::feedback::ingest::SoftBouncePolicy { limit: self.soft_bounce_limit, window: self.soft_bounce_window }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboxSettings {
    /// Secret that signs end users' inbox tokens (at least 32 characters).
    /// Every instance must share it. Without it each process makes up its
    /// own at start, and tokens die with the process (a warning says so).
    pub token_secret: Option<String>,
    /// How long a token from `POST /v1/users/{id}/token` lives. Default "1h".
    #[serde(with = "humantime_serde")]
    pub token_ttl: Duration,
    /// Browser origins allowed to call the inbox API, e.g.
    /// `["https://app.example.com"]`; `["*"]` allows any. Default none.
    pub cors_origins: Vec<String>,
}

impl Default for InboxSettings {
    fn default() -> Self {
        InboxSettings { token_secret: None, token_ttl: Duration::from_secs(3600), cors_origins: Vec::new() }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Standard Webhooks signing secret, `whsec_` + base64 of at least 24
    /// random bytes (`openssl rand -base64 32`), or a list of them while
    /// receivers move from one to the next: every delivery is signed with
    /// each (see `delivery::channel::signing`). Without it the webhook
    /// channel cannot deliver, and its rows end `failed` saying so.
    pub signing_secret: Option<crate::delivery::channel::signing::SecretList>,
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
    pub fn policy(&self) -> crate::delivery::channel::webhook::WebhookPolicy {
        crate::delivery::channel::webhook::WebhookPolicy { allow_private_networks: self.allow_private_networks }
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerSettings {
    /// Run the planner's sweep in `serve` (it picks up triggers a host
    /// application inserted into `engagement_triggers` itself). Triggers
    /// posted to the API are planned at once either way. Default true.
    pub enabled: bool,
    /// How often the sweep looks for unplanned triggers. Default "1s".
    #[serde(with = "humantime_serde")]
    pub poll: Duration,
    /// Most triggers planned per sweep (1 to 10000). Default 100.
    pub batch: u32,
}

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings { enabled: true, poll: Duration::from_secs(1), batch: 100 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// Connections in the pool (1 to 1000). Default 10.
    pub max_connections: u32,
    /// How long an operation waits for a free connection. Default "10s".
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Address the HTTP server listens on. Default 127.0.0.1:8080.
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes (1 KiB to 64 MiB); larger
    /// ones get 413. Default 262144 (256 KiB).
    pub max_body_bytes: usize,
    /// Longest a client may take to send a request's header block (the
    /// first request's, and each later one's on a kept-alive connection);
    /// then the connection is closed. Without it a client that sends half a
    /// request holds its connection forever (slowloris). Default "10s"
    /// (1s to 10m).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Most client connections open at once (1 to 1000000). Past it the
    /// server stops accepting until one closes, so a flood of connections
    /// costs the backlog, not memory or file descriptors; open inbox and
    /// event streams count. Default 10000.
    pub max_connections: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerSettings {
    /// Run the delivery worker in `serve`. Default true.
    pub enabled: bool,
    /// Longest sleep between sweeps. Default "30s" (the seed's).
    #[serde(with = "humantime_serde")]
    pub poll: Duration,
    /// Most rows claimed per sweep (1 to 10000). Default 100.
    pub batch: u32,
    /// Deliveries started before a row is given up on (1 to 100). Default 5.
    pub max_attempts: u32,
    /// Flat wait before a transient failure is retried. Default "5m".
    #[serde(with = "humantime_serde")]
    pub retry: Duration,
    /// Age after which a claim is taken back from an instance presumed dead.
    /// Must exceed `deliver_timeout`. Default "15m".
    #[serde(with = "humantime_serde")]
    pub stale: Duration,
    /// Longest one delivery may take before it counts as a transient
    /// failure. Default "60s".
    #[serde(with = "humantime_serde")]
    pub deliver_timeout: Duration,
    /// On SIGTERM/SIGINT, how long in-flight deliveries may finish before
    /// their rows are put back. Default "30s".
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Concurrent deliveries for channels not named in `concurrency`.
    /// Default 16.
    pub default_concurrency: usize,
    /// Concurrent deliveries per channel, e.g. `{ email = 4, inbox = 32 }`.
    pub concurrency: BTreeMap<String, usize>,
    /// This instance's lease in the database, renewed every third of it
    /// (at least every 5 s). An instance that cannot renew starts no new
    /// delivery; the rows of one whose lease lapsed are taken back after
    /// the lease plus `deliver_timeout` (a killed instance's rows wait
    /// about that long, 80 s by default, not `stale`). At least "3s".
    /// Default "20s".
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// The time zone send windows and quiet hours are read in for a
    /// recipient without a valid `timezone` of their own, as a tz database
    /// name. Default "UTC".
    pub default_timezone: String,
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
            bounces: BounceSettings::default(),
            ui: UiSettings::default(),
            retention: RetentionSettings::default(),
        }
    }
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings { max_connections: 10, acquire_timeout: Duration::from_secs(10) }
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 256 * 1024,
            header_read_timeout: Duration::from_secs(10),
            max_connections: 10_000,
        }
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        let w = WorkerConfig::default();
        WorkerSettings {
            enabled: true,
            poll: w.poll,
            batch: w.batch,
            max_attempts: w.max_attempts,
            retry: w.retry,
            stale: w.stale,
            deliver_timeout: w.deliver_timeout,
            shutdown_grace: w.shutdown_grace,
            default_concurrency: w.default_concurrency,
            concurrency: w.concurrency,
            lease: w.lease,
            default_timezone: w.default_timezone.name().to_owned(),
        }
    }
}

impl WorkerSettings {
    pub fn to_worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            poll: self.poll,
            batch: self.batch,
            max_attempts: self.max_attempts,
            retry: self.retry,
            stale: self.stale,
            deliver_timeout: self.deliver_timeout,
            shutdown_grace: self.shutdown_grace,
            concurrency: self.concurrency.clone(),
            default_concurrency: self.default_concurrency,
            lease: self.lease,
            // Checked by `validate`; a name that slipped through reads as UTC.
            default_timezone: crate::planning::workflow::parse_zone(&self.default_timezone)
                .unwrap_or(chrono_tz::Tz::UTC),
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
        if self.webhook.timeout.is_zero() || self.webhook.timeout >= self.worker.deliver_timeout {
            return Err(invalid(
                "webhook.timeout",
                humantime::format_duration(self.webhook.timeout),
                format!(
                    "above zero and shorter than worker.deliver_timeout ({})",
                    humantime::format_duration(self.worker.deliver_timeout)
                ),
            ));
        }
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
        self.validate_email()
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
        if let Some(url) = &e.public_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(invalid("email.public_url", format!("{url:?}"), "an https:// (or http://) base URL"));
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
        if e.public_url.is_none() && !transport.is_file() {
            return Err(invalid(
                "email.public_url",
                "(unset)",
                "the public https:// URL of this server, required with an SMTP transport for unsubscribe links",
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
            let value: figment::value::Value = v.parse().expect("figment parses any string");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_database_scheme_is_refused_without_its_password() {
        for url in ["postgresx://bob:hunter2@db.example/x", "foo://bob:hunter2@db/x", "bob:hunter2@db"] {
            let c = Config { database_url: url.into(), ..Config::default() };
            let e = c.validate().expect_err("refused").to_string();
            assert!(e.contains("database_url"), "{e}");
            assert!(!e.contains("hunter2"), "the password is shown: {e}");
        }
        assert_eq!(redact_url_password("postgres://bob:pw@h/db"), "postgres://bob:***@h/db");
        assert_eq!(redact_url_password("sqlite://herald.db"), "sqlite://herald.db");
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_the_seeds() {
        let c = Config::load(None, env(&[]), &FlagOverrides::default()).unwrap();
        assert_eq!(c.database_url, "sqlite://herald.db");
        assert_eq!(c.worker.poll, Duration::from_secs(30));
        assert_eq!(c.worker.batch, 100);
        assert_eq!(c.worker.max_attempts, 5);
        assert_eq!(c.worker.retry, Duration::from_secs(300));
        assert_eq!(c.worker.stale, Duration::from_secs(900));
    }

    #[test]
    fn file_then_environment_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.toml");
        std::fs::write(&path, "database_url = \"sqlite://file.db\"\n[worker]\nbatch = 7\npoll = \"2s\"\n").unwrap();
        let c = Config::load(Some(&path), env(&[("HERALD_WORKER__BATCH", "9")]), &FlagOverrides::default()).unwrap();
        assert_eq!(
            (c.worker.batch, c.worker.poll, c.database_url.as_str()),
            (9, Duration::from_secs(2), "sqlite://file.db")
        );
        let flags = FlagOverrides { database_url: Some("postgres://x/y".into()), ..Default::default() };
        let c = Config::load(Some(&path), env(&[("HERALD_DATABASE_URL", "mysql://a/b")]), &flags).unwrap();
        assert_eq!(c.database_url, "postgres://x/y");
    }

    #[test]
    fn a_bad_value_names_the_key_the_value_and_what_is_accepted() {
        let err = Config::load(None, env(&[("HERALD_WORKER__BATCH", "0")]), &FlagOverrides::default()).unwrap_err();
        assert_eq!(err.to_string(), "configuration key `worker.batch`: 0 is not accepted; expected 1 to 10000");

        let err = Config::load(None, env(&[("HERALD_WORKER__BATCH", "lots")]), &FlagOverrides::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("worker.batch") && text.contains("lots") && text.contains("HERALD_"), "{text}");

        let err = Config::load(None, env(&[("HERALD_WORKER__POLL", "soon")]), &FlagOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("worker.poll"), "{err}");

        let err =
            Config::load(None, env(&[("HERALD_DATABASE_URL", "redis://x")]), &FlagOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("database_url") && err.to_string().contains("postgres://"), "{err}");

        let err = Config::load(None, env(&[("HERALD_WORKER__STALE", "30s")]), &FlagOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("deliver_timeout"), "{err}");
    }

    #[test]
    fn a_bad_webhook_secret_is_refused_without_echoing_it() {
        let err = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", "hunter2")]), &FlagOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("webhook.signing_secret") && err.contains("whsec_"), "{err}");
        assert!(!err.contains("hunter2"), "secrets are never printed: {err}");
    }

    #[test]
    fn the_webhook_secret_takes_one_secret_or_a_list_for_a_rotation() {
        use crate::delivery::channel::signing::SecretList;
        let (new, old) = ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGhlIG9sZCBzZWNyZXQsIDMyIGJ5dGVzIGxvbmch");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, format!("[webhook]\nsigning_secret = [\"{new}\", \"{old}\"]\n")).unwrap();
        let c = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).unwrap();
        assert_eq!(c.webhook.signing_secret, Some(SecretList::Many(vec![new.into(), old.into()])));
        let list = format!("[\"{new}\", \"{old}\"]");
        let c =
            Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", &list)]), &FlagOverrides::default()).unwrap();
        assert_eq!(c.webhook.signing_secret.unwrap().texts(), [new, old], "the same list from the environment");
        let c = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", new)]), &FlagOverrides::default()).unwrap();
        assert_eq!(c.webhook.signing_secret, Some(SecretList::One(new.into())), "a single secret as before");

        let bad = format!("[\"{new}\", \"hunter2\"]");
        let err = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", &bad)]), &FlagOverrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("webhook.signing_secret") && err.contains("item [1]") && err.contains("whsec_"), "{err}");
        assert!(!err.contains("hunter2") && !err.contains(new), "secrets are never printed: {err}");
    }

    #[test]
    fn retention_periods_are_kept_for_ever_at_zero_and_refused_below_an_hour() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
        let c = load(&[("HERALD_RETENTION__SENDS", "0s"), ("HERALD_RETENTION__OUTBOX", "30days")]).unwrap();
        assert_eq!(c.retention.period(crate::store::Prunable::Sends), None, "0s keeps for ever");
        assert_eq!(c.retention.period(crate::store::Prunable::Outbox), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(c.retention.period(crate::store::Prunable::Events), Some(Duration::from_secs(90 * 86_400)));
        let err = load(&[("HERALD_RETENTION__EVENTS", "10m")]).unwrap_err().to_string();
        assert!(err.contains("retention.events") && err.contains("at least 1h"), "{err}");
        let err = load(&[("HERALD_RETENTION__BATCH", "5")]).unwrap_err().to_string();
        assert!(err.contains("retention.batch") && err.contains("10 to 100000"), "{err}");
    }

    /// Issue 27: a bounce retention shorter than the soft-bounce window
    /// pruned the evidence the policy counts, so it never suppressed.
    #[test]
    fn a_bounce_retention_shorter_than_the_soft_bounce_window_is_refused_naming_both() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
        let short = [("HERALD_RETENTION__BOUNCES", "2days"), ("HERALD_BOUNCES__SOFT_BOUNCE_WINDOW", "3days")];
        let err = load(&short).unwrap_err().to_string();
        assert!(err.contains("retention.bounces") && err.contains("bounces.soft_bounce_window (3days)"), "{err}");
        assert!(load(&[("HERALD_RETENTION__BOUNCES", "3days"), short[1]]).is_ok(), "as long as the window");
        assert!(load(&[("HERALD_RETENTION__BOUNCES", "0s"), short[1]]).is_ok(), "kept for ever");
        assert!(load(&[short[0], short[1], ("HERALD_BOUNCES__SOFT_BOUNCE_LIMIT", "0")]).is_ok(), "no policy");
        assert!(load(&[short[0], short[1], ("HERALD_RETENTION__ENABLED", "false")]).is_ok(), "nothing pruned");
    }

    #[test]
    fn unknown_keys_are_refused_not_ignored() {
        let err = Config::load(None, env(&[("HERALD_WORKER__BACTH", "5")]), &FlagOverrides::default()).unwrap_err();
        assert!(err.to_string().contains("bacth"), "{err}");
    }

    #[test]
    fn email_settings_are_validated() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
        assert!(load(&[]).unwrap().email.transport.is_none());
        let ok = load(&[
            ("HERALD_EMAIL__TRANSPORT", "smtps://u:p@mail.example.com"),
            ("HERALD_EMAIL__FROM", "Herald <news@example.com>"),
            ("HERALD_EMAIL__PUBLIC_URL", "https://herald.example.com"),
        ])
        .unwrap();
        assert_eq!(ok.email.concurrency, 8);

        let err = load(&[("HERALD_EMAIL__TRANSPORT", "smtp://u:secret@h?tls=maybe")]).unwrap_err().to_string();
        assert!(err.contains("email.transport") && err.contains("maybe") && !err.contains("secret"), "{err}");
        let err = load(&[("HERALD_EMAIL__TRANSPORT", "file:///tmp/x")]).unwrap_err().to_string();
        assert!(err.contains("email.from"), "{err}");
        let err = load(&[("HERALD_EMAIL__TRANSPORT", "smtp://h"), ("HERALD_EMAIL__FROM", "a@b.c")]).unwrap_err();
        assert!(err.to_string().contains("email.public_url"), "{err}");
        assert!(load(&[("HERALD_EMAIL__TRANSPORT", "file:///tmp/x"), ("HERALD_EMAIL__FROM", "a@b.c")]).is_ok());
        let err = load(&[("HERALD_EMAIL__ADDRESS_SECRET", "short")]).unwrap_err().to_string();
        assert!(err.contains("email.address_secret") && !err.contains("short"), "{err}");
        let err = load(&[("HERALD_EMAIL__TIMEOUT", "2m")]).unwrap_err().to_string();
        assert!(err.contains("email.timeout"), "{err}");
        let err = load(&[("HERALD_EMAIL__BOUNCE_DOMAIN", "a@b")]).unwrap_err().to_string();
        assert!(err.contains("email.bounce_domain"), "{err}");
    }

    #[test]
    fn ui_settings_have_defaults_and_bounds() {
        let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
        let c = load(&[]).unwrap();
        assert_eq!((c.ui.session_ttl, c.ui.login_max_failures), (Duration::from_secs(12 * 3600), 5));
        assert!(!c.ui.secure_cookies);
        let c = load(&[("HERALD_UI__SECURE_COOKIES", "true"), ("HERALD_UI__SESSION_TTL", "8h")]).unwrap();
        assert_eq!((c.ui.secure_cookies, c.ui.session_ttl), (true, Duration::from_secs(8 * 3600)));
        let err = load(&[("HERALD_UI__SESSION_TTL", "1s")]).unwrap_err().to_string();
        assert!(err.contains("ui.session_ttl") && err.contains("5m to 30days"), "{err}");
        let err = load(&[("HERALD_UI__LOGIN_MAX_FAILURES", "0")]).unwrap_err().to_string();
        assert!(err.contains("ui.login_max_failures"), "{err}");
    }

    /// `herald.example.toml` is checked against this module, so it cannot
    /// drift: it loads, its active lines are exactly the defaults, and every
    /// key of [`Config`] appears in it once, either active (with its
    /// default) or commented out (`# key = example`, for settings that are
    /// off by default), under its section and after a comment saying what
    /// it does; each commented-out example is a value the key accepts.
    #[test]
    fn the_example_configuration_has_every_key_and_default() {
        use std::collections::BTreeSet;
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("herald.example.toml");
        let text = std::fs::read_to_string(&path).expect("herald.example.toml is in the repository");
        let loaded = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).expect("the example loads");
        let defaults = serde_json::to_value(Config::default()).unwrap();
        assert_eq!(serde_json::to_value(&loaded).unwrap(), defaults, "active lines must hold the defaults");

        let mut expected = BTreeSet::new();
        for (key, value) in defaults.as_object().unwrap() {
            match value.as_object() {
                // One level of sections; a map-valued key (worker.concurrency)
                // is a leaf inside its section.
                Some(section) => expected.extend(section.keys().map(|k| format!("{key}.{k}"))),
                None => {
                    expected.insert(key.clone());
                }
            }
        }

        let key_line = |line: &str| -> Option<(bool, String, String)> {
            let (active, rest) = match line.strip_prefix("# ") {
                Some(r) => (false, r),
                None => (true, line),
            };
            let (k, v) = rest.split_once(" = ")?;
            let k = k.trim();
            (!k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                .then(|| (active, k.to_owned(), v.to_owned()))
        };
        let mut found = BTreeSet::new();
        let mut section = String::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let Some((active, key, value)) = key_line(line) else { continue };
            let full = if section.is_empty() { key.clone() } else { format!("{section}.{key}") };
            assert!(expected.contains(&full), "herald.example.toml names `{full}`, which is not a configuration key");
            // Documented: the nearest line above that is not a key line is a comment.
            let doc = lines[..i].iter().rev().find(|l| key_line(l).is_none()).copied().unwrap_or("");
            assert!(doc.starts_with('#'), "`{full}` in herald.example.toml has no comment above it");
            if !active {
                // Every commented-out example is a value of the right type.
                let doc = if section.is_empty() {
                    format!("{key} = {value}")
                } else {
                    format!("[{section}]\n{key} = {value}")
                };
                let parsed: Result<Config, _> =
                    Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(&doc)).extract();
                assert!(parsed.is_ok(), "the example for `{full}` is not accepted: {parsed:?}");
            }
            found.insert(full);
        }
        let missing: Vec<_> = expected.difference(&found).collect();
        assert!(missing.is_empty(), "herald.example.toml lacks {missing:?}");
    }

    #[test]
    fn test_suite_variables_are_not_configuration() {
        assert!(Config::load(None, env(&[("HERALD_TEST_POSTGRES_URL", "x")]), &FlagOverrides::default()).is_ok());
    }
}
