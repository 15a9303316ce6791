-- Herald's statements that SQLite and MariaDB/MySQL run as written here,
-- the same text on both: rules.
-- Each is loaded for both dialects; what differs between them is in
-- sqlite/rules.sql and mariadb/rules.sql, PostgreSQL's in postgres/.
-- How a block reads: README.md beside this file and src/store/queries/mod.rs.

-- name: insert_rule
-- Adds a rule.
-- binds: id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at
INSERT INTO engagement_rules (id, name, trigger_type, condition_expr, channel, template, delay_seconds,
                              grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: get_rule
-- One rule.
-- binds: id
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules WHERE id = ?;

-- name: list_rules
-- Every rule, oldest first.
-- binds:
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules ORDER BY created_at, id;

-- name: update_rule
-- Replaces every column of a rule but its id and created_at.
-- binds: name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds, category, enabled, webhook_url, workflow, updated_at, id
UPDATE engagement_rules
   SET name = ?, trigger_type = ?, condition_expr = ?, channel = ?, template = ?, delay_seconds = ?,
       grace_seconds = ?, category = ?, enabled = ?, webhook_url = ?, workflow = ?, updated_at = ?
 WHERE id = ?;

-- name: delete_rule
-- Deletes a rule.
-- binds: id
DELETE FROM engagement_rules WHERE id = ?;

-- name: enabled_rules
-- Every enabled rule: what the planner's cache holds.
-- binds:
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules WHERE enabled = 1 ORDER BY created_at, id;
