//! The webhook channel against a local receiver: signatures verify with the
//! Standard Webhooks reference library, and each response class leads to the
//! outcome a user would expect.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::{Backend, T0, TestDb, webhook_delivery};
use herald::delivery::channel::webhook::{SigningSecret, WebhookChannel, WebhookPolicy};
use herald::delivery::channel::{Channel, Outcome};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The payload the tests deliver.
const ORDER: &str = r#"{"order": 42}"#;

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver on 127.0.0.1 that records what it got and answers by path.
async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    async fn record(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> StatusCode {
        seen.lock().unwrap().push((headers, body));
        StatusCode::NO_CONTENT
    }
    let app = Router::new()
        .route("/ok", post(record))
        .route("/busy", post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "try later") }))
        .route("/limited", post(|| async { (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "7")], "slow down") }))
        .route("/gone", post(|| async { (StatusCode::NOT_FOUND, format!("no such hook {}", "x".repeat(500))) }))
        .route("/moved", post(|| async { (StatusCode::MOVED_PERMANENTLY, [("location", "http://10.0.0.1/")]) }))
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                StatusCode::OK
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

fn channel(allow_private: bool, timeout: Duration) -> WebhookChannel {
    WebhookChannel::new(
        SigningSecret::parse(SECRET).unwrap(),
        WebhookPolicy { allow_private_networks: allow_private },
        timeout,
    )
}

#[tokio::test]
async fn a_delivered_event_verifies_with_the_reference_implementation() {
    let (base, seen) = receiver().await;
    let outcome = channel(true, Duration::from_secs(5)).deliver(&webhook_delivery(&format!("{base}/ok"), ORDER)).await;
    assert!(matches!(outcome, Outcome::Sent { .. }), "{outcome:?}");
    let (headers, body) = seen.lock().unwrap().remove(0);
    assert_eq!(headers["webhook-id"], "msg_01a23720-c5ee-76eb-bb34-dc5abfe75cd5", "stable per outbox row");
    let wh = standardwebhooks::Webhook::new(SECRET).unwrap();
    wh.verify(&body, &headers).expect("the reference library accepts the signature");
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event["type"], "message.created");
    assert_eq!(event["data"]["outbox_id"], "01a23720-c5ee-76eb-bb34-dc5abfe75cd5");
    assert_eq!(event["data"]["payload"]["order"], 42);

    // And a body changed in transit does not verify.
    let mut tampered = body.to_vec();
    tampered[10] ^= 1;
    assert!(wh.verify(&tampered, &headers).is_err());
}

/// A secret rotation as Standard Webhooks allows it. With
/// `webhook.signing_secret` a list, every delivery carries one signature per
/// secret, so receivers still on the old secret and those already on the
/// new one both verify it, and none has to move at the same moment.
#[tokio::test]
async fn during_a_rotation_either_secret_verifies_a_delivery() {
    use herald::delivery::channel::Lookup;
    use herald::delivery::channel::webhook::SecretList;
    const NEW: &str = "whsec_dGhlIG5ldyBzZWNyZXQsIDMyIGJ5dGVzIGxvbmch";
    let (base, seen) = receiver().await;
    let mut config = herald::config::Config::default();
    config.webhook.signing_secret = Some(SecretList::Many(vec![NEW.into(), SECRET.into()]));
    config.webhook.allow_private_networks = true;
    config.validate().expect("a list of secrets is a valid configuration");
    let registry = herald::app::configured_registry(&config, Default::default());
    let Lookup::Ready(webhook) = registry.lookup("webhook") else { panic!("the webhook channel is configured") };
    let outcome = webhook.deliver(&webhook_delivery(&format!("{base}/ok"), ORDER)).await;
    assert!(matches!(outcome, Outcome::Sent { .. }), "{outcome:?}");

    let (headers, body) = seen.lock().unwrap().remove(0);
    let signatures: Vec<&str> = headers["webhook-signature"].to_str().unwrap().split(' ').collect();
    assert_eq!(signatures.len(), 2, "one signature per secret, space-separated: {signatures:?}");
    assert!(signatures.iter().all(|s| s.starts_with("v1,")), "{signatures:?}");
    for secret in [SECRET, NEW] {
        standardwebhooks::Webhook::new(secret).unwrap().verify(&body, &headers).expect("either secret verifies");
    }
    let stranger = "whsec_YW5vdGhlciBkZXBsb3ltZW50J3Mgc2VjcmV0IGtleQ==";
    assert!(standardwebhooks::Webhook::new(stranger).unwrap().verify(&body, &headers).is_err());

    // After the rotation the old secret is dropped from the list, and its
    // signature with it.
    config.webhook.signing_secret = Some(SecretList::Many(vec![NEW.into()]));
    let registry = herald::app::configured_registry(&config, Default::default());
    let Lookup::Ready(webhook) = registry.lookup("webhook") else { panic!() };
    assert!(matches!(webhook.deliver(&webhook_delivery(&format!("{base}/ok"), ORDER)).await, Outcome::Sent { .. }));
    let (headers, body) = seen.lock().unwrap().remove(0);
    assert!(standardwebhooks::Webhook::new(NEW).unwrap().verify(&body, &headers).is_ok());
    assert!(standardwebhooks::Webhook::new(SECRET).unwrap().verify(&body, &headers).is_err(), "the old one is gone");
}

#[tokio::test]
async fn each_response_class_leads_to_its_outcome() {
    let (base, _) = receiver().await;
    let ch = channel(true, Duration::from_millis(300));
    let outcome = |path: &'static str| {
        let d = webhook_delivery(&format!("{base}{path}"), ORDER);
        let ch = &ch;
        async move { ch.deliver(&d).await }
    };
    match outcome("/busy").await {
        Outcome::Retry { detail, .. } => assert_eq!(detail, "the receiver answered 503 Service Unavailable: try later"),
        other => panic!("503 must retry: {other:?}"),
    }
    // 429 retries when the receiver said, not after the flat interval.
    let limited = outcome("/limited").await;
    assert!(matches!(limited, Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(7)), "{limited:?}");
    match outcome("/slow").await {
        Outcome::Retry { detail, .. } => assert!(detail.contains("did not answer in time"), "{detail}"),
        other => panic!("a timeout must retry: {other:?}"),
    }
    match outcome("/gone").await {
        Outcome::Terminal { detail, .. } => {
            assert!(detail.starts_with("the receiver answered 404 Not Found: no such hook"), "{detail}");
            assert!(detail.len() < 300, "the body excerpt is bounded: {}", detail.len());
        }
        other => panic!("404 is terminal: {other:?}"),
    }
    match outcome("/moved").await {
        Outcome::Terminal { detail, .. } => assert!(detail.contains("redirects are not followed"), "{detail}"),
        other => panic!("a redirect is not followed: {other:?}"),
    }
    // Nobody listening: a passing failure.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let d = webhook_delivery(&format!("http://{closed}/x"), ORDER);
    assert!(matches!(ch.deliver(&d).await, Outcome::Retry { .. }));
}

#[tokio::test]
async fn private_targets_are_refused_unless_allowed() {
    let (base, seen) = receiver().await;
    let strict = channel(false, Duration::from_secs(1));
    for url in [format!("{base}/ok"), "http://localhost:1/ok".to_owned(), "http://169.254.169.254/".to_owned()] {
        match strict.deliver(&webhook_delivery(&url, ORDER)).await {
            Outcome::Terminal { detail, .. } => assert!(detail.contains("loopback, private"), "{detail}"),
            other => panic!("{url} must be refused: {other:?}"),
        }
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent");
}

#[test]
fn a_rule_naming_a_private_address_is_refused_when_saved() {
    let input: herald::planning::rule::RuleInput = serde_json::from_value(serde_json::json!({
        "name": "hook", "trigger_type": "x", "channel": "webhook", "category": "c",
        "webhook_url": "http://10.0.0.5/hook",
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}}
    }))
    .unwrap();
    let errors = input.clone().into_row(T0, &WebhookPolicy::default()).unwrap_err();
    assert_eq!(errors[0].field, "webhook_url");
    assert!(errors[0].message.contains("private"), "{errors:?}");
    assert!(input.into_row(T0, &WebhookPolicy { allow_private_networks: true }).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_reaches_the_receiver_through_rule_planner_and_worker() {
    use herald::clock::{Clock, SystemClock};
    use herald::store::RuleStore;
    let (base, seen) = receiver().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let mut config = herald::config::Config::default();
    config.webhook.signing_secret = Some(SECRET.into());
    config.webhook.allow_private_networks = true;
    let input: herald::planning::rule::RuleInput = serde_json::from_value(serde_json::json!({
        "name": "hook", "trigger_type": "order.shipped", "channel": "webhook", "category": "orders",
        "enabled": true, "webhook_url": format!("{base}/ok"),
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Order {{ payload.order }} shipped", "text": "t"}}}
    }))
    .unwrap();
    db.store.insert_rule(&input.into_row(SystemClock.now(), &config.webhook.policy()).unwrap()).await.unwrap();
    let store = db.arc();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let trigger = herald::store::NewTrigger {
        id: "trig-9".into(),
        trigger_type: "order.shipped".into(),
        user_id: common::user("u-9"),
        payload: serde_json::json!({"order": 9}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: clock.now(),
        send_at: None,
        actor_id: None,
    };
    store.insert_trigger(&trigger, clock.now()).await.unwrap();
    let planner = herald::planning::planner::Planner::new(store.clone(), clock.clone(), Duration::from_secs(1), 10);
    assert_eq!(planner.tick().await.unwrap(), 1);
    let worker = herald::delivery::worker::Worker::new(herald::delivery::worker::WorkerParts {
        store: store.clone(),
        registry: herald::app::configured_registry(&config, Default::default()),
        clock,
        config: herald::delivery::worker::WorkerConfig::default(),
        metrics: herald::metrics::Metrics::new(),
        address_keys: None,
        lease: None,
    });
    assert_eq!(worker.tick().await.unwrap().sent, 1);
    let (headers, body) = seen.lock().unwrap().remove(0);
    standardwebhooks::Webhook::new(SECRET).unwrap().verify(&body, &headers).unwrap();
    let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event["data"]["subject"], "Order 9 shipped", "the rendered template rides along");
    let log = store.sends_for_user(&common::user("u-9"), 10).await.unwrap();
    assert_eq!((log[0].status.as_str(), log[0].transport.as_deref()), ("sent", Some("webhook")));
    db.cleanup().await;
}
