//! Wiring: from a [`Config`] to a running Herald. The CLI calls these; so do
//! the end-to-end tests.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::address::AddressKeys;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::connect_error::OpenError;
use crate::delivery::channel::Registry;
use crate::delivery::channel::catalog::{
    Channels, EMAIL_NOT_CONFIGURED, PUSH_NOT_CONFIGURED, SLACK_NOT_CONFIGURED, SMS_NOT_CONFIGURED,
    WEBHOOK_NOT_CONFIGURED,
};
use crate::delivery::channel::email::EmailChannel;
use crate::delivery::channel::inbox::InboxChannel;
use crate::delivery::channel::push::deliver::{PushChannel, PushParts};
use crate::delivery::channel::slack_deliver::SlackChannel;
use crate::delivery::channel::sms::deliver::{SmsChannel, SmsParts, SmsProvider};
use crate::delivery::channel::webhook::{SigningSecrets, WebhookChannel};
use crate::delivery::worker::{Worker, WorkerParts};
use crate::http::user_auth::TokenKey;
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::planning::planner::Planner;
use crate::store::{ConnectOptions, Dialect, SqlStore, Store};

/// Opens the configured database. A database that cannot be opened is one
/// error naming the file or the host and the cause, and a server that
/// refuses the connection fails at once instead of after the pool's
/// `acquire_timeout` (see [`crate::connect_error`]).
pub async fn open_store(config: &Config) -> Result<SqlStore, OpenError> {
    crate::connect_error::preflight(&config.database_url).await?;
    if let Some(path) = sqlite_file(&config.database_url) {
        create_private(&path);
    }
    let opts = ConnectOptions {
        max_connections: config.database.max_connections,
        acquire_timeout: config.database.acquire_timeout,
    };
    SqlStore::connect(&config.database_url, &opts)
        .await
        .map_err(|e| crate::connect_error::explain(&config.database_url, &e))
}

/// The file a `sqlite:` URL names, or `None` for an in-memory database or
/// another dialect.
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    (!path.is_empty() && !path.contains(":memory:")).then(|| std::path::PathBuf::from(path))
}

/// Creates the SQLite file, readable and writable by its owner only (0600),
/// before SQLite does: SQLite creates it with the process's umask (0644
/// usually), and it holds every recipient's address and the send log. Its
/// `-wal` and `-shm` files take the database file's mode. An existing file
/// is left as it is (it may be shared with a host application on purpose),
/// with a warning when others can read it.
fn create_private(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if let Ok(meta) = std::fs::metadata(path)
                    && meta.permissions().mode() & 0o077 != 0
                {
                    tracing::warn!(
                        path = %path.display(),
                        mode = format!("{:o}", meta.permissions().mode() & 0o777),
                        "the SQLite database can be read by other users; chmod 600 it unless that is intended"
                    );
                }
            }
            // A missing directory and the like: SQLite reports it in its own words.
            Err(_) => {}
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// The channels this build can deliver with, without email. Email (when no
/// transport is configured) and webhooks are known by name but cannot
/// deliver: their rows end `failed` saying so, instead of waiting silently
/// for a configuration that delivers them weeks late.
pub fn registry() -> Registry {
    registry_with_email(None)
}

/// [`registry`], with an email channel when one is configured.
pub fn registry_with_email(email: Option<Arc<EmailChannel>>) -> Registry {
    let mut r = Registry::new();
    r.register("inbox", Arc::new(InboxChannel::new()));
    match email {
        Some(e) => {
            r.register("email", e);
        }
        None => {
            r.declare_unavailable("email", format!("{EMAIL_NOT_CONFIGURED} (set email.transport)"));
        }
    }
    r.declare_unavailable("webhook", format!("{WEBHOOK_NOT_CONFIGURED} (set webhook.signing_secret)"));
    r.declare_unavailable(
        "push",
        format!(
            "{PUSH_NOT_CONFIGURED} (set push.vapid_private_key, push.fcm.service_account_file or push.apns.key_file)"
        ),
    );
    r.declare_unavailable("sms", format!("{SMS_NOT_CONFIGURED} (set sms.transport and sms.from)"));
    r.declare_unavailable("slack", format!("{SLACK_NOT_CONFIGURED} (set slack.bot_token)"));
    r
}

/// The channels built from their configuration sections (each `None`
/// when its section does not configure it): what [`configured_registry`]
/// registers over [`registry_with_email`]'s "unavailable".
#[derive(Default)]
pub struct ConfiguredChannels {
    pub email: Option<Arc<EmailChannel>>,
    pub push: Option<Arc<PushChannel>>,
    pub sms: Option<Arc<SmsChannel>>,
    pub slack: Option<Arc<SlackChannel>>,
}

/// How long a provider (Twilio, Kannel, Slack) may take to answer one
/// message: 10 s, or three quarters of `worker.deliver_timeout` when that
/// is shorter, so a slow provider is the provider's timeout (a retry
/// naming it), never the worker cutting the whole delivery off.
pub const MESSAGING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn messaging_timeout(deliver_timeout: std::time::Duration) -> std::time::Duration {
    MESSAGING_TIMEOUT.min(deliver_timeout * 3 / 4)
}

fn messaging_http(config: &Config) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(messaging_timeout(config.worker.deliver_timeout))
        .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("a client with a timeout builds")
}

/// The SMS channel `[sms]` describes, or `None` without a transport.
pub fn sms_channel(
    config: &Config,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    keys: AddressKeys,
    health: crate::delivery::health::ChannelHealth,
) -> anyhow::Result<Option<Arc<SmsChannel>>> {
    let Some(checked) = config.sms.check().map_err(|e| anyhow::anyhow!("{e}"))? else { return Ok(None) };
    let provider = SmsProvider::new(messaging_http(config), &checked.transport);
    let public_url = match config.public_url()? {
        Some(u) => Some(url::Url::parse(u).map_err(|e| anyhow::anyhow!("http.public_url: {e}"))?),
        None => {
            tracing::warn!(
                "http.public_url is not set: texts are sent without a status callback, so no delivery report comes back"
            );
            None
        }
    };
    let rate = config
        .sms
        .rate
        .map(|r| crate::delivery::channel::sms::rate::SharedRate::new(store.clone(), r, provider.name()));
    tracing::info!(provider = provider.name(), from = %checked.from, "sms channel ready");
    if let (SmsProvider::Kannel(_), Some(public)) = (&provider, &public_url) {
        // What Kannel's `sms-service` `get-url` must be for STOP, START
        // and HELP to reach Herald (its token is the proof Kannel cannot give).
        let url = crate::http::sms::kannel_inbound_url(public.as_str(), &keys);
        tracing::info!(kannel_inbound = %url, "set this as the get-url of Kannel's sms-service");
    }
    Ok(Some(Arc::new(SmsChannel::new(SmsParts {
        store,
        keys,
        clock,
        health,
        provider,
        from: checked.from,
        public_url,
        rate,
    }))))
}

/// The Slack channel `[slack]` describes, or `None` without a bot token.
pub fn slack_channel(
    config: &Config,
    health: crate::delivery::health::ChannelHealth,
) -> anyhow::Result<Option<Arc<SlackChannel>>> {
    let Some(checked) = config.slack.check().map_err(|e| anyhow::anyhow!("{e}"))? else { return Ok(None) };
    let client =
        crate::delivery::channel::slack::SlackClient::new(messaging_http(config), checked.api_url, checked.bot_token);
    tracing::info!(api = %config.slack.api_url, "slack channel ready");
    Ok(Some(Arc::new(SlackChannel::new(client, health))))
}

/// The registry `serve` uses: the inbox, webhooks when a signing secret
/// is configured, and every channel in `channels`.
pub fn configured_registry(config: &Config, channels: ConfiguredChannels) -> Registry {
    let ConfiguredChannels { email, push, sms, slack } = channels;
    let mut r = registry_with_email(email);
    if let Some(push) = push {
        r.register("push", push);
    }
    if let Some(sms) = sms {
        r.register("sms", sms);
    }
    if let Some(slack) = slack {
        r.register("slack", slack);
    }
    if let Some(secrets) = &config.webhook.signing_secret {
        // Validated at load; a failure here is a bug, not a configuration error.
        let secrets = SigningSecrets::parse(secrets).expect("webhook.signing_secret was validated at load");
        r.register("webhook", Arc::new(WebhookChannel::new(secrets, config.webhook.policy(), config.webhook.timeout)));
    }
    r
}

/// The keys behind address hashes and unsubscribe tokens: from
/// `email.address_secret`, or the secret file in `data_dir`.
pub fn address_keys(config: &Config) -> anyhow::Result<AddressKeys> {
    AddressKeys::load(config.email.address_secret.as_deref(), &config.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "configuration key `data_dir`: cannot keep the address secret in {}: {e}",
            config.data_dir.display()
        )
    })
}

/// The Web Push public key `[push]` configures, for the page that
/// subscribes; `None` when Web Push is off.
pub fn vapid_public_key(config: &Config) -> anyhow::Result<Option<String>> {
    let key = config.push.vapid_key().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(key.map(|k| k.public_key().to_owned()))
}

/// The push channel `[push]` describes, or `None` without a provider.
/// Must be called inside the runtime (the channel starts a task).
pub fn push_channel(
    config: &Config,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    health: crate::delivery::health::ChannelHealth,
) -> anyhow::Result<Option<Arc<PushChannel>>> {
    if !config.push.is_configured() {
        return Ok(None);
    }
    let transports = config.push.transports().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Some(Arc::new(PushChannel::new(PushParts {
        devices: store,
        transports,
        policy: config.push.policy(),
        health,
        clock,
    }))))
}

/// The email channel `[email]` describes, or `None` without a transport.
pub fn email_channel(
    config: &Config,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    keys: AddressKeys,
    metrics: Metrics,
) -> anyhow::Result<Option<Arc<EmailChannel>>> {
    if config.email.transport.is_none() {
        return Ok(None);
    }
    let default_public = format!("http://{}", config.http.listen);
    // `http.public_url` or its older name, `email.public_url`.
    let mut email = config.email.clone();
    email.public_url = config.public_url()?.map(str::to_owned);
    let channel = EmailChannel::from_settings(&email, &default_public, store, clock, keys, metrics)
        .map_err(|e| anyhow::anyhow!("email: {e}"))?;
    tracing::info!(transport = %channel.describe(), pooled = config.email.pool, "email channel ready");
    Ok(Some(Arc::new(channel)))
}

/// `herald serve`: migrate (unless told not to), run the worker and the HTTP
/// server until SIGINT/SIGTERM, then shut down in order: stop claiming,
/// finish or put back in-flight rows, stop serving.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    if config.migrate_on_start {
        let applied = migrate_waiting(&store, MIGRATE_WAIT, |e, left| {
            tracing::warn!(error = %e, left = ?left, "cannot migrate yet (a standby, or the database is away); waiting for a primary")
        })
        .await?;
        for m in &applied {
            tracing::info!(version = m.version, name = m.name, "applied migration");
        }
    }
    let listener = tokio::net::TcpListener::bind(config.http.listen).await.map_err(|e| {
        anyhow::anyhow!("configuration key `http.listen`: cannot listen on {}: {e}", config.http.listen)
    })?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    serve_until(config, store, listener, shutdown).await
}

/// How long `serve` and `herald migrate` (unless told otherwise with
/// `--wait`) wait for a primary that takes the migration.
pub const MIGRATE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Migrates, waiting up to `wait` for a server that can: just after a
/// failover HAProxy may still route to a standby ("cannot execute CREATE
/// TABLE in a read-only transaction"), or the database may be away for the
/// seconds a failover takes. `waiting` is told each error and the time
/// left before it is tried again (every second).
pub async fn migrate_waiting(
    store: &SqlStore,
    wait: std::time::Duration,
    waiting: impl FnMut(&crate::store::StoreError, std::time::Duration),
) -> Result<Vec<crate::store::AppliedMigration>, crate::store::StoreError> {
    until_primary(wait, std::time::Duration::from_secs(1), || store.migrate(), waiting).await
}

/// Runs `attempt` until it succeeds, fails for a reason other than a
/// standby or an absent database, or `wait` has passed (pausing `every`
/// between tries).
pub async fn until_primary<T, F, Fut>(
    wait: std::time::Duration,
    every: std::time::Duration,
    mut attempt: F,
    mut waiting: impl FnMut(&crate::store::StoreError, std::time::Duration),
) -> Result<T, crate::store::StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_read_only() || e.is_unavailable() || e.is_lost_race() => {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return Err(e);
                }
                waiting(&e, left);
                tokio::time::sleep(every.min(left)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The body of `serve`, with the listener and the shutdown signal supplied
/// by the caller (tests bind port 0 and cancel the token themselves).
pub async fn serve_until(
    config: Config,
    store: SqlStore,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let clock = database_clock(&store, shutdown.clone()).await?;
    serve_with_clock(config, store, listener, shutdown, clock).await
}

/// How often a service re-reads the database's clock.
const CLOCK_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The clock a service decides by: the database's (see
/// [`crate::clock::DbClock`]), kept fresh until `shutdown`. On SQLite the
/// database runs in this process, so its clock is this machine's.
pub async fn database_clock(store: &SqlStore, shutdown: CancellationToken) -> anyhow::Result<Arc<dyn Clock>> {
    if store.dialect() == Dialect::Sqlite {
        return Ok(Arc::new(SystemClock));
    }
    let sample = {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move { store.database_time().await }
        }
    };
    let clock = crate::clock::DbClock::start(&sample, Arc::new(SystemClock))
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the database's clock: {e}"))?;
    let refreshed = clock.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(CLOCK_REFRESH) => {}
                _ = shutdown.cancelled() => return,
            }
            if let Err(e) = refreshed.refresh(&sample).await {
                tracing::debug!(error = %e, "could not re-read the database's clock; counting on from the last reading");
            }
        }
    });
    Ok(clock)
}

/// [`serve_until`] on a given clock, so tests can expire an operator's
/// session (or anything else with a deadline) by moving a `ManualClock`.
pub async fn serve_with_clock(
    config: Config,
    store: SqlStore,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let dyn_store: Arc<dyn Store> = Arc::new(store.clone());
    let keys = address_keys(&config)?;

    let health = crate::delivery::health::ChannelHealth::default();
    let mut tasks = tokio::task::JoinSet::new();
    if store.dialect() == Dialect::Postgres {
        tasks.spawn(crate::store::listen::forward_notifications(store.clone(), shutdown.clone()));
    }
    if config.worker.enabled {
        let email = email_channel(&config, dyn_store.clone(), clock.clone(), keys.clone(), metrics.clone())?;
        // This process's lease: its claims name it, so if it dies (or
        // loses the database) its rows are taken back after the lease plus
        // deliver_timeout, not after worker.stale.
        let who = crate::delivery::worker::lease::identity(clock.now());
        tracing::info!(instance = %who.id, host = %who.host, pid = who.pid, lease = ?config.worker.lease, "instance lease");
        let worker = Worker::new(WorkerParts {
            store: Arc::new(store.for_instance(&who.id)),
            registry: configured_registry(
                &config,
                ConfiguredChannels {
                    email,
                    push: push_channel(&config, dyn_store.clone(), clock.clone(), health.clone())?,
                    sms: sms_channel(&config, dyn_store.clone(), clock.clone(), keys.clone(), health.clone())?,
                    slack: slack_channel(&config, health.clone())?,
                },
            ),
            clock: clock.clone(),
            config: config.worker.to_worker_config(),
            metrics: metrics.clone(),
            address_keys: Some(keys.clone()),
            lease: Some(who),
        });
        let token = shutdown.clone();
        tasks.spawn(async move { worker.run(token).await });
    }

    log_channels(&Channels::from_config(&config), config.worker.enabled);
    if config.retention.enabled {
        let retention =
            crate::retention::Retention::new(store.clone(), clock.clone(), config.retention.clone(), metrics.clone());
        let token = shutdown.clone();
        tasks.spawn(async move { retention.run(token).await });
    }

    let rules = Arc::new(
        crate::planning::planner::RuleBook::new(dyn_store.clone())
            .with_default_timezone(config.worker.to_worker_config().default_timezone),
    );
    let planner =
        Planner::with_rules(dyn_store.clone(), clock.clone(), rules.clone(), config.planner.poll, config.planner.batch);
    let expander =
        crate::planning::fan_out::Expander::new(dyn_store.clone(), clock.clone(), rules.clone(), config.planner.poll)
            .with_chunk(config.planner.fan_out_chunk)
            .with_lease(config.planner.fan_out_lease);
    let intake = crate::planning::intake::Intake::new(dyn_store.clone(), clock.clone(), rules);
    if config.planner.enabled {
        let (planner, token) = (planner.clone(), shutdown.clone());
        tasks.spawn(async move { planner.run(token).await });
        let (expander, token) = (expander.clone(), shutdown.clone());
        tasks.spawn(async move { expander.run(token).await });
    }
    let user_tokens = match &config.inbox.token_secret {
        Some(secret) => TokenKey::new(secret.as_bytes()),
        None => {
            tracing::warn!(
                "inbox.token_secret is not set: user tokens are signed with a key made up at start, so they stop \
                 working when this process restarts and are not accepted by other instances"
            );
            TokenKey::ephemeral()
        }
    };
    let state = AppState::new(http::AppParts {
        store: dyn_store,
        metrics,
        clock,
        planner,
        expander,
        intake,
        api_keys: Default::default(),
        keys,
        providers: http::bounces::ProviderKeys::from_config(&config.bounces),
        soft_bounces: config.bounces.soft_bounce_policy(),
        webhooks: config.webhook.policy(),
        channels: Channels::from_config(&config),
        user_tokens,
        token_ttl: config.inbox.token_ttl,
        default_timezone: config.worker.to_worker_config().default_timezone,
        ui: config.ui.clone(),
        login_checks: Arc::new(crate::http::ui::session::PasswordChecks::new(config.ui.login_concurrency as usize)),
        vapid_public_key: vapid_public_key(&config)?,
        health,
        push_endpoints: config.push.policy(),
        shutdown: shutdown.clone(),
        sms: http::sms::SmsHooks::from_config(&config),
        sms_max_segments: config.sms.max_segments as usize,
    });
    let cors = http::Cors { origins: config.inbox.cors_origins.clone() };
    let app = http::router(state, config.http.max_body_bytes, &cors);
    tracing::info!(addr = %listener.local_addr()?, database = %store.dialect(), "herald serving");
    let http_shutdown = shutdown.clone();
    // Header-read timeout and connection bound; handlers get the peer's
    // address (the operator screen's per-address login limit).
    let limits = http::server::ServerLimits {
        header_read_timeout: config.http.header_read_timeout,
        max_connections: config.http.max_connections,
    };
    http::server::serve(listener, app, limits, http_shutdown).await;
    while tasks.join_next().await.is_some() {}
    store.close().await;
    tracing::info!("herald stopped");
    Ok(())
}

/// One line per channel at start: what delivers here, and for what does
/// not, the setting that would make it. An operator finds out now, not from
/// the first `failed` row.
fn log_channels(channels: &Channels, worker_enabled: bool) {
    if !worker_enabled {
        tracing::info!("worker.enabled is false: this instance delivers nothing (other instances may)");
    }
    for c in channels.all() {
        match c.setting {
            None => tracing::info!(channel = c.name, "channel live: {}", c.detail),
            Some(setting) => {
                tracing::info!(channel = c.name, setting, "channel off: {} (set {setting} to turn it on)", c.detail)
            }
        }
    }
}

async fn shutdown_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler cannot fail on unix");
        tokio::select! {
            _ = ctrl_c => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_providers_timeout_stays_inside_the_delivery_timeout() {
        assert_eq!(super::messaging_timeout(Duration::from_secs(60)), Duration::from_secs(10));
        assert_eq!(super::messaging_timeout(Duration::from_secs(8)), Duration::from_secs(6));
    }
}
