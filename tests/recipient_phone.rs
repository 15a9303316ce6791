//! Phone numbers and Slack ids on recipients (issue 30, item 1), on all
//! three databases: `PUT /v1/users/{id}` normalises a phone to E.164 and
//! refuses what is not one (naming the field), checks a Slack user id, and
//! clears either with `null` or by leaving it out (a PUT replaces the
//! recipient); a phone is suppressed, listed and lifted by its hash; and
//! `herald sends --phone` finds the user who has the number, with what still
//! waits for them, and the number's suppressions.

mod common;

use common::Backend;
use common::app::App;
use herald::address::AddressKeys;
use herald::store::{RecipientStore, SuppressionStore};
use serde_json::{Value, json};

/// The address secret `common::app::test_config` gives the server.
const SECRET: &str = "a test secret of sufficient length";
const ANN: &str = "+14155550101";

fn keys() -> AddressKeys {
    AddressKeys::from_secret(SECRET.as_bytes())
}

/// The fields a 422 names, in order.
fn fields(problem: &Value) -> Vec<String> {
    problem["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap().to_owned()).collect()
}

async fn phones_and_slack_ids_are_normalised_checked_and_cleared(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let put = |body: Value| app.call(reqwest::Method::PUT, "/v1/users/ann", Some(body));
    let hash = keys().hash_normalized(ANN);

    let (status, body) =
        put(json!({"email": "ann@example.org", "phone": "+1 (415) 555-0101", "slack_user_id": "U024BE7LH"})).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["phone"].as_str(), body["slack_user_id"].as_str()), (Some(ANN), Some("U024BE7LH")));
    let (_, got) = app.get("/v1/users/ann").await;
    assert_eq!((got["phone"].as_str(), got["slack_user_id"].as_str()), (Some(ANN), Some("U024BE7LH")), "{got}");
    assert!(got.get("phone_hash").is_none(), "the hash is not shown: {got}");
    // Found by the phone's hash, whichever way the number was written.
    assert_eq!(app.db.store.users_by_phone_hash(&hash, 10).await.unwrap(), vec!["ann".to_owned()]);

    // Each refusal names its field and what is expected; nothing changes.
    let (status, p) = put(json!({"phone": "12345"})).await;
    assert_eq!((status, fields(&p)), (422, vec!["phone".to_owned()]), "{p}");
    let said = p["errors"][0]["message"].as_str().unwrap();
    assert!(said.contains("E.164") && said.contains("country code") && said.contains("12345"), "{said}");
    for bad in ["+1 212 000 0000", "+1 415 555", "+hello", "+1 415 555 0101 ext. 2"] {
        let (status, p) = put(json!({"phone": bad})).await;
        assert_eq!((status, fields(&p)), (422, vec!["phone".to_owned()]), "{bad}: {p}");
    }
    for bad in ["C024BE7LH", "u024be7lh", "U", "U02 4BE"] {
        let (status, p) = put(json!({"slack_user_id": bad})).await;
        assert_eq!((status, fields(&p)), (422, vec!["slack_user_id".to_owned()]), "{bad}: {p}");
        assert!(p["errors"][0]["message"].as_str().unwrap().contains("U or W"), "{p}");
    }
    let (status, p) = put(json!({"phone": "12345", "slack_user_id": "nope", "email": "nope"})).await;
    assert_eq!((status, fields(&p)), (422, vec!["email".to_owned(), "phone".to_owned(), "slack_user_id".to_owned()]));
    let (_, got) = app.get("/v1/users/ann").await;
    assert_eq!((got["phone"].as_str(), got["slack_user_id"].as_str()), (Some(ANN), Some("U024BE7LH")), "{got}");

    // `null` clears one; a W… (Enterprise Grid) id is taken.
    let (status, body) = put(json!({"email": "ann@example.org", "phone": null, "slack_user_id": "W012A3CDE"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["phone"].clone(), body["slack_user_id"].as_str()), (Value::Null, Some("W012A3CDE")));
    assert!(app.db.store.users_by_phone_hash(&hash, 10).await.unwrap().is_empty(), "the cleared phone's hash went too");
    // Left out, as every field of a PUT: the recipient is replaced.
    let (_, body) = put(json!({"phone": "+44 20 7946 0958", "slack_user_id": "W012A3CDE"})).await;
    assert_eq!(body["phone"], "+442079460958");
    let (status, body) = put(json!({"email": "ann@example.org"})).await;
    assert_eq!(status, 200);
    assert_eq!((body["phone"].clone(), body["slack_user_id"].clone()), (Value::Null, Value::Null), "{body}");
    let (_, got) = app.get("/v1/users/ann").await;
    assert_eq!((got["phone"].clone(), got["slack_user_id"].clone()), (Value::Null, Value::Null), "{got}");
    // Blank is none, as for `email`.
    let (status, body) = put(json!({"phone": " ", "slack_user_id": ""})).await;
    assert_eq!((status, body["phone"].clone()), (200, Value::Null), "{body}");
    app.stop().await;
}

async fn a_phone_is_suppressed_listed_and_lifted_by_its_hash(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let hash = keys().hash_normalized(ANN);

    let (status, body) =
        app.post("/v1/suppressions", json!({"phone": "+1 (415) 555-0101", "detail": "texted STOP"})).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["address_hash"].as_str(), body["address_kind"].as_str()), (Some(hash.as_str()), Some("phone")));
    assert!(!body.to_string().contains("5550101"), "the number is never echoed or stored: {body}");
    let (status, body) = app.post("/v1/suppressions", json!({"phone": ANN, "reason": "complaint"})).await;
    assert_eq!((status, body["reason"].as_str()), (200, Some("complaint")), "the same number, the same hash: {body}");
    let stopped = app.db.store.active_suppression(&hash, Some("news"), herald::clock::Millis(i64::MAX / 2)).await;
    assert_eq!(stopped.unwrap().map(|s| s.address_kind), Some(herald::address::AddressKind::Phone));

    // One of email and phone: both or neither is a 422 naming the two.
    for body in [json!({"email": "ann@example.org", "phone": ANN}), json!({}), json!({"email": null, "phone": null})] {
        let (status, p) = app.post("/v1/suppressions", body.clone()).await;
        assert_eq!((status, fields(&p)), (422, vec!["email".to_owned(), "phone".to_owned()]), "{body}: {p}");
    }
    let (status, p) = app.post("/v1/suppressions", json!({"phone": "12345"})).await;
    assert_eq!((status, fields(&p)), (422, vec!["phone".to_owned()]), "{p}");
    assert!(p["errors"][0]["message"].as_str().unwrap().contains("country code"), "{p}");

    // The list says which kind each hash is of.
    assert_eq!(app.post("/v1/suppressions", json!({"email": "ann@example.org"})).await.0, 201);
    let (_, list) = app.get("/v1/suppressions").await;
    let mut kinds: Vec<&str> =
        list["suppressions"].as_array().unwrap().iter().map(|s| s["address_kind"].as_str().unwrap()).collect();
    kinds.sort();
    assert_eq!(kinds, vec!["email", "phone"], "{list}");
    let (status, one) = app.get("/v1/suppressions?phone=%2B1%20415%20555%200101").await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["suppressions"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["suppressions"][0]["address_kind"], "phone");
    let (status, p) = app.get(&format!("/v1/suppressions?phone=%2B14155550101&address_hash={hash}")).await;
    assert_eq!((status, fields(&p)), (422, vec!["phone".to_owned()]), "{p}");

    let (status, lifted) = app.call(reqwest::Method::DELETE, "/v1/suppressions?phone=%2B14155550101", None).await;
    assert_eq!((status, lifted["lifted"].as_u64()), (200, Some(1)), "{lifted}");
    assert!(app.db.store.list_suppressions(Some(&hash), 10).await.unwrap().is_empty());
    app.stop().await;
}

/// `herald sends ARGS --json` (or text) against the service's database.
fn herald_sends(db_url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("sends")
        .args(args)
        .env("HERALD_DATABASE_URL", db_url)
        .env("HERALD_EMAIL__ADDRESS_SECRET", SECRET)
        .env("HERALD_LOG", "warn")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run herald sends")
}

async fn sends_by_phone_finds_the_user_what_waits_and_the_suppressions(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let rule = json!({
        "name": "Later", "trigger_type": "later", "channel": "inbox", "category": "news", "delay": 3600,
        "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Later", "text": "t"}}}
    });
    assert_eq!(app.post("/v1/rules", rule).await.0, 201);
    let (status, _) = app.call(reqwest::Method::PUT, "/v1/users/ann", Some(json!({"phone": "+1 415 555 0101"}))).await;
    assert_eq!(status, 201);
    let (status, body) = app.post("/v1/triggers", json!({"type": "later", "user_id": "ann"})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(app.post("/v1/suppressions", json!({"phone": ANN, "category": "news"})).await.0, 201);

    let out = herald_sends(&app.db.url, &["--phone", "+1 (415) 555-0101", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let found: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(found["address_hash"], keys().hash_normalized(ANN).as_str());
    assert_eq!(found["users"][0]["user_id"], "ann", "{found}");
    let pending = found["users"][0]["pending"].as_array().unwrap();
    assert_eq!((pending.len(), pending[0]["status"].as_str()), (1, Some("scheduled")), "{found}");
    assert_eq!(found["suppressions"][0]["address_kind"], "phone", "{found}");

    let out = herald_sends(&app.db.url, &["--phone", ANN]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("user ann has this number; not yet delivered (1):"), "{text}");
    assert!(text.contains("category news"), "the suppression is listed: {text}");
    let out = herald_sends(&app.db.url, &["--phone", "+44 20 7946 0958"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no user has this number"));

    // A number without its country code is refused, naming the flag.
    let out = herald_sends(&app.db.url, &["--phone", "4155550101"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("--phone") && said.contains("country code"), "{said}");
    let out = herald_sends(&app.db.url, &["--phone", ANN, "--address", "ann@example.org"]);
    assert!(!out.status.success(), "--phone and --address together are refused");
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(per_backend_tests![
        phones_and_slack_ids_are_normalised_checked_and_cleared,
        a_phone_is_suppressed_listed_and_lifted_by_its_hash,
        sends_by_phone_finds_the_user_what_waits_and_the_suppressions,
    ])
}
