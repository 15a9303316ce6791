-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: operators.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/operators.sql and mariadb/operators.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: insert_audit_entry
-- Appends an operator's action to the audit log.
-- binds: id, operator_email, action, target, detail, now
INSERT INTO engagement_audit_log (id, operator_email, action, target, detail, created_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: insert_operator
-- Adds an operator (a taken email fails on the key).
-- binds: id, email, password_hash, created_at
INSERT INTO engagement_operators (id, email, password_hash, created_at)
VALUES (?, ?, ?, ?);

-- name: operator_by_email
-- An operator by email.
-- binds: email
SELECT id, email, password_hash, created_at
  FROM engagement_operators
 WHERE email = ?;

-- name: delete_operator_sessions
-- Ends an operator's sessions.
-- binds: email
DELETE
  FROM engagement_operator_sessions
 WHERE operator_email = ?;

-- name: delete_operator
-- Removes an operator.
-- binds: email
DELETE
  FROM engagement_operators
 WHERE email = ?;

-- name: purge_expired_sessions
-- Forgets expired sessions.
-- binds: now
DELETE
  FROM engagement_operator_sessions
 WHERE expires_at <= ?;

-- name: purge_login_attempts
-- Forgets login attempts older than their retention.
-- binds: cutoff
DELETE
  FROM engagement_login_attempts
 WHERE created_at < ?;

-- name: insert_session
-- Starts an operator session (the token's hash, never the token).
-- binds: token_hash, operator_id, operator_email, created_at, expires_at
INSERT INTO engagement_operator_sessions (token_hash, operator_id, operator_email, created_at, expires_at)
VALUES (?, ?, ?, ?, ?);

-- name: session_by_token
-- A session by its token's hash.
-- binds: token_hash
SELECT operator_id, operator_email, created_at, expires_at
  FROM engagement_operator_sessions
 WHERE token_hash = ?;

-- name: delete_session
-- Ends a session.
-- binds: token_hash
DELETE
  FROM engagement_operator_sessions
 WHERE token_hash = ?;

-- name: insert_login_attempt
-- Records a login attempt.
-- binds: id, email, ip, outcome, created_at
INSERT INTO engagement_login_attempts (id, email, ip, outcome, created_at)
VALUES (?, ?, ?, ?, ?);

-- name: set_login_outcome
-- Settles a pending login attempt's outcome.
-- binds: outcome, id
UPDATE engagement_login_attempts SET outcome = ?
 WHERE id = ?;

-- name: last_login_success
-- An email's latest successful login since `since`.
-- binds: email, since
SELECT MAX(created_at) AS t
  FROM engagement_login_attempts
 WHERE email = ? AND outcome = 'ok' AND created_at >= ?;

-- name: login_failures_by_email
-- An email's failed (or pending) logins after `since`, and the oldest.
-- binds: email, since
SELECT COUNT(*) AS n, MIN(created_at) AS oldest
  FROM engagement_login_attempts
 WHERE email = ? AND created_at > ? AND outcome IN ('wrong_password', 'unknown_email', 'pending');

-- name: login_failures_by_ip
-- An address's failed (or pending) logins after `since`, and the oldest.
-- binds: ip, since
SELECT COUNT(*) AS n, MIN(created_at) AS oldest
  FROM engagement_login_attempts
 WHERE ip = ? AND created_at > ? AND outcome IN ('wrong_password', 'unknown_email', 'pending');

-- name: login_failures_by_email_ip
-- Failed (or pending) logins of an email from an address after `since`, and the oldest.
-- binds: email, ip, since
SELECT COUNT(*) AS n, MIN(created_at) AS oldest
  FROM engagement_login_attempts
 WHERE email = ? AND ip = ? AND created_at > ? AND outcome IN ('wrong_password', 'unknown_email', 'pending');

-- name: known_login_address
-- Whether an email logged in from an address since `since`.
-- binds: email, ip, since
SELECT COUNT(*) AS n
  FROM engagement_login_attempts
 WHERE email = ? AND ip = ? AND outcome = 'ok' AND created_at >= ?;

-- name: recent_login_attempts
-- The latest login attempts.
-- binds: limit
SELECT email, ip, outcome, created_at
  FROM engagement_login_attempts
 ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: audit_for_target
-- The audit log of one target, newest first.
-- binds: target, limit
SELECT id, operator_email, action, target, detail, created_at
  FROM engagement_audit_log
 WHERE target = ?
 ORDER BY id DESC LIMIT ?;

-- name: audit_before
-- The audit log before an id, newest first.
-- binds: before, limit
SELECT id, operator_email, action, target, detail, created_at
  FROM engagement_audit_log
 WHERE id < ?
 ORDER BY id DESC LIMIT ?;

-- name: suppression_lifts_of_address
-- An address's suppression lifts, newest first.
-- binds: address_hash, limit
SELECT address_hash, category, lifted, reason, lifted_by, created_at
  FROM engagement_suppression_lifts
 WHERE address_hash = ?
 ORDER BY created_at DESC, id DESC LIMIT ?;

-- name: suppression_lifts
-- The newest suppression lifts.
-- binds: limit
SELECT address_hash, category, lifted, reason, lifted_by, created_at
  FROM engagement_suppression_lifts
 ORDER BY created_at DESC, id DESC LIMIT ?;
