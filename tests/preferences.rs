//! The preference center under an outside review: what end
//! users, the hosted page and operators saw go wrong, each end to end
//! through a running server, on SQLite, PostgreSQL and MariaDB. Each test
//! here failed on the code before its fix.

mod common;

use common::Backend;
use common::app::App;
use herald::store::OperatorStore;
use std::time::Duration;

use herald::store::{Store, TriggerStore};
use serde_json::{Value, json};

/// An enabled rule on `channel` in `category`.
async fn rule(app: &App, category: &str, channel: &str) {
    let mut body = json!({
        "name": format!("{category} by {channel}"), "trigger_type": format!("{category}.happened"),
        "channel": channel, "category": category, "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}},
    });
    if channel == "webhook" {
        body["webhook_url"] = json!("http://127.0.0.1:9/herald");
    }
    let (status, body) = app.post("/v1/rules", body).await;
    assert_eq!(status, 201, "{body}");
}

async fn user_token(app: &App, user: &str) -> String {
    let (status, t) = app.post(&format!("/v1/users/{user}/token"), json!({})).await;
    assert_eq!(status, 200, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

async fn as_user(app: &App, token: &str, method: reqwest::Method, body: Option<Value>) -> (u16, Value) {
    app.call_as(token, method, "/v1/inbox/preferences", body).await
}

/// Four simultaneous `PUT /v1/inbox/preferences`, one category each (the
/// widget sends one per checkbox): all four are kept, for a user the host
/// described and for one it did not. Before, the handler read the choices,
/// merged in memory and overwrote the whole map, so usually one of the
/// four survived, and on PostgreSQL the first write of an unknown user
/// answered 500 (duplicate key) to most of the others.
async fn concurrent_preference_changes_are_all_kept(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let categories = ["alerts", "digest", "news", "tips"];
    for c in categories {
        rule(&app, c, "inbox").await;
    }
    for round in 0..12 {
        let user = format!("u{round}");
        if round % 2 == 0 {
            let (status, body) = app.call(reqwest::Method::PUT, &format!("/v1/users/{user}"), Some(json!({}))).await;
            assert_eq!(status, 201, "{body}");
        }
        let token = user_token(&app, &user).await;
        let puts = categories
            .map(|c| as_user(&app, &token, reqwest::Method::PUT, Some(json!({"categories": {c: {"inbox": false}}}))));
        for (status, body) in futures::future::join_all(puts).await {
            assert_eq!(status, 200, "round {round}: {body}");
        }
        let (status, body) = app.get(&format!("/v1/users/{user}")).await;
        assert_eq!(status, 200, "{body}");
        let expected: serde_json::Map<String, Value> =
            categories.iter().map(|c| (c.to_string(), json!({"inbox": false}))).collect();
        assert_eq!(body["user_preferences"], Value::Object(expected), "round {round} ({user}) lost a change");
        let audit = app.db.store.audit_for_target(&format!("user:{user}"), 10).await.unwrap();
        assert_eq!(audit.len(), 4, "one audit entry per change: {audit:?}");
    }
    app.stop().await;
}

/// Four simultaneous `PUT /v1/users/{id}` for a user Herald does not know
/// yet: one creates it (201), the others replace it (200); none is a 500.
/// Before, PostgreSQL refused the losers' insert with a duplicate key.
async fn concurrent_first_writes_of_a_user_are_not_errors(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    for round in 0..25 {
        let path = format!("/v1/users/new-{round}");
        let puts = [0, 1, 2, 3]
            .map(|i| app.call(reqwest::Method::PUT, &path, Some(json!({"email": format!("n{i}@example.com")}))));
        let mut statuses: Vec<u16> = futures::future::join_all(puts).await.into_iter().map(|(s, _)| s).collect();
        statuses.sort();
        assert_eq!(statuses, [200, 200, 200, 201], "round {round}: one creates, the others replace");
    }
    app.stop().await;
}

/// The hosted page's link for `user`, as an email's footer carries it.
fn preference_link(user: &str) -> String {
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    format!("/p/{}", keys.sign_preferences(user))
}

/// The hosted page's form fields: each box shown as (category, channel,
/// ticked when shown), and the boxes ticked now.
fn preference_form(shown: &[(&str, &str, bool)], on: &[(&str, &str)]) -> Vec<(&'static str, String)> {
    let mut fields = Vec::new();
    for (category, channel, was) in shown {
        fields.push(("shown", box_of(category, channel)));
        if *was {
            fields.push(("was", box_of(category, channel)));
        }
    }
    for (category, channel) in on {
        fields.push(("on", box_of(category, channel)));
    }
    fields
}

/// Posts the hosted page's form with `fields` (name, value), as a browser
/// does.
async fn post_form(app: &App, path: &str, fields: &[(&'static str, String)]) -> (u16, String) {
    let body: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(fields).finish();
    let resp = app
        .http
        .post(app.url(path))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Undoes minijinja's HTML escaping (the hosted page and the operator
/// screen render with the same templates).
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&#x2f;", "/")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// What a browser sends for the form in `html` whose opening tag contains
/// `marker`, after the user sets each box `set` answers for (given the
/// box's value) to ticked or not: its hidden fields, and the checkboxes
/// that are ticked and not disabled.
fn browser_fields(html: &str, marker: &str, set: impl Fn(&str) -> Option<bool>) -> Vec<(&'static str, String)> {
    let form = html.split("<form").find(|f| f.split('>').next().unwrap().contains(marker)).expect("the form");
    let form = form.split("</form>").next().unwrap();
    let mut fields = Vec::new();
    for input in form.split("<input").skip(1) {
        let tag = input.split('>').next().unwrap();
        let attr =
            |name: &str| tag.split(&format!(" {name}=\"")).nth(1).map(|v| unescape(v.split('"').next().unwrap()));
        let (Some(name), Some(value)) = (attr("name"), attr("value")) else { continue };
        let name: &'static str = match name.as_str() {
            "shown" => "shown",
            "was" => "was",
            "on" => "on",
            "csrf" => "csrf",
            "user" => "user",
            other => panic!("unexpected field {other}"),
        };
        let checkbox = attr("type").as_deref() == Some("checkbox");
        let ticked = set(&value).unwrap_or(tag.contains(" checked"));
        if !checkbox || (ticked && !tag.contains(" disabled")) {
            fields.push((name, value));
        }
    }
    fields
}

/// The box of `category` on `channel`, as the forms name it.
fn box_of(category: &str, channel: &str) -> String {
    serde_json::to_string(&[category, channel]).unwrap()
}

/// A category as rules accept it (`promo:spring`, `product.updates`, 36
/// characters and more) is one everywhere: the host's `PUT /v1/users`
/// preferences take it, and the hosted page and the operator's form save
/// with it. Before, a `:` in any enabled rule's category broke both forms
/// for every user (the box `promo:spring:inbox` was split on its first
/// `:`), and the host's preferences refused all three names.
async fn any_category_a_rule_accepts_works_in_every_preference_form(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let long = "a_category_name_longer_than_35_characters";
    for c in ["promo:spring", "product.updates", long, "news"] {
        rule(&app, c, "inbox").await;
    }
    // The hosted page: the user turns news off and saves.
    let link = preference_link("ada");
    let html = app.http.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    let fields = browser_fields(&html, "method=\"post\"", |v| v.contains("news").then_some(false));
    assert!(fields.iter().any(|(_, v)| v.contains("promo:spring")), "{fields:?}");
    let (status, page) = post_form(&app, &link, &fields).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Saved."), "{page}");
    let (_, body) = app.get("/v1/users/ada").await;
    assert_eq!(body["user_preferences"]["news"], json!({"inbox": false}), "{body}");

    // The operator's form on the user's send-log page: turns news back on.
    let cookie = format!("herald_session={}", app.operator_session().await.1);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = http.get(app.url("/ui/sends?q=ada")).header("cookie", &cookie).send().await.unwrap();
    let html = page.text().await.unwrap();
    let fields = browser_fields(&html, "/ui/sends/preferences", |v| v.contains("news").then_some(true));
    let body: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(&fields).finish();
    let resp = http
        .post(app.url("/ui/sends/preferences"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 303);
    let (_, body) = app.get("/v1/users/ada").await;
    assert_eq!(body["user_preferences"]["news"], json!({"inbox": true}), "the operator's change is saved: {body}");
    let audit = app.db.store.audit_for_target("user:ada", 10).await.unwrap();
    assert!(audit[0].operator_email.starts_with("operator ops@example.com"), "{audit:?}");

    // The host turns the same categories off.
    let host = json!({"preferences": {"categories": {"promo:spring": false, "product.updates": false, long: false}}});
    let (status, body) = app.call(reqwest::Method::PUT, "/v1/users/ada", Some(host)).await;
    assert_eq!(status, 200, "the host's preferences take every rule's category: {body}");
    let (status, body) = app
        .call(reqwest::Method::PUT, "/v1/users/ada", Some(json!({"preferences": {"categories": {"a\u{7}": false}}})))
        .await;
    assert_eq!((status, body["errors"][0]["field"].as_str()), (422, Some("preferences.categories")), "{body}");
    app.stop().await;
}

/// Saving the hosted page records only the boxes the user changed, as the
/// widget does: a host's later opt-out (`channels.email = false`) still
/// holds for every category the user left alone. Before, every box on the
/// page became the user's own "on", which wins over the host.
async fn the_hosted_page_saves_only_what_the_user_changed(backend: Backend) {
    let mail = tempfile::tempdir().unwrap();
    let transport = format!("file://{}", mail.path().display());
    let app = App::start_on(backend, |c| {
        c.email.transport = Some(transport);
        c.email.from = Some("Herald <news@herald.test>".into());
    })
    .await;
    for c in ["news", "tips", "offers"] {
        rule(&app, c, "email").await;
    }
    let (status, body) =
        app.call(reqwest::Method::PUT, "/v1/users/ada", Some(json!({"email": "ada@example.com"}))).await;
    assert_eq!(status, 201, "{body}");
    let link = preference_link("ada");
    let html = app.http.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    let fields = browser_fields(&html, "method=\"post\"", |v| v.contains("news").then_some(false));
    let (status, page) = post_form(&app, &link, &fields).await;
    assert!(status == 200 && page.contains("Saved."), "{status} {page}");
    let (_, body) = app.get("/v1/users/ada").await;
    assert_eq!(body["user_preferences"], json!({"news": {"email": false}}), "only the box unticked: {body}");

    // The host turns email off: the categories the user did not touch follow.
    let host = json!({"email": "ada@example.com", "preferences": {"channels": {"email": false}}});
    assert_eq!(app.call(reqwest::Method::PUT, "/v1/users/ada", Some(host)).await.0, 200);
    let token = user_token(&app, "ada").await;
    let (_, center) = as_user(&app, &token, reqwest::Method::GET, None).await;
    for c in center["categories"].as_array().unwrap() {
        let email = &c["channels"][0];
        assert_eq!(email["enabled"], false, "{center}");
        let who = if c["category"] == "news" { "user" } else { "host" };
        assert_eq!(email["decided_by"], who, "{center}");
    }
    // Saving again without touching anything changes nothing.
    let html = app.http.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    let (status, _) = post_form(&app, &link, &browser_fields(&html, "method=\"post\"", |_| None)).await;
    assert_eq!(status, 200);
    let (_, body) = app.get("/v1/users/ada").await;
    assert_eq!(body["user_preferences"], json!({"news": {"email": false}}), "{body}");
    app.stop().await;
}

/// The end user's preference view offers only the channels a person
/// receives, each with a name a person reads, and a readable name for a
/// category whose rules set no `display_name`. Before, a webhook (the
/// host's integration) was offered as a box to switch, and the raw key
/// (`product_updates`) was the category's name.
async fn the_preference_view_shows_what_a_person_receives_by_readable_names() {
    let app = App::start_on(Backend::Sqlite, |c| {
        c.webhook.signing_secret = Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into());
        c.webhook.allow_private_networks = true;
    })
    .await;
    rule(&app, "product_updates", "inbox").await;
    rule(&app, "product_updates", "webhook").await;
    rule(&app, "orders", "webhook").await;
    let token = user_token(&app, "ada").await;
    let (status, center) = as_user(&app, &token, reqwest::Method::GET, None).await;
    assert_eq!(status, 200, "{center}");
    assert_eq!(
        center,
        json!({"categories": [{
            "category": "product_updates", "name": "Product updates", "locked": false,
            "channels": [{"channel": "inbox", "name": "In the app", "enabled": true, "decided_by": "default"}],
        }], "topics": []}),
        "no webhook, and a webhook-only category is not offered"
    );
    let html = app.http.get(app.url(&preference_link("ada"))).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("Product updates") && html.contains("In the app"), "{html}");
    assert!(!html.contains("webhook") && !html.contains("product_updates</"), "{html}");
    let off = json!({"categories": {"product_updates": {"webhook": false}}});
    let (status, body) = as_user(&app, &token, reqwest::Method::PUT, Some(off)).await;
    assert_eq!((status, body["errors"][0]["field"].as_str()), (422, Some("categories.product_updates.webhook")));
    assert!(body.to_string().contains("does not reach a person"), "{body}");
    app.stop().await;
}

/// A user the host deleted stays deleted: their old inbox token and the
/// preference link from an earlier email change nothing and are answered
/// as for a user Herald does not know (404), and `GET /v1/users/{id}`
/// stays 404. Before, saving a preference recreated the user as a bare
/// recipient row. A host that describes the user again brings them back.
async fn a_deleted_user_stays_deleted(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    rule(&app, "news", "inbox").await;
    let (status, body) =
        app.call(reqwest::Method::PUT, "/v1/users/gone", Some(json!({"email": "gone@example.com"}))).await;
    assert_eq!(status, 201, "{body}");
    let token = user_token(&app, "gone").await;
    let off = json!({"categories": {"news": {"inbox": false}}});
    assert_eq!(as_user(&app, &token, reqwest::Method::PUT, Some(off.clone())).await.0, 200);
    let (status, body) = app.call(reqwest::Method::DELETE, "/v1/users/gone", None).await;
    assert_eq!((status, &body["recipient_deleted"]), (200, &json!(true)), "{body}");

    let (status, body) = as_user(&app, &token, reqwest::Method::PUT, Some(off.clone())).await;
    assert_eq!(status, 404, "an old inbox token: {body}");
    assert!(body["detail"].as_str().unwrap().contains("deleted"), "{body}");
    let (status, body) =
        post_form(&app, &preference_link("gone"), &preference_form(&[("news", "inbox", true)], &[])).await;
    assert_eq!(status, 404, "an old preference link: {body}");
    let (status, body) = app.get("/v1/users/gone").await;
    assert_eq!(status, 404, "the user stays deleted: {body}");
    let (status, center) = as_user(&app, &token, reqwest::Method::GET, None).await;
    assert_eq!(status, 200, "{center}");
    assert_eq!(center["categories"][0]["channels"][0]["decided_by"], "default", "nothing of theirs is left: {center}");

    // The host describes them again: their choices are theirs to make again.
    let (status, body) = app.call(reqwest::Method::PUT, "/v1/users/gone", Some(json!({}))).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = as_user(&app, &token, reqwest::Method::PUT, Some(off)).await;
    assert_eq!(status, 200, "{body}");
    app.stop().await;
}

/// The hosted page's form posts back to the address it was loaded from, so
/// behind a proxy that serves Herald under a path
/// (`email.public_url = "https://example.com/herald"`, the link in every
/// email) it posts to `/herald/p/…`. Before, its `action="/p/…"` went to
/// the host's root.
async fn the_hosted_form_posts_back_under_the_public_path() {
    let app = App::start_on(Backend::Sqlite, |_| {}).await;
    rule(&app, "news", "inbox").await;
    let link = preference_link("ada");
    let html = app.http.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    let form = html.split("<form").nth(1).expect("a form").split('>').next().unwrap().to_owned();
    let action = form.split("action=\"").nth(1).map(|a| a.split('"').next().unwrap().to_owned());
    // Where a browser sends it from the link an email carries.
    let page = url::Url::parse(&format!("https://example.com/herald{link}")).unwrap();
    let target = match &action {
        Some(a) => page.join(a).unwrap(),
        None => page.clone(),
    };
    assert_eq!(target.path(), page.path(), "the form <form{form}> posts to {target}");
    app.stop().await;
}

/// A rule's category, display name and description are text an operator
/// (or whoever holds an API key) wrote; the hosted page shows them to end
/// users, so markup in any of them is shown as text, never run, and the
/// form built around a hostile category still saves it. The page is
/// rendered by the operator screen's templates with auto-escaping; this
/// fails if any value reaches the page unescaped.
async fn hostile_text_on_the_hosted_page_is_escaped() {
    let app = App::start_on(Backend::Sqlite, |_| {}).await;
    let category = "x\"><script>alert('c')</script>&";
    let (status, body) = app
        .post(
            "/v1/rules",
            json!({
                "name": "hostile", "trigger_type": "hostile.happened", "channel": "inbox",
                "category": category, "enabled": true,
                "display_name": "<script>alert('n')</script>", "description": "<img src=x onerror=alert('d')>",
                "template": {"fallback_locale": "en", "locales": {"en": {"subject": "s", "text": "t"}}},
            }),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let link = preference_link("<b>ada</b>");
    let page = app.http.get(app.url(&link)).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(page.headers()["cache-control"], "no-store");
    assert_eq!(page.headers()["referrer-policy"], "no-referrer");
    let html = page.text().await.unwrap();
    for raw in ["<script", "<img", "alert('"] {
        assert!(!html.contains(raw), "{raw} reached the page unescaped: {html}");
    }
    assert!(html.contains("&lt;script&gt;alert(&#x27;n&#x27;)&lt;&#x2f;script&gt;"), "the name, as text: {html}");
    assert!(html.contains("&lt;img src=x onerror=alert(&#x27;d&#x27;)&gt;"), "the description, as text: {html}");
    // The box round-trips: unticking it turns the hostile category off.
    let fields = browser_fields(&html, "method=\"post\"", |_| Some(false));
    assert!(fields.iter().any(|(name, v)| *name == "shown" && *v == box_of(category, "inbox")), "{fields:?}");
    let (status, page) = post_form(&app, &link, &fields).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Saved.") && !page.contains("<script"), "{page}");
    let (_, body) = app.get("/v1/users/%3Cb%3Eada%3C%2Fb%3E").await;
    assert_eq!(body["user_preferences"], json!({category: {"inbox": false}}), "{body}");
    app.stop().await;
}

/// Each of `trigger`'s messages: (user id, status), sorted.
async fn statuses(app: &App, trigger: &str) -> Vec<(String, String)> {
    let rows = app.db.store.outbox_for_trigger(trigger).await.unwrap();
    let mut rows: Vec<(String, String)> = rows.into_iter().map(|r| (r.user_id, r.status.as_str().to_owned())).collect();
    rows.sort();
    rows
}

/// A user mutes one topic they follow (issue 31): the API lists the topics
/// they follow by name, a `PUT` mutes one and is audited in words, the
/// next trigger to it is suppressed for them saying so while another topic
/// still reaches them, and the hosted page shows a box per topic (escaped)
/// whose unticking mutes. Keys that are not topic keys are refused naming
/// the field, and `topic:` is not a category.
async fn a_user_mutes_a_topic_from_the_api_and_the_hosted_page(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    assert_eq!(app.post("/v1/rules", common::app::inbox_rule("doc.commented", true)).await.0, 201);
    let (status, body) = app.call(reqwest::Method::PUT, "/v1/topics/doc:42", Some(json!({"name": "Roadmap"}))).await;
    assert_eq!(status, 201, "{body}");
    let hostile = "<i>Launch</i> & \"more\"";
    assert_eq!(app.call(reqwest::Method::PUT, "/v1/topics/doc:7", Some(json!({"name": hostile}))).await.0, 201);
    for (topic, users) in [("doc:42", json!(["ada", "bob"])), ("doc:7", json!(["ada"])), ("doc:9", json!(["ada"]))] {
        let (status, body) = app.post(&format!("/v1/topics/{topic}/subscribers"), json!({"user_ids": users})).await;
        assert_eq!(status, 200, "{body}");
    }
    let token = user_token(&app, "ada").await;
    let (status, center) = as_user(&app, &token, reqwest::Method::GET, None).await;
    assert_eq!(status, 200, "{center}");
    assert_eq!(
        center["topics"],
        json!([
            {"topic": "doc:42", "name": "Roadmap", "muted": false},
            {"topic": "doc:7", "name": hostile, "muted": false},
            {"topic": "doc:9", "name": null, "muted": false},
        ]),
        "{center}"
    );

    // Muted through the API, audited in words.
    let (status, center) =
        as_user(&app, &token, reqwest::Method::PUT, Some(json!({"topics": {"doc:42": false}}))).await;
    assert_eq!((status, &center["topics"][0]["muted"]), (200, &json!(true)), "{center}");
    let (_, center) = as_user(&app, &token, reqwest::Method::GET, None).await;
    assert_eq!(center["topics"][0], json!({"topic": "doc:42", "name": "Roadmap", "muted": true}), "{center}");
    let audit = app.db.store.audit_for_target("user:ada", 10).await.unwrap();
    assert_eq!(audit[0].detail.as_deref(), Some("topic doc:42: muted"), "{audit:?}");

    // Not topic keys, and a topic's mute sent as a category.
    for (body, field) in [
        (json!({"topics": {"doc 42": false}}), "topics.doc 42"),
        (json!({"topics": {"": true}}), "topics."),
        (json!({"categories": {"topic:doc:42": {"*": false}}}), "categories.topic:doc:42"),
    ] {
        let (status, problem) = as_user(&app, &token, reqwest::Method::PUT, Some(body.clone())).await;
        assert_eq!((status, problem["errors"][0]["field"].as_str()), (422, Some(field)), "{body} → {problem}");
    }
    let (status, problem) = as_user(&app, &token, reqwest::Method::PUT, Some(json!({"topic": {}}))).await;
    assert!(status == 400 || status == 422, "an unknown field is refused: {status} {problem}");

    // The next trigger to the muted topic: suppressed for ada, saying so;
    // bob still gets it, and another topic still reaches ada.
    let mut ids = Vec::new();
    for topic in ["doc:42", "doc:7"] {
        let (status, answer) =
            app.post("/v1/triggers", json!({"type": "doc.commented", "topic": topic, "payload": {"name": "x"}})).await;
        assert_eq!(status, 202, "{answer}");
        ids.push(answer["trigger_id"].as_str().unwrap().to_owned());
    }
    let clock: std::sync::Arc<dyn herald::clock::Clock> = std::sync::Arc::new(herald::clock::SystemClock);
    let rules = std::sync::Arc::new(herald::planning::planner::RuleBook::new(app.db.arc()));
    let expander = herald::planning::fan_out::Expander::new(app.db.arc(), clock, rules, Duration::from_secs(1));
    assert_eq!(expander.tick().await.unwrap(), 2);
    app.deliver().await;
    let pair = |u: &str, s: &str| (u.to_owned(), s.to_owned());
    assert_eq!(statuses(&app, &ids[0]).await, [pair("ada", "suppressed"), pair("bob", "sent")]);
    assert_eq!(statuses(&app, &ids[1]).await, [pair("ada", "sent")]);
    let sends = app.db.store.sends_for_user(&common::user("ada"), 10).await.unwrap();
    let suppressed = sends.iter().find(|s| s.status == "suppressed").expect("a suppressed send");
    assert_eq!(suppressed.detail.as_deref(), Some("the user muted topic \"doc:42\""));

    // The hosted page: a box per topic, the muted one unticked, the host's
    // name shown as text. Ticking doc:42 and unticking doc:7 saves both.
    let link = preference_link("ada");
    let html = app.http.get(app.url(&link)).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("Topics you follow") && html.contains("Notify me about Roadmap (doc:42)"), "{html}");
    assert!(html.contains("Notify me about doc:9</label>"), "a topic without a name: {html}");
    assert!(!html.contains("<i>") && html.contains("&lt;i&gt;Launch&lt;&#x2f;i&gt; &amp; &quot;more&quot;"), "{html}");
    let doc = |t: &str| format!("[\"topic:{t}\",\"*\"]");
    let fields = browser_fields(&html, "method=\"post\"", |v| {
        (v == doc("doc:42")).then_some(true).or((v == doc("doc:7")).then_some(false))
    });
    assert!(fields.contains(&("shown", doc("doc:42"))) && !fields.contains(&("was", doc("doc:42"))), "{fields:?}");
    let (status, page) = post_form(&app, &link, &fields).await;
    assert!(status == 200 && page.contains("Saved."), "{status} {page}");
    let (_, center) = as_user(&app, &token, reqwest::Method::GET, None).await;
    let muted: Vec<&Value> = center["topics"].as_array().unwrap().iter().map(|t| &t["muted"]).collect();
    assert_eq!(muted, [&json!(false), &json!(true), &json!(false)], "{center}");
    let audit = app.db.store.audit_for_target("user:ada", 10).await.unwrap();
    assert_eq!(audit[0].detail.as_deref(), Some("topic doc:42: on; topic doc:7: muted"), "{audit:?}");

    // A box naming a key that is not a topic key: refused by field.
    let bad = vec![("shown", doc("doc 42")), ("was", doc("doc 42"))];
    let (status, page) = post_form(&app, &link, &bad).await;
    assert_eq!(status, 422, "{page}");
    assert!(page.contains("topics.doc 42"), "{page}");
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    let mut trials = per_backend_tests![
        a_user_mutes_a_topic_from_the_api_and_the_hosted_page,
        concurrent_preference_changes_are_all_kept,
        concurrent_first_writes_of_a_user_are_not_errors,
        a_deleted_user_stays_deleted,
        the_hosted_page_saves_only_what_the_user_changed,
        any_category_a_rule_accepts_works_in_every_preference_form,
    ];
    trials.extend(named_tests![
        the_preference_view_shows_what_a_person_receives_by_readable_names,
        the_hosted_form_posts_back_under_the_public_path,
        hostile_text_on_the_hosted_page_is_escaped,
    ]);
    common::harness::main(trials)
}
