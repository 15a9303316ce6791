//! `herald copy --to URL`: the configured database (the source) copied
//! into another, empty one; see [`crate::store::copy`] for what it
//! guarantees and refuses. Its own file so the verb's arguments and output
//! stay out of `cli.rs`.

use clap::Args;

use crate::config::Config;
use crate::store::Store;

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The database to copy into: postgres://…, mysql://… or sqlite://PATH.
    /// It must be empty (created and never used); it is migrated first.
    /// Every instance on the source must be stopped.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(config: &Config, args: CopyArgs) -> anyhow::Result<()> {
    let source = super::open_cli_store(config).await?;
    let target_config = Config { database_url: args.to.clone(), ..config.clone() };
    let target = super::open_cli_store(&target_config).await?;
    let (from, to) = (source.dialect(), target.dialect());
    let report = crate::store::copy::copy(&source, &target, |t| {
        if !args.json {
            println!("{}: {} rows in {} batch(es)", t.table, t.rows, t.batches);
        }
    })
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "copied {} rows in {} tables from {from} to {to} in {:.1}s; counts verified, committed.",
            report.rows,
            report.tables.len(),
            report.seconds
        );
        println!(
            "Next: point database_url (HERALD_DATABASE_URL) at {} and start Herald with the same \
             email.address_secret / herald-secret and inbox.token_secret.",
            crate::config::redact_url_password(&args.to)
        );
    }
    Ok(())
}
