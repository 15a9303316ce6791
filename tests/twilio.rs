//! The Twilio transport against a local double of the Messages API that
//! checks what Twilio checks (Basic auth with the account SID and auth
//! token, the account in the path, the form fields) and answers with
//! Twilio's documented bodies: `201` with the message, `400` with 21610 or
//! 21211, `429` with 20429 and `Retry-After`, `401` with 20003.
//!
//! The `X-Twilio-Signature` check is compared with Twilio's own
//! `RequestValidator` (the `twilio` PyPI package) in both directions.

mod common;

use common::twilio::{SID, TOKEN, double};

use std::time::Duration;

use herald::delivery::channel::answer::Answer;
use herald::delivery::channel::sms::Text;
use herald::delivery::channel::sms::phone::PhoneNumber;
use herald::delivery::channel::sms::sender::Sender;
use herald::delivery::channel::sms::transport::SmsTransport;
use herald::delivery::channel::sms::twilio::{TwilioClient, signature, verify_signature};
use serde_json::json;
use url::Url;

fn client(addr: &str, token: &str) -> TwilioClient {
    let SmsTransport::Twilio(endpoint) = SmsTransport::parse(&format!("twilio+http://{SID}:{token}@{addr}")).unwrap()
    else {
        panic!("a twilio URL")
    };
    TwilioClient::new(reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap(), endpoint)
}

fn phone(s: &str) -> PhoneNumber {
    PhoneNumber::parse("phone", s).unwrap()
}

async fn an_accepted_text_keeps_its_sid_and_sends_the_documented_fields() {
    let (addr, received) = double().await;
    let from = Sender::parse("+14155550100").unwrap();
    let callback = Url::parse("https://herald.example/v1/sms/status/twilio").unwrap();
    let to = phone("+1 (415) 555-0101");
    let answer = client(&addr, TOKEN)
        .send(&Text { to: &to, from: &from, body: "Your code: 123456 €", callback: Some(&callback) })
        .await;
    assert_eq!(
        answer,
        Answer::Accepted {
            provider_id: Some("SM0123456789abcdef0123456789abcdef".into()),
            detail: "Twilio took it as SM0123456789abcdef0123456789abcdef (queued)".into(),
        }
    );
    let form = received.lock().unwrap().pop().unwrap();
    let expected: Vec<(String, String)> = [
        ("To", "+14155550101"),
        ("From", "+14155550100"),
        ("Body", "Your code: 123456 €"),
        ("StatusCallback", "https://herald.example/v1/sms/status/twilio"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(form, expected);

    let service = Sender::parse(&format!("messaging_service_sid=MG{}", "ab".repeat(16))).unwrap();
    let answer = client(&addr, TOKEN).send(&Text { to: &to, from: &service, body: "hi", callback: None }).await;
    assert!(answer.accepted(), "{answer:?}");
    let form = received.lock().unwrap().pop().unwrap();
    assert!(form.contains(&("MessagingServiceSid".into(), format!("MG{}", "ab".repeat(16)))), "{form:?}");
    assert!(!form.iter().any(|(k, _)| k == "From" || k == "StatusCallback"), "{form:?}");
}

async fn documented_errors_become_the_documented_answers() {
    let (addr, _received) = double().await;
    let c = client(&addr, TOKEN);
    let from = Sender::parse("Herald").unwrap();
    let send = |to: &'static str| {
        let c = c.clone();
        let from = from.clone();
        async move { c.send(&Text { to: &phone(to), from: &from, body: "hi", callback: None }).await }
    };
    let stopped = send("+14155550110").await;
    assert_eq!(
        stopped,
        Answer::OptedOut {
            reason: "Twilio answered 400, error 21610: Attempt to send to unsubscribed recipient".into()
        }
    );
    let invalid = send("+14155550111").await;
    assert!(matches!(invalid, Answer::AddressInvalid { ref reason } if reason.contains("21211")), "{invalid:?}");
    let limited = send("+14155550112").await;
    assert!(matches!(limited, Answer::Retry { after: Some(d), .. } if d == Duration::from_secs(3)), "{limited:?}");
    let down = send("+14155550113").await;
    assert!(matches!(down, Answer::Retry { after: None, .. }), "{down:?}");

    let wrong = client(&addr, "not-the-token")
        .send(&Text { to: &phone("+14155550101"), from: &from, body: "hi", callback: None })
        .await;
    assert_eq!(wrong, Answer::CredentialRejected { reason: "Twilio answered 401, error 20003: Authenticate".into() });

    // Nothing listening: retried, the provider named.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let gone = client(&closed.to_string(), TOKEN)
        .send(&Text { to: &phone("+14155550101"), from: &from, body: "hi", callback: None })
        .await;
    assert!(
        matches!(gone, Answer::Retry { ref reason, .. } if reason.starts_with("Twilio could not be reached")),
        "{gone:?}"
    );
}

/// Reads `url`, `token`, `params` (a list of pairs) and `signature` as
/// JSON; prints Twilio's signature of the request and whether Twilio's
/// validator accepts the given one.
const VALIDATOR: &str = r#"
import json, sys
from twilio.request_validator import RequestValidator
case = json.load(sys.stdin)
params = {}
for k, v in case["params"]:
    params.setdefault(k, []).append(v)
class Form(dict):
    def getall(self, k):
        return self[k]
form = Form(params)
v = RequestValidator(case["token"])
print(v.compute_signature(case["url"], form))
print(v.validate(case["url"], form, case["signature"]))
"#;

async fn signatures_agree_with_twilios_request_validator() {
    let url = "https://herald.example/v1/sms/status/twilio?row=01J9";
    let params: Vec<(String, String)> = [
        ("MessageSid", "SM0123456789abcdef0123456789abcdef"),
        ("MessageStatus", "undelivered"),
        ("ErrorCode", "30005"),
        ("To", "+14155550101"),
        ("AccountSid", SID),
        ("Body", "Ünïcödé & spaces+plus"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let ours = signature(TOKEN, url, &params);
    let case = json!({"url": url, "token": TOKEN, "params": params, "signature": ours});
    let out = common::python::run("twilio", "twilio", VALIDATOR, &case.to_string());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, vec![ours.as_str(), "True"], "Twilio's validator disagrees");
    assert!(verify_signature(TOKEN, url, &params, lines[0]));

    // A forged signature: Twilio's validator refuses it, and so does ours.
    let forged = signature("another-token", url, &params);
    let case = json!({"url": url, "token": TOKEN, "params": params, "signature": forged});
    let out = common::python::run("twilio", "twilio", VALIDATOR, &case.to_string());
    assert_eq!(out.lines().nth(1), Some("False"));
    assert!(!verify_signature(TOKEN, url, &params, &forged));
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        an_accepted_text_keeps_its_sid_and_sends_the_documented_fields,
        documented_errors_become_the_documented_answers,
        signatures_agree_with_twilios_request_validator,
    ])
}
