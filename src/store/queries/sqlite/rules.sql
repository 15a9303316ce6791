-- Herald's statements on SQLite: rules.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- --------------------------------------------------------------------- rules

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
