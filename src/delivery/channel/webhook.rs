//! The `webhook` channel: POSTs a JSON event to the rule's URL, signed per the
//! Standard Webhooks scheme (<https://www.standardwebhooks.com/>), so any of its
//! reference libraries can verify it.
//!
//! A rule's URL is operator input that makes this server send requests, so it
//! must not become a way to reach internal services: URLs whose host is, or
//! resolves to, a loopback, private, link-local (cloud metadata) or otherwise
//! non-public address are refused unless the deployment allows them. The check
//! runs when the rule is saved (IP literals and `localhost`) and again inside
//! the HTTP client's resolver on every delivery, so a DNS name that later
//! points inward (rebinding) is caught where it matters.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::Serialize;

pub use super::signing::{SecretList, SigningSecret, SigningSecrets};
use super::{Channel, Delivery, Outcome};

/// Which target addresses a deployment allows.
#[derive(Debug, Clone, Copy, Default)]
pub struct WebhookPolicy {
    /// Allow loopback and private ranges (tests, or a deployment whose
    /// receivers live on its own network).
    pub allow_private_networks: bool,
}

/// Addresses a webhook may not reach unless private networks are allowed.
pub fn is_non_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local() // 169.254/16, cloud metadata services
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // carrier-grade NAT
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19)) // benchmarking
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_ipv4(v6) {
                // An address that reaches an IPv4 host (a translator, a
                // tunnel, a mapped socket) is judged by that host.
                return is_non_public(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00 // unique local
                || (seg[0] & 0xffc0) == 0xfe80 // link local
                || (seg[0] & 0xffc0) == 0xfec0 // site local (deprecated, still routed inward by some stacks)
                || (seg[0] == 0x2001 && seg[1] == 0) // Teredo: the IPv4 inside is obfuscated; no receiver needs it
                || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
                || (seg[0] == 0x0064 && seg[1] == 0xff9b && seg[2] == 1) // local-use NAT64 (RFC 8215)
                || (seg[0] == 0x0100 && seg[1..4] == [0, 0, 0]) // discard-only
                || seg[..6] == [0, 0, 0, 0, 0, 0] // the rest of the IPv4-compatible block (::/96)
        }
    }
}

/// The IPv4 address an IPv6 address stands for, in the forms that reach an
/// IPv4 host: IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`
/// (deprecated, still accepted by some stacks), IPv4-translated
/// `::ffff:0:a.b.c.d` (SIIT), the NAT64 well-known prefix `64:ff9b::/96`,
/// and 6to4 `2002:AABB:CCDD::/48`. An outside review reached inward through
/// each of these while only the mapped form was checked.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let seg = v6.segments();
    let low = std::net::Ipv4Addr::new((seg[6] >> 8) as u8, seg[6] as u8, (seg[7] >> 8) as u8, seg[7] as u8);
    match seg {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        // `::` and `::1` are themselves, not 0.0.0.0 and 0.0.0.1.
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        [0x0064, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(std::net::Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)),
        _ => None,
    }
}

impl WebhookPolicy {
    /// Checks a rule's URL when it is saved. Names are resolved at delivery.
    pub fn check_url(&self, raw: &str) -> Result<reqwest::Url, String> {
        let url = reqwest::Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL ({e})"))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(format!("{raw:?}: only https:// (or http://) URLs are accepted"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials in the URL are not accepted; the request is signed instead".into());
        }
        let Some(host) = url.host() else { return Err(format!("{raw:?} has no host")) };
        if self.allow_private_networks {
            return Ok(url);
        }
        let forbidden = match host {
            url::Host::Ipv4(ip) => is_non_public(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => is_non_public(IpAddr::V6(ip)),
            url::Host::Domain(d) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                d == "localhost" || d.ends_with(".localhost") || d.ends_with(".internal") || d.ends_with(".local")
            }
        };
        if forbidden {
            return Err(format!(
                "{raw:?} points at a loopback, private or link-local address; webhooks may only reach public \
                 addresses (set webhook.allow_private_networks = true to allow internal receivers)"
            ));
        }
        Ok(url)
    }
}

/// Resolves names for the HTTP client and refuses non-public answers.
struct GuardedResolver {
    policy: WebhookPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                addrs.into_iter().filter(|a| policy.allow_private_networks || !is_non_public(a.ip())).collect();
            if allowed.is_empty() {
                let msg = format!("{host} resolves only to loopback, private or link-local addresses");
                return Err(Box::<dyn std::error::Error + Send + Sync>::from(msg));
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The JSON body posted for one message.
#[derive(Debug, Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: EventData<'a>,
}

#[derive(Debug, Serialize)]
struct EventData<'a> {
    outbox_id: &'a str,
    user_id: &'a str,
    rule_id: Option<&'a str>,
    trigger_id: Option<&'a str>,
    trigger_type: Option<&'a str>,
    subject: Option<&'a str>,
    text: Option<&'a str>,
    html: Option<&'a str>,
    payload: serde_json::Value,
}

/// How much of a refusing receiver's body goes into the detail.
const BODY_EXCERPT: usize = 200;

pub struct WebhookChannel {
    client: reqwest::Client,
    /// Each delivery is signed with every one (see `channel::signing`).
    secrets: SigningSecrets,
    policy: WebhookPolicy,
}

impl WebhookChannel {
    pub fn new(secrets: impl Into<SigningSecrets>, policy: WebhookPolicy, timeout: Duration) -> WebhookChannel {
        let secrets = secrets.into();
        let client = reqwest::Client::builder()
            // Direct connections only. With a proxy from HTTP_PROXY or
            // HTTPS_PROXY the guarded resolver below resolves only the
            // proxy's name, and the proxy then reaches whatever the URL
            // names, loopback included: an outside review reached a
            // loopback service that way. A deployment that must leave
            // through a proxy is not supported for webhooks.
            .no_proxy()
            .timeout(timeout)
            // A redirect could lead anywhere, including inward; the receiver
            // should be configured with its final URL.
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(GuardedResolver { policy }))
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client with a resolver and timeouts builds");
        WebhookChannel { client, secrets, policy }
    }
}

#[async_trait]
impl Channel for WebhookChannel {
    async fn deliver(&self, d: &Delivery) -> Outcome {
        let row = &d.row;
        let Some(raw_url) = d.rule.as_ref().and_then(|r| r.webhook_url.as_deref()) else {
            return Outcome::terminal("no webhook URL: webhook rows must come from a rule with webhook_url set");
        };
        let url = match self.policy.check_url(raw_url) {
            Ok(u) => u,
            Err(e) => return Outcome::terminal(e),
        };
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
        let now = chrono::Utc::now();
        let event = Event {
            kind: "message.created",
            timestamp: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            data: EventData {
                outbox_id: &row.id,
                user_id: &row.user_id,
                rule_id: row.rule_id.as_deref(),
                trigger_id: row.trigger_id.as_deref(),
                trigger_type: d.rule.as_ref().map(|r| r.trigger_type.as_str()),
                subject: d.message.as_ref().map(|m| m.subject.as_str()),
                text: d.message.as_ref().map(|m| m.text.as_str()),
                html: d.message.as_ref().and_then(|m| m.html.as_deref()),
                payload,
            },
        };
        let body = serde_json::to_vec(&event).expect("events serialise");
        // Stable per outbox row, so a receiver can drop a redelivery.
        let id = format!("msg_{}", row.id);
        let timestamp = now.timestamp();
        let response = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", self.secrets.sign(&id, timestamp, &body))
            .body(body)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => return classify_error(&e),
        };
        let status = response.status();
        if status.is_success() {
            return Outcome::Sent {
                transport: "webhook".into(),
                detail: Some(format!("{status}")),
                address_hash: None,
            };
        }
        // The body is kept (an excerpt) only from a receiver known to be
        // public, or when the deployment allows internal receivers: an
        // answer from anything else is recorded by its status line alone,
        // so the send log can never carry an internal service's reply.
        let public_peer = response.remote_addr().is_some_and(|a| !is_non_public(a.ip()));
        let excerpt =
            if public_peer || self.policy.allow_private_networks { excerpt(response).await } else { String::new() };
        let detail = format!("the receiver answered {status}{excerpt}");
        if status.as_u16() == 429 || status.is_server_error() {
            Outcome::retry(detail)
        } else if status.is_redirection() {
            Outcome::terminal(format!("{detail} (redirects are not followed: configure the final URL)"))
        } else {
            Outcome::terminal(detail)
        }
    }
}

fn classify_error(e: &reqwest::Error) -> Outcome {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    if msg.contains("resolves only to loopback") {
        // Refused by policy: will be refused next time too.
        return Outcome::terminal(format!("webhook target refused: {msg}"));
    }
    if e.is_timeout() {
        return Outcome::retry(format!("the receiver did not answer in time: {msg}"));
    }
    Outcome::retry(format!("could not reach the receiver: {msg}"))
}

async fn excerpt(response: reqwest::Response) -> String {
    let text = response.text().await.unwrap_or_default();
    let text: String = text.chars().filter(|c| !c.is_control()).take(BODY_EXCERPT).collect();
    if text.trim().is_empty() { String::new() } else { format!(": {}", text.trim()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_and_metadata_addresses_are_refused() {
        let p = WebhookPolicy::default();
        for bad in [
            "http://127.0.0.1/x",
            "http://10.1.2.3/",
            "http://172.20.0.1/",
            "http://192.168.1.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:10.0.0.1]/",
            // IPv6 forms that embed an inward IPv4 address (once let through).
            "http://[::127.0.0.1]/",
            "http://[::ffff:0:127.0.0.1]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:7f00:1::]/",
            "http://[2002:a00:1::1]/",
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "http://[fec0::1]/",
            "http://[64:ff9b:1::1]/",
            "http://localhost:8080/",
            "http://db.internal/",
            "http://100.64.0.1/",
            "ftp://example.com/",
            "https://user:pw@example.com/",
        ] {
            assert!(p.check_url(bad).is_err(), "{bad} must be refused");
        }
        assert!(p.check_url("https://hooks.example.com/herald").is_ok());
        assert!(p.check_url("https://93.184.216.34/x").is_ok());
        // The same forms around a public IPv4 address, and ordinary global IPv6.
        assert!(p.check_url("https://[64:ff9b::5db8:d822]/x").is_ok());
        assert!(p.check_url("https://[2002:5db8:d822::1]/x").is_ok());
        assert!(p.check_url("https://[2606:2800:220:1:248:1893:25c8:1946]/x").is_ok());
        let open = WebhookPolicy { allow_private_networks: true };
        assert!(open.check_url("http://127.0.0.1:9000/").is_ok());
    }

    #[tokio::test]
    async fn the_resolver_refuses_names_that_point_inward() {
        use std::str::FromStr;
        let guarded = GuardedResolver { policy: WebhookPolicy::default() };
        let err = guarded.resolve(Name::from_str("localhost").unwrap()).await.err().expect("refused");
        assert!(err.to_string().contains("resolves only to loopback"), "{err}");
        let open = GuardedResolver { policy: WebhookPolicy { allow_private_networks: true } };
        assert!(open.resolve(Name::from_str("localhost").unwrap()).await.is_ok());
    }
}
