//! The `email` channel: SMTP (pooled, STARTTLS or implicit TLS, AUTH) or,
//! for development, `.eml` files in a directory.
//!
//! - [`transport`]: the `email.transport` URL and the lettre transport.
//! - [`message`]: headers, bodies and envelope of one message.
//! - [`classify`]: what an SMTP reply means (retry, bounce, policy, terminal).
//! - [`pool`]: `smtp://` connections with TCP_NODELAY, pooled or not.
//!
//! Order of one delivery: find the address (the recipient's, or `to` in a
//! hand-enqueued row's payload), hash it, refuse it if suppressed (no SMTP
//! connection is made), build the message, wait for the rate limit and a
//! concurrency slot, send, classify. A hard bounce suppresses the address
//! for every category before the outcome is returned.

pub mod classify;
pub mod message;
pub mod pool;
pub mod transport;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::Mailbox;
use lettre::transport::smtp::AsyncSmtpTransport;
use lettre::{AsyncTransport, Tokio1Executor};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Channel, Delivery, Outcome};
use crate::address::{AddressKeys, UnsubscribeToken};
use crate::clock::Clock;
use crate::delivery::settings::EmailSettings;
use crate::metrics::Metrics;
use crate::store::{ALL_CATEGORIES, Store, SuppressionReason, SuppressionRow};
use classify::{Class, SendFailure};
use transport::TransportUrl;

/// The payload of a hand-enqueued email row (one no rule planned).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailPayload {
    pub to: String,
    pub subject: String,
    pub text: String,
    #[serde(default)]
    pub html: Option<String>,
    /// Default `transactional` (no List-Unsubscribe).
    #[serde(default)]
    pub category: Option<String>,
}

enum Sender {
    /// `smtp://`: our connections with TCP_NODELAY (see [`pool`]).
    NoDelay(pool::NoDelaySmtp),
    /// `smtps://`: lettre's pooled transport.
    Pooled {
        transport: AsyncSmtpTransport<Tokio1Executor>,
    },
    Unpooled {
        url: TransportUrl,
        timeout: Duration,
        /// `email.tls_ca_file`.
        ca_file: Option<std::path::PathBuf>,
    },
    File {
        dir: PathBuf,
    },
}

/// Spaces message starts `1/rate` apart.
struct RateLimiter {
    interval: Option<Duration>,
    next: Mutex<Instant>,
}

impl RateLimiter {
    fn new(per_second: u32) -> RateLimiter {
        let interval = (per_second > 0).then(|| Duration::from_secs_f64(1.0 / f64::from(per_second)));
        RateLimiter { interval, next: Mutex::new(Instant::now()) }
    }

    async fn wait(&self) {
        let Some(interval) = self.interval else { return };
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let at = (*next).max(Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

/// What the channel needs beyond the transport.
pub struct EmailOptions {
    pub from: Mailbox,
    /// Base URL for `/u/TOKEN` links, without a trailing slash.
    pub public_url: String,
    pub unsubscribe_mailto: Option<String>,
    pub bounce_domain: Option<String>,
}

pub struct EmailChannel {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    keys: AddressKeys,
    metrics: Metrics,
    opts: EmailOptions,
    url: TransportUrl,
    sender: Sender,
    dkim: Option<lettre::message::dkim::DkimConfig>,
    limiter: RateLimiter,
    slots: Semaphore,
    /// `slots`' size, for [`Channel::concurrency`].
    concurrency: usize,
}

impl EmailChannel {
    /// Builds the channel from `[email]`; the caller has checked
    /// `email.transport` is set. `default_public_url` is used when
    /// `email.public_url` is not set (allowed only with `file://`).
    pub fn from_settings(
        settings: &EmailSettings,
        default_public_url: &str,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        keys: AddressKeys,
        metrics: Metrics,
    ) -> Result<EmailChannel, String> {
        let url_text = settings.transport.as_deref().ok_or("email.transport is not set")?;
        let url = TransportUrl::parse(url_text)?;
        let from: Mailbox = settings
            .from
            .as_deref()
            .ok_or("email.from is required with email.transport")?
            .parse()
            .map_err(|e| format!("email.from: {e}"))?;
        let sender = match &url {
            TransportUrl::File { dir } => {
                std::fs::create_dir_all(dir).map_err(|e| format!("email.transport: {}: {e}", dir.display()))?;
                tracing::warn!(
                    dir = %dir.display(),
                    "email.transport is file://: every message is written to this directory as an .eml file \
                     and NOTHING LEAVES THIS MACHINE"
                );
                Sender::File { dir: dir.clone() }
            }
            TransportUrl::Smtp { host, port, tls, user, password } if *tls != transport::TlsMode::Implicit => {
                let credentials = match (user, password) {
                    (Some(u), Some(p)) => {
                        Some(lettre::transport::smtp::authentication::Credentials::new(u.clone(), p.clone()))
                    }
                    _ => None,
                };
                let tls_params = match tls {
                    transport::TlsMode::None => None,
                    _ => Some(transport::tls_parameters(host, settings.tls_ca_file.as_deref())?),
                };
                Sender::NoDelay(pool::NoDelaySmtp::new(
                    host.clone(),
                    *port,
                    *tls,
                    tls_params,
                    credentials,
                    settings.timeout,
                    settings.pool.then_some(settings.concurrency as usize),
                ))
            }
            TransportUrl::Smtp { .. } if settings.pool => Sender::Pooled {
                transport: url.smtp(settings.timeout, settings.concurrency, settings.tls_ca_file.as_deref())?,
            },
            TransportUrl::Smtp { .. } => {
                Sender::Unpooled { url: url.clone(), timeout: settings.timeout, ca_file: settings.tls_ca_file.clone() }
            }
        };
        let dkim = match (&settings.dkim_selector, &settings.dkim_private_key_file) {
            (Some(selector), Some(path)) => {
                let key = std::fs::read_to_string(path)
                    .map_err(|e| format!("email.dkim_private_key_file: {}: {e}", path.display()))?;
                let domain = settings.dkim_domain.clone().unwrap_or_else(|| from.email.domain().to_owned());
                Some(
                    message::dkim_config(selector, &domain, &key)
                        .map_err(|e| format!("email.dkim_private_key_file: {}: {e}", path.display()))?,
                )
            }
            _ => None,
        };
        let public_url = settings.public_url.as_deref().unwrap_or(default_public_url).trim_end_matches('/').to_owned();
        Ok(EmailChannel {
            store,
            clock,
            keys,
            metrics,
            opts: EmailOptions {
                from,
                public_url,
                unsubscribe_mailto: settings.unsubscribe_mailto.clone(),
                bounce_domain: settings.bounce_domain.clone(),
            },
            url,
            sender,
            dkim,
            limiter: RateLimiter::new(settings.rate_per_second),
            slots: Semaphore::new(settings.concurrency as usize),
            concurrency: settings.concurrency as usize,
        })
    }

    /// Where messages go, for logs (no credentials).
    pub fn describe(&self) -> String {
        self.url.describe()
    }

    async fn send(&self, outbox_id: &str, built: &message::Built) -> Result<Option<String>, SendFailure> {
        self.limiter.wait().await;
        let _slot = self.slots.acquire().await.expect("the semaphore is never closed");
        match &self.sender {
            Sender::NoDelay(smtp) => {
                let r = smtp.send(&built.envelope, &built.bytes).await?;
                Ok(Some(reply_text(&r)))
            }
            Sender::Pooled { transport } => {
                let r = transport.send_raw(&built.envelope, &built.bytes).await.map_err(SendFailure::Smtp)?;
                Ok(Some(reply_text(&r)))
            }
            Sender::Unpooled { url, timeout, ca_file } => {
                let r =
                    transport::send_unpooled(url, *timeout, ca_file.as_deref(), &built.envelope, &built.bytes).await?;
                Ok(Some(reply_text(&r)))
            }
            Sender::File { dir } => {
                // Named by outbox id: a redelivery overwrites, it does not add.
                let path = dir.join(format!("{outbox_id}.eml"));
                let tmp = dir.join(format!(".{outbox_id}.eml.tmp"));
                let write = async {
                    tokio::fs::write(&tmp, &built.bytes).await?;
                    tokio::fs::rename(&tmp, &path).await
                };
                write.await.map_err(|e| SendFailure::Setup(format!("writing {}: {e}", path.display())))?;
                Ok(Some(format!("written to {}", path.display())))
            }
        }
    }
}

fn reply_text(r: &lettre::transport::smtp::response::Response) -> String {
    format!("{} {}", r.code(), r.message().collect::<Vec<_>>().join(" ")).trim().to_owned()
}

/// The address, name and message of one delivery.
struct Addressed<'a> {
    address: String,
    name: Option<String>,
    category: String,
    subject: &'a str,
    text: &'a str,
    html: Option<&'a str>,
}

fn address<'a>(d: &'a Delivery, payload: &'a Option<EmailPayload>) -> Result<Addressed<'a>, String> {
    if let (Some(rule), Some(m)) = (&d.rule, &d.message) {
        let r = d.recipient.as_ref().ok_or("the user has no recipient record, so no email address is known")?;
        let address = r.email.clone().filter(|e| !e.trim().is_empty()).ok_or("the user has no email address")?;
        return Ok(Addressed {
            address,
            name: r.name.clone(),
            category: rule.category.clone(),
            subject: &m.subject,
            text: &m.text,
            html: m.html.as_deref(),
        });
    }
    let p = payload.as_ref().ok_or(
        "email payload is not usable; expected a JSON object with \"to\", \"subject\", \"text\" and optional \
         \"html\", \"category\"",
    )?;
    if p.category.as_deref().is_some_and(|c| c.trim() == ALL_CATEGORIES) {
        return Err(
            "the payload's category \"*\" is reserved (it means every category); name the kind of message".into()
        );
    }
    Ok(Addressed {
        address: p.to.clone(),
        name: None,
        category: p.category.clone().unwrap_or_else(|| message::TRANSACTIONAL.to_owned()),
        subject: &p.subject,
        text: &p.text,
        html: p.html.as_deref(),
    })
}

#[async_trait]
impl Channel for EmailChannel {
    fn concurrency(&self) -> Option<usize> {
        Some(self.concurrency)
    }

    async fn deliver(&self, d: &Delivery) -> Outcome {
        let payload =
            if d.message.is_none() { serde_json::from_str::<EmailPayload>(&d.row.payload).ok() } else { None };
        let a = match address(d, &payload) {
            Ok(a) => a,
            Err(why) => return Outcome::terminal(why),
        };
        let Some(hash) = self.keys.hash(&a.address) else {
            return Outcome::terminal("the recipient's email address is not a valid address");
        };
        let h = Some(hash.clone());
        let now = self.clock.now();
        match super::active_suppression(self.store.as_ref(), &hash, &a.category, now).await {
            Ok(Some(s)) => {
                return Outcome::Suppressed { detail: super::suppressed_detail("address", &s), address_hash: h };
            }
            Ok(None) => {}
            Err(retry) => return retry,
        }
        let to = match a.address.trim().parse::<lettre::Address>() {
            Ok(addr) => Mailbox::new(a.name.clone(), addr),
            Err(_) => {
                return Outcome::Terminal {
                    detail: "the recipient's email address is not a valid address".into(),
                    address_hash: h,
                };
            }
        };
        let transactional = a.category == message::TRANSACTIONAL;
        let token = (!transactional).then(|| {
            self.keys.sign_unsubscribe(&UnsubscribeToken {
                address_hash: hash.clone(),
                category: a.category.clone(),
                user_id: d.row.user_id.clone(),
            })
        });
        let parts = message::Parts {
            outbox_id: &d.row.id,
            from: &self.opts.from,
            to,
            subject: a.subject,
            text: a.text,
            html: a.html,
            date: std::time::SystemTime::now(),
            unsubscribe_url: token.as_ref().map(|t| format!("{}/u/{t}", self.opts.public_url)),
            preferences_url: (!transactional)
                .then(|| format!("{}/p/{}", self.opts.public_url, self.keys.sign_preferences(&d.row.user_id))),
            unsubscribe_mailto: match (&token, &self.opts.unsubscribe_mailto) {
                (Some(t), Some(m)) => Some(format!("mailto:{m}?subject=unsubscribe%20{t}")),
                _ => None,
            },
            bounce_domain: self.opts.bounce_domain.as_deref(),
        };
        let built = match message::build(&parts, self.dkim.as_ref()) {
            Ok(b) => b,
            Err(why) => return Outcome::Terminal { detail: why, address_hash: h },
        };
        match self.send(&d.row.id, &built).await {
            Ok(reply) => Outcome::Sent {
                transport: self.url.describe(),
                detail: reply.map(|r| format!("Message-ID {}; {r}", built.message_id)),
                address_hash: h,
                provider_id: Some(built.message_id.clone()),
            },
            Err(failure) => {
                let c = failure.classify();
                match c.class {
                    Class::Retry => Outcome::Retry { detail: c.detail, address_hash: h, after: None },
                    Class::Terminal => Outcome::Terminal { detail: c.detail, address_hash: h },
                    Class::Policy => {
                        self.metrics.email_policy_rejection();
                        tracing::warn!(detail = %c.detail, "an SMTP server refused a message by policy (5.7.x): check SPF, DKIM and sender reputation");
                        Outcome::Terminal { detail: c.detail, address_hash: h }
                    }
                    Class::Bounce => {
                        let s = SuppressionRow {
                            address_hash: hash.clone(),
                            address_kind: crate::address::AddressKind::Email,
                            category: ALL_CATEGORIES.into(),
                            reason: SuppressionReason::HardBounce,
                            detail: Some(c.detail.clone()),
                            created_at: self.clock.now(),
                            expires_at: None,
                        };
                        if let Err(e) = self.store.suppress(&s).await {
                            // The bounce is still recorded; the next message
                            // to this address bounces again and retries this.
                            tracing::error!(error = %e, "could not record a hard-bounce suppression");
                        }
                        Outcome::Bounced { detail: c.detail, address_hash: h }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_rate_limit_spaces_message_starts() {
        let unlimited = RateLimiter::new(0);
        let started = std::time::Instant::now();
        for _ in 0..100 {
            unlimited.wait().await;
        }
        assert!(started.elapsed() < Duration::from_millis(50));

        let limited = RateLimiter::new(20);
        let started = std::time::Instant::now();
        for _ in 0..5 {
            limited.wait().await;
        }
        // Five starts at 20/s: the first at once, the fifth 200 ms later.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(195) && took < Duration::from_millis(600), "{took:?}");
    }
}
