//! SMS: the parts of the `sms` channel that talk to providers and judge
//! text, each a pure function or a small client that a test can drive
//! against a local server.
//!
//! - [`phone`]: E.164 numbers, parsed and validated once at the edge.
//! - [`segments`]: GSM-7 or UCS-2, and how many segments a text costs.
//! - [`sender`]: `sms.from`, a number, an alphanumeric sender ID or a
//!   Twilio Messaging Service.
//! - [`transport`]: the `sms.transport` URL (`twilio://`, `kannel://`).
//! - [`twilio`]: Twilio's Messages API, its error codes, the
//!   `X-Twilio-Signature` check of its callbacks, and what its status
//!   callbacks and inbound messages say.
//! - [`kannel`]: Kannel's `sendsms` interface, its answers, and the
//!   delivery reports it sends back to a signed `dlr-url`.
//! - [`keywords`]: STOP, START and HELP in an inbound message.
//! - [`deliver`]: the channel itself, which turns answers into outcomes,
//!   suppressions and `/readyz`.
//! - [`rate`]: `sms.rate`, shared by every instance.
//!
//! Each transport answers an [`Answer`](super::answer::Answer); turning
//! that into an outcome, a suppression or an invalid number is the
//! channel's, which holds the store.

pub mod deliver;
pub mod kannel;
pub mod keywords;
pub mod phone;
pub mod rate;
pub mod segments;
pub mod sender;
pub mod transport;
pub mod twilio;

use phone::PhoneNumber;
use sender::Sender;

/// One text to send, as both transports take it.
#[derive(Debug, Clone, Copy)]
pub struct Text<'a> {
    pub to: &'a PhoneNumber,
    pub from: &'a Sender,
    pub body: &'a str,
    /// Where the provider reports what became of it: Twilio's
    /// `StatusCallback`; for Kannel the `dlr-url`, to which the client adds
    /// Kannel's placeholders. Herald builds it from `http.public_url`, with
    /// a signed token where the provider does not sign.
    pub callback: Option<&'a url::Url>,
}

/// A transport's endpoint as a log shows it: its base URL and who it logs
/// in as, never the password or token.
fn redacted(f: &mut std::fmt::Formatter<'_>, name: &str, base: &url::Url, user: (&str, &str)) -> std::fmt::Result {
    f.debug_struct(name).field("base", &base.as_str()).field(user.0, &user.1).finish_non_exhaustive()
}
