//! Prometheus metrics, served as text on `/metrics`.
//!
//! Counters and histograms are updated where things happen; the outbox depth
//! by status is read from the database when scraped, because every instance
//! would otherwise report its own idea of a number only the database knows.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::store::StatusSummary;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub channel: String,
    /// sent, failed, suppressed, bounced, expired, retry, lost_claim
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: String,
}

/// The metrics of one process. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    deliveries: Family<DeliveryLabels, Counter>,
    claim_latency: Histogram,
    claim_duration: Histogram,
    outbox_depth: Family<StatusLabels, Gauge>,
    oldest_due_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    reclaimed: Counter,
    email_policy_rejections: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("herald");
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "deliveries",
            "Delivery attempts by channel and outcome (retry and lost_claim are not terminal)",
            deliveries.clone(),
        );
        // From 10 ms to ~3 h: a healthy outbox claims within a poll interval,
        // a backed-up one can be hours behind, and both must be visible.
        let claim_latency = Histogram::new(exponential_buckets(0.01, 4.0, 12));
        registry.register(
            "claim_latency_seconds",
            "How long a row waited past its due time before a worker claimed it",
            claim_latency.clone(),
        );
        let claim_duration = Histogram::new(exponential_buckets(0.0005, 3.0, 12));
        registry.register(
            "claim_duration_seconds",
            "How long one batched claim statement took",
            claim_duration.clone(),
        );
        let outbox_depth = Family::<StatusLabels, Gauge>::default();
        registry.register(
            "outbox_rows",
            "Rows in engagement_outbox by status, read at scrape time",
            outbox_depth.clone(),
        );
        let oldest_due_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "oldest_due_age_seconds",
            "How long the longest-waiting due row has been due (0 when none is)",
            oldest_due_age.clone(),
        );
        let reclaimed = Counter::default();
        registry.register(
            "reclaimed_claims",
            "Stale claims taken back from an instance that stopped",
            reclaimed.clone(),
        );
        let email_policy_rejections = Counter::default();
        registry.register(
            "email_policy_rejections",
            "Messages an SMTP server refused by policy (5.7.x): usually our own SPF, DKIM or reputation, not the recipient",
            email_policy_rejections.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                deliveries,
                claim_latency,
                claim_duration,
                outbox_depth,
                oldest_due_age,
                reclaimed,
                email_policy_rejections,
            }),
        }
    }

    pub fn delivery(&self, channel: &str, outcome: &str) {
        self.inner
            .deliveries
            .get_or_create(&DeliveryLabels { channel: channel.to_owned(), outcome: outcome.to_owned() })
            .inc();
    }

    pub fn claim_latency(&self, seconds: f64) {
        self.inner.claim_latency.observe(seconds);
    }

    pub fn claim_duration(&self, seconds: f64) {
        self.inner.claim_duration.observe(seconds);
    }

    pub fn email_policy_rejection(&self) {
        self.inner.email_policy_rejections.inc();
    }

    pub fn reclaimed(&self, n: u64) {
        self.inner.reclaimed.inc_by(n);
    }

    /// Copies a fresh status summary into the gauges.
    pub fn set_outbox(&self, summary: &StatusSummary) {
        for c in &summary.counts {
            self.inner.outbox_depth.get_or_create(&StatusLabels { status: c.status.as_str().to_owned() }).set(c.count);
        }
        self.inner.oldest_due_age.set(summary.oldest_due.as_ref().map_or(0.0, |o| o.overdue_seconds));
    }

    /// The Prometheus text exposition of everything registered.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}
