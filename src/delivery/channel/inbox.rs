//! The `inbox` channel: the message lands in `engagement_inbox`, where the
//! user's own API reads it.
//!
//! The channel only builds the message; the worker writes it in the same
//! transaction as the `sent` outcome ([`Outcome::Inbox`]). Writing it here,
//! in a transaction of its own, cost a second commit per flush and left a
//! window in which the message existed but the send log did not say so (a
//! crash there meant a redelivery that had to find it already written).

use async_trait::async_trait;
use serde::Deserialize;

use super::{Channel, Delivery, Outcome};
use crate::domain::storable_text;
use crate::store::NewInboxMessage;

/// What an inbox row's payload holds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxPayload {
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub data: Option<serde_json::Value>,
}

#[derive(Debug, Default)]
pub struct InboxChannel;

impl InboxChannel {
    pub fn new() -> Self {
        InboxChannel
    }

    /// The message a delivery writes, or why it cannot be written.
    pub fn message(delivery: &Delivery) -> Result<NewInboxMessage, String> {
        let row = &delivery.row;
        Ok(match &delivery.message {
            // Planned by a rule: the rendered template is the message, and
            // the trigger's payload rides along for the client to use.
            Some(m) => {
                let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
                // Through `storable_text`: a U+0000 in the payload (or the
                // template) would otherwise fail the insert on PostgreSQL
                // on every attempt, and the message would never arrive.
                NewInboxMessage {
                    outbox_id: row.id.clone(),
                    user_id: row.user_id.clone(),
                    title: storable_text(&m.subject).into_owned(),
                    body: Some(storable_text(&m.text).into_owned()),
                    url: payload.get("url").and_then(|u| u.as_str()).map(|u| storable_text(u).into_owned()),
                    data: Some(payload),
                }
            }
            None => match serde_json::from_str::<InboxPayload>(&row.payload) {
                Ok(p) => NewInboxMessage {
                    outbox_id: row.id.clone(),
                    user_id: row.user_id.clone(),
                    title: storable_text(&p.title).into_owned(),
                    body: p.body.map(|b| storable_text(&b).into_owned()),
                    url: p.url.map(|u| storable_text(&u).into_owned()),
                    data: p.data,
                },
                Err(e) => {
                    return Err(format!(
                        "inbox payload is not usable: {e}; expected a JSON object with \"title\" (string) and \
                         optional \"body\", \"url\", \"data\""
                    ));
                }
            },
        })
    }
}

#[async_trait]
impl Channel for InboxChannel {
    async fn deliver(&self, delivery: &Delivery) -> Outcome {
        match InboxChannel::message(delivery) {
            Ok(msg) => Outcome::Inbox(Box::new(msg)),
            // A payload that does not parse will not parse next time either.
            Err(detail) => Outcome::terminal(detail),
        }
    }

    fn delivers_in_database(&self) -> bool {
        true
    }
}
