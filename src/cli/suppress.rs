//! `herald suppress`: suppresses an email address or a phone number from a
//! terminal, through the checks of `POST /v1/suppressions`
//! (`http::suppressions::validate`, so both refuse the same input in the
//! same words), and audited as the API audits it, with the OS user as who.
//! Only the hash is stored, keyed with the deployment's secret (the same
//! `email.address_secret` or `data_dir` as the server's, or the server would
//! never match it).

use std::io::Write;

use clap::Args;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::http::problem::ApiError;
use crate::http::suppressions::{SuppressionInput, validate};
use crate::store::{OperatorStore, SuppressionReason, SuppressionStore};

#[derive(Debug, Args)]
pub struct SuppressArgs {
    /// The email address to suppress (only its hash is stored)
    #[arg(long, required_unless_present = "phone", conflicts_with = "phone")]
    pub email: Option<String>,
    /// Or the phone number, with its country code (+14155550101)
    #[arg(long)]
    pub phone: Option<String>,
    /// A category, or * for every category
    #[arg(long, default_value = "*")]
    pub category: String,
    /// manual, hard_bounce, soft_bounce, complaint or unsubscribe
    #[arg(long, default_value = "manual")]
    pub reason: String,
    /// Why, for whoever reads it later
    #[arg(long)]
    pub detail: Option<String>,
    /// Print the suppression as JSON (the API's row) instead of text
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn run(config: &Config, args: SuppressArgs) -> anyhow::Result<()> {
    let Some(reason) = SuppressionReason::parse(&args.reason) else {
        anyhow::bail!(
            "--reason: {:?} is not one of manual, hard_bounce, soft_bounce, complaint, unsubscribe",
            args.reason
        );
    };
    let keys = crate::app::address_keys(config)?;
    let input = SuppressionInput {
        email: args.email,
        phone: args.phone,
        reason: Some(reason),
        category: Some(args.category),
        detail: args.detail,
        expires_at: None,
    };
    let now = SystemClock.now();
    let row = validate(&keys, input, now).map_err(|e| match e {
        // The API's field names, as the flags that carry them.
        ApiError::Invalid(errors) => {
            let said: Vec<String> = errors.iter().map(|e| format!("--{}: {}", e.field, e.message)).collect();
            anyhow::anyhow!("nothing suppressed: {}", said.join("; "))
        }
        other => anyhow::anyhow!("nothing suppressed: {other}"),
    })?;
    let store = super::ready_store(config).await?;
    let created = store.suppress(&row).await?;
    let what = if created { "added" } else { "updated" };
    let entry = crate::store::AuditEntry {
        operator_email: super::rules::actor(),
        action: "suppression.add".into(),
        target: row.address_hash.clone(),
        detail: Some(format!("{} (category {}), {what}", row.reason, row.category)),
    };
    store.append_audit(&entry, now).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &row)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{} {what}: {} hash {} suppressed for category {} ({})",
            if created { "suppression" } else { "existing suppression" },
            row.address_kind,
            row.address_hash,
            row.category,
            row.reason
        )?;
    }
    Ok(())
}
