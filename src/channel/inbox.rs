//! The `inbox` channel: the message lands in `engagement_inbox`, where the
//! user's own API reads it.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;

use super::{Channel, Delivery, Outcome};
use crate::batch::Batcher;
use crate::clock::Clock;
use crate::domain::storable_text;
use crate::store::{NewInboxMessage, Store, StoreError};

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

/// The send-log detail of a delivery that found its message already in the
/// inbox (an earlier attempt wrote it, then died before its outcome was
/// committed). The chaos audit counts redeliveries by it.
pub const ALREADY_DELIVERED: &str = "already in the inbox from an earlier attempt";

pub struct InboxChannel {
    /// Concurrent deliveries share transactions (see `batch`).
    writer: Batcher<NewInboxMessage, Result<bool, Arc<StoreError>>>,
}

impl InboxChannel {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let writer = Batcher::spawn(256, move |msgs: Vec<NewInboxMessage>| {
            let (store, clock) = (store.clone(), clock.clone());
            async move {
                match store.insert_inbox_many(&msgs, clock.now()).await {
                    Ok(created) => created.into_iter().map(Ok).collect(),
                    Err(e) => {
                        let e = Arc::new(e);
                        msgs.iter().map(|_| Err(e.clone())).collect()
                    }
                }
            }
        });
        InboxChannel { writer }
    }
}

#[async_trait]
impl Channel for InboxChannel {
    async fn deliver(&self, delivery: &Delivery) -> Outcome {
        let row = &delivery.row;
        let msg = match &delivery.message {
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
                // A payload that does not parse will not parse next time either.
                Err(e) => {
                    return Outcome::terminal(format!(
                        "inbox payload is not usable: {e}; expected a JSON object with \"title\" (string) and \
                         optional \"body\", \"url\", \"data\""
                    ));
                }
            },
        };
        // Idempotent on the outbox id: a redelivery after a crash between this
        // insert and the outcome's commit finds the message there already, and
        // that is still a success.
        match self.writer.submit(msg).await.unwrap_or(Err(Arc::new(StoreError::WriterGone))) {
            Ok(true) => Outcome::Sent { transport: "inbox".into(), detail: None, address_hash: None },
            Ok(false) => {
                Outcome::Sent { transport: "inbox".into(), detail: Some(ALREADY_DELIVERED.into()), address_hash: None }
            }
            Err(e) => Outcome::retry(format!("could not write the inbox message: {e}")),
        }
    }
}
