//! A local double of Twilio's Messages API, shared by the transport's own
//! tests (`tests/twilio.rs`) and the channel's end to end (`tests/sms.rs`).
//! It checks what Twilio checks (Basic auth with the account SID and auth
//! token, the account in the path, the form fields) and answers with
//! Twilio's documented bodies, chosen by the `To` number:
//!
//! | To             | answer                                   |
//! |----------------|------------------------------------------|
//! | `+14155550110` | 400, 21610 (the recipient replied STOP)  |
//! | `+14155550111` | 400, 21211 (invalid `To`)                |
//! | `+14155550112` | 429, 20429 with `Retry-After: 3`         |
//! | `+14155550113` | 503 without Twilio's JSON                |
//! | anything else  | 201 with the message, `SM0123…`, queued  |

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use serde_json::json;

pub const SID: &str = "AC0123456789abcdef0123456789abcdef";
pub const TOKEN: &str = "twilio-test-auth-token";

/// The forms the double accepted, in order.
pub type Received = Arc<Mutex<Vec<Vec<(String, String)>>>>;

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    let body = json!({"code": code, "message": message,
                      "more_info": format!("https://www.twilio.com/docs/errors/{code}"), "status": status.as_u16()});
    (status, axum::Json(body)).into_response()
}

/// `POST /2010-04-01/Accounts/{sid}/Messages.json`, as Twilio answers it.
async fn messages(
    State(received): State<Received>,
    Path(account): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{SID}:{TOKEN}")));
    if headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) != Some(expected.as_str()) || account != SID {
        return error(StatusCode::UNAUTHORIZED, 20003, "Authenticate");
    }
    if headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) != Some("application/x-www-form-urlencoded") {
        return error(StatusCode::BAD_REQUEST, 20001, "the body must be a form");
    }
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let senders = form.iter().filter(|(k, _)| k == "From" || k == "MessagingServiceSid").count();
    let (Some(to), Some(text), 1) = (field("To"), field("Body"), senders) else {
        return error(
            StatusCode::BAD_REQUEST,
            21604,
            "A 'To', a 'Body' and one of 'From' or 'MessagingServiceSid' are required",
        );
    };
    received.lock().unwrap().push(form.clone());
    match to.as_str() {
        "+14155550110" => error(StatusCode::BAD_REQUEST, 21610, "Attempt to send to unsubscribed recipient"),
        "+14155550111" => error(StatusCode::BAD_REQUEST, 21211, &format!("Invalid 'To' Phone Number: {to}")),
        "+14155550112" => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, 20429, "Too Many Requests");
            r.headers_mut().insert("retry-after", "3".parse().unwrap());
            r
        }
        "+14155550113" => (StatusCode::SERVICE_UNAVAILABLE, "upstream unavailable").into_response(),
        _ => (
            StatusCode::CREATED,
            axum::Json(json!({"sid": "SM0123456789abcdef0123456789abcdef", "account_sid": SID, "to": to,
                              "from": field("From"), "messaging_service_sid": field("MessagingServiceSid"),
                              "body": text, "status": "queued", "num_segments": "1", "error_code": null})),
        )
            .into_response(),
    }
}

pub async fn double() -> (String, Received) {
    let received = Received::default();
    let app = Router::new()
        .route("/2010-04-01/Accounts/{account}/Messages.json", post(messages))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr.to_string(), received)
}

/// A Twilio delivery report for outbox row `outbox_id` (user `u1`, SMS) as
/// the status callback records it: evidence whose `fingerprint` is the
/// character repeated, `status` also the send-log row it adds.
pub fn delivery_report(
    outbox_id: &str,
    fingerprint: &str,
    status: &'static str,
    detail: &str,
    address_hash: Option<&str>,
) -> herald::store::NewBounce {
    herald::store::NewBounce {
        fingerprint: fingerprint.repeat(64),
        provider: "twilio".into(),
        kind: "delivery_report".into(),
        address_hash: address_hash.map(str::to_owned),
        status: Some(status.into()),
        reply_code: None,
        detail: detail.into(),
        raw_excerpt: String::new(),
        matched: Some(herald::store::MatchedSend {
            outbox_id: outbox_id.into(),
            rule_id: None,
            trigger_id: None,
            user_id: "u1".into(),
            channel: "sms".into(),
            matched_by: "callback",
        }),
        send_status: Some(status),
        provider_id: Some("SM0123".into()),
        suppress: None,
    }
}
