//! The `[email]` and `[webhook]` sections of herald.toml: the channels'
//! own settings, declared beside the channels that use them so that the
//! delivery code never reads the whole configuration (`config` re-exports
//! them and checks them with the rest at start).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Standard Webhooks signing secret, `whsec_` + base64 of at least 24
    /// random bytes (`openssl rand -base64 32`), or a list of them while
    /// receivers move from one to the next: every delivery is signed with
    /// each (see `delivery::channel::signing`). Without it the webhook
    /// channel cannot deliver, and its rows end `failed` saying so.
    pub signing_secret: Option<super::channel::signing::SecretList>,
    /// Allow rules to target loopback and private addresses. Off by default,
    /// so a rule cannot be used to reach internal services.
    pub allow_private_networks: bool,
    /// Longest a receiver may take to answer before it counts as a
    /// transient failure. Default "10s".
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

/// The email channel. Without `transport` the channel is known by name but
/// cannot deliver: its rows end `failed` saying so.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmailSettings {
    /// Where messages go: `smtp://USER:PASS@HOST:PORT?tls=required|starttls|none`
    /// (STARTTLS; `required` is the default and refuses a server without
    /// it, `starttls` uses it when offered, `none` is plain text for a relay
    /// on the same host), `smtps://USER:PASS@HOST:PORT` (implicit TLS), or
    /// `file:///DIR` (development: one `.eml` file per message, nothing
    /// leaves the machine). Unset: no email is sent.
    pub transport: Option<String>,
    /// The From address, e.g. `Herald <news@example.com>`. Required with a
    /// transport. Its domain also names Message-IDs (`<OUTBOX-ID@DOMAIN>`).
    pub from: Option<String>,
    /// The deployment secret keying address hashes and unsubscribe tokens.
    /// Unset: generated into `data_dir` on first start. Instances sharing a
    /// database must share it.
    pub address_secret: Option<String>,
    /// Public base URL of this Herald's HTTP server, e.g.
    /// `https://herald.example.com`: unsubscribe links are
    /// `PUBLIC_URL/u/TOKEN`. Required with an `smtp`/`smtps` transport;
    /// with `file://` it defaults to `http://` + `http.listen`.
    pub public_url: Option<String>,
    /// An address that takes unsubscribe requests by mail, added to
    /// List-Unsubscribe as `mailto:` when set.
    pub unsubscribe_mailto: Option<String>,
    /// When set, the envelope sender (Return-Path) is
    /// `bounce+OUTBOX-ID@BOUNCE_DOMAIN` (VERP), so an asynchronous bounce
    /// names the message it is about.
    pub bounce_domain: Option<String>,
    /// DKIM selector (`SELECTOR._domainkey.DOMAIN` holds the public key).
    /// Set together with `dkim_private_key_file` to sign every message;
    /// the signature covers From, To, Subject, Date, Message-ID,
    /// List-Unsubscribe, List-Unsubscribe-Post and X-Herald-Outbox-Id.
    pub dkim_selector: Option<String>,
    /// The signing domain (`d=`). Default: the domain of `email.from`.
    pub dkim_domain: Option<String>,
    /// A file holding the DKIM private key: PKCS#1 PEM RSA
    /// (`-----BEGIN RSA PRIVATE KEY-----`) or a base64 Ed25519 seed.
    pub dkim_private_key_file: Option<PathBuf>,
    /// A PEM file of CA certificates to trust for the SMTP server's TLS
    /// certificate (STARTTLS and `smtps://`), for a relay whose certificate
    /// a private CA issued. Trusted in addition to the operating system's
    /// store and the built-in (Mozilla) roots, which are always trusted.
    /// `HERALD_EMAIL__TLS_CA_FILE`. Default unset.
    pub tls_ca_file: Option<PathBuf>,
    /// Reuse SMTP connections between messages (a pool of up to
    /// `concurrency`). Off: one connection per message. Default true.
    pub pool: bool,
    /// Most messages in flight to the transport at once, and the pool's
    /// size (1 to 1000). Default 8.
    pub concurrency: u32,
    /// Most messages started per second on this transport (0: no limit).
    /// Default 0.
    pub rate_per_second: u32,
    /// Longest one message's SMTP exchange may take (`smtp://`: connect to
    /// the reply after the data; `smtps://`: each command). Must be shorter
    /// than `worker.deliver_timeout`. Default "30s".
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings { signing_secret: None, allow_private_networks: false, timeout: Duration::from_secs(10) }
    }
}

impl WebhookSettings {
    pub fn policy(&self) -> super::channel::webhook::WebhookPolicy {
        super::channel::webhook::WebhookPolicy { allow_private_networks: self.allow_private_networks }
    }
}

impl Default for EmailSettings {
    fn default() -> Self {
        EmailSettings {
            transport: None,
            from: None,
            address_secret: None,
            public_url: None,
            unsubscribe_mailto: None,
            bounce_domain: None,
            dkim_selector: None,
            dkim_domain: None,
            dkim_private_key_file: None,
            tls_ca_file: None,
            pool: true,
            concurrency: 8,
            rate_per_second: 0,
            timeout: Duration::from_secs(30),
        }
    }
}
