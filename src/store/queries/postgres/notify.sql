-- Herald's statements on PostgreSQL: notifications between instances.
-- How a block reads, and what holds for the whole dialect: README.md beside
-- this file and src/store/queries/mod.rs.

-- ------------------------------------------------------------- notifications

-- name: notify_enqueued
-- PostgreSQL only (LISTEN/NOTIFY): tells other instances' workers, from
-- inside the writing transaction (sent at commit), that rows were enqueued.
-- binds:
SELECT pg_notify('herald_outbox', '');

-- name: notify_events
-- Tells other instances' followers that events were appended (from inside
-- the writing transaction, or alone after it).
-- binds:
SELECT pg_notify('herald_events', '');

-- name: notify_inbox
-- Tells other instances' streams whose inboxes changed: `users` is their ids,
-- one a line, or "*" for every stream (a payload is limited to 8000 bytes).
-- binds: users
SELECT 1 FROM (SELECT pg_notify('herald_inbox', $1)) AS n;
