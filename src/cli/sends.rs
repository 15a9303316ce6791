//! `herald status`, `herald sends` and `herald preferences`: "did user X
//! get it, and if not, why" and "what does X receive", answered from the
//! same store functions the API and the screen use.

use std::io::Write;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::delivery::channel::sms::phone::PhoneNumber;
use crate::domain::UserId;
use crate::store::{RecipientStore, SendRecord, Store, SuppressionStore};

use super::{PreferencesArgs, SendsArgs, ready_store};

pub(super) async fn status(config: &Config, json: bool) -> anyhow::Result<()> {
    let store = ready_store(config).await?;
    let now = SystemClock.now();
    let summary = store.status_summary(now).await?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "outbox ({})", store.dialect())?;
    for c in &summary.counts {
        writeln!(out, "  {:<11} {:>8}", c.status.as_str(), c.count)?;
    }
    match &summary.oldest_due {
        Some(o) => writeln!(
            out,
            "oldest due: {} for user {} ({}), due {}, {:.0}s overdue, {} attempt(s){}",
            o.id,
            o.user_id,
            o.channel,
            o.due_at,
            o.overdue_seconds,
            o.attempts,
            o.last_error.as_deref().map(|e| format!(", last error: {e}")).unwrap_or_default()
        )?,
        None => writeln!(out, "oldest due: none (nothing is waiting past its due time)")?,
    }
    if let Some(next) = summary.next_due_at.filter(|n| *n > now) {
        writeln!(out, "next due:   {next}")?;
    }
    // The `herald serve` instances and their leases (see `worker.lease`):
    // which are alive, and which lost theirs (their rows are taken back
    // after the lease plus worker.deliver_timeout).
    let instances = crate::store::InstanceStore::instances(&store).await?;
    if instances.is_empty() {
        writeln!(out, "instances: none holds a lease")?;
    } else {
        writeln!(out, "instances:")?;
        for i in &instances {
            let lease = if i.expires_at > now {
                format!("lease held, {:.0}s left", i.expires_at.since(now).as_secs_f64())
            } else {
                format!("lease lapsed {:.0}s ago", now.since(i.expires_at).as_secs_f64())
            };
            writeln!(out, "  {} on {} (pid {}), started {}: {lease}", i.id, i.host, i.pid, i.started_at)?;
        }
    }
    Ok(())
}

pub(super) async fn sends(config: &Config, args: SendsArgs) -> anyhow::Result<()> {
    let Some(user_id) = &args.user_id else {
        return sends_by_address(config, &args).await;
    };
    let user = UserId::parse("--user-id", user_id)?;
    let store = ready_store(config).await?;
    let log = store.sends_for_user(&user, args.limit).await?;
    let pending = store.pending_for_user(&user, args.limit).await?;
    // The API's answer, for what it adds to the log: each message's subject
    // and the triggers that planned nothing, with why.
    let timeline = crate::http::users::user_timeline(&store, &user, args.limit)
        .await
        .map_err(|e| anyhow::anyhow!("reading the user's messages: {e}"))?;
    let subjects: std::collections::HashMap<&str, &str> =
        timeline.messages.iter().filter_map(|m| Some((m.outbox_id.as_str(), m.subject.as_deref()?))).collect();
    let subject = |id: &str| subjects.get(id).map(|s| format!(" \"{s}\"")).unwrap_or_default();
    // Digest membership and escalation links, as the API shows them.
    let messages: std::collections::HashMap<&str, &crate::http::users::MessageHistory> =
        timeline.messages.iter().map(|m| (m.outbox_id.as_str(), m)).collect();
    let quiet = &timeline.triggers_without_messages;
    let mut out = std::io::stdout().lock();
    if args.json {
        let with_subject = |v: serde_json::Value, id: &str| {
            let mut v = v;
            if let Some(s) = subjects.get(id) {
                v["subject"] = serde_json::Value::from(*s);
            }
            if let Some(m) = messages.get(id) {
                if let Some(t) = &m.digest_triggers {
                    v["digest_triggers"] = serde_json::json!(t);
                }
                if let Some(o) = &m.follow_up_of {
                    v["follow_up_of"] = o.as_str().into();
                }
                if let Some(n) = m.follow_up_step {
                    v["follow_up_step"] = n.into();
                }
                if let Some(f) = &m.follow_up {
                    v["follow_up"] = f.as_str().into();
                }
                if m.follow_ups.len() > 1 {
                    v["follow_ups"] = serde_json::json!(m.follow_ups);
                }
            }
            v
        };
        let sends: Vec<serde_json::Value> =
            log.iter().map(|s| with_subject(serde_json::json!(s), &s.outbox_id)).collect();
        let pending: Vec<serde_json::Value> = pending.iter().map(|r| with_subject(pending_json(r), &r.id)).collect();
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({
                "user_id": user, "sends": sends, "pending": pending, "triggers_without_messages": quiet,
            }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    if log.is_empty() && pending.is_empty() && quiet.is_empty() {
        writeln!(out, "nothing was ever scheduled for user {user}, and no trigger names them")?;
        return Ok(());
    }
    // A message's digest and escalation links, once per message.
    let mut linked = std::collections::HashSet::new();
    let mut links = |out: &mut std::io::StdoutLock, id: &str| -> std::io::Result<()> {
        let Some(m) = messages.get(id).filter(|_| linked.insert(id.to_owned())) else { return Ok(()) };
        if let Some(t) = &m.digest_triggers {
            // Where each of those triggers went, and when it goes out.
            let when = match m.status.as_str() {
                "scheduled" | "sending" => format!(", goes out {}", m.due_at),
                status => format!(", {status}"),
            };
            writeln!(out, "      digest of {} trigger(s){when}: {}", t.len(), t.join(", "))?;
        }
        match (&m.follow_up_of, m.follow_up_step) {
            (Some(o), Some(n)) if n > 1 => writeln!(out, "      follow-up (step {n}) of inbox message {o}")?,
            (Some(o), _) => writeln!(out, "      follow-up of inbox message {o}")?,
            _ => {}
        }
        match m.follow_ups.as_slice() {
            [] => {}
            [f] => writeln!(out, "      followed up by {f}")?,
            steps => writeln!(out, "      followed up by {}", steps.join(", then "))?,
        }
        Ok(())
    };
    if !pending.is_empty() {
        writeln!(out, "not yet delivered ({}):", pending.len())?;
        for r in &pending {
            writeln!(out, "{}", pending_line(r, &subject(&r.id)))?;
            links(&mut out, &r.id)?;
        }
    }
    // An empty log says only that no outcome was recorded: with messages
    // waiting above it, "nothing was ever scheduled" would contradict them.
    if log.is_empty() && pending.is_empty() {
        writeln!(out, "nothing was ever scheduled for user {user}")?;
    } else if log.is_empty() {
        writeln!(out, "send log for user {user}: no outcome yet (nothing delivered or given up on so far)")?;
    } else {
        writeln!(out, "send log for user {user}, newest first ({}):", log.len())?;
    }
    for s in &log {
        log_line(&mut out, s, &subject(&s.outbox_id), "")?;
        links(&mut out, &s.outbox_id)?;
    }
    if !quiet.is_empty() {
        writeln!(out, "triggers that planned nothing, newest first ({}):", quiet.len())?;
        for t in quiet {
            writeln!(out, "  {}  {}  {}: {}", t.occurred_at, t.trigger_type, t.trigger_id, t.detail)?;
        }
    }
    Ok(())
}

/// A row still waiting, as JSON: the row, and when it is held, until when.
fn pending_json(r: &crate::store::OutboxRow) -> serde_json::Value {
    let mut v = serde_json::json!(r);
    if r.hold_detail().is_some() {
        v["held_until"] = r.due_at.to_rfc3339().into();
    }
    v
}

/// A row still waiting, as a line (`subject` quoted, or empty).
fn pending_line(r: &crate::store::OutboxRow, subject: &str) -> String {
    // A hold is not an error: the row waits for its window.
    let why = match (r.hold_detail(), r.last_error.as_deref()) {
        (Some(hold), _) => format!("  held until {}: {hold}", r.due_at),
        (None, Some(e)) => format!("  last error: {e}"),
        (None, None) => String::new(),
    };
    format!(
        "  {}  {:<9} {:<8}{subject} due {}  attempts {}{why}",
        r.id,
        r.status.as_str(),
        r.channel,
        r.due_at,
        r.attempts
    )
}

/// `herald preferences`: what the user receives, per category and channel
/// and who decided; with `--set` or `--topic`, an operator's change, checked
/// like the user's own and audited as `operator EMAIL (command line)`.
pub(super) async fn preferences(config: &Config, args: PreferencesArgs) -> anyhow::Result<()> {
    let user = UserId::parse("--user-id", &args.user_id)?;
    let mut change = crate::http::preferences::PreferenceChange::default();
    for set in &args.set {
        // From the right: `on`/`off` and a channel name hold neither `=`
        // nor `:`, while a category may hold both (`promo:spring`).
        let parsed = set.rsplit_once('=').and_then(|(target, value)| {
            let (category, channel) = target.rsplit_once(':')?;
            let on = match value {
                "on" => true,
                "off" => false,
                _ => return None,
            };
            Some((category.trim(), channel.trim(), on))
        });
        let Some((category, channel, on)) = parsed.filter(|(c, ch, _)| !c.is_empty() && !ch.is_empty()) else {
            anyhow::bail!("--set: {set:?} is not CATEGORY:CHANNEL=on|off (for example news:email=off)");
        };
        change.categories.entry(category.to_owned()).or_default().insert(channel.to_owned(), on);
    }
    for topic in &args.topic {
        // From the right, as --set: a topic key may hold `:` but not `=`.
        let parsed = topic.rsplit_once('=').and_then(|(key, value)| match value.trim() {
            "muted" => Some((key.trim(), false)),
            "on" => Some((key.trim(), true)),
            _ => None,
        });
        let Some((key, on)) = parsed.filter(|(k, _)| !k.is_empty()) else {
            anyhow::bail!("--topic: {topic:?} is not KEY=muted|on (for example doc:42=muted)");
        };
        change.topics.insert(key.to_owned(), on);
    }
    let changing = !args.set.is_empty() || !args.topic.is_empty();
    let store = ready_store(config).await?;
    let who = match (changing, &args.operator) {
        (false, _) => String::new(),
        (true, None) => {
            anyhow::bail!("--operator: required with --set or --topic (the operator's email, named in the audit trail)")
        }
        (true, Some(email)) => {
            if crate::store::OperatorStore::operator_by_email(&store, email.trim()).await?.is_none() {
                anyhow::bail!("--operator: {email:?} is not an operator account (see herald operators list)");
            }
            format!("operator {} (command line)", email.trim())
        }
    };
    let change = changing.then_some(change);
    let (center, changed) =
        crate::http::preferences::center_or_change_in_store(&store, SystemClock.now(), &user, change, &who)
            .await
            .map_err(|e| match e {
                crate::http::problem::ApiError::Invalid(errors) => {
                    let said: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
                    anyhow::anyhow!("nothing changed: {}", said.join("; "))
                }
                other => anyhow::anyhow!("{other}"),
            })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(
            &mut out,
            &serde_json::json!({ "user_id": user, "center": center, "changed": changed }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    if changing {
        if changed.is_empty() {
            writeln!(out, "nothing changed for user {user}")?;
        } else {
            writeln!(out, "changed for user {user}: {} (recorded in the audit log)", changed.join("; "))?;
        }
    }
    if center.categories.is_empty() {
        writeln!(out, "no enabled rule sends anything, so there is nothing to choose")?;
    }
    for c in &center.categories {
        let name = if c.name == c.category { c.category.clone() } else { format!("{} ({})", c.name, c.category) };
        let channels: Vec<String> = c
            .channels
            .iter()
            .map(|ch| {
                let state = if ch.enabled { "on" } else { "off" };
                if c.locked {
                    format!("{}: {state} (always sent)", ch.channel)
                } else {
                    format!("{}: {state} (decided by {})", ch.channel, ch.decided_by)
                }
            })
            .collect();
        writeln!(out, "  {name}  {}", channels.join(", "))?;
    }
    if !center.topics.is_empty() {
        writeln!(out, "topics followed (the first {}):", crate::http::preferences::TOPICS_SHOWN)?;
    }
    for t in &center.topics {
        let name = t.name.as_ref().map_or(t.topic.clone(), |n| format!("{n} ({})", t.topic));
        writeln!(out, "  {name}  {}", if t.muted { "muted" } else { "on" })?;
    }
    Ok(())
}

/// `--address` or `--phone`: the send log and the suppressions by the
/// hash, and for a phone the users who have it (by the same hash) with
/// what still waits for them, held back or not yet delivered.
async fn sends_by_address(config: &Config, args: &SendsArgs) -> anyhow::Result<()> {
    let keys = crate::app::address_keys(config)?;
    let hash = match (&args.address, &args.phone) {
        (_, Some(phone)) => {
            let phone =
                PhoneNumber::parse("--phone", phone).map_err(|e| anyhow::anyhow!("--phone: {}", e.unnamed()))?;
            keys.hash_phone(&phone)
        }
        (address, None) => {
            let address = address.as_deref().unwrap_or_default();
            keys.hash(address).ok_or_else(|| {
                anyhow::anyhow!("--address: {address:?} is not an email address (expected local@domain)")
            })?
        }
    };
    let store = ready_store(config).await?;
    let mut waiting = Vec::new();
    if args.phone.is_some() {
        for user_id in store.users_by_phone_hash(&hash, 20).await? {
            let pending = store.pending_for_user(&UserId::parse("user_id", &user_id)?, args.limit).await?;
            waiting.push((user_id, pending));
        }
    }
    let log = store.sends_for_address(&hash, args.limit).await?;
    let subjects = crate::headline::for_sends(&store, &log).await?;
    let suppressions = store.list_suppressions(Some(&hash), 100).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let sends: Vec<serde_json::Value> = log
            .iter()
            .map(|s| {
                let mut v = serde_json::json!(s);
                if let Some(subject) = subjects.get(&s.outbox_id) {
                    v["subject"] = subject.as_str().into();
                }
                v
            })
            .collect();
        let mut body = serde_json::json!({ "address_hash": hash, "sends": sends, "suppressions": suppressions });
        if args.phone.is_some() {
            let users: Vec<serde_json::Value> = waiting
                .iter()
                .map(|(user_id, pending)| {
                    let pending: Vec<serde_json::Value> = pending.iter().map(pending_json).collect();
                    serde_json::json!({ "user_id": user_id, "pending": pending })
                })
                .collect();
            body["users"] = users.into();
        }
        serde_json::to_writer_pretty(&mut out, &body)?;
        writeln!(out)?;
        return Ok(());
    }
    for s in &suppressions {
        writeln!(
            out,
            "suppressed since {} ({}, category {}){}",
            s.created_at,
            s.reason,
            s.category,
            s.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
        )?;
    }
    for (user_id, pending) in &waiting {
        if pending.is_empty() {
            writeln!(out, "user {user_id} has this number; nothing waiting for them")?;
        } else {
            writeln!(out, "user {user_id} has this number; not yet delivered ({}):", pending.len())?;
        }
        for r in pending {
            writeln!(out, "{}", pending_line(r, ""))?;
        }
    }
    if args.phone.is_some() && waiting.is_empty() {
        writeln!(out, "no user has this number")?;
    }
    if log.is_empty() {
        writeln!(out, "nothing in the send log for that address (hash {hash})")?;
        return Ok(());
    }
    writeln!(out, "send log for address hash {hash}, newest first ({}):", log.len())?;
    for s in &log {
        let subject = subjects.get(&s.outbox_id).map(|t| format!(" \"{t}\"")).unwrap_or_default();
        log_line(&mut out, s, &subject, &format!(" user {} ", s.user_id))?;
    }
    Ok(())
}

/// One send-log row as both listings print it: when, status, channel, the
/// message's subject, `user` (the address listing's " user U "), the
/// outbox id and the detail.
fn log_line(out: &mut impl Write, s: &SendRecord, subject: &str, user: &str) -> std::io::Result<()> {
    let detail = s.detail.as_deref().map(|d| format!("  {d}")).unwrap_or_default();
    writeln!(out, "  {}  {:<11} {:<8}{subject}{user} outbox {}{detail}", s.created_at, s.status, s.channel, s.outbox_id)
}
