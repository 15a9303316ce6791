//! The command line. Each verb parses its arguments here and calls the
//! library; `main.rs` only calls [`main`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, FlagOverrides, HttpFlags};
use crate::domain::{ChannelName, UserId};
use crate::store::{NewOutboxRow, Store, new_id};

mod access;
mod bench;
mod bounce;
mod copy;
mod rules;
mod sends;
mod users;

use access::{keys, operators};
use bench::bench;
use bounce::{bounce_import, bounce_parse};
use sends::{preferences, sends, status};

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
    if let Some(why) = crate::delivery::channel::catalog::Channels::from_settings(&config.email, &config.webhook)
        .not_live(&args.channel)
    {
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
