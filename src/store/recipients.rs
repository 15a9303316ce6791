//! `engagement_recipients` (who a user is, for messages) and
//! `engagement_api_keys` (who may call the API).

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::json_rows::keys_json;
use super::queries::Query;
use super::rows::{opt_text, text};
use super::{CancelScope, RuleStore, SqlStore, StoreError};
use crate::clock::Millis;
use crate::domain::UserId;

#[derive(Debug, Clone, Serialize)]
pub struct RecipientRow {
    pub user_id: String,
    pub email: Option<String>,
    pub name: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    /// `{"categories": {"marketing": false}, "channels": {"email": false}}`
    pub preferences: serde_json::Value,
    /// When the user wants nothing but transactional messages, in their
    /// time zone (`crate::planning::workflow::Span` parses it).
    pub quiet_hours: Option<crate::planning::workflow::QuietHoursInput>,
    /// E.164 (`+14155550101`), normalised before it is stored
    /// (`delivery::channel::sms::phone`).
    pub phone: Option<String>,
    /// The address hash of `phone` (`AddressKeys::hash_phone`), which the
    /// searches by phone find the user by: the send log and the
    /// suppressions are keyed by the same hash. Set by whoever sets
    /// `phone` (`http::users::put_recipient`, which holds the keys); never
    /// shown, and not read back (`None` in a row read from the store).
    #[serde(skip)]
    pub phone_hash: Option<String>,
    /// `U…` or `W…`: a Slack message to this user is a direct message.
    pub slack_user_id: Option<String>,
    /// The user's own choices from the preference center, which the host's
    /// `preferences` never override (see `crate::planning::recipient::UserChoices`).
    /// Written only by [`RecipientStore::merge_user_choices`].
    pub user_choices: crate::planning::recipient::UserChoices,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl RecipientRow {
    fn from_any(row: &AnyRow) -> Result<RecipientRow, sqlx::Error> {
        let prefs = text(row, "preferences")?;
        Ok(RecipientRow {
            user_id: text(row, "user_id")?,
            email: opt_text(row, "email")?,
            name: opt_text(row, "name")?,
            locale: opt_text(row, "locale")?,
            timezone: opt_text(row, "timezone")?,
            preferences: serde_json::from_str(&prefs).unwrap_or_default(),
            quiet_hours: opt_text(row, "quiet_hours")?.and_then(|q| serde_json::from_str(&q).ok()),
            phone: opt_text(row, "phone")?,
            phone_hash: None,
            slack_user_id: opt_text(row, "slack_user_id")?,
            user_choices: opt_text(row, "user_preferences")?
                .and_then(|q| serde_json::from_str(&q).ok())
                .unwrap_or_default(),
            created_at: Millis(row.try_get("created_at")?),
            updated_at: Millis(row.try_get("updated_at")?),
        })
    }
}

/// What [`RecipientStore::merge_user_choices`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChoicesMerged {
    /// Stored. `changed` lists each (category, channel, on) that differs
    /// from what was stored before (empty: the change was already so, and
    /// nothing was written).
    Merged { changed: Vec<(String, String, bool)> },
    /// The host deleted the user (`DELETE /v1/users/{id}`) and has not
    /// described them again: nothing was written, so an old inbox token or
    /// preference link cannot bring the user back.
    Erased,
}

/// What deleting a user removed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct UserErasure {
    pub recipient_deleted: bool,
    pub inbox_messages_deleted: u64,
    pub scheduled_cancelled: u64,
    /// The user's push devices (browsers and phones), removed ones too.
    pub push_devices_deleted: u64,
    /// The topics the user followed (see `store::topics`).
    pub topic_subscriptions_deleted: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiKeyRow {
    pub id: String,
    pub name: String,
    #[serde(skip)]
    pub key_hash: String,
    /// The first characters of the key, to recognise it in a list.
    pub prefix: String,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

#[async_trait]
pub trait RecipientStore: Send + Sync {
    /// Creates or replaces; true when it was created.
    async fn put_recipient(&self, r: &RecipientRow) -> Result<bool, StoreError>;
    async fn get_recipient(&self, user_id: &UserId) -> Result<Option<RecipientRow>, StoreError>;
    /// These users' recipient rows (those that exist), in one query.
    async fn recipients_by_ids(&self, user_ids: &[&str]) -> Result<Vec<RecipientRow>, StoreError>;
    /// The ids of the users whose phone has this address hash (at most
    /// `limit`, by id): a search by phone number. Usually one, but nothing
    /// stops a host from giving two users one number (a shared phone).
    async fn users_by_phone_hash(&self, phone_hash: &str, limit: u32) -> Result<Vec<String>, StoreError>;
    /// Erases the user's address, inbox, push devices and topic
    /// subscriptions and cancels what is still scheduled for them. The send
    /// log keeps its rows, which hold no address (only its hash).
    async fn erase_user(&self, user_id: &UserId, now: Millis) -> Result<UserErasure, StoreError>;
    /// Merges a change into the user's own preference-center choices,
    /// creating a bare recipient row when the host has not described the
    /// user yet, unless the host deleted the user.
    ///
    /// The merge happens in the database transaction that holds the row's
    /// lock, not on a copy read before it: the widget sends one request per
    /// checkbox, and four clicks read-merged-overwritten side by side kept
    /// only the last writer's map (the others' choices were lost while the
    /// audit log recorded all four). Rejected: one JSON-merging statement
    /// per dialect (`json_set`, `jsonb_set`, `JSON_SET` each treat missing
    /// nested keys and quoting differently) and a version column with
    /// retries (a schema change for what a row lock already gives).
    async fn merge_user_choices(
        &self,
        user_id: &UserId,
        change: &crate::planning::recipient::UserChoices,
        now: Millis,
    ) -> Result<ChoicesMerged, StoreError>;

    async fn insert_api_key(&self, key: &ApiKeyRow) -> Result<(), StoreError>;
    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>, StoreError>;
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRow>, StoreError>;
    async fn revoke_api_key(&self, id: &str, now: Millis) -> Result<bool, StoreError>;
}

fn key_from_any(row: &AnyRow) -> Result<ApiKeyRow, sqlx::Error> {
    Ok(ApiKeyRow {
        id: text(row, "id")?,
        name: text(row, "name")?,
        key_hash: text(row, "key_hash")?,
        prefix: text(row, "prefix")?,
        created_at: Millis(row.try_get("created_at")?),
        revoked_at: row.try_get::<Option<i64>, _>("revoked_at")?.map(Millis),
    })
}

#[async_trait]
impl RecipientStore for SqlStore {
    async fn put_recipient(&self, r: &RecipientRow) -> Result<bool, StoreError> {
        let db = StoreError::db;
        let quiet_hours = r.quiet_hours.as_ref().map(|q| serde_json::json!(q).to_string());
        let mut tx = self.begin_write().await.map_err(db("put recipient: begin"))?;
        // Insert, or nothing when the row exists, in one statement the
        // database arbitrates: with "update, else insert" two first writers
        // both found no row and the second insert failed on the key
        // (PostgreSQL's 23505 answered 500 to 5 of 100 concurrent PUTs).
        let created = sqlx::query(self.sql(Query::InsertRecipient))
            .bind(r.user_id.clone())
            .bind(r.email.clone())
            .bind(r.name.clone())
            .bind(r.locale.clone())
            .bind(r.timezone.clone())
            .bind(r.preferences.to_string())
            .bind(quiet_hours.clone())
            .bind(r.phone.clone())
            .bind(r.phone_hash.clone())
            .bind(r.slack_user_id.clone())
            .bind(r.created_at.0)
            .bind(r.updated_at.0)
            .execute(&mut *tx)
            .await
            .map_err(db("put recipient: insert"))?
            .rows_affected()
            == 1;
        if !created {
            sqlx::query(self.sql(Query::UpdateRecipient))
                .bind(r.email.clone())
                .bind(r.name.clone())
                .bind(r.locale.clone())
                .bind(r.timezone.clone())
                .bind(r.preferences.to_string())
                .bind(quiet_hours)
                .bind(r.phone.clone())
                .bind(r.phone_hash.clone())
                .bind(r.slack_user_id.clone())
                .bind(r.updated_at.0)
                .bind(r.user_id.clone())
                .execute(&mut *tx)
                .await
                .map_err(db("put recipient: update"))?;
        }
        // The host describes the user again: a deleted user's preference
        // links work again from here on.
        sqlx::query(self.sql(Query::UneraseUser))
            .bind(r.user_id.clone())
            .execute(&mut *tx)
            .await
            .map_err(db("put recipient: no longer erased"))?;
        tx.commit().await.map_err(db("put recipient: commit"))?;
        Ok(created)
    }

    async fn recipients_by_ids(&self, user_ids: &[&str]) -> Result<Vec<RecipientRow>, StoreError> {
        if user_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.sql(Query::RecipientsByIds))
            .bind(keys_json(user_ids.iter().copied())?)
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("recipients by id"))?;
        rows.iter().map(|r| RecipientRow::from_any(r).map_err(StoreError::db("recipients by id"))).collect()
    }

    async fn users_by_phone_hash(&self, phone_hash: &str, limit: u32) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(self.sql(Query::RecipientsByPhoneHash))
            .bind(phone_hash.to_owned())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("users by phone"))?;
        rows.iter().map(|r| text(r, "user_id").map_err(StoreError::db("users by phone"))).collect()
    }

    async fn get_recipient(&self, user_id: &UserId) -> Result<Option<RecipientRow>, StoreError> {
        let row = sqlx::query(self.sql(Query::GetRecipient))
            .bind(user_id.as_str().to_owned())
            .fetch_optional(self.pool())
            .await
            .map_err(StoreError::db("get recipient"))?;
        row.map(|r| RecipientRow::from_any(&r).map_err(StoreError::db("get recipient"))).transpose()
    }

    async fn erase_user(&self, user_id: &UserId, now: Millis) -> Result<UserErasure, StoreError> {
        let db = StoreError::db;
        let scheduled_cancelled =
            self.cancel_scheduled(CancelScope::User(user_id.as_str()), "user deleted", now).await?;
        let mut tx = self.begin_write().await.map_err(db("erase user: begin"))?;
        let inbox = sqlx::query(self.sql(Query::DeleteUserInbox))
            .bind(user_id.as_str().to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: inbox"))?
            .rows_affected();
        let push_devices_deleted = sqlx::query(self.sql(Query::DeleteUserPushDevices))
            .bind(user_id.as_str().to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: push devices"))?
            .rows_affected();
        let topic_subscriptions_deleted = sqlx::query(self.sql(Query::DeleteUserSubscriptions))
            .bind(user_id.as_str().to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: topic subscriptions"))?
            .rows_affected();
        let recipient = sqlx::query(self.sql(Query::DeleteRecipient))
            .bind(user_id.as_str().to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: recipient"))?
            .rows_affected();
        sqlx::query(self.sql(Query::RememberErasedUser))
            .bind(user_id.as_str().to_owned())
            .bind(now.0)
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: remember"))?;
        tx.commit().await.map_err(db("erase user: commit"))?;
        Ok(UserErasure {
            recipient_deleted: recipient == 1,
            inbox_messages_deleted: inbox,
            scheduled_cancelled,
            push_devices_deleted,
            topic_subscriptions_deleted,
        })
    }

    async fn merge_user_choices(
        &self,
        user_id: &UserId,
        change: &crate::planning::recipient::UserChoices,
        now: Millis,
    ) -> Result<ChoicesMerged, StoreError> {
        let db = StoreError::db;
        let id = user_id.as_str().to_owned();
        let mut tx = self.begin_write().await.map_err(db("user choices: begin"))?;
        // The row, created bare when missing (a concurrent creator makes
        // this do nothing rather than fail), then locked: every other
        // change to this user's choices waits here until this one commits,
        // and then reads what it wrote. SQLite's BEGIN IMMEDIATE already
        // holds the only write lock.
        sqlx::query(self.sql(Query::InsertBareRecipient))
            .bind(id.clone())
            .bind(now.0)
            .bind(now.0)
            .execute(&mut *tx)
            .await
            .map_err(db("user choices: insert"))?;
        let row = sqlx::query(self.sql(Query::LockUserChoices))
            .bind(id.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db("user choices: read"))?;
        // Read after the lock is held, so a deletion that committed while
        // this waited is seen (and the row it deleted is not recreated).
        let erased = sqlx::query(self.sql(Query::ErasedUser))
            .bind(id.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db("user choices: erased?"))?
            .is_some();
        let Some(row) = row.filter(|_| !erased) else {
            tx.rollback().await.map_err(db("user choices: rollback"))?;
            return Ok(ChoicesMerged::Erased);
        };
        let mut choices: crate::planning::recipient::UserChoices = opt_text(&row, "user_preferences")
            .map_err(db("user choices: read"))?
            .and_then(|q| serde_json::from_str(&q).ok())
            .unwrap_or_default();
        let mut changed = Vec::new();
        for (category, channels) in change {
            for (channel, on) in channels {
                if choices.entry(category.clone()).or_default().insert(channel.clone(), *on) != Some(*on) {
                    changed.push((category.clone(), channel.clone(), *on));
                }
            }
        }
        if changed.is_empty() {
            // Nothing to write, not even a bare row for a change to nothing.
            tx.rollback().await.map_err(db("user choices: rollback"))?;
            return Ok(ChoicesMerged::Merged { changed });
        }
        let json = serde_json::to_string(&choices).map_err(|e| StoreError::Encode(e.to_string()))?;
        sqlx::query(self.sql(Query::UpdateUserChoices))
            .bind(json)
            .bind(now.0)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db("user choices: update"))?;
        tx.commit().await.map_err(db("user choices: commit"))?;
        Ok(ChoicesMerged::Merged { changed })
    }

    async fn insert_api_key(&self, k: &ApiKeyRow) -> Result<(), StoreError> {
        sqlx::query(self.sql(Query::InsertApiKey))
            .bind(k.id.clone())
            .bind(k.name.clone())
            .bind(k.key_hash.clone())
            .bind(k.prefix.clone())
            .bind(k.created_at.0)
            .bind(k.revoked_at.map(|t| t.0))
            .execute(self.writer())
            .await
            .map_err(StoreError::db("insert api key"))?;
        Ok(())
    }

    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        let row = sqlx::query(self.sql(Query::ApiKeyByHash))
            .bind(key_hash.to_owned())
            .fetch_optional(self.pool())
            .await
            .map_err(StoreError::db("find api key"))?;
        row.map(|r| key_from_any(&r).map_err(StoreError::db("find api key"))).transpose()
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRow>, StoreError> {
        let rows = sqlx::query(self.sql(Query::ListApiKeys))
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("list api keys"))?;
        rows.iter().map(|r| key_from_any(r).map_err(StoreError::db("list api keys"))).collect()
    }

    async fn revoke_api_key(&self, id: &str, now: Millis) -> Result<bool, StoreError> {
        let n = sqlx::query(self.sql(Query::RevokeApiKey))
            .bind(now.0)
            .bind(id.to_owned())
            .execute(self.writer())
            .await
            .map_err(StoreError::db("revoke api key"))?
            .rows_affected();
        Ok(n == 1)
    }
}
