//! Channels: how a claimed outbox row reaches a person.
//!
//! A channel is a trait object in a [`Registry`], keyed by the name stored in
//! `engagement_outbox.channel`. The worker never knows what a channel does; it
//! only reads the [`Outcome`] back.

pub mod answer;
pub mod catalog;
pub mod email;
pub mod inbox;
pub mod public_address;
pub mod push;
pub mod signing;
pub mod slack;
pub mod slack_deliver;
pub mod sms;
pub mod webhook;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::planning::template::Rendered;
use crate::store::{NewInboxMessage, OutboxRow, RecipientRow, RuleRow};

/// Everything a channel needs for one claimed row: the row, and for rows a
/// rule planned, the rule, the recipient and the rendered message.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub row: OutboxRow,
    /// Shared with the worker's rule cache: one copy per rule, not per row.
    pub rule: Option<Arc<RuleRow>>,
    pub recipient: Option<RecipientRow>,
    pub message: Option<Rendered>,
}

impl Delivery {
    /// A row enqueued by hand: no rule, no template, the payload is the message.
    pub fn bare(row: OutboxRow) -> Delivery {
        Delivery { row, rule: None, recipient: None, message: None }
    }

    /// The rule's options for one channel (`"push": {…}`, `"slack": {…}`,
    /// stored with its workflow fields), or their defaults: without a rule,
    /// or when they do not read (the rule check refused such at save).
    pub fn rule_options<T: serde::de::DeserializeOwned + Default>(&self, key: &str) -> T {
        self.rule
            .as_ref()
            .and_then(|r| r.workflow.as_ref())
            .and_then(|w| w.get(key))
            .and_then(|v| T::deserialize(v).ok())
            .unwrap_or_default()
    }
}

/// What a delivery attempt came to. An enum rather than flags, so that a
/// channel cannot say "ok" and "retry" at once, and every caller has to decide
/// what each case means.
///
/// `address_hash` rides on every outcome, success or not: a bounce arrives
/// later with an address and has to find the row it belongs to, and the rows
/// worth correlating include the ones that already failed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Handed over: the relay accepted it, the inbox row exists, the webhook
    /// answered 2xx.
    Sent { transport: String, detail: Option<String>, address_hash: Option<String>, provider_id: Option<String> },
    /// A passing failure: worth trying again after the retry interval, or
    /// after `after` when the provider said when (`Retry-After`): a rate
    /// limit asks for a second, the flat `worker.retry` would wait minutes,
    /// and an answer of an hour retried in five minutes is refused again.
    Retry { detail: String, address_hash: Option<String>, after: Option<std::time::Duration> },
    /// We declined to try (suppressed address, opted-out user). Its own
    /// outcome, because "we did not try" and "we tried and were refused" send
    /// an operator to different places.
    Suppressed { detail: String, address_hash: Option<String> },
    /// The mailbox does not exist. Terminal, recorded under its own name.
    Bounced { detail: String, address_hash: Option<String> },
    /// Refused for good, for a reason that is not a bounce.
    Terminal { detail: String, address_hash: Option<String> },
    /// No longer wanted (its rule was disabled or deleted): not attempted.
    Cancelled { detail: String, address_hash: Option<String> },
    /// Not now (a send window or quiet hours): due again at `until`, its
    /// grace window moved to `expires_at`. Not an attempt, and not an
    /// outcome the send log records; the row's `last_error` says why it
    /// waits.
    Held {
        until: crate::clock::Millis,
        expires_at: Option<crate::clock::Millis>,
        reason: crate::domain::HoldReason,
        detail: String,
    },
    /// Past its grace window: no longer relevant, not attempted.
    Expired { detail: String, address_hash: Option<String> },
    /// Delivered into the in-app inbox: the message to write. The worker
    /// writes it in the transaction that records `sent`, fenced by the
    /// claim, so the message exists exactly when the send log says it was
    /// sent; a redelivery or a lost claim can never show it twice.
    Inbox(Box<NewInboxMessage>),
}

impl Outcome {
    pub fn retry(detail: impl Into<String>) -> Outcome {
        Outcome::Retry { detail: detail.into(), address_hash: None, after: None }
    }

    pub fn terminal(detail: impl Into<String>) -> Outcome {
        Outcome::Terminal { detail: detail.into(), address_hash: None }
    }

    pub fn sent(transport: impl Into<String>) -> Outcome {
        Outcome::Sent { transport: transport.into(), detail: None, address_hash: None, provider_id: None }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Sent { .. } | Outcome::Inbox(_) => "sent",
            Outcome::Retry { .. } => "retry",
            Outcome::Suppressed { .. } => "suppressed",
            Outcome::Bounced { .. } => "bounced",
            Outcome::Terminal { .. } => "terminal",
            Outcome::Cancelled { .. } => "cancelled",
            Outcome::Held { .. } => "held",
            Outcome::Expired { .. } => "expired",
        }
    }

    pub fn address_hash(&self) -> Option<&str> {
        match self {
            Outcome::Sent { address_hash, .. }
            | Outcome::Retry { address_hash, .. }
            | Outcome::Suppressed { address_hash, .. }
            | Outcome::Bounced { address_hash, .. }
            | Outcome::Terminal { address_hash, .. }
            | Outcome::Cancelled { address_hash, .. }
            | Outcome::Expired { address_hash, .. } => address_hash.as_deref(),
            Outcome::Held { .. } | Outcome::Inbox(_) => None,
        }
    }
}

/// The suppression in force for `hash` in `category`, read the way every
/// channel that checks one reads it: waiting out a failover
/// (`race::AWAY_WAIT`) rather than turning it into a five-minute retry,
/// and when the database stays away, the row's retry as the `Err`.
pub async fn active_suppression(
    store: &dyn crate::store::Store,
    hash: &str,
    category: &str,
    now: crate::clock::Millis,
) -> Result<Option<crate::store::SuppressionRow>, Outcome> {
    crate::store::race::retry_while_away("check suppressions", crate::store::race::AWAY_WAIT, || {
        store.active_suppression(hash, Some(category), now)
    })
    .await
    .map_err(|e| Outcome::Retry {
        detail: format!("could not check the suppression list: {e}"),
        address_hash: Some(hash.to_owned()),
        after: None,
    })
}

/// "address suppressed (hard_bounce, all categories): 550 5.1.1 …": what
/// a row held back by `s` says, `what` naming the address's kind.
pub fn suppressed_detail(what: &str, s: &crate::store::SuppressionRow) -> String {
    let scope = if s.category == crate::store::ALL_CATEGORIES {
        "all categories".to_owned()
    } else {
        format!("category {}", s.category)
    };
    match &s.detail {
        Some(why) => format!("{what} suppressed ({}, {scope}): {why}", s.reason),
        None => format!("{what} suppressed ({}, {scope})", s.reason),
    }
}

/// What a messaging provider's answer makes of a row, for the answers
/// every messaging channel treats alike: taken (`sent`, the provider's id
/// first in the detail, the credential healthy again), a passing failure
/// (retried after the provider's `Retry-After`), a refusal of this one
/// message (`failed`), a refused credential (`failed`, and `provider` on
/// `/readyz`). An invalid address and an opt-out are given back (`Err`):
/// what they do to the address is the channel's.
pub fn answered(
    answer: answer::Answer,
    provider: &str,
    health: &crate::delivery::health::ChannelHealth,
    address_hash: Option<String>,
) -> Result<Outcome, answer::Answer> {
    use answer::Answer;
    Ok(match answer {
        Answer::Accepted { provider_id, detail } => {
            health.accepted(provider);
            Outcome::Sent { transport: provider.into(), detail: Some(detail), address_hash, provider_id }
        }
        Answer::Retry { after, reason } => Outcome::Retry { detail: reason, address_hash, after },
        Answer::Failed { reason } => Outcome::Terminal { detail: reason, address_hash },
        Answer::CredentialRejected { reason } => {
            health.credential_refused(provider, &reason);
            Outcome::Terminal { detail: format!("the credential was refused: {reason}"), address_hash }
        }
        other @ (Answer::AddressInvalid { .. } | Answer::OptedOut { .. }) => return Err(other),
    })
}

/// One way of delivering a message.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// Delivers one claimed row. Should not panic or return errors for
    /// expected failures: say what happened as an [`Outcome`]. (If it panics
    /// anyway, the worker records a retry rather than crashing the tick.)
    async fn deliver(&self, delivery: &Delivery) -> Outcome;

    /// Called with the rows of each claimed batch about to be delivered,
    /// before the first `deliver`: a channel that reads something per row
    /// (the push channel: the user's devices) reads it for the whole batch
    /// in one statement here, instead of one round trip a row. The default
    /// reads nothing.
    async fn prefetch(&self, _rows: &[&OutboxRow]) {}

    /// Whether delivering is only a write in Herald's own database (the
    /// inbox): `deliver` then does no I/O and answers [`Outcome::Inbox`], and
    /// the worker claims, delivers and records each row in one transaction.
    fn delivers_in_database(&self) -> bool {
        false
    }

    /// The most deliveries this channel runs at once, when it has a limit
    /// of its own (the email channel's `email.concurrency`). The worker
    /// starts no more than that on this channel, so a row it counts as
    /// being delivered is being delivered, not queued inside the channel.
    fn concurrency(&self) -> Option<usize> {
        None
    }
}

/// An entry in the registry: a channel Herald knows by name, with or without
/// a way to deliver in this deployment.
#[derive(Clone)]
enum Entry {
    Ready(Arc<dyn Channel>),
    /// Known by name but with nothing to deliver with (for example email with
    /// no transport configured). Rows for it end `failed` and say so; the
    /// alternative, leaving them scheduled, delivers a message about today on
    /// whatever later day someone configures it.
    Unavailable {
        reason: String,
    },
}

/// The channels this process can deliver to.
#[derive(Clone, Default)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

/// What the registry says about a channel name.
pub enum Lookup<'a> {
    Ready(&'a Arc<dyn Channel>),
    /// The terminal detail to record, in plain words.
    Missing(String),
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn register(&mut self, name: &str, channel: Arc<dyn Channel>) -> &mut Self {
        self.entries.insert(name.to_owned(), Entry::Ready(channel));
        self
    }

    /// Declares a channel by name that cannot deliver here, and why.
    pub fn declare_unavailable(&mut self, name: &str, reason: impl Into<String>) -> &mut Self {
        self.entries.insert(name.to_owned(), Entry::Unavailable { reason: reason.into() });
        self
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    pub fn lookup(&self, name: &str) -> Lookup<'_> {
        match self.entries.get(name) {
            Some(Entry::Ready(c)) => Lookup::Ready(c),
            // Two missing-channel cases, worded for what happened: "is no
            // longer registered" would blame a removal for what is usually a
            // typo, and "has no delivery implementation yet" the build for a
            // setting left unset.
            None => Lookup::Missing(format!(
                "channel \"{name}\" does not exist here (the channels are {}); nothing was sent",
                self.names().collect::<Vec<_>>().join(", ")
            )),
            Some(Entry::Unavailable { reason }) => Lookup::Missing(format!(
                "channel \"{name}\" is not configured on this instance: {reason}; nothing was sent"
            )),
        }
    }
}
