//! `engagement_topics` and `engagement_topic_subscriptions`: keys a host
//! chooses (`doc:42`) and the users who follow each, for triggers addressed
//! to a topic (issue 31).
//!
//! The subscriptions have no foreign key to the topics, on purpose (see
//! migration 0022): a host may insert a subscription in its own
//! transaction, writing that one row, and a topic's row only names and
//! describes it. So adding subscribers through Herald creates the topic's
//! row when it is missing, and deleting a topic deletes its subscriptions,
//! but a subscription without a topic row is still a subscription.
//!
//! Subscribing and unsubscribing take every user id of a call as one JSON
//! parameter in one statement (see [`super::json_rows`]): 10,000 ids are one
//! round trip, the statement's text is the same whatever their number, and
//! the database says how many rows it added or removed, which is the
//! answer, so nothing is read first.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Serialize;
use sqlx::{FromRow, Row};

use super::json_rows::keys_json;
use super::queries::Query;
use super::rows::{Fetch, Run, from_columns};
use super::{SqlStore, StoreError};
use crate::clock::Millis;
use crate::domain::{TopicKey, UserId};

/// A topic's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicRow {
    pub topic_key: String,
    /// For people (the operator's screens); Herald does not read it.
    pub name: Option<String>,
    pub description: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

from_columns!(TopicRow: topic_key, name, description, created_at, updated_at);

/// One user following one topic, since `created_at`: a trigger to the
/// topic reaches the subscribers whose `created_at` is at or before the
/// trigger's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Subscription {
    pub topic_key: String,
    pub user_id: String,
    pub created_at: Millis,
}

from_columns!(Subscription: topic_key, user_id, created_at);

/// What [`TopicStore::subscribe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscribed {
    /// Subscriptions written now; the other distinct ids were subscribed
    /// already and were left as they were.
    pub added: u64,
    /// The topic had no row, and now has one (without name or description).
    pub topic_created: bool,
}

/// What [`TopicStore::delete_topic`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicDeletion {
    /// The topic had a row.
    pub topic: bool,
    pub subscriptions: u64,
}

impl TopicDeletion {
    /// Nothing of the topic existed.
    pub fn nothing(&self) -> bool {
        !self.topic && self.subscriptions == 0
    }
}

/// A page of a list keyed by text: the key to start after (`None`: the
/// first page) and how many at most.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    pub after: Option<&'a str>,
    pub limit: u32,
}

impl Page<'_> {
    /// The bound the statements compare with: every key is at least one
    /// character, so `''` is before them all.
    fn after(&self) -> String {
        self.after.unwrap_or_default().to_owned()
    }
}

#[async_trait]
pub trait TopicStore: Send + Sync {
    /// Creates the topic, or replaces its name and description; the row as
    /// it now is, and whether it was created.
    async fn put_topic(
        &self,
        key: &TopicKey,
        name: Option<&str>,
        description: Option<&str>,
        now: Millis,
    ) -> Result<(TopicRow, bool), StoreError>;
    /// The topic and how many users follow it.
    async fn get_topic(&self, key: &TopicKey) -> Result<Option<(TopicRow, u64)>, StoreError>;
    /// Deletes the topic and all its subscriptions, in one transaction.
    async fn delete_topic(&self, key: &TopicKey) -> Result<TopicDeletion, StoreError>;
    /// Topics in key order.
    async fn list_topics(&self, page: Page<'_>) -> Result<Vec<TopicRow>, StoreError>;
    /// Subscribes users (each id once however often it is listed), creating
    /// the topic's row when it has none, in one transaction. Existing
    /// subscriptions are left alone, their `created_at` included; new ones
    /// get `now`.
    async fn subscribe(&self, key: &TopicKey, users: &[UserId], now: Millis) -> Result<Subscribed, StoreError>;
    /// Removes users from the topic; how many were subscribed.
    async fn unsubscribe(&self, key: &TopicKey, users: &[UserId]) -> Result<u64, StoreError>;
    /// A topic's subscribers in user-id order.
    async fn subscribers(&self, key: &TopicKey, page: Page<'_>) -> Result<Vec<Subscription>, StoreError>;
    /// The topics a user follows, in key order.
    async fn user_topics(&self, user: &UserId, page: Page<'_>) -> Result<Vec<Subscription>, StoreError>;
    /// The names of these topics, by key, in one statement (a topic without
    /// a row or a name is absent): the preference center shows a page of a
    /// user's topics by name without a query per topic.
    async fn topic_names(&self, keys: &[&str]) -> Result<BTreeMap<String, String>, StoreError>;
}

/// Every id once, sorted, as the statements' JSON parameter: two calls over
/// overlapping ids then take their rows' locks in the same order (each
/// database reads the array in order), not in orders that deadlock.
fn users_json(users: &[UserId]) -> Result<String, StoreError> {
    keys_json(users.iter().map(UserId::as_str))
}

#[async_trait]
impl TopicStore for SqlStore {
    async fn put_topic(
        &self,
        key: &TopicKey,
        name: Option<&str>,
        description: Option<&str>,
        now: Millis,
    ) -> Result<(TopicRow, bool), StoreError> {
        let mut tx = self.begin_write().await.map_err(StoreError::db("put topic: begin"))?;
        let created = sqlx::query(self.sql(Query::InsertTopic))
            .bind(key.as_str().to_owned())
            .bind(name.map(str::to_owned))
            .bind(description.map(str::to_owned))
            .bind(now.0)
            .bind(now.0)
            .run(&mut *tx, "put topic: insert")
            .await?
            == 1;
        if !created {
            sqlx::query(self.sql(Query::UpdateTopic))
                .bind(name.map(str::to_owned))
                .bind(description.map(str::to_owned))
                .bind(now.0)
                .bind(key.as_str().to_owned())
                .run(&mut *tx, "put topic: update")
                .await?;
        }
        let row: TopicRow = sqlx::query_as(self.sql(Query::GetTopic))
            .bind(key.as_str().to_owned())
            .one(&mut *tx, "put topic: read back")
            .await?;
        tx.commit().await.map_err(StoreError::db("put topic: commit"))?;
        Ok((row, created))
    }

    async fn get_topic(&self, key: &TopicKey) -> Result<Option<(TopicRow, u64)>, StoreError> {
        let Some(row) = sqlx::query(self.sql(Query::GetTopic))
            .bind(key.as_str().to_owned())
            .optional(self.pool(), "get topic")
            .await?
        else {
            return Ok(None);
        };
        let count: i64 = row.try_get("subscribers").map_err(StoreError::db("get topic: decode"))?;
        let topic = TopicRow::from_row(&row).map_err(StoreError::db("get topic: decode"))?;
        Ok(Some((topic, count.unsigned_abs())))
    }

    async fn delete_topic(&self, key: &TopicKey) -> Result<TopicDeletion, StoreError> {
        let mut tx = self.begin_write().await.map_err(StoreError::db("delete topic: begin"))?;
        let subscriptions = sqlx::query(self.sql(Query::DeleteTopicSubscriptions))
            .bind(key.as_str().to_owned())
            .run(&mut *tx, "delete topic: subscriptions")
            .await?;
        let topic = sqlx::query(self.sql(Query::DeleteTopic))
            .bind(key.as_str().to_owned())
            .run(&mut *tx, "delete topic")
            .await?
            == 1;
        tx.commit().await.map_err(StoreError::db("delete topic: commit"))?;
        Ok(TopicDeletion { topic, subscriptions })
    }

    async fn list_topics(&self, page: Page<'_>) -> Result<Vec<TopicRow>, StoreError> {
        sqlx::query_as(self.sql(Query::ListTopics))
            .bind(page.after())
            .bind(i64::from(page.limit))
            .all(self.pool(), "list topics")
            .await
    }

    async fn subscribe(&self, key: &TopicKey, users: &[UserId], now: Millis) -> Result<Subscribed, StoreError> {
        let users = users_json(users)?;
        let mut tx = self.begin_write().await.map_err(StoreError::db("subscribe: begin"))?;
        let topic_created = sqlx::query(self.sql(Query::InsertTopic))
            .bind(key.as_str().to_owned())
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(now.0)
            .bind(now.0)
            .run(&mut *tx, "subscribe: topic")
            .await?
            == 1;
        let added = sqlx::query(self.sql(Query::Subscribe))
            .bind(key.as_str().to_owned())
            .bind(now.0)
            .bind(users)
            .run(&mut *tx, "subscribe")
            .await?;
        tx.commit().await.map_err(StoreError::db("subscribe: commit"))?;
        Ok(Subscribed { added, topic_created })
    }

    async fn unsubscribe(&self, key: &TopicKey, users: &[UserId]) -> Result<u64, StoreError> {
        let users = users_json(users)?;
        let mut tx = self.begin_write().await.map_err(StoreError::db("unsubscribe: begin"))?;
        let removed = sqlx::query(self.sql(Query::Unsubscribe))
            .bind(users)
            .bind(key.as_str().to_owned())
            .run(&mut *tx, "unsubscribe")
            .await?;
        tx.commit().await.map_err(StoreError::db("unsubscribe: commit"))?;
        Ok(removed)
    }

    async fn subscribers(&self, key: &TopicKey, page: Page<'_>) -> Result<Vec<Subscription>, StoreError> {
        sqlx::query_as(self.sql(Query::TopicSubscribers))
            .bind(key.as_str().to_owned())
            .bind(page.after())
            .bind(i64::from(page.limit))
            .all(self.pool(), "topic subscribers")
            .await
    }

    async fn user_topics(&self, user: &UserId, page: Page<'_>) -> Result<Vec<Subscription>, StoreError> {
        sqlx::query_as(self.sql(Query::UserTopics))
            .bind(user.as_str().to_owned())
            .bind(page.after())
            .bind(i64::from(page.limit))
            .all(self.pool(), "user topics")
            .await
    }

    async fn topic_names(&self, keys: &[&str]) -> Result<BTreeMap<String, String>, StoreError> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows = sqlx::query(self.sql(Query::TopicNames))
            .bind(keys_json(keys.iter().copied())?)
            .all(self.pool(), "topic names")
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("topic_key")?, r.try_get("name")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::db("topic names: decode"))
    }
}
