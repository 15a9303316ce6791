//! `herald trigger show|cancel ID`: one trigger and its whole audience,
//! for an operator in a terminal ("how did the announcement to 40,000 go?").
//!
//! Both verbs read [`TriggerReport`], the answer of `GET /v1/triggers/{id}`,
//! and `cancel` goes through [`cancel_trigger`] as `POST
//! /v1/triggers/{id}/cancel` and the operator screen do: the counts are the
//! outbox's, never recounted here, and a cancel here cancels exactly what
//! one there would.

use std::io::Write;

use clap::Subcommand;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::http::trigger_report::{TriggerReport, cancel_trigger, thousands};
use crate::store::{AuditEntry, OperatorStore};

#[derive(Debug, Subcommand)]
pub enum TriggerCommand {
    /// Show a trigger and its audience: its progress, its messages by
    /// status and by channel, and why the ones that did not go did not.
    Show {
        /// The trigger's id (the `id` POST /v1/triggers answered)
        id: String,
        /// Print JSON (the API's GET /v1/triggers/{id} body) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Cancel what a trigger has not sent yet, and the rest of its
    /// expansion. Recorded in the audit log.
    Cancel {
        /// The trigger's id
        id: String,
        /// Who cancels, named in each message's send log and the audit log
        /// [default: the OS user]
        #[arg(long, value_name = "NAME")]
        operator: Option<String>,
        /// Print JSON (the API's POST /v1/triggers/{id}/cancel body) instead of text
        #[arg(long)]
        json: bool,
    },
}

/// Why a trigger verb did nothing.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    #[error(
        "no trigger has the id {0:?}; give a trigger_id as POST /v1/triggers answers it (each row of `herald sends --json` has its own)"
    )]
    NotFound(String),
    #[error("--operator: an empty name is not accepted; give who cancels, or leave it out for the OS user")]
    EmptyOperator,
}

pub(super) async fn run(config: &Config, command: TriggerCommand) -> anyhow::Result<()> {
    let store = super::ready_store(config).await?;
    let mut out = std::io::stdout().lock();
    match command {
        TriggerCommand::Show { id, json } => {
            let report = read(&store, &id).await?;
            match json {
                true => json_line(&mut out, &report)?,
                false => show(&mut out, &report)?,
            }
        }
        TriggerCommand::Cancel { id, operator, json } => {
            read(&store, &id).await?;
            // The audit names an OS user as every verb here does, and a
            // name given with --operator as the operator it is.
            let (name, who) = match operator.as_deref().map(str::trim) {
                Some("") => return Err(TriggerError::EmptyOperator.into()),
                Some(name) => (name.to_owned(), format!("operator {name} (command line)")),
                None => (super::rules::os_user(), super::rules::actor()),
            };
            let by = format!("the command line (operator {name})");
            let cancelled = cancel_trigger(&store, &id, &by, SystemClock.now()).await?;
            let entry = AuditEntry {
                operator_email: who,
                action: "trigger.cancel".into(),
                target: id.clone(),
                detail: Some(format!("{cancelled} message(s) cancelled")),
            };
            store.append_audit(&entry, SystemClock.now()).await?;
            let trigger = read(&store, &id).await?;
            if json {
                let body = crate::http::trigger_report::TriggerCancelled { cancelled, trigger };
                json_line(&mut out, &body)?;
            } else {
                writeln!(out, "{} message(s) cancelled (recorded in the audit log)", thousands(cancelled as i64))?;
                show(&mut out, &trigger)?;
            }
        }
    }
    Ok(())
}

async fn read(store: &crate::store::SqlStore, id: &str) -> anyhow::Result<TriggerReport> {
    TriggerReport::read(store, id.trim()).await?.ok_or_else(|| TriggerError::NotFound(id.to_owned()).into())
}

fn json_line(out: &mut impl Write, body: &impl serde::Serialize) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, body)?;
    writeln!(out)?;
    Ok(())
}

/// The report as text: the trigger, its progress, then each table.
fn show(out: &mut impl Write, r: &TriggerReport) -> std::io::Result<()> {
    let to = match (r.audience, &r.user_id, &r.topic) {
        ("user", Some(user), _) => format!("user {user}"),
        ("topic", _, Some(topic)) => format!("the subscribers of topic {topic}"),
        (audience, _, _) => format!("a list of {audience}"),
    };
    let actor = r.actor_id.as_deref().map(|a| format!(", actor {a} (left out)")).unwrap_or_default();
    writeln!(out, "trigger {}  {}  to {to}{actor}", r.id, r.trigger_type)?;
    writeln!(out, "  occurred {}, recorded {}", r.occurred_at, r.created_at)?;
    if let Some(send_at) = &r.send_at {
        writeln!(out, "  nothing of it is due before {send_at}")?;
    }
    if let Some(key) = &r.idempotency_key {
        writeln!(out, "  idempotency key {key}")?;
    }
    writeln!(out, "audience: {}", r.progress())?;
    if r.counts.is_empty() {
        writeln!(out, "messages: none planned")?;
    } else {
        let total: i64 = r.counts.values().sum();
        writeln!(out, "messages by status ({}):", thousands(total))?;
        for (status, n) in &r.counts {
            writeln!(out, "  {status:<11} {:>9}", thousands(*n))?;
        }
        writeln!(out, "by channel:")?;
        for (channel, counts) in &r.by_channel {
            let said: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {}", thousands(*n))).collect();
            writeln!(out, "  {channel:<11} {}", said.join(", "))?;
        }
    }
    if !r.why_not.is_empty() {
        writeln!(out, "why not:")?;
        for (why, n) in &r.why_not {
            writeln!(out, "  {why:<11} {:>9}", thousands(*n))?;
        }
    }
    if let Some(detail) = &r.detail {
        writeln!(out, "detail: {detail}")?;
    }
    Ok(())
}
