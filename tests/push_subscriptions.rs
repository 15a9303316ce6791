//! The devices API: `/v1/users/{user_id}/push-subscriptions` with the API
//! key and `/v1/inbox/push-subscriptions` with a user's inbox token, on
//! each database: `201` for a new device, `200` with the same id for a
//! known one (moved to the caller's user), the list, removal (`404` for a
//! device that is not the caller's), each `422` naming its field, and the
//! endpoint guard.

mod common;

use common::app::App;
use common::{Backend, harness};
use herald::store::{OperatorStore, PushDeviceStore};
use reqwest::Method;
use serde_json::{Value, json};

// RFC 8291's example subscription keys (§5).
const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const TOKEN_SECRET: &str = "an inbox token secret of at least thirty-two characters";

/// A browser's `PushSubscription.toJSON()`.
fn browser(endpoint: &str) -> Value {
    json!({"endpoint": endpoint, "expirationTime": null, "keys": {"p256dh": P256DH, "auth": AUTH}})
}

async fn start(backend: Backend, allow_private_networks: bool) -> App {
    App::start_on(backend, |c| {
        c.inbox.token_secret = Some(TOKEN_SECRET.into());
        c.inbox.cors_origins = vec!["https://app.example".into()];
        c.push.allow_private_networks = allow_private_networks;
    })
    .await
}

/// An inbox token for `user`, as the host's backend gets one.
async fn token(app: &App, user: &str) -> String {
    let (status, body) = app.post(&format!("/v1/users/{user}/token"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_owned()
}

/// The fields a 422 names.
fn fields(problem: &Value) -> Vec<&str> {
    problem["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect()
}

async fn the_api_key_registers_lists_moves_and_removes_a_users_devices(backend: Backend) {
    let app = start(backend, false).await;
    let path = "/v1/users/ada/push-subscriptions";
    let (status, created) = app.post(path, json!({"fcm_token": "fcm-1", "label": "Ada's Pixel"})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&created["kind"], &created["label"], &created["last_success_at"]),
        (&json!("fcm"), &json!("Ada's Pixel"), &Value::Null)
    );
    assert!(chrono::DateTime::parse_from_rfc3339(created["created_at"].as_str().unwrap()).is_ok(), "{created}");
    assert_eq!(created.as_object().unwrap().len(), 5, "no token or key in the answer: {created}");

    let (status, again) = app.post(path, json!({"fcm_token": "fcm-1"})).await;
    assert_eq!((status, &again["id"], &again["label"]), (200, &json!(id), &json!("Ada's Pixel")), "{again}");
    let (status, web) = app.post(path, browser("https://push.example.net/send/abc")).await;
    assert_eq!((status, &web["kind"]), (201, &json!("web")), "{web}");
    let (status, apns) = app.post(path, json!({"apns_token": "ABCDEF0123"})).await;
    assert_eq!((status, &apns["kind"]), (201, &json!("apns")), "{apns}");

    let (status, list) = app.get(path).await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = list["items"].as_array().unwrap().iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["fcm", "web", "apns"], "{list}");

    // Bob registers Ada's old phone: it is his now, and Ada's audit trail says so.
    let (status, moved) = app.post("/v1/users/bob/push-subscriptions", json!({"fcm_token": "fcm-1"})).await;
    assert_eq!((status, &moved["id"]), (200, &json!(id)), "{moved}");
    let (_, list) = app.get(path).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let audit = app.db.store.audit_for_target("user:ada", 10).await.unwrap();
    assert_eq!(audit[0].action, "push_device.moved", "{audit:?}");

    let web_id = web["id"].as_str().unwrap();
    let (status, problem) = app.call(Method::DELETE, &format!("{path}/{id}"), None).await;
    assert_eq!(status, 404, "Bob's device is not Ada's to delete: {problem}");
    let (status, _) = app.call(Method::DELETE, &format!("{path}/{web_id}"), None).await;
    assert_eq!(status, 204);
    let (status, _) = app.call(Method::DELETE, &format!("{path}/{web_id}"), None).await;
    assert_eq!(status, 404, "already removed");
    let (_, list) = app.get(path).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    let removed = app.db.store.push_devices("ada", true).await.unwrap();
    let removed = removed.iter().find(|d| d.id == web_id).unwrap();
    assert_eq!(
        (removed.removed_by.as_deref(), removed.removed_reason.as_deref()),
        (Some("api"), Some("deleted through the API"))
    );

    // Deleting the user deletes their devices.
    let (status, erased) = app.call(Method::DELETE, "/v1/users/ada", None).await;
    assert_eq!((status, &erased["push_devices_deleted"]), (200, &json!(2)), "{erased}");
    let (_, list) = app.get(path).await;
    assert_eq!(list["items"], json!([]));
    app.stop().await;
}

async fn an_inbox_token_reaches_only_its_own_users_devices(backend: Backend) {
    let app = start(backend, false).await;
    let (ada, bob) = (token(&app, "ada").await, token(&app, "bob").await);
    let path = "/v1/inbox/push-subscriptions";
    let (status, created) =
        app.call_as(&ada, Method::POST, path, Some(browser("https://push.example.net/send/ada"))).await;
    assert_eq!((status, &created["kind"]), (201, &json!("web")), "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, again) =
        app.call_as(&ada, Method::POST, path, Some(browser("https://push.example.net/send/ada"))).await;
    assert_eq!((status, &again["id"]), (200, &json!(id)));

    let (status, list) = app.call_as(&ada, Method::GET, path, None).await;
    assert_eq!((status, list["items"].as_array().unwrap().len()), (200, 1), "{list}");
    let (_, list) = app.call_as(&bob, Method::GET, path, None).await;
    assert_eq!(list["items"], json!([]), "Bob sees none of Ada's");
    let (status, _) = app.call_as(&bob, Method::DELETE, &format!("{path}/{id}"), None).await;
    assert_eq!(status, 404, "Bob cannot delete Ada's device");
    // The API key does not open the inbox routes, nor a user token the API's.
    let (status, _) = app.call(Method::GET, path, None).await;
    assert_eq!(status, 401);
    let (status, _) = app.call_as(&ada, Method::GET, "/v1/users/ada/push-subscriptions", None).await;
    assert_eq!(status, 401);

    let (status, _) = app.call_as(&ada, Method::DELETE, &format!("{path}/{id}"), None).await;
    assert_eq!(status, 204);
    let (_, list) = app.call_as(&ada, Method::GET, path, None).await;
    assert_eq!(list["items"], json!([]));
    let all = app.db.store.push_devices("ada", true).await.unwrap();
    assert_eq!(
        (all[0].removed_by.as_deref(), all[0].removed_reason.as_deref()),
        (Some("user"), Some("the user turned notifications off"))
    );
    let audit = app.db.store.audit_for_target("user:ada", 10).await.unwrap();
    assert_eq!((audit[0].action.as_str(), audit[0].operator_email.as_str()), ("push_device.removed", "user"));

    // A browser page may send the DELETE from another origin.
    let preflight = app
        .http
        .request(Method::OPTIONS, app.url(&format!("{path}/{id}")))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "DELETE")
        .header("access-control-request-headers", "authorization")
        .send()
        .await
        .unwrap();
    let allowed = preflight.headers()["access-control-allow-methods"].to_str().unwrap().to_owned();
    assert!(allowed.contains("DELETE"), "{allowed}");
    app.stop().await;
}

async fn every_refusal_is_a_422_naming_its_field() {
    let app = start(Backend::Sqlite, false).await;
    let ada = token(&app, "ada").await;
    let keys = json!({"p256dh": P256DH, "auth": AUTH});
    let cases = [
        (json!({}), vec!["endpoint"]),
        (json!({"label": "no device"}), vec!["endpoint"]),
        (json!({"fcm_token": "t", "apns_token": "ab"}), vec!["fcm_token", "apns_token"]),
        (
            json!({"endpoint": "https://push.example.net/x", "keys": keys, "fcm_token": "t"}),
            vec!["endpoint", "fcm_token"],
        ),
        (json!({"endpoint": "http://push.example.net/x", "keys": keys}), vec!["endpoint"]),
        (json!({"endpoint": "not a url", "keys": keys}), vec!["endpoint"]),
        (json!({"endpoint": "https://push.example.net/x"}), vec!["keys.p256dh", "keys.auth"]),
        (
            json!({"endpoint": "https://push.example.net/x", "keys": {"p256dh": "BCVx", "auth": AUTH}}),
            vec!["keys.p256dh"],
        ),
        (
            json!({"endpoint": "https://push.example.net/x", "keys": {"p256dh": P256DH, "auth": "AAAA"}}),
            vec!["keys.auth"],
        ),
        (
            json!({"endpoint": "https://push.example.net/x", "keys": {"p256dh": P256DH, "auth": "!!"}}),
            vec!["keys.auth"],
        ),
        (json!({"fcm_token": ""}), vec!["fcm_token"]),
        (json!({"apns_token": "  "}), vec!["apns_token"]),
        (json!({"apns_token": "not hex"}), vec!["apns_token"]),
        (json!({"fcm_token": "t", "label": "x".repeat(201)}), vec!["label"]),
        (json!({"fcm_token": "t", "unknown": 1}), vec!["unknown"]),
    ];
    for (body, expected) in cases {
        for (credential, path) in
            [(&app.key, "/v1/users/ada/push-subscriptions"), (&ada, "/v1/inbox/push-subscriptions")]
        {
            let resp = app.http.post(app.url(path)).bearer_auth(credential).json(&body).send().await.unwrap();
            assert_eq!(resp.status(), 422, "{path} {body}");
            assert_eq!(resp.headers()["content-type"], "application/problem+json");
            let problem: Value = resp.json().await.unwrap();
            assert_eq!(fields(&problem), expected, "{path} {body}: {problem}");
        }
    }
    let (status, _) =
        app.post("/v1/users/ada/push-subscriptions", json!({"fcm_token": "t", "label": "x".repeat(200)})).await;
    assert_eq!(status, 201, "200 characters is allowed");
    assert!(app.db.store.push_devices("ada", true).await.unwrap().len() == 1, "nothing refused was filed");
    app.stop().await;
}

/// An address a name of this machine resolves to, if all of its addresses
/// are loopback or private (as in containers and on most hosts).
async fn an_inward_name() -> Option<String> {
    let name = std::fs::read_to_string("/etc/hostname").ok()?.trim().to_owned();
    let addrs: Vec<_> = tokio::net::lookup_host((name.as_str(), 443)).await.ok()?.collect();
    let inward =
        !addrs.is_empty() && addrs.iter().all(|a| herald::delivery::channel::public_address::is_non_public(a.ip()));
    inward.then_some(name)
}

async fn an_endpoint_on_a_private_address_is_refused_unless_allowed() {
    let app = start(Backend::Sqlite, false).await;
    let path = "/v1/users/ada/push-subscriptions";
    let mut endpoints = vec![
        "https://127.0.0.1/push".to_owned(),
        "https://10.0.0.8/push".to_owned(),
        "https://169.254.169.254/latest".to_owned(),
        "https://[::1]/push".to_owned(),
        "https://localhost/push".to_owned(),
    ];
    // A name that resolves inward is refused at registration too, not only
    // at delivery.
    if let Some(name) = an_inward_name().await {
        endpoints.push(format!("https://{name}/push"));
    } else {
        eprintln!("note: this machine's name does not resolve inward; the resolved-name case is not exercised");
    }
    for endpoint in &endpoints {
        let (status, problem) = app.post(path, browser(endpoint)).await;
        assert_eq!((status, fields(&problem)), (422, vec!["endpoint"]), "{endpoint}: {problem}");
        let message = problem["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("push.allow_private_networks"), "{message}");
    }
    app.stop().await;

    let app = start(Backend::Sqlite, true).await;
    for endpoint in endpoints.iter().map(String::as_str).chain(["http://127.0.0.1:9/push"]) {
        let (status, body) = app.post(path, browser(endpoint)).await;
        assert_eq!(status, 201, "{endpoint} with push.allow_private_networks: {body}");
    }
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    let mut trials = per_backend_tests![
        the_api_key_registers_lists_moves_and_removes_a_users_devices,
        an_inbox_token_reaches_only_its_own_users_devices,
    ];
    trials.extend(named_tests![
        every_refusal_is_a_422_naming_its_field,
        an_endpoint_on_a_private_address_is_refused_unless_allowed
    ]);
    harness::main(trials)
}
