-- Herald's statements on PostgreSQL: rules.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- --------------------------------------------------------------------- rules

-- name: insert_rule
-- Adds a rule.
-- binds: id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at
INSERT INTO engagement_rules (id, name, trigger_type, condition_expr, channel, template, delay_seconds,
                              grace_seconds, category, enabled, webhook_url, workflow, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: get_rule
-- One rule.
-- binds: id
SELECT id, name, trigger_type, condition_expr, channel, template, delay_seconds, grace_seconds,
       category, enabled, webhook_url, workflow, created_at, updated_at
  FROM engagement_rules WHERE id = $1;

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
   SET name = $1, trigger_type = $2, condition_expr = $3, channel = $4, template = $5, delay_seconds = $6,
       grace_seconds = $7, category = $8, enabled = $9, webhook_url = $10, workflow = $11, updated_at = $12
 WHERE id = $13;

-- name: delete_rule
-- Deletes a rule.
-- binds: id
DELETE FROM engagement_rules WHERE id = $1;

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
  FROM engagement_rules r
 WHERE r.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));

-- name: rules_by_ids
-- These rules (a JSON array of ids), those that exist.
-- binds: ids
SELECT r.id, r.name, r.trigger_type, r.condition_expr, r.channel, r.template, r.delay_seconds, r.grace_seconds,
       r.category, r.enabled, r.webhook_url, r.workflow, r.created_at, r.updated_at
  FROM engagement_rules r
 WHERE r.id = ANY(ARRAY(SELECT jsonb_array_elements_text(CAST($1 AS jsonb))));
