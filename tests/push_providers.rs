//! FCM and APNs against local servers that check what Google's and Apple's
//! documentation say their services check, and answer with the error bodies
//! those documents list:
//! - FCM: the OAuth 2.0 JWT bearer grant (an RS256 assertion verified with
//!   the service account's public key: `iss`, `scope`, `aud`, lifetime),
//!   then `messages:send` with the access token it issued and a message of
//!   the documented shape (`data` values strings, `android.ttl` a duration).
//! - APNs over HTTP/2 only: the provider token verified with the `.p8`
//!   key's public key (`kid`, `iss`, `iat` within the hour), `apns-topic`,
//!   `apns-push-type`, `apns-expiration`, `apns-collapse-id` (at most 64
//!   bytes), `apns-priority` and the `aps` body.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, Request, Response, Version};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use herald::delivery::channel::push::apns::{Apns, ApnsSettings};
use herald::delivery::channel::push::fcm::Fcm;
use herald::delivery::channel::push::{DeviceOutcome, PushNotification, Urgency};
use serde_json::{Value, json};

const TEST_KEY: &str = include_str!("push/fcm-test-key.pem");
const OTHER_KEY: &str = include_str!("push/fcm-other-key.pem");

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn notification(id: &str) -> PushNotification {
    PushNotification {
        id: id.to_owned(),
        title: "Your export is ready".into(),
        body: Some("3 files".into()),
        url: Some("https://app.example.com/exports/42".into()),
        data: json!({ "export_id": 42 }),
        ttl: Duration::from_secs(600),
        urgency: Urgency::Normal,
    }
}

/// A compact JWS split and decoded: header, claims, signed input, signature.
fn split_jwt(token: &str) -> (Value, Value, String, Vec<u8>) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let decode = |s: &str| serde_json::from_slice(&URL_SAFE_NO_PAD.decode(s).unwrap()).unwrap();
    (
        decode(parts[0]),
        decode(parts[1]),
        format!("{}.{}", parts[0], parts[1]),
        URL_SAFE_NO_PAD.decode(parts[2]).unwrap(),
    )
}

async fn serve_http1(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

// ---------------------------------------------------------------- FCM ----

const PROJECT: &str = "herald-test";
const CLIENT_EMAIL: &str = "herald@herald-test.iam.gserviceaccount.com";
const KEY_ID: &str = "0123456789abcdef";

#[derive(Default)]
struct FcmState {
    /// The key the token endpoint verifies assertions with.
    public_key: Option<rsa::RsaPublicKey>,
    token_uri: String,
    grants: usize,
    issued: Vec<String>,
    /// Messages accepted, by token.
    sent: BTreeMap<String, Value>,
    /// Why a request was refused as malformed, when one was.
    complaints: Vec<String>,
}

type Shared = Arc<Mutex<FcmState>>;

/// The token endpoint: RFC 7523's grant, as Google's OAuth server checks it.
async fn fcm_token(State(s): State<Shared>, Form(form): Form<BTreeMap<String, String>>) -> Response<Body> {
    use rsa::signature::Verifier;
    let mut s = s.lock().unwrap();
    let refuse = |why: &str| {
        let body = json!({ "error": "invalid_grant", "error_description": why }).to_string();
        Response::builder().status(400).body(Body::from(body)).unwrap()
    };
    if form.get("grant_type").map(String::as_str) != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return refuse("Invalid grant_type");
    }
    let (header, claims, signed, signature) = split_jwt(form.get("assertion").map_or("", |a| a.as_str()));
    let key = rsa::pkcs1v15::VerifyingKey::<rsa::sha2::Sha256>::new(s.public_key.clone().unwrap());
    let sig = rsa::pkcs1v15::Signature::try_from(signature.as_slice()).unwrap();
    if header["alg"] != "RS256" || key.verify(signed.as_bytes(), &sig).is_err() {
        return refuse("Invalid JWT Signature.");
    }
    assert_eq!(header["kid"], KEY_ID);
    assert_eq!(claims["iss"], CLIENT_EMAIL);
    assert_eq!(claims["scope"], "https://www.googleapis.com/auth/firebase.messaging");
    assert_eq!(claims["aud"], s.token_uri.as_str());
    let (iat, exp) = (claims["iat"].as_i64().unwrap(), claims["exp"].as_i64().unwrap());
    assert!((iat - now()).abs() < 60 && exp > iat && exp - iat <= 3600, "iat {iat}, exp {exp}");
    s.grants += 1;
    let token = format!("ya29.test-{}", s.grants);
    s.issued.push(token.clone());
    Json(json!({ "access_token": token, "expires_in": 3599, "token_type": "Bearer" })).into_response()
}

fn fcm_error(status: u16, code: &str, message: &str, error_code: &str, extra: Option<Value>) -> Response<Body> {
    let mut details =
        vec![json!({ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": error_code })];
    details.extend(extra);
    let body = json!({ "error": { "code": status, "message": message, "status": code, "details": details } });
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// `messages:send`: the access token, the message's shape, and an answer
/// per token as FCM gives it.
async fn fcm_send(
    State(s): State<Shared>,
    Path(call): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response<Body> {
    let mut s = s.lock().unwrap();
    assert_eq!(call, "messages:send");
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    if !s.issued.iter().any(|t| bearer == format!("Bearer {t}")) {
        return fcm_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials.",
            "THIRD_PARTY_AUTH_ERROR",
            None,
        );
    }
    let v: Value = serde_json::from_str(&body).unwrap();
    let m = &v["message"];
    let mut complaints = vec![];
    if !m["token"].is_string() {
        complaints.push("message.token is not a string".to_owned());
    }
    if !m["notification"]["title"].is_string() {
        complaints.push("message.notification.title is not a string".to_owned());
    }
    if !m["data"].as_object().is_some_and(|d| d.values().all(Value::is_string)) {
        complaints.push(format!("message.data values must be strings: {}", m["data"]));
    }
    let ttl = m["android"]["ttl"].as_str().unwrap_or("");
    if !(ttl.ends_with('s') && ttl.trim_end_matches('s').parse::<f64>().is_ok()) {
        complaints.push(format!("Invalid value at 'message.android.ttl' ({ttl})"));
    }
    if !complaints.is_empty() {
        s.complaints.extend(complaints.clone());
        return fcm_error(400, "INVALID_ARGUMENT", &complaints.join("; "), "INVALID_ARGUMENT", None);
    }
    let token = m["token"].as_str().unwrap().to_owned();
    match token.as_str() {
        "tok-unregistered" => fcm_error(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED", None),
        "tok-invalid" => fcm_error(
            400,
            "INVALID_ARGUMENT",
            "The registration token is not a valid FCM registration token",
            "INVALID_ARGUMENT",
            Some(json!({ "@type": "type.googleapis.com/google.rpc.BadRequest",
                         "fieldViolations": [{ "field": "message.token", "description": "Invalid registration token" }] })),
        ),
        "tok-quota" => {
            let mut r = fcm_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", "QUOTA_EXCEEDED", None);
            r.headers_mut().insert("retry-after", "7".parse().unwrap());
            r
        }
        _ => {
            s.sent.insert(token, v.clone());
            Json(json!({ "name": format!("projects/{PROJECT}/messages/{}", s.sent.len()) })).into_response()
        }
    }
}

/// A local FCM with its token endpoint; the service-account JSON that
/// points at it, signed with `key_pem`.
async fn fcm_server(key_pem: &str) -> (Shared, Fcm) {
    use rsa::pkcs8::DecodePrivateKey;
    let state: Shared = Arc::default();
    let app = Router::new()
        .route("/token", post(fcm_token))
        .route("/v1/projects/herald-test/{call}", post(fcm_send))
        .with_state(state.clone());
    let addr = serve_http1(app).await;
    let token_uri = format!("http://{addr}/token");
    {
        let mut s = state.lock().unwrap();
        s.public_key = Some(rsa::RsaPrivateKey::from_pkcs8_pem(TEST_KEY).unwrap().to_public_key());
        s.token_uri = token_uri.clone();
    }
    let account = json!({
        "type": "service_account", "project_id": PROJECT, "private_key_id": KEY_ID, "private_key": key_pem,
        "client_email": CLIENT_EMAIL, "client_id": "1", "token_uri": token_uri,
    });
    let fcm = Fcm::from_json(&account.to_string(), &format!("http://{addr}"), Duration::from_secs(10)).unwrap();
    (state, fcm)
}

#[tokio::test]
async fn fcm_sends_with_a_cached_oauth_token_and_the_documented_shape() {
    let (state, fcm) = fcm_server(TEST_KEY).await;
    let n = notification("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    let outcome = fcm.send("tok-ada", &n).await;
    assert_eq!(outcome, DeviceOutcome::Accepted { message_id: Some("projects/herald-test/messages/1".into()) });
    assert!(matches!(fcm.send("tok-bob", &notification("n2")).await, DeviceOutcome::Accepted { .. }));
    let s = state.lock().unwrap();
    assert!(s.complaints.is_empty(), "{:?}", s.complaints);
    assert_eq!(s.grants, 1, "the access token is cached until it expires");
    let m = &s.sent["tok-ada"]["message"];
    assert_eq!(m["notification"], json!({ "title": "Your export is ready", "body": "3 files" }));
    assert_eq!(m["data"]["id"], "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    assert_eq!(m["data"]["url"], "https://app.example.com/exports/42");
    assert_eq!(serde_json::from_str::<Value>(m["data"]["data"].as_str().unwrap()).unwrap(), json!({ "export_id": 42 }));
    assert_eq!(m["android"]["ttl"], "600s");
    assert_eq!(m["android"]["collapse_key"], n.collapse_key());
    assert_eq!(m["android"]["notification"]["tag"], n.collapse_key(), "replaces a copy already shown");
    assert_eq!(m["webpush"]["headers"]["Topic"], n.collapse_key());
    assert_eq!(m["webpush"]["fcm_options"]["link"], "https://app.example.com/exports/42");
    assert_eq!(m["apns"]["headers"]["apns-collapse-id"], n.collapse_key());
}

#[tokio::test]
async fn fcm_errors_are_read_as_google_documents_them() {
    let (_state, fcm) = fcm_server(TEST_KEY).await;
    let n = notification("n1");
    let gone = fcm.send("tok-unregistered", &n).await;
    assert_eq!(
        gone,
        DeviceOutcome::DeviceGone { reason: "FCM answered 404: UNREGISTERED Requested entity was not found.".into() }
    );
    let invalid = fcm.send("tok-invalid", &n).await;
    assert!(
        matches!(&invalid, DeviceOutcome::DeviceGone { reason } if reason.contains("not a valid FCM registration token")),
        "{invalid:?}"
    );
    let quota = fcm.send("tok-quota", &n).await;
    assert!(matches!(quota, DeviceOutcome::Retry { after: Some(d), .. } if d == Duration::from_secs(7)), "{quota:?}");
}

#[tokio::test]
async fn a_revoked_fcm_access_token_is_replaced_once() {
    let (state, fcm) = fcm_server(TEST_KEY).await;
    assert!(matches!(fcm.send("tok-ada", &notification("n1")).await, DeviceOutcome::Accepted { .. }));
    // Google revokes the token before its expiry: the next send is
    // refused with it, makes a new grant and goes through.
    state.lock().unwrap().issued.clear();
    assert!(matches!(fcm.send("tok-bob", &notification("n2")).await, DeviceOutcome::Accepted { .. }));
    assert_eq!(state.lock().unwrap().grants, 2);
    assert!(state.lock().unwrap().sent.contains_key("tok-bob"));
}

#[tokio::test]
async fn an_fcm_assertion_signed_with_another_key_is_a_rejected_credential() {
    let (state, fcm) = fcm_server(OTHER_KEY).await;
    let outcome = fcm.send("tok-ada", &notification("n1")).await;
    let DeviceOutcome::CredentialRejected { reason } = &outcome else { panic!("{outcome:?}") };
    assert!(reason.contains("400") && reason.contains("Invalid JWT Signature."), "{reason}");
    assert!(state.lock().unwrap().sent.is_empty());
}

// --------------------------------------------------------------- APNs ----

const TEAM_ID: &str = "TEAM123456";
const APNS_KEY_ID: &str = "KEY9876543";
const TOPIC: &str = "com.example.herald";

struct ApnsCheck {
    key: p256::ecdsa::VerifyingKey,
    received: Mutex<Vec<(String, HeaderMap, Value)>>,
}

fn apns_reply(status: u16, reason: &str) -> Response<Body> {
    let body = if status == 410 {
        json!({ "reason": reason, "timestamp": now() * 1000 })
    } else {
        json!({ "reason": reason })
    };
    Response::builder()
        .status(status)
        .header("apns-id", "0193a1b2-0000-7000-8000-000000000000")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// One APNs request, checked as Apple documents it.
async fn apns_handle(check: Arc<ApnsCheck>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    use p256::ecdsa::signature::Verifier;
    assert_eq!(req.version(), Version::HTTP_2, "APNs speaks HTTP/2 only");
    assert_eq!(req.method(), "POST");
    let token = req.uri().path().strip_prefix("/3/device/").unwrap_or_else(|| panic!("path {}", req.uri())).to_owned();
    let h = req.headers().clone();
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let Some(jwt) = get("authorization").strip_prefix("bearer ").map(str::to_owned) else {
        return apns_reply(403, "MissingProviderToken");
    };
    let (header, claims, signed, signature) = split_jwt(&jwt);
    let sig = p256::ecdsa::Signature::from_slice(&signature).unwrap();
    if header["alg"] != "ES256" || header["kid"] != APNS_KEY_ID || check.key.verify(signed.as_bytes(), &sig).is_err() {
        return apns_reply(403, "InvalidProviderToken");
    }
    if claims["iss"] != TEAM_ID || (now() - claims["iat"].as_i64().unwrap()).abs() > 3600 {
        return apns_reply(403, "ExpiredProviderToken");
    }
    if get("apns-topic") != TOPIC {
        return apns_reply(400, "DeviceTokenNotForTopic");
    }
    if get("apns-push-type") != "alert" {
        return apns_reply(400, "InvalidPushType");
    }
    if get("apns-expiration").parse::<i64>().is_err() {
        return apns_reply(400, "BadExpirationDate");
    }
    if get("apns-collapse-id").len() > 64 {
        return apns_reply(400, "BadCollapseId");
    }
    if !["5", "10"].contains(&get("apns-priority").as_str()) {
        return apns_reply(400, "BadPriority");
    }
    let bytes = axum::body::to_bytes(Body::new(req.into_body()), 1 << 20).await.unwrap();
    if bytes.len() > 4096 {
        return apns_reply(413, "PayloadTooLarge");
    }
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    if !body["aps"]["alert"]["title"].is_string() {
        return apns_reply(400, "PayloadEmpty");
    }
    match token.as_str() {
        "0bad" => apns_reply(400, "BadDeviceToken"),
        "0dead" => apns_reply(410, "Unregistered"),
        _ => {
            let id = get("apns-id");
            check.received.lock().unwrap().push((token, h, body));
            Response::builder().status(200).header("apns-id", id).body(Body::empty()).unwrap()
        }
    }
}

/// An HTTP/2-only server on 127.0.0.1 (cleartext, prior knowledge).
async fn apns_server(check: Arc<ApnsCheck>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let check = check.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let check = check.clone();
                    async move { Ok::<_, std::convert::Infallible>(apns_handle(check, req).await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn p8_key() -> (String, p256::ecdsa::VerifyingKey) {
    use p256::pkcs8::EncodePrivateKey;
    let key = p256::SecretKey::from_slice(&rand::random::<[u8; 32]>()).unwrap();
    let pem = key.to_pkcs8_pem(Default::default()).unwrap().to_string();
    (pem, p256::ecdsa::VerifyingKey::from(key.public_key()))
}

async fn apns_pair() -> (Arc<ApnsCheck>, Apns, Apns) {
    let (pem, public) = p8_key();
    let check = Arc::new(ApnsCheck { key: public, received: Mutex::new(vec![]) });
    let endpoint = format!("http://{}", apns_server(check.clone()).await);
    let settings = |pem| ApnsSettings {
        key_pem: pem,
        key_id: APNS_KEY_ID,
        team_id: TEAM_ID,
        topic: TOPIC,
        endpoint: &endpoint,
        timeout: Duration::from_secs(10),
    };
    let good = Apns::new(&settings(&pem)).unwrap();
    let (other_pem, _) = p8_key();
    let wrong = Apns::new(&settings(&other_pem)).unwrap();
    (check, good, wrong)
}

#[tokio::test]
async fn apns_sends_over_http2_with_a_verified_provider_token() {
    let (check, apns, _) = apns_pair().await;
    let n = notification("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    let outcome = apns.send("a1b2c3", &n).await;
    assert_eq!(outcome, DeviceOutcome::Accepted { message_id: Some("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into()) });
    let mut low = notification("n2");
    low.urgency = Urgency::Low;
    assert!(matches!(apns.send("a1b2c3", &low).await, DeviceOutcome::Accepted { .. }));
    let received = check.received.lock().unwrap();
    assert_eq!(received.len(), 2);
    let (token, h, body) = &received[0];
    assert_eq!(token, "a1b2c3");
    assert_eq!(h["apns-collapse-id"], n.collapse_key().as_str());
    assert_eq!(h["apns-priority"], "10");
    assert_eq!(received[1].1["apns-priority"], "5");
    let expiration: i64 = h["apns-expiration"].to_str().unwrap().parse().unwrap();
    assert!((expiration - (now() + 600)).abs() <= 5, "{expiration}");
    assert_eq!(body["aps"], json!({ "alert": { "title": "Your export is ready", "body": "3 files" } }));
    assert_eq!(body["id"], "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    assert_eq!(body["url"], "https://app.example.com/exports/42");
    assert_eq!(body["data"], json!({ "export_id": 42 }));
    // One provider token for both: it is reused, not signed per message.
    assert_eq!(received[0].1["authorization"], received[1].1["authorization"]);
}

#[tokio::test]
async fn apns_errors_are_read_as_apple_documents_them() {
    let (_check, apns, wrong) = apns_pair().await;
    let n = notification("n1");
    assert_eq!(
        apns.send("0bad", &n).await,
        DeviceOutcome::DeviceGone { reason: "APNs answered 400: BadDeviceToken".into() }
    );
    assert_eq!(
        apns.send("0dead", &n).await,
        DeviceOutcome::DeviceGone { reason: "APNs answered 410: Unregistered".into() }
    );
    assert_eq!(
        wrong.send("a1b2c3", &n).await,
        DeviceOutcome::CredentialRejected { reason: "APNs answered 403: InvalidProviderToken".into() }
    );
    let mut large = notification("n-large");
    large.data = json!({ "blob": "x".repeat(4100) });
    let outcome = apns.send("a1b2c3", &large).await;
    assert!(
        matches!(&outcome, DeviceOutcome::TooLarge { reason } if reason.contains("4096-byte limit")),
        "{outcome:?}"
    );
}
