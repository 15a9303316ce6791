//! The command line. Each verb parses its arguments here and calls the
//! library; `main.rs` only calls [`main`].

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, FlagOverrides, HttpFlags};
use crate::domain::{ChannelName, UserId};
use crate::store::{NewOutboxRow, RecipientStore, Store, SuppressionStore, new_id};

mod copy;
mod rules;
mod users;

#[derive(Debug, Parser)]
#[command(
    name = "herald",
    version = env!("VERSION_LINE"),
    about = "An engagement outbox: delivers messages to users and records what happened to each one."
)]
pub struct Cli {
    /// TOML configuration file [default: herald.toml if present]
    #[arg(long, global = true, env = "HERALD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://PATH, postgres://… or mysql://… (also HERALD_DATABASE_URL)
    /// [default: sqlite://herald.db]
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the worker and the HTTP server (/healthz, /readyz, /metrics) until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Apply pending database migrations and exit.
    Migrate(MigrateArgs),
    /// Schedule messages by hand (for trying Herald out and for tests).
    Enqueue(EnqueueArgs),
    /// Outbox counts by status and the oldest due row.
    Status(JsonFlag),
    /// The send log for one user, newest first: did they get it, and if not, why.
    Sends(SendsArgs),
    /// A user's preference-center choices; with --set, an operator changes
    /// them (recorded in the audit trail with the operator as who).
    Preferences(PreferencesArgs),
    /// Measure enqueue and drain rates on this machine.
    Bench(BenchArgs),
    /// Measure messages/s through the inbox stream to many connections, and server memory per connection.
    BenchStream {
        /// Concurrent stream connections, one user each
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Messages per connection
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Manage API keys for the /v1 HTTP API.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage operator accounts for the operator screen (/ui).
    #[command(subcommand)]
    Operators(OperatorsCommand),
    /// Walk a trigger through rules, planner, worker and send log on this database, and print what happened.
    Demo,
    /// Work with bounce, complaint and auto-reply messages.
    #[command(subcommand)]
    Bounce(BounceCommand),
    /// List and show rules, turn them on or off (recorded in the audit log
    /// with the OS user as who).
    #[command(subcommand)]
    Rules(rules::RulesCommand),
    /// Show a recipient, or change its address, locale, time zone, quiet
    /// hours and the host's opt-outs.
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// Copy this (stopped) database into an empty one: SQLite to PostgreSQL or MariaDB.
    Copy(copy::CopyArgs),
}

#[derive(Debug, Subcommand)]
pub enum BounceCommand {
    /// Record bounce messages from files or a maildir: evidence, send-log rows, suppressions.
    Import {
        /// A raw message file, a directory of them, or a maildir (its cur/ and new/)
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Parse raw messages (.eml) and print one line per recipient found: recipient, status, reply code, kind, reason.
    Parse {
        /// Raw message files as received on the return path
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON object per recipient (file, recipient, status, reply_code, kind, reason, original_message_id)
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key; it is printed once and only its hash is stored.
    Create {
        /// Who or what the key is for, e.g. "billing-service"
        #[arg(long)]
        name: String,
    },
    /// List keys (names, prefixes, created, revoked), never the keys themselves.
    List,
    /// Revoke a key by id; requests with it get 401 from then on (on every
    /// instance within 5 s), and event streams opened with it end.
    Revoke {
        /// The key's id, from `herald keys list`
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum OperatorsCommand {
    /// Create an operator account. The password is asked for twice without
    /// echo; with --password-stdin (or when stdin is not a terminal) it is
    /// read from the first line of stdin instead, for scripts.
    Add {
        /// The operator's email address: their login name
        #[arg(long)]
        email: String,
        /// Read the password from stdin (first line) instead of prompting
        #[arg(long)]
        password_stdin: bool,
    },
    /// List operator accounts (emails and when they were created).
    List,
    /// Remove an operator account and end all of its sessions at once.
    Remove {
        /// The operator's email address
        #[arg(long)]
        email: String,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Do not apply migrations at start (run `herald migrate` yourself)
    #[arg(long)]
    pub no_migrate: bool,
    /// Not an option (hidden): a `--port` answers with the `--listen` it meant.
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "8080", value_name = "PORT")]
    pub port: Option<String>,
}

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Channel to deliver through: inbox, email or webhook
    #[arg(long)]
    pub channel: String,
    /// The host application's id for the user
    #[arg(long)]
    pub user_id: String,
    /// How many messages to schedule
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Seconds from now until the messages are due
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub due_in: u64,
    /// Seconds after due time past which a message expires undelivered
    #[arg(long, value_name = "SECS")]
    pub grace: Option<u64>,
    /// Message payload as JSON [default: {"title": "Test message from herald enqueue"}]
    #[arg(long, value_name = "JSON")]
    pub payload: Option<String>,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// How long to wait for a server that takes the migration: through
    /// HAProxy just after a failover the first answer can come from a
    /// standby (read-only) or from nobody. Each wait is printed.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub wait: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SendsArgs {
    /// The host application's id for the user
    #[arg(long, required_unless_present = "address", conflicts_with = "address")]
    pub user_id: Option<String>,
    /// An email address: finds the send log by its address hash (the log
    /// holds no addresses). Needs the same `email.address_secret` (or
    /// `data_dir`) as the server that wrote the log.
    #[arg(long)]
    pub address: Option<String>,
    /// Most send-log rows to show
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PreferencesArgs {
    /// The host application's id for the user
    #[arg(long)]
    pub user_id: String,
    /// A choice to make for the user, CATEGORY:CHANNEL=on|off (repeatable),
    /// e.g. `--set news:email=off`; the last `:` ends the category, which
    /// may hold one (`promo:spring:email=off`). Stored as the user's own
    /// choice, so a host's PUT /v1/users does not undo it
    #[arg(long = "set", value_name = "CATEGORY:CHANNEL=on|off")]
    pub set: Vec<String>,
    /// The operator making the change (an account of `herald operators`);
    /// required with --set, and named in the audit trail
    #[arg(long, value_name = "EMAIL")]
    pub operator: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Rows to enqueue and drain
    #[arg(long, default_value_t = 10_000)]
    pub rows: usize,
    /// Rows claimed per sweep
    #[arg(long, default_value_t = 100)]
    pub batch: u32,
    /// Concurrent deliveries
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Use this (scratch!) database instead of a temporary SQLite file
    #[arg(long = "bench-database-url", value_name = "URL")]
    pub database_url: Option<String>,
    /// The channel to drain through: inbox, or email (needs --smtp-url)
    #[arg(long, default_value = "inbox")]
    pub channel: String,
    /// With --channel email: the SMTP server (or file:///DIR) to send to.
    /// Every message goes to it: point it at a local sink, never a real relay.
    #[arg(long, value_name = "URL", required_if_eq("channel", "email"))]
    pub smtp_url: Option<String>,
    /// With --channel email: one SMTP connection per message instead of a pool
    #[arg(long)]
    pub no_pool: bool,
    /// Drain with N `herald serve` processes (this binary) sharing the
    /// database, and report latency too, instead of one worker in this
    /// process (inbox channel only)
    #[arg(long, value_name = "N", conflicts_with_all = ["smtp_url", "no_pool"])]
    pub instances: Option<usize>,
    /// Measure the whole path instead of the drain: the service in this
    /// process, POST /v1/triggers from --connections clients for --duration
    /// seconds, an inbox rule with a condition and a German variant
    #[arg(long, conflicts_with_all = ["smtp_url", "no_pool", "instances"])]
    pub pipeline: bool,
    /// With --pipeline: seconds of load
    #[arg(long, value_name = "SECS", default_value_t = 15, requires = "pipeline")]
    pub duration: u64,
    /// With --pipeline: concurrent HTTP connections sending triggers, each
    /// waiting for its answer before the next (so N connections at a
    /// latency L send at most N / L a second: 16 at 7 ms, 2,300)
    #[arg(long, value_name = "N", default_value_t = crate::tooling::bench_pipeline::DEFAULT_CONNECTIONS, requires = "pipeline")]
    pub connections: usize,
    /// With --pipeline: the rule with a send window (open), a frequency cap
    /// (not reached), escalation (follow-ups due after the run) and
    /// recipients with time zones and quiet hours (not on)
    #[arg(long, requires = "pipeline")]
    pub workflows: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// Parses the command line and runs it; the process exit code.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HERALD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    // Colours only on a terminal: a log file or journal full of escape codes
    // is hard to grep.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut flags = FlagOverrides { database_url: cli.database_url.clone(), ..Default::default() };
    if let Command::Serve(args) = &cli.command {
        if let Some(port) = &args.port {
            anyhow::bail!(
                "herald serve has no --port; give the address and port with --listen, e.g. --listen 127.0.0.1:{port} \
                 (or http.listen in the configuration, HERALD_HTTP__LISTEN in the environment)"
            );
        }
        flags.http = args.listen.map(|listen| HttpFlags { listen });
        flags.migrate_on_start = args.no_migrate.then_some(false);
    }
    if let Command::Bench(args) = &cli.command {
        return bench(args).await;
    }
    if let Command::BenchStream { connections, rounds, json } = &cli.command {
        let opts = crate::tooling::bench_stream::StreamBenchOptions { connections: *connections, rounds: *rounds };
        let r = crate::tooling::bench_stream::run(&opts).await?;
        if *json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            println!("herald bench-stream: {} connections, {} messages, {} cores", r.connections, r.messages, r.cores);
            println!("  {:.0} messages/s through the stream ({:.2}s)", r.messages_per_sec, r.seconds);
            println!(
                "  server memory: {} KiB before, {} KiB with the streams open: {:.1} KiB per connection",
                r.server_rss_before_kib, r.server_rss_connected_kib, r.server_kib_per_connection
            );
        }
        return Ok(());
    }
    // Needs no database and no configuration.
    if let Command::Bounce(BounceCommand::Parse { files, json }) = &cli.command {
        return bounce_parse(files, *json);
    }
    let config = Config::load(cli.config.as_deref(), std::env::vars(), &flags)?;
    let result = dispatch(cli.command, config).await;
    close_opened_stores().await;
    result
}

/// The stores a verb opened, closed by [`run`] before the process exits
/// (see `SqlStore::close`), whether the verb succeeded or not. A process that exits
/// with its SQLite connections open leaves what it wrote in the `-wal`
/// file beside the database (safe, but the `.db` file alone is not the
/// whole database): a user who ran `herald migrate` or `herald enqueue` and
/// then copied `herald.db` somewhere got "database disk image is
/// malformed" or an empty outbox, about one run in four. (`herald serve`
/// closes its own on shutdown.) A list rather than a return value because
/// each verb opens its store where it first needs it, after checking its
/// arguments.
static OPENED: std::sync::Mutex<Vec<crate::store::SqlStore>> = std::sync::Mutex::new(Vec::new());

async fn open_cli_store(config: &Config) -> anyhow::Result<crate::store::SqlStore> {
    let store = crate::app::open_store(config).await?;
    OPENED.lock().unwrap_or_else(|e| e.into_inner()).push(store.clone());
    Ok(store)
}

async fn close_opened_stores() {
    let opened = std::mem::take(&mut *OPENED.lock().unwrap_or_else(|e| e.into_inner()));
    for store in opened {
        store.close().await;
    }
}

async fn dispatch(command: Command, config: Config) -> anyhow::Result<()> {
    match command {
        Command::Serve(_) => crate::app::serve(config).await,
        Command::Migrate(args) => {
            let store = open_cli_store(&config).await?;
            let wait = args.wait;
            let applied = crate::app::migrate_waiting(&store, wait, |e, left| {
                eprintln!(
                    "cannot migrate yet: {e}\n  waiting for a primary that takes writes ({}s of --wait {} left)",
                    left.as_secs(),
                    humantime::format_duration(wait)
                );
            })
            .await
            .map_err(|e| match e.is_read_only() || e.is_unavailable() || e.is_lost_race() {
                true => anyhow::anyhow!(
                    "{e} (no primary took the migration within --wait {})",
                    humantime::format_duration(wait)
                ),
                false => e.into(),
            })?;
            if applied.is_empty() {
                println!("{}: schema is up to date", store.dialect());
            }
            for m in applied {
                println!("{}: applied migration {} ({})", store.dialect(), m.version, m.name);
            }
            Ok(())
        }
        Command::Enqueue(args) => enqueue(&config, args).await,
        Command::Status(args) => status(&config, args.json).await,
        Command::Sends(args) => sends(&config, args).await,
        Command::Preferences(args) => preferences(&config, args).await,
        Command::Bounce(BounceCommand::Import { paths }) => bounce_import(&config, &paths).await,
        Command::Bench(_) | Command::BenchStream { .. } | Command::Bounce(_) => unreachable!("handled above"),
        Command::Keys(cmd) => keys(&config, cmd).await,
        Command::Copy(args) => copy::run(&config, args).await,
        Command::Operators(cmd) => operators(&config, cmd).await,
        Command::Rules(cmd) => rules::run(&config, cmd).await,
        Command::Users(cmd) => users::run(&config, cmd).await,
        Command::Demo => {
            if let Some(t) = config.email.transport.as_deref().filter(|t| t.starts_with("file:")) {
                eprintln!(
                    "NOTE: email.transport is {t}: email is written to files there and NOTHING LEAVES THIS MACHINE \
                     (the demo itself delivers in-app messages only)"
                );
            }
            let store = ready_store(&config).await?;
            crate::tooling::demo::run(&store, &mut std::io::stdout().lock()).await
        }
    }
}

/// Opens the store and makes sure the schema exists, so `enqueue` and
/// `status` work on a fresh machine without a separate `migrate`.
async fn ready_store(config: &Config) -> anyhow::Result<crate::store::SqlStore> {
    let store = open_cli_store(config).await?;
    if config.migrate_on_start {
        store.migrate().await?;
    }
    Ok(store)
}

async fn enqueue(config: &Config, args: EnqueueArgs) -> anyhow::Result<()> {
    // Checked here, like a rule's channel: a name Herald does not have, or
    // a channel this configuration cannot deliver on, would only come back
    // as `failed` rows.
    crate::delivery::channel::catalog::check_known(&args.channel).map_err(|e| anyhow::anyhow!("--channel: {e}"))?;
    if let Some(why) = crate::delivery::channel::catalog::Channels::from_config(config).not_live(&args.channel) {
        anyhow::bail!("--channel: {why}; nothing was enqueued");
    }
    let channel = ChannelName::parse("--channel", &args.channel)?;
    let user = UserId::parse("--user-id", &args.user_id)?;
    let payload: serde_json::Value = match &args.payload {
        None => serde_json::json!({ "title": "Test message from herald enqueue" }),
        Some(p) => serde_json::from_str(p).map_err(|e| {
            anyhow::anyhow!("--payload: not valid JSON ({e}); expected e.g. '{{\"title\": \"Hello\"}}'")
        })?,
    };
    if args.count == 0 {
        anyhow::bail!("--count: 0 is not accepted; expected 1 or more");
    }
    let store = ready_store(config).await?;
    let clock = SystemClock;
    let now = clock.now();
    let due_at = now.plus(std::time::Duration::from_secs(args.due_in));
    let expires_at = args.grace.map(|g| due_at.plus(std::time::Duration::from_secs(g)));
    let rows: Vec<NewOutboxRow> = (0..args.count)
        .map(|_| {
            let id = new_id();
            NewOutboxRow {
                dedupe_key: format!("cli:{id}"),
                id,
                rule_id: None,
                trigger_id: None,
                user_id: user.clone(),
                channel: channel.clone(),
                payload: payload.clone(),
                due_at,
                expires_at,
                follow_up_at: None,
            }
        })
        .collect();
    let done = store.enqueue(&rows, now).await?;
    println!(
        "enqueued {} {} message(s) for {} due {}",
        done.iter().filter(|e| e.created).count(),
        channel,
        user,
        due_at
    );
    Ok(())
}

async fn status(config: &Config, json: bool) -> anyhow::Result<()> {
    let store = ready_store(config).await?;
    let now = SystemClock.now();
    let summary = store.status_summary(now).await?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "outbox ({})", store.dialect())?;
    for c in &summary.counts {
        writeln!(out, "  {:<11} {:>8}", c.status.as_str(), c.count)?;
    }
    match &summary.oldest_due {
        Some(o) => writeln!(
            out,
            "oldest due: {} for user {} ({}), due {}, {:.0}s overdue, {} attempt(s){}",
            o.id,
            o.user_id,
            o.channel,
            o.due_at,
            o.overdue_seconds,
            o.attempts,
            o.last_error.as_deref().map(|e| format!(", last error: {e}")).unwrap_or_default()
        )?,
        None => writeln!(out, "oldest due: none (nothing is waiting past its due time)")?,
    }
    if let Some(next) = summary.next_due_at.filter(|n| *n > now) {
        writeln!(out, "next due:   {next}")?;
    }
    // The `herald serve` instances and their leases (see `worker.lease`):
    // which are alive, and which lost theirs (their rows are taken back
    // after the lease plus worker.deliver_timeout).
    let instances = crate::store::InstanceStore::instances(&store).await?;
    if instances.is_empty() {
        writeln!(out, "instances: none holds a lease")?;
    } else {
        writeln!(out, "instances:")?;
        for i in &instances {
            let lease = if i.expires_at > now {
                format!("lease held, {:.0}s left", i.expires_at.since(now).as_secs_f64())
            } else {
                format!("lease lapsed {:.0}s ago", now.since(i.expires_at).as_secs_f64())
            };
            writeln!(out, "  {} on {} (pid {}), started {}: {lease}", i.id, i.host, i.pid, i.started_at)?;
        }
    }
    Ok(())
}

async fn sends(config: &Config, args: SendsArgs) -> anyhow::Result<()> {
    let Some(user_id) = &args.user_id else {
        return sends_by_address(config, &args).await;
    };
    let user = UserId::parse("--user-id", user_id)?;
    let store = ready_store(config).await?;
    let log = store.sends_for_user(&user, args.limit).await?;
    let pending = store.pending_for_user(&user, args.limit).await?;
    // The API's answer, for what it adds to the log: each message's subject
    // and the triggers that planned nothing, with why.
    let timeline = crate::http::users::user_timeline(&store, &user, args.limit)
        .await
        .map_err(|e| anyhow::anyhow!("reading the user's messages: {e}"))?;
    let subjects: std::collections::HashMap<&str, &str> =
        timeline.messages.iter().filter_map(|m| Some((m.outbox_id.as_str(), m.subject.as_deref()?))).collect();
    let subject = |id: &str| subjects.get(id).map(|s| format!(" \"{s}\"")).unwrap_or_default();
    // Digest membership and escalation links, as the API shows them.
    let messages: std::collections::HashMap<&str, &crate::http::users::MessageHistory> =
        timeline.messages.iter().map(|m| (m.outbox_id.as_str(), m)).collect();
    let quiet = &timeline.triggers_without_messages;
    let mut out = std::io::stdout().lock();
    if args.json {
        let with_subject = |v: serde_json::Value, id: &str| {
            let mut v = v;
            if let Some(s) = subjects.get(id) {
                v["subject"] = serde_json::Value::from(*s);
            }
            if let Some(m) = messages.get(id) {
                if let Some(t) = &m.digest_triggers {
                    v["digest_triggers"] = serde_json::json!(t);
                }
                if let Some(o) = &m.follow_up_of {
                    v["follow_up_of"] = o.as_str().into();
                }
                if let Some(f) = &m.follow_up {
                    v["follow_up"] = f.as_str().into();
                }
            }
            v
        };
        let sends: Vec<serde_json::Value> =
            log.iter().map(|s| with_subject(serde_json::json!(s), &s.outbox_id)).collect();
        let pending: Vec<serde_json::Value> = pending
            .iter()
            .map(|r| {
                let mut v = with_subject(serde_json::json!(r), &r.id);
                if r.hold_detail().is_some() {
                    v["held_until"] = r.due_at.to_rfc3339().into();
                }
                v
            })
            .collect();
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({
                "user_id": user, "sends": sends, "pending": pending, "triggers_without_messages": quiet,
            }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    if log.is_empty() && pending.is_empty() && quiet.is_empty() {
        writeln!(out, "nothing was ever scheduled for user {user}, and no trigger names them")?;
        return Ok(());
    }
    // A message's digest and escalation links, once per message.
    let mut linked = std::collections::HashSet::new();
    let mut links = |out: &mut std::io::StdoutLock, id: &str| -> std::io::Result<()> {
        let Some(m) = messages.get(id).filter(|_| linked.insert(id.to_owned())) else { return Ok(()) };
        if let Some(t) = &m.digest_triggers {
            // Where each of those triggers went, and when it goes out.
            let when = match m.status.as_str() {
                "scheduled" | "sending" => format!(", goes out {}", m.due_at),
                status => format!(", {status}"),
            };
            writeln!(out, "      digest of {} trigger(s){when}: {}", t.len(), t.join(", "))?;
        }
        if let Some(o) = &m.follow_up_of {
            writeln!(out, "      follow-up of inbox message {o}")?;
        }
        if let Some(f) = &m.follow_up {
            writeln!(out, "      followed up by {f}")?;
        }
        Ok(())
    };
    if !pending.is_empty() {
        writeln!(out, "not yet delivered ({}):", pending.len())?;
        for r in &pending {
            // A hold is not an error: the row waits for its window.
            let why = match (r.hold_detail(), r.last_error.as_deref()) {
                (Some(hold), _) => format!("  held until {}: {hold}", r.due_at),
                (None, Some(e)) => format!("  last error: {e}"),
                (None, None) => String::new(),
            };
            writeln!(
                out,
                "  {}  {:<9} {:<8}{} due {}  attempts {}{why}",
                r.id,
                r.status.as_str(),
                r.channel,
                subject(&r.id),
                r.due_at,
                r.attempts,
            )?;
            links(&mut out, &r.id)?;
        }
    }
    // An empty log says only that no outcome was recorded: with messages
    // waiting above it, "nothing was ever scheduled" would contradict them.
    if log.is_empty() && pending.is_empty() {
        writeln!(out, "nothing was ever scheduled for user {user}")?;
    } else if log.is_empty() {
        writeln!(out, "send log for user {user}: no outcome yet (nothing delivered or given up on so far)")?;
    } else {
        writeln!(out, "send log for user {user}, newest first ({}):", log.len())?;
    }
    for s in &log {
        writeln!(
            out,
            "  {}  {:<10} {:<8}{} outbox {}{}",
            s.created_at,
            s.status,
            s.channel,
            subject(&s.outbox_id),
            s.outbox_id,
            s.detail.as_deref().map(|d| format!("  {d}")).unwrap_or_default()
        )?;
        links(&mut out, &s.outbox_id)?;
    }
    if !quiet.is_empty() {
        writeln!(out, "triggers that planned nothing, newest first ({}):", quiet.len())?;
        for t in quiet {
            writeln!(out, "  {}  {}  {}: {}", t.occurred_at, t.trigger_type, t.trigger_id, t.detail)?;
        }
    }
    Ok(())
}

/// `herald preferences`: what the user receives, per category and channel
/// and who decided; with `--set`, an operator's change, checked like the
/// user's own and audited as `operator EMAIL (command line)`.
async fn preferences(config: &Config, args: PreferencesArgs) -> anyhow::Result<()> {
    let user = UserId::parse("--user-id", &args.user_id)?;
    let mut change = crate::http::preferences::PreferenceChange { categories: Default::default() };
    for set in &args.set {
        // From the right: `on`/`off` and a channel name hold neither `=`
        // nor `:`, while a category may hold both (`promo:spring`).
        let parsed = set.rsplit_once('=').and_then(|(target, value)| {
            let (category, channel) = target.rsplit_once(':')?;
            let on = match value {
                "on" => true,
                "off" => false,
                _ => return None,
            };
            Some((category.trim(), channel.trim(), on))
        });
        let Some((category, channel, on)) = parsed.filter(|(c, ch, _)| !c.is_empty() && !ch.is_empty()) else {
            anyhow::bail!("--set: {set:?} is not CATEGORY:CHANNEL=on|off (for example news:email=off)");
        };
        change.categories.entry(category.to_owned()).or_default().insert(channel.to_owned(), on);
    }
    let store = ready_store(config).await?;
    let who = match (&args.operator, args.set.is_empty()) {
        (_, true) => String::new(),
        (None, false) => {
            anyhow::bail!("--operator: required with --set (the operator's email, named in the audit trail)")
        }
        (Some(email), false) => {
            if crate::store::OperatorStore::operator_by_email(&store, email.trim()).await?.is_none() {
                anyhow::bail!("--operator: {email:?} is not an operator account (see herald operators list)");
            }
            format!("operator {} (command line)", email.trim())
        }
    };
    let change = (!args.set.is_empty()).then_some(change);
    let (center, changed) =
        crate::http::preferences::center_or_change_in_store(&store, SystemClock.now(), &user, change, &who)
            .await
            .map_err(|e| match e {
                crate::http::problem::ApiError::Invalid(errors) => {
                    let said: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
                    anyhow::anyhow!("nothing changed: {}", said.join("; "))
                }
                other => anyhow::anyhow!("{other}"),
            })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({ "user_id": user, "center": center, "changed": changed }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    if !args.set.is_empty() {
        if changed.is_empty() {
            writeln!(out, "nothing changed for user {user}")?;
        } else {
            writeln!(out, "changed for user {user}: {} (recorded in the audit log)", changed.join("; "))?;
        }
    }
    if center.categories.is_empty() {
        writeln!(out, "no enabled rule sends anything, so there is nothing to choose")?;
    }
    for c in &center.categories {
        let name = if c.name == c.category { c.category.clone() } else { format!("{} ({})", c.name, c.category) };
        let channels: Vec<String> = c
            .channels
            .iter()
            .map(|ch| {
                let state = if ch.enabled { "on" } else { "off" };
                if c.locked {
                    format!("{}: {state} (always sent)", ch.channel)
                } else {
                    format!("{}: {state} (decided by {})", ch.channel, ch.decided_by)
                }
            })
            .collect();
        writeln!(out, "  {name}  {}", channels.join(", "))?;
    }
    Ok(())
}

async fn sends_by_address(config: &Config, args: &SendsArgs) -> anyhow::Result<()> {
    let address = args.address.as_deref().unwrap_or_default();
    let keys = crate::app::address_keys(config)?;
    let hash = keys
        .hash(address)
        .ok_or_else(|| anyhow::anyhow!("--address: {address:?} is not an email address (expected local@domain)"))?;
    let store = ready_store(config).await?;
    let log = store.sends_for_address(&hash, args.limit).await?;
    let subjects = crate::headline::for_sends(&store, &log).await?;
    let suppressions = store.list_suppressions(Some(&hash), 100).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let sends: Vec<serde_json::Value> = log
            .iter()
            .map(|s| {
                let mut v = serde_json::json!(s);
                if let Some(subject) = subjects.get(&s.outbox_id) {
                    v["subject"] = subject.as_str().into();
                }
                v
            })
            .collect();
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({ "address_hash": hash, "sends": sends, "suppressions": suppressions }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    for s in &suppressions {
        writeln!(
            out,
            "suppressed since {} ({}, category {}){}",
            s.created_at,
            s.reason,
            s.category,
            s.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
        )?;
    }
    if log.is_empty() {
        writeln!(out, "nothing in the send log for that address (hash {hash})")?;
        return Ok(());
    }
    writeln!(out, "send log for address hash {hash}, newest first ({}):", log.len())?;
    for s in &log {
        writeln!(
            out,
            "  {}  {:<10} {:<8}{} user {}  outbox {}{}",
            s.created_at,
            s.status,
            s.channel,
            subjects.get(&s.outbox_id).map(|t| format!(" \"{t}\"")).unwrap_or_default(),
            s.user_id,
            s.outbox_id,
            s.detail.as_deref().map(|d| format!("  {d}")).unwrap_or_default()
        )?;
    }
    Ok(())
}

async fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    if let Some(instances) = args.instances {
        return bench_instances(args, instances).await;
    }
    if args.pipeline {
        return bench_pipeline(args).await;
    }
    let opts = crate::tooling::bench::BenchOptions {
        rows: args.rows,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        channel: args.channel.clone(),
        smtp_url: args.smtp_url.clone(),
        pool: !args.no_pool,
    };
    let report = crate::tooling::bench::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "herald bench: {} rows, {} ({} cores), channel {}, batch {}, concurrency {}",
            report.rows, report.database, report.cores, report.channel, report.batch, report.concurrency
        );
        if let Some(t) = &report.transport {
            println!("  transport: {t}");
        }
        println!("  enqueue: {:>10.0} rows/s ({:.2}s)", report.enqueue_rows_per_sec, report.enqueue_seconds);
        println!(
            "  drain:   {:>10.0} rows/s ({:.2}s, {} claimed, {} sent)",
            report.drain_rows_per_sec, report.drain_seconds, report.claimed, report.sent
        );
        if let (Some(c), Some(per_row)) = (report.pg_commits, report.pg_commits_per_row) {
            println!("  commits: {c} PostgreSQL transactions during the drain, {per_row:.3} per row");
        }
    }
    Ok(())
}

async fn bench_pipeline(args: &BenchArgs) -> anyhow::Result<()> {
    let opts = crate::tooling::bench_pipeline::PipelineOptions {
        duration: std::time::Duration::from_secs(args.duration),
        connections: args.connections,
        database_url: args.database_url.clone(),
        workflows: args.workflows,
        ..Default::default()
    };
    let r = crate::tooling::bench_pipeline::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "herald bench --pipeline{}: {} ({} cores), {} connections, {:.1}s of load",
        if r.workflows { " --workflows" } else { "" },
        r.database,
        r.cores,
        r.connections,
        r.duration_seconds
    );
    println!(
        "  accepted:  {:>8.0} triggers/s ({} triggers, {} errors), API p50 {:.1} ms, p99 {:.1} ms",
        r.triggers_per_sec, r.triggers_accepted, r.errors, r.api_latency_ms.p50, r.api_latency_ms.p99
    );
    println!(
        "  delivered: {:>8.0} messages/s while the load ran; backlog at the end {}, drained {:.1}s later",
        r.delivered_per_sec, r.backlog_at_end, r.drain_after_load_seconds
    );
    let column = |f: fn(&crate::tooling::bench_pipeline::LoadSecond) -> String| {
        r.per_second.iter().map(f).collect::<Vec<_>>().join(" ")
    };
    println!("  per second: accepted {}", column(|s| s.accepted.to_string()));
    println!("              delivered {}", column(|s| s.delivered.to_string()));
    println!("              RSS MiB {}", column(|s| format!("{:.0}", s.rss_mib)));
    println!(
        "  trigger to delivery: p50 {:.0} ms, p99 {:.0} ms; one trigger into an idle service: p50 {:.0} ms, max {:.0} ms",
        r.trigger_to_delivery_ms.p50,
        r.trigger_to_delivery_ms.p99,
        r.idle_trigger_to_delivery_ms.p50,
        r.idle_trigger_to_delivery_ms.max
    );
    println!(
        "  memory: RSS {:.0} MiB before the load, {:.0} MiB after, peak {:.0} MiB",
        r.rss_start_mib, r.rss_end_mib, r.peak_rss_mib
    );
    if let Some(c) = r.pg_commits_per_message {
        println!("  commits: {c:.3} PostgreSQL transactions per message");
    }
    Ok(())
}

async fn bench_instances(args: &BenchArgs, instances: usize) -> anyhow::Result<()> {
    if args.channel != "inbox" {
        anyhow::bail!("--instances: only --channel inbox is measured with several instances");
    }
    let opts = crate::tooling::bench_instances::InstancesOptions {
        rows: args.rows,
        instances,
        database_url: args.database_url.clone(),
        batch: args.batch,
        concurrency: args.concurrency,
        binary: None,
        timeout: std::time::Duration::from_secs(1800),
    };
    let r = crate::tooling::bench_instances::run(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "herald bench: {} rows, {} ({} cores), {} instance(s), batch {}, concurrency {}",
            r.rows, r.database, r.cores, r.instances, r.batch, r.concurrency
        );
        println!(
            "  drain:   {:>10.0} rows/s ({:.2}s, {} sent, {} not sent)",
            r.drain_rows_per_sec, r.drain_seconds, r.sent, r.not_sent
        );
        println!(
            "  latency: p50 {} ms, p99 {} ms, max {} ms (outcome commit minus due time)",
            r.latency_p50_ms, r.latency_p99_ms, r.latency_max_ms
        );
    }
    Ok(())
}

async fn keys(config: &Config, cmd: KeysCommand) -> anyhow::Result<()> {
    let store = ready_store(config).await?;
    match cmd {
        KeysCommand::Create { name } => {
            let name = name.trim();
            if name.is_empty() || name.len() > 255 {
                anyhow::bail!("--name: expected 1 to 255 characters naming who the key is for");
            }
            let (key, row) = crate::http::auth::generate(name, SystemClock.now());
            store.insert_api_key(&row).await?;
            println!("{key}");
            eprintln!("created API key {} ({}) for {name:?}; it is shown only this once", row.id, row.prefix);
        }
        KeysCommand::List => {
            let keys = store.list_api_keys().await?;
            if keys.is_empty() {
                println!("no API keys; create one with `herald keys create --name NAME`");
            }
            for k in keys {
                let state = k.revoked_at.map(|t| format!("revoked {t}")).unwrap_or_else(|| "active".into());
                println!("{}  {}…  {:<24} created {}  {state}", k.id, k.prefix, k.name, k.created_at);
            }
        }
        KeysCommand::Revoke { id } => {
            if store.revoke_api_key(&id, SystemClock.now()).await? {
                println!("revoked {id}");
            } else {
                anyhow::bail!("no active API key with id {id:?} (see `herald keys list`)");
            }
        }
    }
    Ok(())
}

/// The new operator's password: without echo from a terminal (twice, to
/// catch a typo), or the first line of stdin when scripted.
fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    use std::io::{BufRead, IsTerminal};
    if from_stdin || !std::io::stdin().is_terminal() {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        return Ok(line.trim_end_matches(['\r', '\n']).to_owned());
    }
    let first = rpassword::prompt_password("Password: ")?;
    let again = rpassword::prompt_password("Password again: ")?;
    if first != again {
        anyhow::bail!("the two passwords differ; nothing was created");
    }
    Ok(first)
}

async fn operators(config: &Config, cmd: OperatorsCommand) -> anyhow::Result<()> {
    use crate::store::OperatorStore;
    match cmd {
        OperatorsCommand::Add { email, password_stdin } => {
            let password = read_password(password_stdin)?;
            let store = ready_store(config).await?;
            let op = crate::ui::session::add_operator(&store, &email, &password, SystemClock.now()).await?;
            println!("created operator {}; log in at /ui/login", op.email);
        }
        OperatorsCommand::List => {
            let store = ready_store(config).await?;
            let ops = store.list_operators().await?;
            if ops.is_empty() {
                println!("no operators; create one with `herald operators add --email EMAIL`");
            }
            for o in ops {
                println!("{:<40} created {}", o.email, o.created_at);
            }
        }
        OperatorsCommand::Remove { email } => {
            let store = ready_store(config).await?;
            let email = crate::ui::session::normalize_email(&email);
            if !store.delete_operator(&email).await? {
                anyhow::bail!("no operator with email {email:?} (see `herald operators list`)");
            }
            println!("removed operator {email}; their sessions have ended");
        }
    }
    Ok(())
}

/// `herald bounce parse`: exits non-zero if any file could not be read or
/// parsed, after printing what it could.
fn bounce_parse(files: &[PathBuf], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut failures = 0;
    for file in files {
        let name = file.display().to_string();
        let parsed = std::fs::read(file)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|raw| crate::feedback::bounce::parse(&raw).map_err(|e| e.to_string()));
        let report = match parsed {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{name}: {e}");
                failures += 1;
                continue;
            }
        };
        if report.recipients.is_empty() {
            eprintln!("{name}: not a bounce, complaint or auto-reply (no recipient found)");
        }
        for r in &report.recipients {
            if json {
                let line = serde_json::json!({
                    "file": name, "recipient": r.recipient, "status": r.status, "reply_code": r.reply_code,
                    "kind": r.kind, "reason": r.reason, "original_message_id": r.original_message_id,
                });
                writeln!(out, "{line}")?;
            } else {
                writeln!(
                    out,
                    "{name}\t{}\t{}\t{}\t{}\t{}",
                    r.recipient,
                    r.status.as_deref().unwrap_or("-"),
                    r.reply_code.map_or("-".to_owned(), |c| c.to_string()),
                    serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                    r.reason
                )?;
            }
        }
    }
    if failures > 0 {
        anyhow::bail!("{failures} of {} file(s) could not be parsed", files.len());
    }
    Ok(())
}

/// Files under `paths`: files as given, directories' files, and a maildir's
/// `cur/` and `new/`.
fn message_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let dirs: Vec<PathBuf> = if p.join("cur").is_dir() || p.join("new").is_dir() {
                vec![p.join("cur"), p.join("new")]
            } else {
                vec![p.clone()]
            };
            for d in dirs.into_iter().filter(|d| d.is_dir()) {
                let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", d.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .collect();
                files.sort();
                out.extend(files);
            }
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

async fn bounce_import(config: &Config, paths: &[PathBuf]) -> anyhow::Result<()> {
    let store = ready_store(config).await?;
    let keys = crate::app::address_keys(config)?;
    let (mut recorded, mut duplicates, mut suppressed, mut failures) = (0, 0, 0, 0);
    let files = message_files(paths)?;
    for file in &files {
        let raw = match std::fs::read(file) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}: cannot read: {e}", file.display());
                failures += 1;
                continue;
            }
        };
        let policy = config.bounces.soft_bounce_policy();
        match crate::feedback::ingest::ingest_mail(&store, &keys, policy, &raw, "mail", SystemClock.now()).await {
            Ok(r) => {
                recorded += r.recorded;
                duplicates += r.duplicates;
                suppressed += r.suppressed;
                for item in &r.items {
                    println!("{}\t{}\t{}", file.display(), item.kind, item.action);
                }
            }
            Err(crate::feedback::ingest::IngestError::Parse(e)) => {
                eprintln!("{}: {e}", file.display());
                failures += 1;
            }
            Err(crate::feedback::ingest::IngestError::Store(e)) => return Err(e.into()),
        }
    }
    eprintln!(
        "{} file(s): {recorded} recorded, {duplicates} already recorded, {suppressed} address(es) suppressed, {failures} unreadable",
        files.len()
    );
    if failures > 0 {
        anyhow::bail!("{failures} of {} file(s) could not be read or parsed", files.len());
    }
    Ok(())
}
