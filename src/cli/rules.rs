//! `herald rules list|show|enable|disable`: the rules the API and the
//! operator screen manage, for operators who live in a terminal.
//!
//! Every verb goes through the functions behind `/v1/rules`
//! (`http::rules::load`, `update_rule`), so a rule is checked and switched
//! exactly as the screen switches it: turning one on is refused while its
//! channel cannot deliver here, turning one off cancels what it still had
//! scheduled, and the switch is written to the audit log as `rule.enable` /
//! `rule.disable`, with the person at the terminal (the OS user) as who.
//! Rejected alternative: writing `enabled` with one UPDATE from here, which
//! would skip the channel check, the cancellation and the audit entry.

use std::io::Write;
use std::sync::Arc;

use clap::Subcommand;

use crate::config::Config;
use crate::http::AppState;
use crate::http::problem::ApiError;
use crate::planning::rule::{RulePatch, RuleView};
use crate::store::{AuditEntry, RuleRow, Store};

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// List every rule: id, on/off, trigger type, channel and name.
    List {
        /// Print JSON (the API's GET /v1/rules body) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Show one rule, with what stands in the way of its messages here.
    Show {
        /// The rule's id (see `herald rules list`) or its exact name
        rule: String,
        /// Print JSON (the API's GET /v1/rules/{id} body) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Turn a rule on: it plans messages for new triggers. Recorded in the
    /// audit log with the OS user as who.
    Enable {
        /// The rule's id (see `herald rules list`) or its exact name
        rule: String,
        /// Print JSON (the rule as it is now, and how many messages were cancelled)
        #[arg(long)]
        json: bool,
    },
    /// Turn a rule off and cancel the messages it still had scheduled.
    /// Recorded in the audit log with the OS user as who.
    Disable {
        /// The rule's id (see `herald rules list`) or its exact name
        rule: String,
        /// Print JSON (the rule as it is now, and how many messages were cancelled)
        #[arg(long)]
        json: bool,
    },
}

/// Why a rules verb did nothing.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("no rule has the id or name {0:?}; give an id or exact name from `herald rules list`")]
    NotFound(String),
    #[error("{given:?} names {count} rules; give one of their ids instead: {ids}")]
    Ambiguous { given: String, count: usize, ids: String },
    #[error("rule {rule} was not turned {on_off}: {why}")]
    Refused { rule: String, on_off: &'static str, why: String },
}

pub(super) async fn run(config: &Config, command: RulesCommand) -> anyhow::Result<()> {
    let store = super::ready_store(config).await?;
    let state = offline_state(config, store, None)?;
    let mut out = std::io::stdout().lock();
    match command {
        RulesCommand::List { json } => {
            let rules = state.store.list_rules().await?;
            let views: Vec<RuleView> = rules.iter().map(|r| RuleView::new(r, &state.channels)).collect();
            if json {
                serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "rules": views }))?;
                writeln!(out)?;
            } else if views.is_empty() {
                writeln!(out, "no rules yet (create them with POST /v1/rules or on the operator screen)")?;
            } else {
                for v in &views {
                    let warn = if v.warnings.is_empty() { String::new() } else { "  (!)".to_owned() };
                    let on = if v.enabled { "on " } else { "off" };
                    writeln!(out, "{}  {on}  {}  {}  {}{warn}", v.id, v.trigger_type, v.channel, v.name)?;
                }
            }
        }
        RulesCommand::Show { rule, json } => {
            let row = find(&state, &rule).await?;
            let view = RuleView::new(&row, &state.channels);
            if json {
                serde_json::to_writer_pretty(&mut out, &view)?;
                writeln!(out)?;
            } else {
                show(&mut out, &view)?;
            }
        }
        RulesCommand::Enable { rule, json } => switch(&state, &mut out, &rule, true, json).await?,
        RulesCommand::Disable { rule, json } => switch(&state, &mut out, &rule, false, json).await?,
    }
    Ok(())
}

/// What the verbs need of the server's state, without its tasks: no worker,
/// planner loop or listener runs. Rules are read and written through the
/// store; their verbs hash no address, so a throwaway secret stands in
/// rather than creating the deployment's secret file as a side effect.
/// `keys`: the deployment's, for a verb that hashes (`herald users set
/// --phone` stores the number's hash).
pub(super) fn offline_state(
    config: &Config,
    store: crate::store::SqlStore,
    keys: Option<crate::address::AddressKeys>,
) -> anyhow::Result<AppState> {
    let store: Arc<dyn Store> = Arc::new(store);
    let clock: Arc<dyn crate::clock::Clock> = Arc::new(crate::clock::SystemClock);
    let rules = Arc::new(crate::planning::planner::RuleBook::new(store.clone()));
    let planner = crate::planning::planner::Planner::with_rules(
        store.clone(),
        clock.clone(),
        rules.clone(),
        config.planner.poll,
        config.planner.batch,
    );
    let expander =
        crate::planning::fan_out::Expander::new(store.clone(), clock.clone(), rules.clone(), config.planner.poll)
            .with_chunk(config.planner.fan_out_chunk)
            .with_lease(config.planner.fan_out_lease);
    let intake = crate::planning::intake::Intake::new(store.clone(), clock.clone(), rules);
    let throwaway: [u8; 32] = rand::random();
    Ok(AppState::new(crate::http::AppParts {
        store,
        metrics: crate::metrics::Metrics::new(),
        clock,
        planner,
        expander,
        intake,
        api_keys: Default::default(),
        keys: keys.unwrap_or_else(|| crate::address::AddressKeys::from_secret(&throwaway)),
        providers: crate::http::bounces::ProviderKeys::from_config(&config.bounces),
        soft_bounces: config.bounces.soft_bounce_policy(),
        webhooks: config.webhook.policy(),
        channels: crate::delivery::channel::catalog::Channels::from_config(config),
        user_tokens: crate::http::user_auth::TokenKey::ephemeral(),
        token_ttl: config.inbox.token_ttl,
        default_timezone: config.worker.to_worker_config().default_timezone,
        ui: config.ui.clone(),
        login_checks: Arc::new(crate::http::ui::session::PasswordChecks::new(1)),
        vapid_public_key: None,
        health: Default::default(),
        push_endpoints: config.push.policy(),
        sms: None,
        sms_max_segments: config.sms.max_segments as usize,
        shutdown: Default::default(),
    }))
}

/// Who the audit log names for a change made here: the OS account running
/// the command (`$USER`, `$LOGNAME`, `$USERNAME`), as the screen names the
/// logged-in operator and the API its key.
pub(super) fn actor() -> String {
    format!("os user {} (command line)", os_user())
}

/// The person at the terminal, as the environment names them.
pub(super) fn os_user() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A rule by id, or else by exact name (names are not unique: two rules
/// with the name are refused, listing their ids).
async fn find(state: &AppState, given: &str) -> anyhow::Result<RuleRow> {
    let given = given.trim();
    if let Some(row) = state.store.get_rule(given).await? {
        return Ok(row);
    }
    let mut named: Vec<RuleRow> = state.store.list_rules().await?.into_iter().filter(|r| r.name == given).collect();
    match named.len() {
        0 => Err(RulesError::NotFound(given.to_owned()).into()),
        1 => Ok(named.remove(0)),
        count => {
            let ids = named.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", ");
            Err(RulesError::Ambiguous { given: given.to_owned(), count, ids }.into())
        }
    }
}

async fn switch(state: &AppState, out: &mut impl Write, given: &str, on: bool, json: bool) -> anyhow::Result<()> {
    let row = find(state, given).await?;
    let label = format!("{:?} ({})", row.name, row.id);
    let on_off = if on { "on" } else { "off" };
    if row.enabled == on {
        let view = RuleView::new(&row, &state.channels);
        if json {
            serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "rule": view, "cancelled": 0 }))?;
            writeln!(out)?;
        } else {
            writeln!(out, "rule {label} is already {on_off}; nothing changed")?;
        }
        return Ok(());
    }
    let patch = RulePatch { enabled: Some(on), ..Default::default() };
    let changed = crate::http::rules::update_rule(state, &row.id, patch).await.map_err(|e| {
        let why = match e {
            ApiError::Invalid(errors) => {
                errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ")
            }
            other => other.to_string(),
        };
        RulesError::Refused { rule: label.clone(), on_off, why }
    })?;
    // The screen's entries, word for word (see `ui::rules::switch`).
    let (action, detail) = if on {
        ("rule.enable", format!("\"{}\" turned on", changed.rule.name))
    } else {
        (
            "rule.disable",
            format!("\"{}\" turned off; {} scheduled message(s) cancelled", changed.rule.name, changed.cancelled),
        )
    };
    let entry =
        AuditEntry { operator_email: actor(), action: action.into(), target: row.id.clone(), detail: Some(detail) };
    if let Err(e) = state.store.append_audit(&entry, state.clock.now()).await {
        // The switch is done; say so, and that the log missed it.
        eprintln!("warning: rule {label} is {on_off}, but the audit log could not be written: {e}");
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &changed)?;
        writeln!(out)?;
    } else if on {
        writeln!(out, "rule {label} is on: it plans messages for new triggers (recorded in the audit log)")?;
    } else {
        writeln!(
            out,
            "rule {label} is off; {} scheduled message(s) cancelled (recorded in the audit log)",
            changed.cancelled
        )?;
    }
    Ok(())
}

fn show(out: &mut impl Write, v: &RuleView) -> std::io::Result<()> {
    writeln!(out, "{}  {}", v.id, v.name)?;
    writeln!(out, "  enabled:   {}", if v.enabled { "on" } else { "off" })?;
    writeln!(out, "  trigger:   {}", v.trigger_type)?;
    if let Some(c) = &v.condition {
        writeln!(out, "  condition: {c}")?;
    }
    writeln!(out, "  channel:   {}", v.channel)?;
    writeln!(out, "  category:  {}", v.category)?;
    writeln!(out, "  delay:     {}s", v.delay)?;
    if let Some(g) = v.grace {
        writeln!(out, "  grace:     {g}s")?;
    }
    if let Some(url) = &v.webhook_url {
        writeln!(out, "  webhook:   {url}")?;
    }
    for (name, present) in [
        ("send window", v.send_window.is_some()),
        ("digest", v.digest.is_some()),
        ("throttle", v.throttle.is_some()),
        ("escalation", v.escalate.is_some()),
    ] {
        if present {
            writeln!(out, "  {name}: yes (see --json)")?;
        }
    }
    writeln!(out, "  created:   {}", v.created_at)?;
    writeln!(out, "  updated:   {}", v.updated_at)?;
    for w in &v.warnings {
        writeln!(out, "  warning:   {w}")?;
    }
    Ok(())
}
