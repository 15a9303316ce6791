//! `herald users show|set`: a recipient as `GET /v1/users/{id}` shows it,
//! and changes to it from a terminal.
//!
//! `set` changes only the fields given and keeps the rest, then stores the
//! result through `http::users::put_recipient`, the function behind `PUT
//! /v1/users/{id}`: the same validation (each refusal names its field and
//! what is accepted), the user's own preference-center choices kept, and a
//! change of the host's preferences written to the audit log, here with the
//! OS user as who. Rejected alternative: a full replacement as the API's
//! PUT does, which from a terminal would wipe every field not retyped.

use std::io::Write;

use clap::{Args, Subcommand};

use crate::config::Config;
use crate::domain::UserId;
use crate::http::problem::ApiError;
use crate::planning::recipient::{Preferences, RecipientInput, RecipientView};
use crate::planning::workflow::QuietHoursInput;
use crate::store::RecipientStore;

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Show a recipient: address, locale, time zone, quiet hours, the host's
    /// opt-outs and the user's own preference-center choices.
    Show(UsersShowArgs),
    /// Change the fields given (others are kept), creating the user if
    /// unknown; a change of the host's opt-outs is recorded in the audit
    /// log with the OS user as who.
    Set(Box<UsersSetArgs>),
}

#[derive(Debug, Args)]
pub struct UsersShowArgs {
    /// The host application's id for the user
    #[arg(long)]
    pub user_id: String,
    /// Print JSON (the API's GET /v1/users/{id} body) instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UsersSetArgs {
    /// The host application's id for the user (created if unknown)
    #[arg(long)]
    pub user_id: String,
    /// Email address; "" removes it
    #[arg(long)]
    pub email: Option<String>,
    /// Display name; "" removes it
    #[arg(long)]
    pub name: Option<String>,
    /// BCP 47 locale tag such as de or pt-BR; "" removes it
    #[arg(long)]
    pub locale: Option<String>,
    /// IANA time zone such as Europe/Berlin; "" removes it
    #[arg(long)]
    pub timezone: Option<String>,
    /// Phone number with its country code, such as +14155550101 (stored in
    /// E.164); "" removes it
    #[arg(long)]
    pub phone: Option<String>,
    /// Slack user id (U… or W…); "" removes it
    #[arg(long)]
    pub slack_user_id: Option<String>,
    /// Quiet hours in the user's time zone, FROM-UNTIL such as 22:00-07:00;
    /// "none" removes them
    #[arg(long, value_name = "HH:MM-HH:MM|none")]
    pub quiet_hours: Option<String>,
    /// The host's opt-out or opt-in for a category, CATEGORY=on|off
    /// (repeatable), e.g. --category marketing=off
    #[arg(long = "category", value_name = "CATEGORY=on|off")]
    pub categories: Vec<String>,
    /// The host's opt-out or opt-in for a channel, CHANNEL=on|off
    /// (repeatable), e.g. --channel email=off
    #[arg(long = "channel", value_name = "CHANNEL=on|off")]
    pub channels: Vec<String>,
    /// Print JSON (the user as stored) instead of text
    #[arg(long)]
    pub json: bool,
}

/// Why `herald users` did nothing.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("no user {0:?}; create one with `herald users set --user-id {0} --email ...` or PUT /v1/users/{0}")]
    NotFound(String),
    #[error("{flag}: {given:?} is not {what}=on|off (for example {example})")]
    Switch { flag: &'static str, given: String, what: &'static str, example: &'static str },
    #[error("--quiet-hours: {0:?} is not FROM-UNTIL in 24-hour HH:MM (for example 22:00-07:00), or none")]
    QuietHours(String),
    #[error("user {user} was not changed: {why}")]
    Refused { user: String, why: String },
}

pub(super) async fn run(config: &Config, command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Show(args) => show(config, args).await,
        UsersCommand::Set(args) => set(config, *args).await,
    }
}

async fn show(config: &Config, args: UsersShowArgs) -> anyhow::Result<()> {
    let user = UserId::parse("user_id", &args.user_id)?;
    let store = super::ready_store(config).await?;
    let row = store.get_recipient(&user).await?.ok_or_else(|| UsersError::NotFound(user.to_string()))?;
    print(&RecipientView::from(&row), args.json, None)
}

async fn set(config: &Config, args: UsersSetArgs) -> anyhow::Result<()> {
    let user = UserId::parse("user_id", &args.user_id)?;
    let categories = switches("--category", "CATEGORY", "marketing=off", &args.categories)?;
    let channels = switches("--channel", "CHANNEL", "email=off", &args.channels)?;
    let quiet_hours = args.quiet_hours.as_deref().map(quiet_hours).transpose()?;

    let store = super::ready_store(config).await?;
    // The deployment's keys: a phone is stored with its hash, which a
    // search by number and a STOP must find under the server's secret.
    let state = super::rules::offline_state(config, store, Some(crate::app::address_keys(config)?))?;
    let existing = state.store.get_recipient(&user).await?;
    let mut input = match &existing {
        Some(row) => {
            let view = RecipientView::from(row);
            RecipientInput {
                email: view.email,
                name: view.name,
                locale: view.locale,
                timezone: view.timezone,
                preferences: view.preferences,
                quiet_hours: view.quiet_hours,
                phone: view.phone,
                slack_user_id: view.slack_user_id,
            }
        }
        None => RecipientInput::default(),
    };
    let text = |v: &Option<String>| v.as_ref().map(|s| Some(s.clone()).filter(|s| !s.trim().is_empty()));
    let fields = [
        (&args.email, &mut input.email),
        (&args.name, &mut input.name),
        (&args.locale, &mut input.locale),
        (&args.timezone, &mut input.timezone),
        (&args.phone, &mut input.phone),
        (&args.slack_user_id, &mut input.slack_user_id),
    ];
    for (given, field) in fields {
        if let Some(v) = text(given) {
            *field = v;
        }
    }
    if let Some(q) = quiet_hours {
        input.quiet_hours = q;
    }
    let Preferences { categories: cats, channels: chans } = &mut input.preferences;
    cats.extend(categories);
    chans.extend(channels);

    let (view, created) =
        crate::http::users::put_recipient(&state, &user, input, &super::rules::actor()).await.map_err(|e| {
            let why = match e {
                ApiError::Invalid(errors) => {
                    errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ")
                }
                other => other.to_string(),
            };
            UsersError::Refused { user: user.to_string(), why }
        })?;
    let said = if created { "created" } else { "saved" };
    print(&view, args.json, Some(said))
}

/// `NAME=on|off` flags into a map, refusing anything else by flag.
fn switches(
    flag: &'static str,
    what: &'static str,
    example: &'static str,
    given: &[String],
) -> Result<Vec<(String, bool)>, UsersError> {
    given
        .iter()
        .map(|g| {
            let parsed = g.split_once('=').and_then(|(name, value)| {
                let on = match value.trim() {
                    "on" => true,
                    "off" => false,
                    _ => return None,
                };
                Some((name.trim().to_owned(), on)).filter(|(n, _)| !n.is_empty())
            });
            parsed.ok_or_else(|| UsersError::Switch { flag, given: g.clone(), what, example })
        })
        .collect()
}

/// `22:00-07:00` into the API's `{from, until}`; `none` removes them. The
/// times themselves are checked by the same code as the API's.
fn quiet_hours(given: &str) -> Result<Option<QuietHoursInput>, UsersError> {
    if given.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let (from, until) = given.split_once('-').ok_or_else(|| UsersError::QuietHours(given.to_owned()))?;
    Ok(Some(QuietHoursInput { from: from.trim().to_owned(), until: until.trim().to_owned() }))
}

fn print(view: &RecipientView, json: bool, said: Option<&str>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, view)?;
        writeln!(out)?;
        return Ok(());
    }
    if let Some(said) = said {
        writeln!(out, "user {} {said}", view.user_id)?;
    }
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    writeln!(out, "{}", view.user_id)?;
    writeln!(out, "  email:       {}", or_none(&view.email))?;
    writeln!(out, "  name:        {}", or_none(&view.name))?;
    writeln!(out, "  locale:      {}", or_none(&view.locale))?;
    writeln!(out, "  timezone:    {}", or_none(&view.timezone))?;
    writeln!(out, "  phone:       {}", or_none(&view.phone))?;
    writeln!(out, "  slack:       {}", or_none(&view.slack_user_id))?;
    let quiet = view.quiet_hours.as_ref().map_or("-".to_owned(), |q| format!("{}-{}", q.from, q.until));
    writeln!(out, "  quiet hours: {quiet}")?;
    let onoff = |m: &std::collections::BTreeMap<String, bool>| {
        if m.is_empty() {
            "-".to_owned()
        } else {
            m.iter().map(|(k, v)| format!("{k}={}", if *v { "on" } else { "off" })).collect::<Vec<_>>().join(", ")
        }
    };
    writeln!(out, "  categories:  {}", onoff(&view.preferences.categories))?;
    writeln!(out, "  channels:    {}", onoff(&view.preferences.channels))?;
    if !view.user_preferences.is_empty() {
        let own: Vec<String> = view
            .user_preferences
            .iter()
            .flat_map(|(cat, chans)| {
                chans.iter().map(move |(ch, on)| format!("{cat} by {ch}={}", if *on { "on" } else { "off" }))
            })
            .collect();
        writeln!(out, "  user's own:  {} (their preference center; see herald preferences)", own.join(", "))?;
    }
    writeln!(out, "  created:     {}", view.created_at)?;
    writeln!(out, "  updated:     {}", view.updated_at)?;
    Ok(())
}
