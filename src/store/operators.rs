//! The operator screen's tables: operator accounts, their sessions, login
//! attempts and the audit log.
//!
//! # Why sessions and attempts live in the database
//! Herald runs as several instances behind a load balancer. A session kept in
//! one process's memory would log the operator out whenever the balancer picks
//! another instance, and a logout or an expiry would only take effect on the
//! instance that saw it. In the database every instance sees the same session
//! (and its deletion at once), and the login rate limit counts failures made
//! against any instance. The cost is one indexed read per page view, which an
//! operator screen can afford. Only a SHA-256 of the session token is stored,
//! so reading the table opens no session.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::queries::Query;
use super::rows::from_columns;
use super::rows::{Fetch, Run};
use super::{Dialect, SqlStore, Store, StoreError, new_id};
use crate::clock::Millis;

#[derive(Debug, Clone, Serialize)]
pub struct OperatorRow {
    pub id: String,
    /// Normalised (trimmed, lowercase): the login name.
    pub email: String,
    /// An Argon2id PHC string (`$argon2id$v=19$...`), never the password.
    #[serde(skip)]
    pub password_hash: String,
    pub created_at: Millis,
}

from_columns!(OperatorRow: id, email, password_hash, created_at);

/// A live (or expired, not yet purged) session, found by its token's hash.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRow {
    pub operator_id: String,
    pub operator_email: String,
    pub created_at: Millis,
    pub expires_at: Millis,
}

from_columns!(SessionRow: operator_id, operator_email, created_at, expires_at);

/// How a login attempt ended. Only the two failures (and attempts still
/// being checked) count against the rate limit: refusing a rate-limited
/// attempt must not extend the lockout, or an attacker could keep an
/// operator out forever by trying once a minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoginOutcome {
    /// Reserved before the password is checked, so concurrent attempts see
    /// each other; becomes one of the others once the check is done. A
    /// process that dies mid-check leaves it, and it counts as a failure
    /// until the window passes.
    Pending,
    Ok,
    WrongPassword,
    UnknownEmail,
    RateLimited,
}

impl LoginOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            LoginOutcome::Pending => "pending",
            LoginOutcome::Ok => "ok",
            LoginOutcome::WrongPassword => "wrong_password",
            LoginOutcome::UnknownEmail => "unknown_email",
            LoginOutcome::RateLimited => "rate_limited",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LoginAttempt {
    /// As typed (normalised), whether or not such an operator exists.
    pub email: String,
    /// The client's address as the server saw it.
    pub ip: String,
    pub outcome: String,
    pub created_at: Millis,
}

from_columns!(LoginAttempt: email, ip, outcome, created_at);

/// Failures (and pending attempts) that count against the limits, for one
/// email, one address, and the two together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoginFailures {
    /// For the email from every address, since its last success.
    pub by_email: i64,
    /// The oldest counted failure for the email: the lockout ends a window after it.
    pub email_oldest: Option<Millis>,
    /// For the email from this address, since the email's last success.
    pub by_email_ip: i64,
    pub email_ip_oldest: Option<Millis>,
    /// From the address, for every email.
    pub by_ip: i64,
    pub ip_oldest: Option<Millis>,
    /// The email logged in successfully from this address since `known_since`.
    pub known_address: bool,
}

/// One operator action, to append to the audit log: from the screen, or
/// through the API (then `operator_email` is `api key "NAME"`).
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub operator_email: String,
    /// `rule.create`, `rule.update`, `rule.enable`, `rule.disable`,
    /// `rule.delete`, `outbox.retry`, `outbox.retry_many`, `outbox.cancel`,
    /// `suppression.add`, `suppression.lift`, `topic.create`,
    /// `topic.update`, `topic.delete`, `login`, `logout`.
    pub action: String,
    /// What it was done to: a rule id, an outbox id, an address hash (for
    /// `outbox.retry_many`, the status retried).
    pub target: String,
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    pub id: String,
    pub operator_email: String,
    pub action: String,
    pub target: String,
    pub detail: Option<String>,
    pub created_at: Millis,
}

from_columns!(AuditRow: id, operator_email, action, target, detail, created_at);

/// Who lifted a suppression and why: kept because lifting deletes the row.
#[derive(Debug, Clone, Serialize)]
pub struct SuppressionLiftRow {
    pub address_hash: String,
    /// The category lifted, or `*` when every suppression of the address was.
    pub category: String,
    /// How many suppression rows the lift removed.
    pub lifted: i64,
    pub reason: Option<String>,
    /// An operator's email, or `api key "NAME"`.
    pub lifted_by: String,
    pub created_at: Millis,
}

from_columns!(SuppressionLiftRow: address_hash, category, lifted, reason, lifted_by, created_at);

/// How long refused and accepted login attempts are kept once they no
/// longer count for the rate limit (they are the record of who tried).
pub const LOGIN_ATTEMPT_RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

#[async_trait]
pub trait OperatorStore: Send + Sync {
    /// False (and nothing written) when an operator with that email exists.
    async fn insert_operator(&self, op: &OperatorRow) -> Result<bool, StoreError>;
    async fn operator_by_email(&self, email: &str) -> Result<Option<OperatorRow>, StoreError>;
    async fn list_operators(&self) -> Result<Vec<OperatorRow>, StoreError>;
    /// Removes the operator and ends every session of theirs. False if no such operator.
    async fn delete_operator(&self, email: &str) -> Result<bool, StoreError>;

    /// Stores a new session (by its token's hash). Also purges expired
    /// sessions and login attempts older than [`LOGIN_ATTEMPT_RETENTION`],
    /// so neither table grows without bound; logins are rare enough to pay for it.
    async fn create_session(
        &self,
        token_hash: &str,
        op: &OperatorRow,
        now: Millis,
        expires_at: Millis,
    ) -> Result<(), StoreError>;
    async fn session(&self, token_hash: &str) -> Result<Option<SessionRow>, StoreError>;
    /// Logout; false when there was no such session.
    async fn delete_session(&self, token_hash: &str) -> Result<bool, StoreError>;

    /// Records an attempt; returns its id (for [`Self::finish_login_attempt`]).
    async fn record_login_attempt(&self, attempt: &LoginAttempt) -> Result<String, StoreError>;
    /// Sets the outcome of an attempt recorded as `pending`.
    async fn finish_login_attempt(&self, id: &str, outcome: LoginOutcome) -> Result<(), StoreError>;
    /// Failures (pending attempts included) after `since` for `email` and
    /// for `email` from `ip` (only those after the email's last successful
    /// login), and for `ip` (all of them: a success with one account must
    /// not reset a guesser's budget for the others); and whether `email`
    /// logged in from `ip` after `known_since`.
    async fn login_failures(
        &self,
        email: &str,
        ip: &str,
        since: Millis,
        known_since: Millis,
    ) -> Result<LoginFailures, StoreError>;
    /// Newest first.
    async fn recent_login_attempts(&self, limit: u32) -> Result<Vec<LoginAttempt>, StoreError>;

    async fn append_audit(&self, entry: &AuditEntry, now: Millis) -> Result<(), StoreError>;
    /// Newest first; `before` is the last id of the previous page (ids are
    /// UUIDv7 and sort by time).
    async fn audit_log(&self, before: Option<&str>, limit: u32) -> Result<Vec<AuditRow>, StoreError>;
    /// The audit rows about one target (e.g. `user:ID`), newest first.
    async fn audit_for_target(&self, target: &str, limit: u32) -> Result<Vec<AuditRow>, StoreError>;

    /// Lifts, newest first; for one address when given.
    async fn suppression_lifts(
        &self,
        address_hash: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SuppressionLiftRow>, StoreError>;
}

/// Appends an audit row on the caller's connection, inside its transaction,
/// so an action and its audit row commit (or fail) together.
pub(crate) async fn append_audit_in(
    conn: &mut sqlx::AnyConnection,
    d: Dialect,
    e: &AuditEntry,
    now: Millis,
) -> Result<(), StoreError> {
    let sql = Query::InsertAuditEntry.sql(d);
    sqlx::query(sql)
        .bind(new_id())
        .bind(e.operator_email.clone())
        .bind(e.action.clone())
        .bind(e.target.chars().take(255).collect::<String>())
        .bind(e.detail.clone())
        .bind(now.0)
        .run(&mut *conn, "append audit row")
        .await?;
    Ok(())
}

#[async_trait]
impl OperatorStore for SqlStore {
    async fn insert_operator(&self, op: &OperatorRow) -> Result<bool, StoreError> {
        let sql = Query::InsertOperator.sql(self.dialect());
        let result = sqlx::query(sql)
            .bind(op.id.clone())
            .bind(op.email.clone())
            .bind(op.password_hash.clone())
            .bind(op.created_at.0)
            .execute(self.writer())
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(StoreError::Database { op: "insert operator", source: e }),
        }
    }

    async fn operator_by_email(&self, email: &str) -> Result<Option<OperatorRow>, StoreError> {
        let sql = Query::OperatorByEmail.sql(self.dialect());
        sqlx::query_as(sql).bind(email.to_owned()).optional(self.pool(), "find operator").await
    }

    async fn list_operators(&self) -> Result<Vec<OperatorRow>, StoreError> {
        sqlx::query_as("SELECT id, email, password_hash, created_at FROM engagement_operators ORDER BY email")
            .all(self.pool(), "list operators")
            .await
    }

    async fn delete_operator(&self, email: &str) -> Result<bool, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let mut tx = self.begin_write().await.map_err(db("delete operator: begin"))?;
        sqlx::query(Query::DeleteOperatorSessions.sql(d))
            .bind(email.to_owned())
            .run(&mut *tx, "delete operator: sessions")
            .await?;
        let n =
            sqlx::query(Query::DeleteOperator.sql(d)).bind(email.to_owned()).run(&mut *tx, "delete operator").await?;
        tx.commit().await.map_err(db("delete operator: commit"))?;
        Ok(n == 1)
    }

    async fn create_session(
        &self,
        token_hash: &str,
        op: &OperatorRow,
        now: Millis,
        expires_at: Millis,
    ) -> Result<(), StoreError> {
        let d = self.dialect();
        sqlx::query(Query::PurgeExpiredSessions.sql(d))
            .bind(now.0)
            .run(self.writer(), "purge expired sessions")
            .await?;
        sqlx::query(Query::PurgeLoginAttempts.sql(d))
            .bind(now.minus(LOGIN_ATTEMPT_RETENTION).0)
            .run(self.writer(), "purge old login attempts")
            .await?;
        let sql = Query::InsertSession.sql(d);
        sqlx::query(sql)
            .bind(token_hash.to_owned())
            .bind(op.id.clone())
            .bind(op.email.clone())
            .bind(now.0)
            .bind(expires_at.0)
            .run(self.writer(), "create session")
            .await?;
        Ok(())
    }

    async fn session(&self, token_hash: &str) -> Result<Option<SessionRow>, StoreError> {
        let sql = Query::SessionByToken.sql(self.dialect());
        sqlx::query_as(sql).bind(token_hash.to_owned()).optional(self.pool(), "find session").await
    }

    async fn delete_session(&self, token_hash: &str) -> Result<bool, StoreError> {
        let sql = Query::DeleteSession.sql(self.dialect());
        let n = sqlx::query(sql).bind(token_hash.to_owned()).run(self.writer(), "delete session").await?;
        Ok(n == 1)
    }

    async fn record_login_attempt(&self, a: &LoginAttempt) -> Result<String, StoreError> {
        let sql = Query::InsertLoginAttempt.sql(self.dialect());
        let id = new_id();
        sqlx::query(sql)
            .bind(id.clone())
            .bind(a.email.chars().take(254).collect::<String>())
            .bind(a.ip.clone())
            .bind(a.outcome.clone())
            .bind(a.created_at.0)
            .run(self.writer(), "record login attempt")
            .await?;
        Ok(id)
    }

    async fn finish_login_attempt(&self, id: &str, outcome: LoginOutcome) -> Result<(), StoreError> {
        let sql = Query::SetLoginOutcome.sql(self.dialect());
        sqlx::query(sql).bind(outcome.as_str()).bind(id.to_owned()).run(self.pool(), "finish login attempt").await?;
        Ok(())
    }

    async fn login_failures(
        &self,
        email: &str,
        ip: &str,
        since: Millis,
        known_since: Millis,
    ) -> Result<LoginFailures, StoreError> {
        let d = self.dialect();
        let db = StoreError::db;
        let last_ok = sqlx::query(Query::LastLoginSuccess.sql(d))
            .bind(email.to_owned())
            .bind(since.0)
            .one(self.pool(), "login failures: last success")
            .await?;
        let email_since = match last_ok.try_get::<Option<i64>, _>("t").map_err(db("login failures: last success"))? {
            Some(t) => t + 1,
            None => since.0,
        };
        let by_email = sqlx::query(Query::LoginFailuresByEmail.sql(d))
            .bind(email.to_owned())
            .bind(email_since)
            .one(self.pool(), "login failures by email")
            .await?;
        let by_ip = sqlx::query(Query::LoginFailuresByIp.sql(d))
            .bind(ip.to_owned())
            .bind(since.0)
            .one(self.pool(), "login failures by address")
            .await?;
        let read = |r: &AnyRow| -> Result<(i64, Option<Millis>), sqlx::Error> {
            Ok((r.try_get::<i64, _>("n")?, r.try_get::<Option<i64>, _>("oldest")?.map(Millis)))
        };
        let by_email_ip = sqlx::query(Query::LoginFailuresByEmailIp.sql(d))
            .bind(email.to_owned())
            .bind(ip.to_owned())
            .bind(email_since)
            .one(self.pool(), "login failures by email and address")
            .await?;
        let known = sqlx::query(Query::KnownLoginAddress.sql(d))
            .bind(email.to_owned())
            .bind(ip.to_owned())
            .bind(known_since.0)
            .one(self.pool(), "login failures: known address")
            .await?;
        let (by_email, email_oldest) = read(&by_email).map_err(db("login failures by email"))?;
        let (by_email_ip, email_ip_oldest) = read(&by_email_ip).map_err(db("login failures by email and address"))?;
        let (by_ip, ip_oldest) = read(&by_ip).map_err(db("login failures by address"))?;
        let known_address = known.try_get::<i64, _>("n").map_err(db("login failures: known address"))? > 0;
        Ok(LoginFailures { by_email, email_oldest, by_email_ip, email_ip_oldest, by_ip, ip_oldest, known_address })
    }

    async fn recent_login_attempts(&self, limit: u32) -> Result<Vec<LoginAttempt>, StoreError> {
        let sql = Query::RecentLoginAttempts.sql(self.dialect());
        sqlx::query_as(sql).bind(i64::from(limit)).all(self.pool(), "recent login attempts").await
    }

    async fn append_audit(&self, entry: &AuditEntry, now: Millis) -> Result<(), StoreError> {
        let mut conn = self.pool().acquire().await.map_err(StoreError::db("append audit row: connect"))?;
        append_audit_in(&mut conn, self.dialect(), entry, now).await
    }

    async fn audit_for_target(&self, target: &str, limit: u32) -> Result<Vec<AuditRow>, StoreError> {
        let sql = Query::AuditForTarget.sql(self.dialect());
        sqlx::query_as(sql).bind(target.to_owned()).bind(i64::from(limit)).all(self.pool(), "read audit log").await
    }

    async fn audit_log(&self, before: Option<&str>, limit: u32) -> Result<Vec<AuditRow>, StoreError> {
        let sql = Query::AuditBefore.sql(self.dialect());
        // Every UUIDv7 sorts below "g": no `before` means from the newest.
        sqlx::query_as(sql)
            .bind(before.unwrap_or("g").to_owned())
            .bind(i64::from(limit))
            .all(self.pool(), "read audit log")
            .await
    }

    async fn suppression_lifts(
        &self,
        address_hash: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SuppressionLiftRow>, StoreError> {
        let d = self.dialect();
        match address_hash {
            Some(h) => {
                let sql = Query::SuppressionLiftsOfAddress.sql(d);
                sqlx::query_as(sql).bind(h.to_owned()).bind(i64::from(limit)).fetch_all(self.pool()).await
            }
            None => {
                let sql = Query::SuppressionLifts.sql(d);
                sqlx::query_as(sql).bind(i64::from(limit)).fetch_all(self.pool()).await
            }
        }
        .map_err(StoreError::db("suppression lifts"))
    }
}
