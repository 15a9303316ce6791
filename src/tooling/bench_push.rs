//! `herald bench --channel push`: the drain through the push channel to a
//! local Web Push service that verifies and decrypts every notification
//! ([`super::push_receiver`]), one device per user, one notification per
//! user.
//!
//! Besides the rate it states what a notification costs: the CPU time of
//! the whole process per notification during the drain (Herald and the
//! receiver together, since both run here; `/proc/self/stat`, Linux only),
//! and, measured apart, Herald's own cryptography per message (the RFC 8291
//! encryption with its fresh ECDH, and the VAPID header, cached per origin)
//! and what a fresh VAPID signature costs (once per origin every 11 hours).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::push_receiver::PushReceiver;
use crate::clock::Clock;
use crate::delivery::channel::Registry;
use crate::delivery::channel::push::deliver::{PushChannel, PushParts};
use crate::delivery::channel::push::vapid::{VapidKey, generate_key_pair};
use crate::delivery::channel::push::webpush::{EndpointPolicy, WebPush, WebSubscription};
use crate::delivery::channel::push::{PushNotification, Transports, Urgency};
use crate::delivery::health::ChannelHealth;
use crate::store::Store;

/// What the push run adds to the bench's report.
#[derive(Debug, Clone, Serialize)]
pub struct PushFigures {
    /// Notifications the receiver verified and decrypted.
    pub received: u64,
    /// Requests it refused (should be 0), and the first one's reason.
    pub refused: u64,
    pub first_refusal: Option<String>,
    /// The whole process's CPU time during the drain, per notification, in
    /// microseconds: Herald and the receiver together.
    pub process_cpu_us_per_notification: Option<f64>,
    /// Herald's encryption and signing per notification (VAPID header
    /// cached), in microseconds of one core.
    pub encrypt_and_sign_us: f64,
    /// One fresh VAPID signature (ES256), in microseconds.
    pub vapid_sign_us: f64,
}

/// The receiver, the devices registered for `rows` users, and the channel.
pub struct PushBench {
    receiver: PushReceiver,
    pub channel: Arc<PushChannel>,
    vapid: Arc<VapidKey>,
    sample: WebSubscription,
    cpu_before: Option<Duration>,
}

/// The user the bench's row `i` is for.
pub fn user(i: usize) -> String {
    format!("bench-push-{i}")
}

/// The payload of the bench's row `i`: a notification the size of a real
/// one (a title, a sentence, a link, a little data).
pub fn payload(i: usize) -> serde_json::Value {
    serde_json::json!({
        "title": format!("Your export {i} is ready"),
        "body": "12,480 rows were written to exports/2026-12.csv.",
        "url": format!("https://app.example.com/exports/{i}"),
        "data": {"export_id": i, "rows": 12480},
    })
}

impl PushBench {
    /// With `http2`, Herald speaks HTTP/2 to the local push service, as it
    /// does over TLS to a real one (which negotiates it); without, HTTP/1.1.
    pub async fn start(
        store: &Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        rows: usize,
        concurrency: usize,
        http2: bool,
    ) -> anyhow::Result<PushBench> {
        let (private, public) = generate_key_pair();
        let vapid = Arc::new(VapidKey::new(&private, "mailto:bench@herald.invalid")?);
        let (receiver, devices) = PushReceiver::start(rows, &public).await?;
        let policy = EndpointPolicy { allow_private_networks: true };
        // Registered before the clock starts, a few at a time.
        let now = clock.now();
        let registrations = devices.iter().enumerate().map(|(i, d)| {
            let store = store.clone();
            let device = d.registration();
            async move { store.register_push_device(&user(i), &device, now).await }
        });
        let mut stream = futures::stream::iter(registrations).buffer_unordered(concurrency.max(1));
        use futures::StreamExt;
        while let Some(done) = stream.next().await {
            done?;
        }
        let sample = WebSubscription::parse(&devices[0].endpoint, &devices[0].p256dh, &devices[0].auth, policy)?;
        let mut web = WebPush::new(vapid.clone(), policy, Duration::from_secs(10));
        if http2 {
            web = web.over_http2(Duration::from_secs(10));
        }
        let transports = Transports { web: Some(web), ..Transports::default() };
        let channel = Arc::new(PushChannel::new(PushParts {
            devices: store.clone(),
            transports,
            policy,
            health: ChannelHealth::default(),
            clock,
        }));
        Ok(PushBench { receiver, channel, vapid, sample, cpu_before: None })
    }

    /// The registry the worker drains with: the bench's push channel.
    pub fn registry(&self) -> Registry {
        let mut registry = crate::app::registry();
        registry.register("push", self.channel.clone());
        registry
    }

    /// Called as the drain starts.
    pub fn drain_started(&mut self) {
        self.cpu_before = process_cpu();
    }

    /// Called when the drain is over: the figures, and an error when the
    /// receiver did not get every notification intact.
    pub fn finish(&self, rows: usize) -> anyhow::Result<PushFigures> {
        let cpu = match (self.cpu_before, process_cpu()) {
            (Some(before), Some(after)) => {
                Some((after.saturating_sub(before)).as_secs_f64() * 1e6 / rows.max(1) as f64)
            }
            _ => None,
        };
        let (refused, first_refusal) = self.receiver.refused();
        let received = self.receiver.accepted();
        if received != rows as u64 {
            anyhow::bail!(
                "the push receiver verified {received} of {rows} notifications and refused {refused} (first: {})",
                first_refusal.as_deref().unwrap_or("none")
            );
        }
        let (encrypt_and_sign_us, vapid_sign_us) = self.crypto_cost();
        Ok(PushFigures {
            received,
            refused,
            first_refusal,
            process_cpu_us_per_notification: cpu,
            encrypt_and_sign_us,
            vapid_sign_us,
        })
    }

    /// Herald's cryptography per message, timed apart from everything else
    /// (one core, 2,000 messages), and one fresh VAPID signature.
    fn crypto_cost(&self) -> (f64, f64) {
        let web = WebPush::new(self.vapid.clone(), EndpointPolicy { allow_private_networks: true }, Duration::ZERO);
        let note = PushNotification {
            id: crate::store::new_id(),
            title: "Your export 1 is ready".into(),
            body: Some("12,480 rows were written to exports/2026-12.csv.".into()),
            url: Some("https://app.example.com/exports/1".into()),
            data: serde_json::json!({"export_id": 1, "rows": 12480}),
            ttl: Duration::from_secs(3600),
            urgency: Urgency::Normal,
        };
        const N: u32 = 2000;
        let started = Instant::now();
        for _ in 0..N {
            std::hint::black_box(web.prepare(&self.sample, &note).expect("a bench notification fits"));
        }
        let per_message = started.elapsed().as_secs_f64() * 1e6 / f64::from(N);
        let started = Instant::now();
        for _ in 0..20 {
            std::hint::black_box(self.vapid.sign("https://push.example.net", std::time::SystemTime::now()));
        }
        let per_signature = started.elapsed().as_secs_f64() * 1e6 / 20.0;
        (per_message, per_signature)
    }
}

/// This process's user + system CPU time, from `/proc/self/stat` (fields
/// 14 and 15, in clock ticks of 1/100 s); `None` where there is no procfs.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: count from its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}
