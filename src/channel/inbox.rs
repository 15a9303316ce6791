//! The `inbox` channel: the message lands in `engagement_inbox`, where the
//! user's own API reads it.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;

use super::{Channel, Outcome};
use crate::batch::Batcher;
use crate::clock::Clock;
use crate::store::{NewInboxMessage, OutboxRow, Store, StoreError};

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
    async fn deliver(&self, row: &OutboxRow) -> Outcome {
        let payload: InboxPayload = match serde_json::from_str(&row.payload) {
            Ok(p) => p,
            // A payload that does not parse will not parse next time either.
            Err(e) => {
                return Outcome::terminal(format!(
                    "inbox payload is not usable: {e}; expected a JSON object with \"title\" (string) and \
                     optional \"body\", \"url\", \"data\""
                ));
            }
        };
        let msg = NewInboxMessage {
            outbox_id: row.id.clone(),
            user_id: row.user_id.clone(),
            title: payload.title,
            body: payload.body,
            url: payload.url,
            data: payload.data,
        };
        // Idempotent on the outbox id: a redelivery after a crash between this
        // insert and the outcome's commit finds the message there already, and
        // that is still a success.
        match self.writer.submit(msg).await.unwrap_or(Err(Arc::new(StoreError::WriterGone))) {
            Ok(true) => Outcome::Sent { transport: "inbox".into(), detail: None, address_hash: None },
            Ok(false) => Outcome::Sent {
                transport: "inbox".into(),
                detail: Some("already in the inbox from an earlier attempt".into()),
                address_hash: None,
            },
            Err(e) => Outcome::retry(format!("could not write the inbox message: {e}")),
        }
    }
}
