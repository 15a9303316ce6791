//! A local double of Slack's `chat.postMessage`, shared by the transport's
//! own tests (`tests/slack.rs`) and the channel's end to end
//! (`tests/slack_channel.rs`). It checks what Slack checks (the bot token
//! as a bearer token, a JSON body with `channel` and `text`) and answers as
//! Slack's documentation says, chosen by the `channel`:
//!
//! | channel     | answer                                     |
//! |-------------|--------------------------------------------|
//! | `U0000GONE` | `ok: false`, `user_not_found`              |
//! | `C0000NONE` | `ok: false`, `channel_not_found`           |
//! | `C0000OLD1` | `ok: false`, `is_archived`                 |
//! | `C0000BUSY` | 429 `ratelimited` with `Retry-After: 7`    |
//! | `U…`        | `ok: true` in the user's DM (`D0000DM01`)  |
//! | other       | `ok: true` in that channel                 |
//!
//! A wrong token is `invalid_auth`, none `not_authed`.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use url::Url;

pub const TOKEN: &str = "xoxb-1234-5678-slacktesttoken";

/// The bodies the double accepted, in order.
pub type Received = Arc<Mutex<Vec<Value>>>;

fn refused(word: &str) -> Response {
    axum::Json(json!({"ok": false, "error": word})).into_response()
}

/// `POST /api/chat.postMessage`, as Slack answers it.
async fn post_message(State(received): State<Received>, headers: HeaderMap, body: String) -> Response {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if bearer != Some(&format!("Bearer {TOKEN}")) {
        return refused(if bearer.is_some() { "invalid_auth" } else { "not_authed" });
    }
    let json_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if !json_type.is_some_and(|t| t.starts_with("application/json")) {
        return refused("invalid_form_data");
    }
    let Ok(message) = serde_json::from_str::<Value>(&body) else { return refused("invalid_json") };
    let (Some(channel), Some(_text)) = (message["channel"].as_str(), message["text"].as_str()) else {
        return refused(if message["channel"].is_string() { "no_text" } else { "channel_not_found" });
    };
    let channel = channel.to_owned();
    received.lock().unwrap().push(message);
    match channel.as_str() {
        "U0000GONE" => refused("user_not_found"),
        "C0000NONE" => refused("channel_not_found"),
        "C0000OLD1" => refused("is_archived"),
        "C0000BUSY" => {
            let mut r = (StatusCode::TOO_MANY_REQUESTS, axum::Json(json!({"ok": false, "error": "ratelimited"})))
                .into_response();
            r.headers_mut().insert("retry-after", "7".parse().unwrap());
            r
        }
        // A DM is posted in the user's D… conversation.
        user if user.starts_with('U') => {
            axum::Json(json!({"ok": true, "channel": "D0000DM01", "ts": "1503435956.000247",
                                                            "message": {"type": "message", "text": "…"}}))
            .into_response()
        }
        other => axum::Json(json!({"ok": true, "channel": other, "ts": "1503435957.000100"})).into_response(),
    }
}

pub async fn double() -> (Url, Received) {
    let received = Received::default();
    let app = Router::new().route("/api/chat.postMessage", post(post_message)).with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (Url::parse(&format!("http://{addr}/api")).unwrap(), received)
}
