//! `herald push`: what an operator needs before the push channel can run,
//! and a user's devices as the push channel sees them.

use clap::Subcommand;

use crate::config::Config;
use crate::domain::UserId;
use crate::store::{PushDeviceRow, PushDeviceStore};

#[derive(Debug, Subcommand)]
pub enum PushCommand {
    /// Print a new Web Push (VAPID) key pair: the private key for
    /// push.vapid_private_key, the public key pages subscribe with.
    /// Needs no configuration or database. Replacing a deployment's key
    /// orphans every browser subscription made with the old one.
    VapidKeys {
        /// Print {"public_key", "private_key"} as JSON
        #[arg(long)]
        json: bool,
    },
    /// List a user's push devices, removed ones too: kind, label, when
    /// registered, the last notification a provider accepted, and for a
    /// removed one when, by whom (provider, user, api, an operator) and why.
    /// Never prints an endpoint, token or key.
    Devices {
        /// The host application's id for the user
        user_id: String,
        /// Print JSON (one object per device) instead of text
        #[arg(long)]
        json: bool,
    },
}

impl PushCommand {
    /// Whether the verb needs the configuration and the database.
    pub fn needs_database(&self) -> bool {
        matches!(self, PushCommand::Devices { .. })
    }
}

/// The verbs that need no configuration or database.
pub fn run(cmd: &PushCommand) -> anyhow::Result<()> {
    match cmd {
        PushCommand::VapidKeys { json } => {
            let (private, public) = crate::delivery::channel::push::vapid::generate_key_pair();
            if *json {
                println!("{}", serde_json::json!({ "public_key": public, "private_key": private }));
            } else {
                println!(
                    "Public key (the applicationServerKey pages subscribe with; GET /v1/push/vapid-public-key \
                     serves it):\n{public}\n\nPrivate key (push.vapid_private_key, or \
                     HERALD_PUSH__VAPID_PRIVATE_KEY; keep it secret):\n{private}"
                );
            }
            Ok(())
        }
        PushCommand::Devices { .. } => unreachable!("run_with_database"),
    }
}

/// The verbs that read the database.
pub(super) async fn run_with_database(config: &Config, cmd: PushCommand) -> anyhow::Result<()> {
    let PushCommand::Devices { user_id, json } = cmd else { return run(&cmd) };
    let user = UserId::parse("user_id", &user_id)?;
    let store = super::ready_store(config).await?;
    let devices = store.push_devices(user.as_str(), true).await?;
    if json {
        let shown: Vec<serde_json::Value> = devices.iter().map(PushDeviceRow::shown).collect();
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else if devices.is_empty() {
        println!("user {user_id:?} has no push device");
    } else {
        for d in &devices {
            println!("{}", device_line(d));
        }
    }
    Ok(())
}

fn device_line(d: &PushDeviceRow) -> String {
    let label = d.label.as_deref().map(|l| format!(" {l:?}")).unwrap_or_default();
    let success = d.last_success_at.map(|t| t.to_rfc3339()).unwrap_or_else(|| "never".into());
    let mut line =
        format!("{} {}{label}  registered {}  last success {success}", d.id, d.kind, d.created_at.to_rfc3339());
    if let Some(at) = d.removed_at {
        let by = d.removed_by.as_deref().unwrap_or("?");
        let why = d.removed_reason.as_deref().unwrap_or("no reason recorded");
        line.push_str(&format!("  REMOVED {} by {by}: {why}", at.to_rfc3339()));
    }
    line
}
