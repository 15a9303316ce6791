//! `engagement_recipients` (who a user is, for messages) and
//! `engagement_api_keys` (who may call the API).

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::json_rows::keys_json;
use super::rows::{opt_text, text};
use super::{CancelScope, RuleStore, SqlStore, Store, StoreError};
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
    /// The user's own choices from the preference center, which the host's
    /// `preferences` never override (see `crate::planning::recipient::UserChoices`).
    /// Written only by [`RecipientStore::set_user_choices`].
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
            user_choices: opt_text(row, "user_preferences")?
                .and_then(|q| serde_json::from_str(&q).ok())
                .unwrap_or_default(),
            created_at: Millis(row.try_get("created_at")?),
            updated_at: Millis(row.try_get("updated_at")?),
        })
    }
}

/// What deleting a user removed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct UserErasure {
    pub recipient_deleted: bool,
    pub inbox_messages_deleted: u64,
    pub scheduled_cancelled: u64,
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
    /// Erases the user's address and inbox and cancels what is still
    /// scheduled for them. The send log keeps its rows, which hold no
    /// address (only its hash).
    async fn erase_user(&self, user_id: &UserId, now: Millis) -> Result<UserErasure, StoreError>;
    /// Replaces the user's own preference-center choices, creating a bare
    /// recipient row when the host has not described the user yet.
    async fn set_user_choices(
        &self,
        user_id: &UserId,
        choices: &crate::planning::recipient::UserChoices,
        now: Millis,
    ) -> Result<(), StoreError>;

    async fn insert_api_key(&self, key: &ApiKeyRow) -> Result<(), StoreError>;
    async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>, StoreError>;
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRow>, StoreError>;
    async fn revoke_api_key(&self, id: &str, now: Millis) -> Result<bool, StoreError>;
}

const KEY_COLUMNS: &str = "id, name, key_hash, prefix, created_at, revoked_at";

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
        let d = self.dialect();
        let db = StoreError::db;
        // Update, else insert: the one upsert all three dialects spell alike.
        let quiet_hours = r.quiet_hours.as_ref().map(|q| serde_json::json!(q).to_string());
        let mut tx = self.begin_write().await.map_err(db("put recipient: begin"))?;
        let update = d.sql(
            "UPDATE engagement_recipients SET email = ?, name = ?, locale = ?, timezone = ?, preferences = ?, \
             quiet_hours = ?, updated_at = ? WHERE user_id = ?",
        );
        let n = sqlx::query(&update)
            .bind(r.email.clone())
            .bind(r.name.clone())
            .bind(r.locale.clone())
            .bind(r.timezone.clone())
            .bind(r.preferences.to_string())
            .bind(quiet_hours.clone())
            .bind(r.updated_at.0)
            .bind(r.user_id.clone())
            .execute(&mut *tx)
            .await
            .map_err(db("put recipient: update"))?
            .rows_affected();
        // MySQL reports a matched row as affected (CLIENT_FOUND_ROWS), so
        // "1" means it exists on every dialect.
        let created = n == 0;
        if created {
            let insert = d.sql(
                "INSERT INTO engagement_recipients (user_id, email, name, locale, timezone, preferences, quiet_hours, \
                 created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            );
            sqlx::query(&insert)
                .bind(r.user_id.clone())
                .bind(r.email.clone())
                .bind(r.name.clone())
                .bind(r.locale.clone())
                .bind(r.timezone.clone())
                .bind(r.preferences.to_string())
                .bind(quiet_hours)
                .bind(r.created_at.0)
                .bind(r.updated_at.0)
                .execute(&mut *tx)
                .await
                .map_err(db("put recipient: insert"))?;
        }
        tx.commit().await.map_err(db("put recipient: commit"))?;
        Ok(created)
    }

    async fn recipients_by_ids(&self, user_ids: &[&str]) -> Result<Vec<RecipientRow>, StoreError> {
        if user_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = self.dialect().select_by_keys(
            "r.user_id, r.email, r.name, r.locale, r.timezone, r.preferences, r.quiet_hours, r.user_preferences, \
             r.created_at, r.updated_at",
            "engagement_recipients",
            "r",
            "user_id",
        );
        let rows = sqlx::query(&sql)
            .bind(keys_json(user_ids.iter().copied())?)
            .fetch_all(self.pool())
            .await
            .map_err(StoreError::db("recipients by id"))?;
        rows.iter().map(|r| RecipientRow::from_any(r).map_err(StoreError::db("recipients by id"))).collect()
    }

    async fn get_recipient(&self, user_id: &UserId) -> Result<Option<RecipientRow>, StoreError> {
        let sql = self.dialect().sql(
            "SELECT user_id, email, name, locale, timezone, preferences, quiet_hours, user_preferences, created_at, updated_at \
             FROM engagement_recipients WHERE user_id = ?",
        );
        let row = sqlx::query(&sql)
            .bind(user_id.as_str().to_owned())
            .fetch_optional(self.pool())
            .await
            .map_err(StoreError::db("get recipient"))?;
        row.map(|r| RecipientRow::from_any(&r).map_err(StoreError::db("get recipient"))).transpose()
    }

    async fn erase_user(&self, user_id: &UserId, now: Millis) -> Result<UserErasure, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let scheduled_cancelled =
            self.cancel_scheduled(CancelScope::User(user_id.as_str()), "user deleted", now).await?;
        let mut tx = self.begin_write().await.map_err(db("erase user: begin"))?;
        let inbox = sqlx::query(&d.sql("DELETE FROM engagement_inbox WHERE user_id = ?"))
            .bind(user_id.as_str().to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: inbox"))?
            .rows_affected();
        let recipient = sqlx::query(&d.sql("DELETE FROM engagement_recipients WHERE user_id = ?"))
            .bind(user_id.as_str().to_owned())
            .execute(&mut *tx)
            .await
            .map_err(db("erase user: recipient"))?
            .rows_affected();
        tx.commit().await.map_err(db("erase user: commit"))?;
        Ok(UserErasure { recipient_deleted: recipient == 1, inbox_messages_deleted: inbox, scheduled_cancelled })
    }

    async fn set_user_choices(
        &self,
        user_id: &UserId,
        choices: &crate::planning::recipient::UserChoices,
        now: Millis,
    ) -> Result<(), StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let json = serde_json::to_string(choices).map_err(|e| StoreError::Encode(e.to_string()))?;
        let mut tx = self.begin_write().await.map_err(db("user choices: begin"))?;
        let n = sqlx::query(
            &d.sql("UPDATE engagement_recipients SET user_preferences = ?, updated_at = ? WHERE user_id = ?"),
        )
        .bind(json.clone())
        .bind(now.0)
        .bind(user_id.as_str().to_owned())
        .execute(&mut *tx)
        .await
        .map_err(db("user choices: update"))?
        .rows_affected();
        if n == 0 {
            sqlx::query(&d.sql(
                "INSERT INTO engagement_recipients (user_id, preferences, user_preferences, created_at, updated_at) \
                 VALUES (?, '{}', ?, ?, ?)",
            ))
            .bind(user_id.as_str().to_owned())
            .bind(json)
            .bind(now.0)
            .bind(now.0)
            .execute(&mut *tx)
            .await
            .map_err(db("user choices: insert"))?;
        }
        tx.commit().await.map_err(db("user choices: commit"))?;
        Ok(())
    }

    async fn insert_api_key(&self, k: &ApiKeyRow) -> Result<(), StoreError> {
        let sql =
            self.dialect().sql(&format!("INSERT INTO engagement_api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"));
        sqlx::query(&sql)
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
        let sql = self.dialect().sql(&format!("SELECT {KEY_COLUMNS} FROM engagement_api_keys WHERE key_hash = ?"));
        let row = sqlx::query(&sql)
            .bind(key_hash.to_owned())
            .fetch_optional(self.pool())
            .await
            .map_err(StoreError::db("find api key"))?;
        row.map(|r| key_from_any(&r).map_err(StoreError::db("find api key"))).transpose()
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRow>, StoreError> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM engagement_api_keys ORDER BY created_at, id");
        let rows = sqlx::query(&sql).fetch_all(self.pool()).await.map_err(StoreError::db("list api keys"))?;
        rows.iter().map(|r| key_from_any(r).map_err(StoreError::db("list api keys"))).collect()
    }

    async fn revoke_api_key(&self, id: &str, now: Millis) -> Result<bool, StoreError> {
        let sql =
            self.dialect().sql("UPDATE engagement_api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
        let n = sqlx::query(&sql)
            .bind(now.0)
            .bind(id.to_owned())
            .execute(self.writer())
            .await
            .map_err(StoreError::db("revoke api key"))?
            .rows_affected();
        Ok(n == 1)
    }
}
