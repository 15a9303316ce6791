//! The guard every outgoing request to a user- or operator-supplied URL goes
//! through (a webhook rule's URL, a browser's Web Push endpoint): such a URL
//! must not become a way to reach internal services, so URLs whose host is,
//! or resolves to, a loopback, private, link-local (cloud metadata) or
//! otherwise non-public address are refused unless the deployment allows
//! them. [`check_public_url`] runs when the URL is accepted (IP literals and
//! `localhost`), and [`guarded_resolver`] again inside the HTTP client's
//! resolver on every request, so a DNS name that later points inward
//! (rebinding) is caught where it matters.
//!
//! One module for both channels rather than a copy per channel: the list of
//! inward ranges grew with every outside review, and a second copy would
//! miss the next addition.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Addresses an outgoing request may not reach unless private networks are
/// allowed.
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

/// Who is checking a URL, for the refusal's words: `what` names the
/// requests ("webhooks", "Web Push endpoints") and `setting` the key that
/// allows internal targets.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub what: &'a str,
    pub setting: &'a str,
    /// Accept `http://` as well as `https://`.
    pub allow_http: bool,
    pub allow_private_networks: bool,
}

/// Checks a URL when it is accepted. Names are resolved at delivery, by
/// [`guarded_resolver`].
pub fn check_public_url(raw: &str, target: Target<'_>) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL ({e})"))?;
    let scheme_ok = match url.scheme() {
        "https" => true,
        "http" => target.allow_http || target.allow_private_networks,
        _ => false,
    };
    if !scheme_ok {
        return Err(if target.allow_http {
            format!("{raw:?}: only https:// (or http://) URLs are accepted")
        } else {
            format!(
                "{raw:?}: only https:// URLs are accepted (http:// only with {} = true, for a service on \
                 your own network)",
                target.setting
            )
        });
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Both callers sign their requests (Standard Webhooks, VAPID): a
        // secret in the URL would only be logged and stored with the rule.
        return Err("credentials in the URL are not accepted; the request is signed instead".into());
    }
    let Some(host) = url.host() else { return Err(format!("{raw:?} has no host")) };
    if target.allow_private_networks {
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
            "{raw:?} points at a loopback, private or link-local address; {} may only reach public addresses \
             (set {} = true to allow internal receivers)",
            target.what, target.setting
        ));
    }
    Ok(url)
}

/// How long [`check_resolved_host`] waits for the resolver.
const ACCEPT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// Resolves the host of a URL [`check_public_url`] accepted, when it is
/// accepted, and refuses it when every address it resolves to is
/// non-public: for a URL that arrives from outside (a browser's Web Push
/// endpoint), so the one who sent it learns at once, in a `422`, rather
/// than at delivery, where [`guarded_resolver`] refuses it again anyway.
/// A name that does not resolve (now) is let through: delivery checks
/// again, and a passing DNS failure must not refuse a good endpoint.
/// Rejected: refusing when *any* address is non-public; the resolver at
/// delivery uses the public ones, so the URL works.
pub async fn check_resolved_host(url: &reqwest::Url, target: Target<'_>) -> Result<(), String> {
    if target.allow_private_networks {
        return Ok(());
    }
    let Some(url::Host::Domain(host)) = url.host() else { return Ok(()) };
    let port = url.port_or_known_default().unwrap_or(443);
    let lookup = tokio::time::timeout(ACCEPT_LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await;
    let Ok(Ok(addrs)) = lookup else { return Ok(()) };
    let addrs: Vec<SocketAddr> = addrs.collect();
    if !addrs.is_empty() && addrs.iter().all(|a| is_non_public(a.ip())) {
        return Err(format!(
            "{:?}: {host} {RESOLVER_REFUSAL}; {} may only reach public addresses (set {} = true to allow \
             internal receivers)",
            url.as_str(),
            target.what,
            target.setting
        ));
    }
    Ok(())
}

/// The words the guarded resolver's refusal carries, so a caller can tell a
/// refusal (final) from a network failure (worth retrying).
const RESOLVER_REFUSAL: &str = "resolves only to loopback, private or link-local addresses";

/// The HTTP client for requests to guarded URLs.
pub fn guarded_client(allow_private_networks: bool, timeout: Duration) -> reqwest::Client {
    guarded_client_builder(allow_private_networks, timeout)
        .build()
        .expect("a client with a resolver and timeouts builds")
}

/// [`guarded_client`]'s builder, for a caller that adds to it.
pub fn guarded_client_builder(allow_private_networks: bool, timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        // Direct connections only. With a proxy from HTTP_PROXY or
        // HTTPS_PROXY the guarded resolver below resolves only the
        // proxy's name, and the proxy then reaches whatever the URL
        // names, loopback included: an outside review reached a
        // loopback service that way. A deployment that must leave
        // through a proxy is not supported for these requests.
        .no_proxy()
        .timeout(timeout)
        // A redirect could lead anywhere, including inward; the receiver
        // should be configured with its final URL.
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(guarded_resolver(allow_private_networks))
        .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
}

/// A resolver for `reqwest::ClientBuilder::dns_resolver` that refuses
/// non-public answers unless private networks are allowed.
pub fn guarded_resolver(allow_private_networks: bool) -> Arc<impl Resolve + use<>> {
    Arc::new(GuardedResolver { allow_private_networks })
}

/// Resolves names for the HTTP client and refuses non-public answers.
struct GuardedResolver {
    allow_private_networks: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private_networks;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                addrs.into_iter().filter(|a| allow_private || !is_non_public(a.ip())).collect();
            if allowed.is_empty() {
                let msg = format!("{host} {RESOLVER_REFUSAL}");
                return Err(Box::<dyn std::error::Error + Send + Sync>::from(msg));
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// A failed request in words: the error and its chain of causes, and
/// whether it was the guarded resolver refusing the target (which will
/// refuse it next time too).
pub fn describe_send_error(e: &reqwest::Error) -> (String, bool) {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    let refused = msg.contains(RESOLVER_REFUSAL);
    (msg, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_resolver_refuses_names_that_point_inward() {
        use std::str::FromStr;
        let guarded = GuardedResolver { allow_private_networks: false };
        let err = guarded.resolve(Name::from_str("localhost").unwrap()).await.err().expect("refused");
        assert!(err.to_string().contains("resolves only to loopback"), "{err}");
        let open = GuardedResolver { allow_private_networks: true };
        assert!(open.resolve(Name::from_str("localhost").unwrap()).await.is_ok());
    }
}
