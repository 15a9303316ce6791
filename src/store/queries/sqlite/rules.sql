-- Herald's statements on SQLite: rules.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- --------------------------------------------------------------------- rules

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

-- name: rule_versions
-- (id, enabled, updated_at) of these rules (a JSON array of ids): whether
-- the worker's cached copies are current and still enabled.
-- binds: ids
SELECT r.id, r.enabled, r.updated_at
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_rules r ON r.id = wanted.k;

-- name: rules_by_ids
-- These rules (a JSON array of ids), those that exist.
-- binds: ids
SELECT r.id, r.name, r.trigger_type, r.condition_expr, r.channel, r.template, r.delay_seconds, r.grace_seconds,
       r.category, r.enabled, r.webhook_url, r.workflow, r.created_at, r.updated_at
  FROM (SELECT value AS k FROM json_each(?)) AS wanted
  JOIN engagement_rules r ON r.id = wanted.k;
