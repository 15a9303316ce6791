//! `herald keys` and `herald operators`: API keys for host applications and
//! the people who sign in to the operator screen.

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::store::RecipientStore;

use super::{KeysCommand, OperatorsCommand, ready_store};

pub(super) async fn keys(config: &Config, cmd: KeysCommand) -> anyhow::Result<()> {
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

pub(super) async fn operators(config: &Config, cmd: OperatorsCommand) -> anyhow::Result<()> {
    use crate::store::OperatorStore;
    match cmd {
        OperatorsCommand::Add { email, password_stdin } => {
            let password = read_password(password_stdin)?;
            let store = ready_store(config).await?;
            let op = crate::http::ui::session::add_operator(&store, &email, &password, SystemClock.now()).await?;
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
            let email = crate::http::ui::session::normalize_email(&email);
            if !store.delete_operator(&email).await? {
                anyhow::bail!("no operator with email {email:?} (see `herald operators list`)");
            }
            println!("removed operator {email}; their sessions have ended");
        }
    }
    Ok(())
}
