//! `herald bench --channel sms` and `--channel slack`: the drain through
//! the SMS channel (Twilio's Messages API) or the Slack channel
//! (`chat.postMessage`) to an in-process double that answers as the
//! provider does, so the figure is Herald's: the suppression check by the
//! number's hash, the request, the answer read, the outcome recorded.
//!
//! Rows are enqueued by hand (no rule), one number or one conversation per
//! row, so nothing is rendered; `sms.rate` is not set (a rate would be the
//! figure).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::routing::post;
use serde::Serialize;

use crate::address::AddressKeys;
use crate::clock::Clock;
use crate::delivery::channel::Registry;
use crate::delivery::channel::slack::{BotToken, SlackClient};
use crate::delivery::channel::slack_deliver::SlackChannel;
use crate::delivery::channel::sms::deliver::{SmsChannel, SmsParts, SmsProvider};
use crate::delivery::channel::sms::sender::Sender;
use crate::delivery::channel::sms::transport::SmsTransport;
use crate::store::Store;

/// What the messaging run adds to the bench's report.
#[derive(Debug, Clone, Serialize)]
pub struct MessagingFigures {
    /// Requests the double answered.
    pub received: u64,
}

/// The double and the registry with the channel on it.
pub struct MessagingBench {
    double: ProviderDouble,
    registry: Registry,
}

/// The payload of the bench's row `i` on `channel`.
pub fn payload(channel: &str, i: usize) -> serde_json::Value {
    match channel {
        "sms" => {
            serde_json::json!({"to": format!("+1415555{:04}", i % 10_000), "text": format!("Your code is {i:06}")})
        }
        _ => serde_json::json!({"channel": "C0BENCH01", "text": format!("Deploy {i} finished")}),
    }
}

/// An in-process double of Twilio's Messages API and Slack's
/// `chat.postMessage`, answering as they do, counting requests and keeping
/// when each arrived (for a rate measured at the provider's side).
pub struct ProviderDouble {
    pub addr: std::net::SocketAddr,
    received: Arc<AtomicU64>,
    arrivals: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
}

impl ProviderDouble {
    pub async fn start() -> anyhow::Result<ProviderDouble> {
        let received = Arc::new(AtomicU64::new(0));
        let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let arrived = {
            let (received, arrivals) = (received.clone(), arrivals.clone());
            move || {
                arrivals.lock().expect("arrivals").push(std::time::Instant::now());
                received.fetch_add(1, Ordering::Relaxed)
            }
        };
        let slack = arrived.clone();
        let app = Router::new()
            .route(
                "/2010-04-01/Accounts/{sid}/Messages.json",
                post(move || {
                    let n = arrived();
                    async move {
                        let body = serde_json::json!({"sid": format!("SM{n:032x}"), "status": "queued"});
                        (axum::http::StatusCode::CREATED, axum::Json(body))
                    }
                }),
            )
            .route(
                "/api/chat.postMessage",
                post(move || {
                    let n = slack();
                    async move {
                        axum::Json(serde_json::json!({"ok": true, "channel": "C0BENCH01", "ts": format!("{n}.000100")}))
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(ProviderDouble { addr, received, arrivals })
    }

    /// `sms.transport` pointing at this double.
    pub fn twilio_url(&self) -> String {
        format!("twilio+http://AC{}:bench-token@{}", "0".repeat(32), self.addr)
    }

    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// When each request arrived, in order.
    pub fn arrivals(&self) -> Vec<std::time::Instant> {
        let mut v = self.arrivals.lock().expect("arrivals").clone();
        v.sort_unstable();
        v
    }
}

impl MessagingBench {
    /// Starts the double and builds the `channel` ("sms" or "slack") to it.
    pub async fn start(channel: &str, store: &Arc<dyn Store>, clock: Arc<dyn Clock>) -> anyhow::Result<Self> {
        let double = ProviderDouble::start().await?;
        let addr = double.addr;
        let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
        let health = crate::delivery::health::ChannelHealth::default();
        let mut registry = crate::app::registry();
        match channel {
            "sms" => {
                let transport = SmsTransport::parse(&double.twilio_url()).map_err(|e| anyhow::anyhow!("{e}"))?;
                let sms = SmsChannel::new(SmsParts {
                    store: store.clone(),
                    keys: AddressKeys::from_secret(b"herald bench secret, not for production"),
                    clock,
                    health,
                    provider: SmsProvider::new(http, &transport),
                    from: Sender::parse("+14155550100").map_err(|e| anyhow::anyhow!("{e}"))?,
                    public_url: None,
                    rate: None,
                });
                registry.register("sms", Arc::new(sms));
            }
            _ => {
                let api = url::Url::parse(&format!("http://{addr}/api"))?;
                let token = BotToken::parse("xoxb-bench-token").map_err(|e| anyhow::anyhow!("{e}"))?;
                registry.register("slack", Arc::new(SlackChannel::new(SlackClient::new(http, api, token), health)));
            }
        }
        Ok(MessagingBench { double, registry })
    }

    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    pub fn finish(&self) -> MessagingFigures {
        MessagingFigures { received: self.double.received() }
    }
}
