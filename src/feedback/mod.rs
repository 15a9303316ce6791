//! Feedback: what comes back after a message left, and keeps Herald from
//! mailing where it must not.
//!
//! [`bounce`] parses bounces, complaints and auto-replies (RFC 3464 DSNs,
//! ARF, RFC 3834 and the free-text formats of common MTAs) after
//! `bounce::limits` has bounded the MIME nesting; [`providers`] verifies
//! provider webhooks (SES, SendGrid, Mailgun, Postmark) and turns them into
//! the parser's shape; [`ingest`] records the evidence, appends the
//! send-log rows and adds the suppressions, one bounce at a time and
//! idempotently. Unsubscribes live with the address secret (`address`) and
//! the suppression list with the store.

pub mod bounce;
pub mod ingest;
pub mod providers;
