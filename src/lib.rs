//! Herald: an engagement outbox.
//!
//! Host applications tell Herald that something happened to a user; rules an
//! operator switched on turn that into scheduled messages; the worker delivers
//! them, retries what failed for a passing reason, and records every outcome so
//! anyone can ask "did user X get it, and if not, why".
//!
//! # Layout
//! - [`address`]: email address hashes, the deployment secret, signed
//!   unsubscribe tokens.
//! - [`domain`]: the values every layer passes around (`UserId`,
//!   `ChannelName`, the two status enums), parsed once at the edge.
//! - [`clock`]: where "now" comes from; tests use a manual clock.
//! - [`store`]: the database, one interface over SQLite, PostgreSQL and
//!   MariaDB/MySQL, with its migrations; `store::instances` holds the
//!   instance leases and the rescue of a lapsed instance's rows,
//!   `store::race` retries transactions that lost a race, `store::history`
//!   reads a user's rows and send log in one snapshot.
//! - [`planning`]: from a trigger to outbox rows: `planning::intake` (API
//!   triggers recorded and planned in shared transactions),
//!   `planning::planner` (one row per enabled matching rule, and the sweep
//!   for host-inserted triggers), `planning::rule` and `planning::recipient`
//!   (what the API accepts, validated once), `planning::category` (what a
//!   category name is, everywhere one comes in), `planning::template` (minijinja
//!   templates and rule conditions), `planning::workflow` (send windows,
//!   quiet hours, caps, digests, escalation, read in the recipient's zone),
//!   `planning::digest` (when a digest closes, after a window or on a
//!   calendar schedule, and the `digest` its template sees),
//!   `planning::escalation` (a follow-up or a chain of them after an unread
//!   inbox message, and their dedupe keys).
//! - [`delivery`]: from a due row to a recorded outcome:
//!   `delivery::worker` (a lane per channel; `worker::policy` decides retry,
//!   give-up and expiry; `worker::lease` is this instance's lease),
//!   `delivery::compose` (whether a planned row may still go out, rendered),
//!   `delivery::channel` (the `Channel` trait, the registry, the outcome
//!   enum; `channel::catalog`, `channel::inbox`, `channel::email`,
//!   `channel::webhook`).
//! - [`headline`]: a message's subject or title for the outbox and send-log
//!   lists.
//! - [`http`]: the HTTP server (`/healthz`, `/readyz`, `/metrics`, the
//!   `/v1` API); `http::server` is the accept loop (header-read timeout,
//!   connection bound), `http::layers` the layers around the routes
//!   (axum's own bodiless 404s and 405s as problems, U+0000 refused at the
//!   edge, the body limit, a write that lost a race run again before
//!   answering, CORS for the inbox), `http::preference_form` is the
//!   preference forms' field encoding, `http::extract` reads every body,
//!   query and path (refusals as problems naming the field),
//!   `http::cursor` parses page cursors.
//!   `http::ui` is the operator screen under `/ui` (server-rendered pages,
//!   operator logins, sessions, CSRF, the audit log), inside `http` because
//!   it shares the router and the state.
//! - [`metrics`]: Prometheus counters and gauges.
//! - [`config`]: settings from a TOML file, `HERALD_*` variables and flags.
//! - [`connect_error`]: why the database could not be opened at start,
//!   once, naming the file or host.
//! - [`feedback`]: what comes back: `feedback::bounce` parses bounces,
//!   complaints and auto-replies (after `bounce::limits` has bounded the MIME
//!   nesting), `feedback::providers` verifies provider webhooks (SES,
//!   SendGrid, Mailgun, Postmark), `feedback::ingest` records the evidence,
//!   send-log rows and suppressions.
//! - [`batch`]: group commit, so concurrent deliveries share transactions.
//! - [`retention`]: old rows pruned, table by table, by every instance.
//! - [`app`]: wiring for the CLI: open the store, build the registry, serve.
//! - `tooling` (behind the `tooling` feature, on by default; a build
//!   without it is the service alone): what measures and tortures Herald
//!   rather than runs it:
//!   the benchmarks behind `herald bench` (`tooling::bench`,
//!   `bench_instances`, `bench_pipeline`, `bench_stream`),
//!   `tooling::cluster` (several `herald serve` processes on one database,
//!   killed at will, and the SQL audit of what they did), `herald demo`, and
//!   the fuzz targets' shared entry points.
//! - [`cli`]: the command line; `main.rs` only calls it.

pub mod address;
pub mod app;
pub mod batch;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connect_error;
pub mod delivery;
pub mod domain;
pub mod feedback;
pub mod headline;
pub mod http;
pub mod metrics;
pub mod planning;
pub mod retention;
pub mod store;
#[cfg(feature = "tooling")]
pub mod tooling;
