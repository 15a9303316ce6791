//! One struct per `[section]` of herald.toml, each field documented where
//! it is declared (these comments are what `herald.example.toml` and
//! docs/operations/configuration.md repeat), with its default beside it.
//! Loading the layers and checking the values across sections is in the
//! parent module.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::delivery::worker::WorkerConfig;

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
    /// How long an instance expanding a trigger to many may go without
    /// finishing a chunk before another instance takes the expansion over
    /// (it resumes after the last chunk committed). Default "30s"; a chunk
    /// takes well under a second.
    #[serde(with = "humantime_serde")]
    pub fan_out_lease: Duration,
    /// Recipients of a trigger to many planned per transaction (100 to
    /// 100000). Default 10000.
    pub fan_out_chunk: u32,
}

impl Default for PlannerSettings {
    fn default() -> Self {
        PlannerSettings {
            enabled: true,
            poll: Duration::from_secs(1),
            batch: 100,
            fan_out_lease: crate::planning::fan_out::LEASE,
            fan_out_chunk: crate::planning::fan_out::CHUNK,
        }
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
    /// Public base URL of this Herald's HTTP server, e.g.
    /// `https://herald.example.com`, from which every link and callback
    /// Herald hands out is built: unsubscribe and preference links in
    /// email, the SMS providers' delivery-report and inbound URLs.
    /// `email.public_url` is its older name and still works; setting both
    /// to different URLs is refused. Default unset.
    pub public_url: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerSettings {
    /// Run the delivery worker in `serve`. Default true.
    pub enabled: bool,
    /// Longest sleep between sweeps when nothing wakes the worker (an
    /// enqueue in this process, or LISTEN on PostgreSQL, wakes it at once;
    /// this bounds how late a row another writer inserted is seen). Default "30s".
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
            public_url: None,
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
