//! Requests of the wrong shape, end to end through a running server (issue
//! 27): every JSON body must be an object (item 6); every error, including
//! the ones axum answers by itself, is `application/problem+json`, and a
//! query parameter of the wrong shape is a `422` naming it (item 19); an
//! address the email channel cannot mail is refused when stored, and a user
//! whose id is an email address can be opened on the screen (item 13).

mod common;

use common::app::App;
use serde_json::{Value, json};

fn rule(trigger_type: &str) -> Value {
    common::app::inbox_rule(trigger_type, false)
}

/// A response's status, content type and body.
async fn answer(resp: reqwest::Response) -> (u16, String, Value) {
    let status = resp.status().as_u16();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let text = resp.text().await.unwrap();
    (status, ct, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Asserts a 422 problem naming exactly `field`.
fn assert_refused(what: &str, (status, ct, body): &(u16, String, Value), field: &str) {
    assert_eq!(*status, 422, "{what}: {body}");
    assert_eq!(ct, "application/problem+json", "{what}");
    let fields: Vec<&str> = body["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, [field], "{what}: {body}");
}

/// serde reads a JSON array into a struct by position: `["x@example.com"]`
/// set a user's email, `["t", "u"]` recorded a trigger, and
/// `["a@example.com"]` suppressed the address for every category. Every
/// JSON route now answers 422 naming the body, and nothing changes.
async fn every_json_body_must_be_an_object() {
    let app = App::start().await;
    let (_, created) = app.post("/v1/rules", rule("shape.check")).await;
    let rule_id = created["id"].as_str().expect("a rule").to_owned();
    let (_, token) = app.post("/v1/users/u-1/token", json!({})).await;
    let token = token["token"].as_str().unwrap().to_owned();

    use reqwest::Method as M;
    let routes: Vec<(M, String, Value, &str)> = vec![
        (M::PUT, "/v1/users/x".into(), json!(["x@example.com"]), "api"),
        (M::POST, "/v1/triggers".into(), json!(["t", "u"]), "api"),
        (M::POST, "/v1/suppressions".into(), json!(["a@example.com"]), "api"),
        // 16 elements, one per field of the rule.
        (M::POST, "/v1/rules".into(), json!(vec![Value::Null; 16]), "api"),
        (M::PATCH, format!("/v1/rules/{rule_id}"), json!(["renamed"]), "api"),
        (M::PUT, "/v1/inbox/preferences".into(), json!([{"exports": {"inbox": false}}]), "user"),
    ];
    for (method, path, body, auth) in routes {
        let what = format!("{method} {path}");
        let bearer = if auth == "api" { &app.key } else { &token };
        let resp = app.http.request(method, app.url(&path)).bearer_auth(bearer).json(&body).send().await.unwrap();
        let got = answer(resp).await;
        assert_refused(&what, &got, "body");
        let said = got.2.to_string();
        assert!(said.contains("must be a JSON object") && said.contains("not an array"), "{what}: {said}");
        // No Rust type names, no "elements" from serde's sequence reader.
        assert!(!said.contains("struct") && !said.contains("elements"), "{what}: {said}");
    }
    // Every other kind of JSON value is refused the same way.
    for body in ["\"x@example.com\"", "42", "true", "null"] {
        let resp = app
            .http
            .put(app.url("/v1/users/x"))
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_refused(body, &answer(resp).await, "body");
    }
    // And nothing happened.
    assert_eq!(app.get("/v1/users/x").await.0, 404, "the array created a user");
    let (_, outbox) = app.get("/v1/outbox").await;
    assert_eq!(outbox["items"], json!([]));
    let (_, list) = app.get("/v1/suppressions").await;
    assert_eq!(list["suppressions"], json!([]), "the array suppressed an address");
    let (_, rule) = app.get(&format!("/v1/rules/{rule_id}")).await;
    assert_eq!(rule["name"], "rule for shape.check");
    // An object still works.
    let (status, body) = app.call(M::PUT, "/v1/users/x", Some(json!({"email": "x@example.com"}))).await;
    assert_eq!(status, 201, "{body}");
    app.stop().await;
}

/// A 405 was an empty body and an unknown path outside `/v1` an empty 404:
/// both are problems now, and the 405 keeps its `Allow`.
async fn a_wrong_method_and_an_unknown_path_are_problems() {
    let app = App::start().await;
    let resp = app.http.delete(app.url("/v1/triggers")).bearer_auth(&app.key).send().await.unwrap();
    let allow = resp.headers().get("allow").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (status, ct, body) = answer(resp).await;
    assert_eq!((status, ct.as_str()), (405, "application/problem+json"), "{body}");
    assert_eq!(body["status"], 405);
    assert!(allow.contains("POST"), "Allow: {allow}");
    assert!(body["detail"].as_str().unwrap().contains("POST"), "{body}");

    for path in ["/v1/no-such-route", "/no-such-page", "/v1"] {
        let resp = app.http.get(app.url(path)).bearer_auth(&app.key).send().await.unwrap();
        let (status, ct, body) = answer(resp).await;
        assert_eq!((status, ct.as_str()), (404, "application/problem+json"), "{path}: {body}");
        assert_eq!(body["status"], 404, "{path}");
    }
    // The probes keep their plain text.
    let resp = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "ok\n");
    app.stop().await;
}

/// `limit=abc` and `limit=-1` were 400s with axum's text; a malformed
/// cursor answered the first page (outbox) or an empty one (inbox). All are
/// 422s naming the parameter now, like `limit=0`.
async fn query_parameters_of_the_wrong_shape_are_422s_naming_them() {
    let app = App::start().await;
    let (_, token) = app.post("/v1/users/u-1/token", json!({})).await;
    let token = token["token"].as_str().unwrap().to_owned();
    for (path, field) in [
        ("/v1/outbox?limit=0", "limit"),
        ("/v1/outbox?limit=abc", "limit"),
        ("/v1/outbox?limit=-1", "limit"),
        ("/v1/outbox?limit=99999999999", "limit"),
        ("/v1/outbox?cursor=zzz", "cursor"),
        ("/v1/outbox?cursor=", "cursor"),
        ("/v1/outbox?unknown=1", "unknown"),
        ("/v1/rules/r-1/preview?limit=abc", "limit"),
        ("/v1/suppressions?limit=-1", "limit"),
        ("/v1/bounces?limit=x", "limit"),
        ("/v1/events/stream?from=yesterday", "from"),
    ] {
        let resp = app.http.get(app.url(path)).bearer_auth(&app.key).send().await.unwrap();
        assert_refused(path, &answer(resp).await, field);
    }
    for (path, field) in [
        ("/v1/inbox?cursor=not-a-cursor", "cursor"),
        ("/v1/inbox?limit=abc", "limit"),
        ("/v1/inbox?filter=everything", "filter"),
    ] {
        let resp = app.http.get(app.url(path)).bearer_auth(&token).send().await.unwrap();
        assert_refused(path, &answer(resp).await, field);
    }
    // A well-formed cursor is still a page.
    let resp = app
        .http
        .get(app.url("/v1/outbox?cursor=0192c5c8-41a1-7c3b-9d2e-5f8a1b2c3d4e&limit=5"))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    app.stop().await;
}

/// `"payload": null` was taken as no payload although the document says
/// an object; it is refused naming `payload`, and leaving it out still works.
async fn a_null_payload_is_refused() {
    let app = App::start().await;
    let (status, body) = app.post("/v1/triggers", json!({"type": "t.x", "user_id": "u", "payload": null})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["field"], "payload", "{body}");
    let (status, body) = app.post("/v1/triggers", json!({"type": "t.x", "user_id": "u"})).await;
    assert_eq!(status, 202, "{body}");
    app.stop().await;
}

/// `"a b"@example.com` passed `PUT /v1/users` and then every email to it
/// failed. Refused when stored now, naming `email`.
async fn an_address_that_cannot_be_mailed_is_refused_naming_email() {
    let app = App::start().await;
    for bad in ["\"a b\"@example.com", "\"ab\"@example.com"] {
        let (status, body) = app.call(reqwest::Method::PUT, "/v1/users/x", Some(json!({"email": bad}))).await;
        assert_eq!(status, 422, "{bad}: {body}");
        assert_eq!(body["errors"][0]["field"], "email", "{bad}: {body}");
        assert!(body["errors"][0]["message"].as_str().unwrap().contains("quoted local part"), "{body}");
    }
    assert_eq!(app.get("/v1/users/x").await.0, 404);
    let (status, body) = app.call(reqwest::Method::PUT, "/v1/users/x", Some(json!({"email": "a.b@example.com"}))).await;
    assert_eq!(status, 201, "{body}");
    app.stop().await;
}

/// The screen's send-log search took any text with `@` as an address, so a
/// user whose id is an email address could not be opened. A known user id
/// is opened now, with a link to the address search, and the operator can
/// say which with `by`.
async fn a_user_whose_id_is_an_address_can_be_opened_on_the_screen() {
    let app = App::start().await;
    let (_, session) = app.operator_session().await;
    let page = |path: &str| {
        let req = app.http.get(app.url(path)).header("cookie", format!("herald_session={session}"));
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            resp.text().await.unwrap()
        }
    };
    let mut r = rule("ada.signed_up");
    r["enabled"] = json!(true);
    let (status, body) = app.post("/v1/rules", r).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = app.post("/v1/triggers", json!({"type": "ada.signed_up", "user_id": "ada@example.com"})).await;
    assert_eq!(status, 202, "{body}");

    let html = page("/ui/sends?q=ada%40example.com").await;
    assert!(html.contains("User <code>ada@example.com</code>"), "the user was not opened:\n{html}");
    assert!(html.contains("by=address"), "no link to the address search:\n{html}");
    let html = page("/ui/sends?q=ada%40example.com&by=address").await;
    assert!(html.contains("Address hash"), "by=address did not search the address:\n{html}");
    assert!(html.contains("by=user"), "no link back to the user:\n{html}");
    let html = page("/ui/sends?q=ada%40example.com&by=user").await;
    assert!(html.contains("User <code>ada@example.com</code>"));
    // An address no user is keyed on is still searched as an address.
    let html = page("/ui/sends?q=bob%40example.com").await;
    assert!(html.contains("Address hash"), "{html}");
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        every_json_body_must_be_an_object,
        a_wrong_method_and_an_unknown_path_are_problems,
        query_parameters_of_the_wrong_shape_are_422s_naming_them,
        a_null_payload_is_refused,
        an_address_that_cannot_be_mailed_is_refused_naming_email,
        a_user_whose_id_is_an_address_can_be_opened_on_the_screen,
    ])
}
