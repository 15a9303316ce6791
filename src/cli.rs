//! The command line. Each verb parses its arguments here and calls the
//! library; `main.rs` only calls [`main`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, FlagOverrides, HttpFlags};
use crate::domain::{ChannelName, UserId};
use crate::store::{NewOutboxRow, Store, new_id};

mod access;
mod bounce;
mod copy;
mod push;
mod rules;
mod sends;
mod suppress;
#[cfg(feature = "tooling")]
mod tooling;
mod topics;
mod trigger;
mod users;

use access::{keys, operators};
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
    #[cfg(feature = "tooling")]
    Bench(tooling::BenchArgs),
    /// Measure messages/s through the inbox stream to many connections, and server memory per connection.
    #[cfg(feature = "tooling")]
    BenchStream(tooling::BenchStreamArgs),
    /// Manage API keys for the /v1 HTTP API.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Manage operator accounts for the operator screen (/ui).
    #[command(subcommand)]
    Operators(OperatorsCommand),
    /// Walk a trigger through rules, planner, worker and send log on this database, and print what happened.
    #[cfg(feature = "tooling")]
    Demo,
    /// Work with bounce, complaint and auto-reply messages.
    #[command(subcommand)]
    Bounce(BounceCommand),
    /// List and show rules, turn them on or off (recorded in the audit log
    /// with the OS user as who).
    #[command(subcommand)]
    Rules(rules::RulesCommand),
    /// Suppress an email address or a phone number (only its hash is
    /// stored), as POST /v1/suppressions does; audited with the OS user.
    Suppress(suppress::SuppressArgs),
    /// Show a recipient, or change its address, phone, Slack id, locale,
    /// time zone, quiet hours and the host's opt-outs.
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// Copy this (stopped) database into an empty one: SQLite to PostgreSQL or MariaDB.
    Copy(copy::CopyArgs),
    /// Push notifications: Web Push keys, and a user's devices.
    #[command(subcommand)]
    Push(push::PushCommand),
    /// Topics and their subscribers: list, show, subscribe users.
    #[command(subcommand)]
    Topics(topics::TopicsCommand),
    /// One trigger and its whole audience: progress, messages by status and
    /// channel, why not; or cancel what it has not sent yet.
    #[command(subcommand)]
    Trigger(trigger::TriggerCommand),
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
    #[arg(long, required_unless_present_any = ["address", "phone"], conflicts_with_all = ["address", "phone"])]
    pub user_id: Option<String>,
    /// An email address: finds the send log by its address hash (the log
    /// holds no addresses). Needs the same `email.address_secret` (or
    /// `data_dir`) as the server that wrote the log.
    #[arg(long, conflicts_with = "phone")]
    pub address: Option<String>,
    /// A phone number with its country code (+14155550101): finds the send
    /// log and the suppressions by its hash, as --address does, and the
    /// users who have the number, with their messages still waiting.
    #[arg(long)]
    pub phone: Option<String>,
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
    /// A topic to mute or unmute for the user, KEY=muted|on (repeatable),
    /// e.g. `--topic doc:42=muted`: the mute of one topic's messages the
    /// user can set in the preference center and the widget
    #[arg(long = "topic", value_name = "KEY=muted|on")]
    pub topic: Vec<String>,
    /// The operator making the change (an account of `herald operators`);
    /// required with --set or --topic, and named in the audit trail
    #[arg(long, value_name = "EMAIL")]
    pub operator: Option<String>,
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// Parses the command line and runs it; the process exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            #[cfg(not(feature = "tooling"))]
            if let Some(message) = tooling_left_out(&e) {
                eprintln!("{message}");
                return std::process::ExitCode::from(2);
            }
            e.exit()
        }
    };
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

/// The commands a build without the `tooling` feature leaves out.
#[cfg(not(feature = "tooling"))]
const TOOLING_COMMANDS: [&str; 3] = ["bench", "bench-stream", "demo"];

/// For one of [`TOOLING_COMMANDS`] in a build without them, the error that
/// says why, instead of clap's "unrecognized subcommand" (which reads as a
/// typo, or a command that never existed).
#[cfg(not(feature = "tooling"))]
fn tooling_left_out(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidSubcommand {
        return None;
    }
    let Some(ContextValue::String(name)) = e.get(ContextKind::InvalidSubcommand) else {
        return None;
    };
    TOOLING_COMMANDS.contains(&name.as_str()).then(|| {
        format!(
            "error: `herald {name}` is part of the `tooling` feature, which this binary was built without \
             (cargo build --no-default-features); build it with the default features to use it"
        )
    })
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
    #[cfg(feature = "tooling")]
    if let Command::Bench(args) = &cli.command {
        return tooling::bench(args).await;
    }
    #[cfg(feature = "tooling")]
    if let Command::BenchStream(args) = &cli.command {
        return tooling::bench_stream(args).await;
    }
    // Needs no database and no configuration.
    if let Command::Bounce(BounceCommand::Parse { files, json }) = &cli.command {
        return bounce_parse(files, *json);
    }
    if let Command::Push(cmd) = &cli.command
        && !cmd.needs_database()
    {
        return push::run(cmd);
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
        #[cfg(feature = "tooling")]
        Command::Bench(_) | Command::BenchStream(_) => unreachable!("handled above"),
        Command::Push(cmd) => push::run_with_database(&config, cmd).await,
        Command::Bounce(_) => unreachable!("handled above"),
        Command::Keys(cmd) => keys(&config, cmd).await,
        Command::Copy(args) => copy::run(&config, args).await,
        Command::Operators(cmd) => operators(&config, cmd).await,
        Command::Rules(cmd) => rules::run(&config, cmd).await,
        Command::Users(cmd) => users::run(&config, cmd).await,
        Command::Suppress(args) => suppress::run(&config, args).await,
        Command::Topics(cmd) => topics::run(&config, cmd).await,
        Command::Trigger(cmd) => trigger::run(&config, cmd).await,
        #[cfg(feature = "tooling")]
        Command::Demo => tooling::demo(&config).await,
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
