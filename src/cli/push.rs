//! `herald push`: what an operator needs before the push channel can run.

use clap::Subcommand;

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
}

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
    }
}
