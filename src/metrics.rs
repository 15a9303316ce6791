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
pub struct TableLabels {
    /// the `retention.*` key: outbox, sends, events, archived_inbox, bounces, triggers
    pub table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
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
    rescued: Family<ReasonLabels, Counter>,
    outcomes_kept: Family<ResultLabels, Counter>,
    email_policy_rejections: Counter,
    pruned: Family<TableLabels, Counter>,
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
        let rescued = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "rescued_claims",
            "Claimed rows taken back from another instance, by reason: lease_lapsed (its lease lapsed more than \
             worker.deliver_timeout ago) or stale (claimed longer than worker.stale ago, the last resort)",
            rescued.clone(),
        );
        let outcomes_kept = Family::<ResultLabels, Counter>::default();
        registry.register(
            "outcomes_kept",
            "Outcomes that could not be recorded at first (the database was away) and were kept, by what became of \
             them: recorded, refused (the row had been taken back) or given_up",
            outcomes_kept.clone(),
        );
        registry.register(
            "lost_races",
            "Transactions that lost a race with another one (deadlock, serialization or Galera certification \
             failure, a read-only standby) and were tried again, by operation",
            crate::store::race::LOST_RACES.clone(),
        );
        let email_policy_rejections = Counter::default();
        registry.register(
            "email_policy_rejections",
            "Messages an SMTP server refused by policy (5.7.x): usually our own SPF, DKIM or reputation, not the recipient",
            email_policy_rejections.clone(),
        );
        let pruned = Family::<TableLabels, Counter>::default();
        registry.register("pruned_rows", "Rows deleted by retention, by table (the retention.* key)", pruned.clone());
        Metrics {
            inner: Arc::new(Inner {
                registry,
                deliveries,
                claim_latency,
                claim_duration,
                outbox_depth,
                oldest_due_age,
                reclaimed,
                rescued,
                outcomes_kept,
                email_policy_rejections,
                pruned,
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

    pub fn pruned(&self, table: &str, n: u64) {
        self.inner.pruned.get_or_create(&TableLabels { table: table.to_owned() }).inc_by(n);
    }

    pub fn reclaimed(&self, n: u64) {
        self.inner.reclaimed.inc_by(n);
    }

    /// Rows taken back from another instance, with the reason.
    pub fn rescued(&self, reason: &str, n: u64) {
        self.inner.rescued.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc_by(n);
    }

    /// How many rows were taken back for `reason`, by this process.
    pub fn rescued_count(&self, reason: &str) -> u64 {
        self.inner.rescued.get_or_create(&ReasonLabels { reason: reason.to_owned() }).get()
    }

    /// An outcome kept while the database was away, and what became of it.
    pub fn outcome_kept(&self, result: &str) {
        self.inner.outcomes_kept.get_or_create(&ResultLabels { result: result.to_owned() }).inc();
    }

    /// How many kept outcomes ended as `result`, in this process.
    pub fn outcomes_kept(&self, result: &str) -> u64 {
        self.inner.outcomes_kept.get_or_create(&ResultLabels { result: result.to_owned() }).get()
    }

    /// Copies a fresh status summary into the gauges.
    pub fn set_outbox(&self, summary: &StatusSummary) {
        for c in &summary.counts {
            self.inner.outbox_depth.get_or_create(&StatusLabels { status: c.status.as_str().to_owned() }).set(c.count);
        }
        self.inner.oldest_due_age.set(summary.oldest_due.as_ref().map_or(0.0, |o| o.overdue_seconds));
    }

    /// The OpenMetrics 1.0 exposition of everything registered (what
    /// prometheus-client writes).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }

    /// The classic Prometheus text format (0.0.4), for scrapers and tools
    /// that do not ask for OpenMetrics (promtool, older Prometheus, most
    /// agents). See [`openmetrics_to_text`].
    pub fn encode_text(&self) -> String {
        openmetrics_to_text(&self.encode())
    }
}

/// The content type of each format.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's `Accept` header prefers OpenMetrics to the classic
/// text format: an `application/openmetrics-text` range with a q-value
/// above zero and at least that of any range the text format matches
/// (`text/plain`, `text/*`, `*/*`). No header, or a plain `*/*` (curl):
/// the text format, the one every scraper reads.
pub fn prefers_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut params = range.split(';');
        let media = params.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = params
            .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
            .find_map(|v| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

/// OpenMetrics text to the classic format: a counter's metadata is named
/// after its samples (`# TYPE x_total counter`, where OpenMetrics writes
/// `# TYPE x counter` over `x_total` samples, which the classic parser reads
/// as a metric without help or type: promtool's "no help text"), and the
/// OpenMetrics-only lines (`# UNIT`, `# EOF`, `_created` samples) are left
/// out.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
            && kind.trim() == "counter"
        {
            counters.insert(name.to_owned());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or(line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        if let Some((prefix, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out.push_str(&format!("{prefix}{name}_total {tail}\n"));
                continue;
            }
        } else {
            let name = line.split(['{', ' ']).next().unwrap_or("");
            if name.strip_suffix("_created").is_some_and(|base| counters.contains(base)) {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_after_their_samples_in_the_text_format() {
        let m = Metrics::new();
        m.delivery("inbox", "sent");
        m.reclaimed(2);
        let text = m.encode_text();
        assert!(text.contains("# HELP herald_deliveries_total Delivery attempts"), "{text}");
        assert!(text.contains("# TYPE herald_deliveries_total counter"), "{text}");
        assert!(text.contains("herald_deliveries_total{channel=\"inbox\",outcome=\"sent\"} 1"), "{text}");
        assert!(
            text.contains("# TYPE herald_reclaimed_claims_total counter\nherald_reclaimed_claims_total 2"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        // Every sample has HELP and TYPE under its own family name.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            let family = if text.contains(&format!("# TYPE {name} ")) { name } else { family };
            assert!(text.contains(&format!("# HELP {family} ")), "no help for {name}: {text}");
            assert!(text.contains(&format!("# TYPE {family} ")), "no type for {name}: {text}");
        }
        assert!(m.encode().ends_with("# EOF\n"));
    }

    #[test]
    fn accept_headers_pick_the_format() {
        assert!(!prefers_openmetrics(None));
        assert!(!prefers_openmetrics(Some("*/*")));
        assert!(!prefers_openmetrics(Some("text/plain; version=0.0.4")));
        assert!(!prefers_openmetrics(Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5")));
        assert!(!prefers_openmetrics(Some("application/openmetrics-text;q=0")));
        assert!(prefers_openmetrics(Some("application/openmetrics-text; version=1.0.0")));
        // What Prometheus itself sends.
        assert!(prefers_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
             text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
    }
}
