//! `engagement_suppressions` on every backend, and `/v1/suppressions`.

mod common;

use std::time::Duration;

use common::app::App;
use common::{T0, TestDb};
use herald::address::AddressKeys;
use herald::store::{Lift, SuppressionReason, SuppressionRow, SuppressionStore};
use serde_json::{Value, json};

const LIFT: Lift<'static> = Lift { reason: Some("test"), by: "tests", audit: false };

fn row(hash: &str, category: &str, reason: SuppressionReason) -> SuppressionRow {
    SuppressionRow {
        address_hash: hash.into(),
        address_kind: herald::address::AddressKind::Email,
        category: category.into(),
        reason,
        detail: Some(format!("{reason} test")),
        created_at: T0,
        expires_at: None,
    }
}

async fn suppress_is_idempotent_and_scoped(db: &TestDb) {
    let s = &db.store;
    let h = "a".repeat(64);
    assert!(s.suppress(&row(&h, "news", SuppressionReason::Unsubscribe)).await.unwrap());
    assert!(!s.suppress(&row(&h, "news", SuppressionReason::Unsubscribe)).await.unwrap());
    // One category: news is suppressed, billing is not.
    let found = s.active_suppression(&h, Some("news"), T0).await.unwrap().unwrap();
    assert_eq!((found.reason, found.category.as_str()), (SuppressionReason::Unsubscribe, "news"));
    assert!(s.active_suppression(&h, Some("billing"), T0).await.unwrap().is_none());
    assert!(s.active_suppression(&h, None, T0).await.unwrap().is_none());
    // `*` covers everything, and is the one reported.
    assert!(s.suppress(&row(&h, "*", SuppressionReason::HardBounce)).await.unwrap());
    for c in [Some("news"), Some("billing"), None] {
        let found = s.active_suppression(&h, c, T0).await.unwrap().unwrap();
        assert_eq!(found.reason, SuppressionReason::HardBounce, "{c:?}");
    }
    assert_eq!(s.list_suppressions(Some(&h), 10).await.unwrap().len(), 2);
    // Lifting one category, then the rest.
    assert_eq!(s.lift_suppression(&h, Some("news"), &LIFT, T0).await.unwrap(), 1);
    assert_eq!(s.lift_suppression(&h, None, &LIFT, T0).await.unwrap(), 1);
    assert_eq!(s.lift_suppression(&h, None, &LIFT, T0).await.unwrap(), 0);
    assert!(s.active_suppression(&h, Some("news"), T0).await.unwrap().is_none());
}

async fn expired_suppressions_no_longer_apply(db: &TestDb) {
    let s = &db.store;
    let h = "b".repeat(64);
    let mut r = row(&h, "*", SuppressionReason::Manual);
    r.expires_at = Some(T0.plus(Duration::from_secs(60)));
    s.suppress(&r).await.unwrap();
    assert!(s.active_suppression(&h, Some("x"), T0).await.unwrap().is_some());
    assert!(s.active_suppression(&h, Some("x"), T0.plus(Duration::from_secs(61))).await.unwrap().is_none());
    // Suppressing again replaces reason, detail and expiry; keeps created_at.
    let mut again = row(&h, "*", SuppressionReason::Complaint);
    again.created_at = T0.plus(Duration::from_secs(5));
    s.suppress(&again).await.unwrap();
    let listed = s.list_suppressions(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].reason, listed[0].expires_at, listed[0].created_at),
        (SuppressionReason::Complaint, None, T0)
    );
    assert_eq!(listed[0].detail.as_deref(), Some("complaint test"));
}

backend_tests!(suppress_is_idempotent_and_scoped, expired_suppressions_no_longer_apply);

const SECRET: &str = "suppression api tests secret";

/// The HTTP harness with this file's address secret, so tests can compute hashes.
async fn start() -> App {
    App::start_with(|c| c.email.address_secret = Some(SECRET.into())).await
}

async fn the_suppressions_api_takes_addresses_and_keeps_hashes() {
    let app = start().await;
    let hash = AddressKeys::from_secret(SECRET.as_bytes()).hash("carol@example.org").unwrap();
    let post = |body: Value| app.call_typed(reqwest::Method::POST, "/v1/suppressions", Some(body));

    let (s, _, body) = post(json!({"email": " Carol@Example.ORG ", "detail": "asked by phone"})).await;
    assert_eq!(s, 201, "{body}");
    assert_eq!(body["address_hash"], hash.as_str());
    assert_eq!((body["reason"].as_str(), body["category"].as_str()), (Some("manual"), Some("*")));
    assert_eq!(body["active"], true);
    assert!(!body.to_string().contains("carol"), "the address is never echoed or stored: {body}");
    let (s, _, body) = post(json!({"email": "carol@example.org", "reason": "complaint"})).await;
    assert_eq!((s, body["reason"].as_str()), (200, Some("complaint")));

    let (s, _, body) = app.call_typed(reqwest::Method::GET, "/v1/suppressions?email=CAROL@example.org", None).await;
    assert_eq!(s, 200);
    assert_eq!(body["suppressions"].as_array().unwrap().len(), 1);
    let (_, _, body) =
        app.call_typed(reqwest::Method::GET, &format!("/v1/suppressions?address_hash={hash}"), None).await;
    assert_eq!(body["suppressions"][0]["address_hash"], hash.as_str());
    let (_, _, body) = app.call_typed(reqwest::Method::GET, "/v1/suppressions", None).await;
    assert_eq!(body["suppressions"].as_array().unwrap().len(), 1);

    // Bad input: a problem naming the field.
    for (body, field) in [
        (json!({"email": "not an address"}), "email"),
        (json!({"email": "a@b.c", "reason": "bored"}), ""),
        (json!({"email": "a@b.c", "expires_at": "tomorrow"}), "expires_at"),
        (json!({"email": "a@b.c", "category": ""}), "category"),
    ] {
        let (s, ct, p) = post(body.clone()).await;
        assert!(s == 400 || s == 422, "{body}: {s} {p}");
        assert_eq!(ct, "application/problem+json");
        assert!(p.to_string().contains(field), "{p}");
    }
    let (s, ct, _) = app.call_typed(reqwest::Method::GET, "/v1/suppressions?address_hash=xyz", None).await;
    assert_eq!((s, ct.as_str()), (422, "application/problem+json"));

    let (s, _, body) = app.call_typed(reqwest::Method::DELETE, "/v1/suppressions?email=carol@example.org", None).await;
    assert_eq!((s, body["lifted"].as_u64()), (200, Some(1)));
    let (s, ct, _) = app.call_typed(reqwest::Method::DELETE, "/v1/suppressions?email=carol@example.org", None).await;
    assert_eq!((s, ct.as_str()), (404, "application/problem+json"));
    let (s, _, _) = app.call_typed(reqwest::Method::DELETE, "/v1/suppressions", None).await;
    assert_eq!(s, 422);

    // The API key is required.
    let resp = app.http.get(format!("{}/v1/suppressions", app.base)).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let doc: Value = app.http.get(format!("{}/v1/openapi.json", app.base)).send().await.unwrap().json().await.unwrap();
    assert!(doc["paths"]["/v1/suppressions"]["delete"].is_object());
    assert!(doc["paths"]["/u/{token}"]["post"].is_object());
    app.stop().await;
}

async fn unsubscribe_get_changes_nothing_and_post_needs_the_one_click_body() {
    let app = start().await;
    let keys = AddressKeys::from_secret(SECRET.as_bytes());
    let hash = keys.hash("dan@example.org").unwrap();
    let token = keys.sign_unsubscribe(&herald::address::UnsubscribeToken {
        address_hash: hash.clone(),
        category: "<news>".into(),
        user_id: "dan".into(),
    });
    let url = format!("{}/u/{token}", app.base);
    let page = app.http.get(&url).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("&lt;news&gt;") && !html.contains("<news>"), "escaped: {html}");
    assert!(app.db.store.list_suppressions(Some(&hash), 10).await.unwrap().is_empty());

    let resp = app.http.post(&url).body("something=else").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert!(app.db.store.list_suppressions(Some(&hash), 10).await.unwrap().is_empty());

    // multipart/form-data is what some clients send (RFC 8058 allows it).
    let multipart = "--b\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b--\r\n";
    let resp = app
        .http
        .post(&url)
        .header("content-type", "multipart/form-data; boundary=b")
        .body(multipart)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let s = app.db.store.list_suppressions(Some(&hash), 10).await.unwrap();
    assert_eq!((s.len(), s[0].category.as_str(), s[0].reason), (1, "<news>", SuppressionReason::Unsubscribe));

    // A token signed under another secret is refused.
    let other =
        AddressKeys::from_secret(b"another deployment's secret").sign_unsubscribe(&herald::address::UnsubscribeToken {
            address_hash: hash,
            category: "all".into(),
            user_id: "dan".into(),
        });
    let resp = app.http.get(format!("{}/u/{other}", app.base)).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    let mut trials = backend_trials();
    trials.extend(named_tests![
        the_suppressions_api_takes_addresses_and_keeps_hashes,
        unsubscribe_get_changes_nothing_and_post_needs_the_one_click_body,
    ]);
    common::harness::main(trials)
}
