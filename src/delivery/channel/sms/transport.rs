//! `sms.transport`: which provider texts go through, named by one URL that
//! carries the endpoint and its credentials, as `email.transport` does.
//!
//! | URL                                          | provider                          |
//! |----------------------------------------------|-----------------------------------|
//! | `twilio://ACCOUNT_SID:AUTH_TOKEN@api.twilio.com` | Twilio's Messages API over HTTPS |
//! | `twilio+http://SID:TOKEN@127.0.0.1:PORT`     | the same over plain HTTP (a local double, tests) |
//! | `kannel://USER:PASS@HOST:13013`              | Kannel's `sendsms` over HTTP (port 13013 when none is given) |
//! | `kannel+https://USER:PASS@HOST:PORT`         | the same over HTTPS (a Kannel built with SSL) |
//!
//! Plain HTTP is the default for Kannel and opt-in for Twilio because of
//! where each runs: Kannel's smsbox usually listens on the same host or a
//! private network and most builds have no TLS, while Twilio is on the
//! internet, where an auth token must never travel in clear. User names and
//! passwords are percent-decoded (`%40` for `@`).
//!
//! Rejected: separate settings per provider (`sms.twilio.account_sid`,
//! `sms.kannel.host`, …), which let a deployment configure two providers
//! with nothing to say which one sends; one URL names exactly one.

use percent_encoding::percent_decode_str;
use url::Url;

use super::kannel::KannelEndpoint;
use super::twilio::TwilioEndpoint;

/// A parsed `sms.transport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmsTransport {
    Twilio(TwilioEndpoint),
    Kannel(KannelEndpoint),
}

/// What `sms.transport` accepts, for error messages.
pub const EXPECTED: &str = "twilio://ACCOUNT_SID:AUTH_TOKEN@api.twilio.com, twilio+http://SID:TOKEN@HOST:PORT, \
                        kannel://USER:PASS@HOST[:PORT] or kannel+https://USER:PASS@HOST[:PORT]";

/// An `sms.transport` that is not one of the accepted URLs. Never shows
/// the value, which holds a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sms.transport is not accepted: {why}; expected {EXPECTED}")]
pub struct InvalidTransport {
    pub why: String,
}

fn refuse<T>(why: impl Into<String>) -> Result<T, InvalidTransport> {
    Err(InvalidTransport { why: why.into() })
}

fn decoded(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

impl SmsTransport {
    pub fn parse(s: &str) -> Result<SmsTransport, InvalidTransport> {
        let url = Url::parse(s).or_else(|e| refuse(format!("not a URL ({e})")))?;
        let (http_scheme, default_port) = match url.scheme() {
            "twilio" => ("https", None),
            "twilio+http" => ("http", None),
            "kannel" => ("http", Some(13013)),
            "kannel+https" => ("https", Some(13013)),
            other => return refuse(format!("the scheme {other:?} is not a transport")),
        };
        let Some(host) = url.host_str().filter(|h| !h.is_empty()) else { return refuse("no host") };
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return refuse("no path, query or fragment is taken");
        }
        let user = decoded(url.username());
        let password = url.password().map(decoded).unwrap_or_default();
        if user.is_empty() || password.is_empty() {
            return refuse("both a user and a password (or token) are needed");
        }
        let port = url.port().or(default_port);
        let base = Url::parse(&match port {
            Some(p) => format!("{http_scheme}://{host}:{p}"),
            None => format!("{http_scheme}://{host}"),
        })
        .or_else(|e| refuse(format!("the host is not usable ({e})")))?;
        if url.scheme().starts_with("twilio") {
            if !user.starts_with("AC") {
                return refuse("the user must be the Twilio account SID (AC…)");
            }
            Ok(SmsTransport::Twilio(TwilioEndpoint { base, account_sid: user, auth_token: password }))
        } else {
            Ok(SmsTransport::Kannel(KannelEndpoint { base, username: user, password }))
        }
    }

    /// The URL with its password or token replaced, for logs and errors.
    pub fn redacted(s: &str) -> String {
        crate::delivery::channel::email::transport::TransportUrl::redacted(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SID: &str = "AC0123456789abcdef0123456789abcdef";

    #[test]
    fn twilio_urls_give_the_api_base_and_credentials() {
        let SmsTransport::Twilio(t) = SmsTransport::parse(&format!("twilio://{SID}:tok%2Fen@api.twilio.com")).unwrap()
        else {
            panic!("not Twilio")
        };
        assert_eq!(
            (t.base.as_str(), t.account_sid.as_str(), t.auth_token.as_str()),
            ("https://api.twilio.com/", SID, "tok/en")
        );
        let SmsTransport::Twilio(t) = SmsTransport::parse(&format!("twilio+http://{SID}:t@127.0.0.1:8099")).unwrap()
        else {
            panic!("not Twilio")
        };
        assert_eq!(t.base.as_str(), "http://127.0.0.1:8099/");
    }

    #[test]
    fn kannel_urls_default_to_port_13013() {
        let SmsTransport::Kannel(k) = SmsTransport::parse("kannel://herald:s%40cret@sms.lan").unwrap() else {
            panic!("not Kannel")
        };
        assert_eq!(
            (k.base.as_str(), k.username.as_str(), k.password.as_str()),
            ("http://sms.lan:13013/", "herald", "s@cret")
        );
        let SmsTransport::Kannel(k) = SmsTransport::parse("kannel+https://u:p@sms.lan:443").unwrap() else {
            panic!("not Kannel")
        };
        assert_eq!(k.base.as_str(), "https://sms.lan/");
    }

    #[test]
    fn bad_urls_say_why_without_the_secret() {
        for (bad, why) in [
            ("smtp://a:b@x", "scheme"),
            ("kannel://sms.lan", "user and a password"),
            ("kannel://u@sms.lan", "user and a password"),
            ("twilio://notasid:secret1@api.twilio.com", "account SID"),
            ("kannel://u:secret1@sms.lan/cgi-bin", "no path"),
            ("kannel://u:secret1@sms.lan?x=1", "no path"),
            ("not a url", "not a URL"),
        ] {
            let e = SmsTransport::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains("secret1"), "{e}");
        }
        assert_eq!(
            SmsTransport::redacted(&format!("twilio://{SID}:secret1@api.twilio.com")),
            format!("twilio://{SID}:***@api.twilio.com")
        );
    }
}
