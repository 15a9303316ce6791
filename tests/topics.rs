//! Topics and their subscribers (`store::topics`, `/v1/topics`), on every
//! backend: a topic's life, which keys are accepted, 10,000 subscribers in
//! one call read back page by page, what a second call, a duplicate and a
//! removal answer, the limits, a user's topics and their erasure, and a
//! subscription a host inserts itself (docs/topics.md's statements).

mod common;

use std::time::Duration;

use common::app::App;
use common::{Backend, T0, TestDb, user};
use herald::domain::{TopicKey, UserId};
use herald::store::{Dialect, Page, RecipientStore, Store, TopicStore};
use reqwest::Method;
use serde_json::{Value, json};

fn key(s: &str) -> TopicKey {
    TopicKey::parse("topic_key", s).unwrap()
}

/// `n` user ids that sort as they are numbered (`u00000`, `u00001`, …).
fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("u{i:05}")).collect()
}

fn users(ids: &[&str]) -> Vec<UserId> {
    ids.iter().map(|u| user(u)).collect()
}

const FIRST: Page<'static> = Page { after: None, limit: 100 };

/// A server whose general body limit (4 KiB in the harness) is far below
/// what 10,000 ids take: the subscriber routes have their own.
async fn start(backend: Backend) -> App {
    App::start_on(backend, |_| {}).await
}

async fn a_topic_is_created_replaced_read_and_deleted(backend: Backend) {
    let app = start(backend).await;
    let body = json!({"name": "Document 42", "description": "Who watches doc 42"});
    let (status, created) = app.call(Method::PUT, "/v1/topics/doc:42", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!((created["topic_key"].as_str(), created["name"].as_str()), (Some("doc:42"), Some("Document 42")));
    // PUT again replaces: a field left out becomes null.
    let (status, replaced) = app.call(Method::PUT, "/v1/topics/doc:42", Some(json!({"name": "Doc 42"}))).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!((replaced["name"].as_str(), &replaced["description"]), (Some("Doc 42"), &Value::Null));
    assert_eq!(replaced["created_at"], created["created_at"]);

    let (status, sub) = app.post("/v1/topics/doc:42/subscribers", json!({"user_ids": ["ada", "bob"]})).await;
    assert_eq!((status, sub), (200, json!({"added": 2, "already": 0, "topic_created": false})));
    let (status, got) = app.get("/v1/topics/doc:42").await;
    assert_eq!((status, &got["subscribers"], &got["name"]), (200, &json!(2), &json!("Doc 42")), "{got}");

    // The list, in key order, a page at a time.
    for k in ["a:1", "z.9"] {
        assert_eq!(app.call(Method::PUT, &format!("/v1/topics/{k}"), Some(json!({}))).await.0, 201);
    }
    let (status, page) = app.get("/v1/topics?limit=2").await;
    assert_eq!(status, 200, "{page}");
    let keys = |p: &Value| p["topics"].as_array().unwrap().iter().map(|t| t["topic_key"].clone()).collect::<Vec<_>>();
    assert_eq!((keys(&page), &page["next_cursor"]), (vec![json!("a:1"), json!("doc:42")], &json!("doc:42")));
    let (_, last) = app.get("/v1/topics?limit=2&cursor=doc:42").await;
    assert_eq!((keys(&last), &last["next_cursor"]), (vec![json!("z.9")], &Value::Null));

    // Deleting takes the subscriptions with it; a second time is a 404.
    let (status, _) = app.call(Method::DELETE, "/v1/topics/doc:42", None).await;
    assert_eq!(status, 204);
    assert_eq!(app.get("/v1/topics/doc:42").await.0, 404);
    let (_, subs) = app.get("/v1/topics/doc:42/subscribers").await;
    assert_eq!(subs["subscriptions"], json!([]));
    let (status, gone) = app.call(Method::DELETE, "/v1/topics/doc:42", None).await;
    assert_eq!(status, 404, "{gone}");

    // A topic without a name is audited as such, not as an empty name.
    use herald::store::OperatorStore;
    let unnamed = app.db.store.audit_for_target("topic:a:1", 10).await.unwrap();
    assert_eq!((unnamed[0].action.as_str(), unnamed[0].detail.as_deref()), ("topic.create", Some("no name")));

    // The audit log names the API key for each change to the topic itself
    // (not for subscribers, which are the users' own following), newest
    // first; the 404 wrote nothing.
    let audit = app.db.store.audit_for_target("topic:doc:42", 10).await.unwrap();
    let said: Vec<(&str, &str, Option<&str>)> =
        audit.iter().map(|a| (a.operator_email.as_str(), a.action.as_str(), a.detail.as_deref())).collect();
    assert_eq!(
        said,
        [
            ("api key \"tests\"", "topic.delete", Some("2 subscription(s) deleted with it")),
            ("api key \"tests\"", "topic.update", Some("name \"Doc 42\"")),
            ("api key \"tests\"", "topic.create", Some("name \"Document 42\"")),
        ]
    );
    app.stop().await;
}

async fn topic_keys_are_checked(backend: Backend) {
    let app = start(backend).await;
    let long = "k".repeat(200);
    for good in ["doc:42", "team.7", "A-z_0.9:x", long.as_str()] {
        let (status, body) = app.call(Method::PUT, &format!("/v1/topics/{good}"), Some(json!({}))).await;
        assert_eq!(status, 201, "{good}: {body}");
    }
    let too_long = "k".repeat(201);
    // As they travel in a path: a space, a slash, a non-ASCII letter, a quote.
    for bad in ["doc%2042", "doc%2F42", "%C3%A9", "doc%2242", too_long.as_str()] {
        for (method, path) in [
            (Method::PUT, format!("/v1/topics/{bad}")),
            (Method::GET, format!("/v1/topics/{bad}")),
            (Method::POST, format!("/v1/topics/{bad}/subscribers")),
            (Method::GET, format!("/v1/topics/{bad}/subscribers")),
        ] {
            let body = (method != Method::GET).then(|| json!({"user_ids": ["ada"]}));
            let body = if method == Method::PUT { Some(json!({})) } else { body };
            let (status, problem) = app.call(method.clone(), &path, body).await;
            assert_eq!(status, 422, "{method} {path}: {problem}");
            assert_eq!(problem["errors"][0]["field"], "topic_key", "{problem}");
            let message = problem["errors"][0]["message"].as_str().unwrap();
            assert!(message.contains("letters, digits and . _ : -"), "{message}");
        }
    }
    // The document says the same, for clients and fuzzers.
    let doc: Value = app.http.get(app.url("/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    let key_schema = &doc["paths"]["/v1/topics/{key}"]["put"]["parameters"][0]["schema"];
    assert_eq!((&key_schema["pattern"], &key_schema["maxLength"]), (&json!("^[A-Za-z0-9._:-]+$"), &json!(200)));
    let ids_schema = &doc["components"]["schemas"]["SubscribersInput"]["properties"]["user_ids"];
    assert_eq!((&ids_schema["minItems"], &ids_schema["maxItems"]), (&json!(1), &json!(10_000)), "{ids_schema}");
    // A cursor is checked as what the list is keyed by.
    let (status, problem) = app.get("/v1/topics?cursor=no%20such").await;
    assert_eq!((status, &problem["errors"][0]["field"]), (422, &json!("cursor")), "{problem}");
    let (status, problem) = app.get("/v1/topics/doc:42/subscribers?cursor=%01").await;
    assert_eq!((status, &problem["errors"][0]["field"]), (422, &json!("cursor")), "{problem}");
    app.stop().await;
}

async fn ten_thousand_subscribers_in_one_call_come_back_once_each_in_order(backend: Backend) {
    let app = start(backend).await;
    let all = ids(10_000);
    // Sent in reverse order: the pages come back in user-id order anyway.
    let sent: Vec<&String> = all.iter().rev().collect();
    let (status, added) = app.post("/v1/topics/doc:big/subscribers", json!({"user_ids": sent})).await;
    assert_eq!((status, added), (200, json!({"added": 10_000, "already": 0, "topic_created": true})));
    let (_, topic) = app.get("/v1/topics/doc:big").await;
    assert_eq!(topic["subscribers"], 10_000, "{topic}");

    let mut read = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1.. {
        assert!(pages <= 11, "more pages than 10,000 / 1,000 + 1");
        let path = match &cursor {
            Some(c) => format!("/v1/topics/doc:big/subscribers?limit=1000&cursor={c}"),
            None => "/v1/topics/doc:big/subscribers?limit=1000".to_owned(),
        };
        let (status, page) = app.get(&path).await;
        assert_eq!(status, 200, "{page}");
        for s in page["subscriptions"].as_array().unwrap() {
            assert_eq!(s["topic_key"], "doc:big");
            read.push(s["user_id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(read, all, "every id once, in order");

    // Again: nothing added, every one already there.
    let (status, again) = app.post("/v1/topics/doc:big/subscribers", json!({"user_ids": all})).await;
    assert_eq!((status, again), (200, json!({"added": 0, "already": 10_000, "topic_created": false})));

    // Some removed, some of them twice in the list, one never subscribed.
    let mut gone: Vec<String> = all[..100].to_vec();
    gone.extend(all[..10].iter().cloned());
    gone.push("nobody".into());
    let (status, removed) =
        app.call(Method::DELETE, "/v1/topics/doc:big/subscribers", Some(json!({"user_ids": gone}))).await;
    assert_eq!((status, removed), (200, json!({"removed": 100})));
    let (_, first) = app.get("/v1/topics/doc:big/subscribers?limit=1").await;
    assert_eq!(first["subscriptions"][0]["user_id"], "u00100", "{first}");
    let (_, topic) = app.get("/v1/topics/doc:big").await;
    assert_eq!(topic["subscribers"], 9_900, "{topic}");
    app.stop().await;
}

async fn the_limits_are_refused_by_name(backend: Backend) {
    let app = start(backend).await;
    let path = "/v1/topics/doc:1/subscribers";
    for (body, field) in [
        (json!({"user_ids": []}), "user_ids"),
        (json!({"user_ids": ids(10_001)}), "user_ids"),
        (json!({"user_ids": ["ada", ""]}), "user_ids[1]"),
        (json!({"user_ids": ["ada", "a\u{7}b"]}), "user_ids[1]"),
    ] {
        for method in [Method::POST, Method::DELETE] {
            let (status, problem) = app.call(method.clone(), path, Some(body.clone())).await;
            assert_eq!((status, &problem["errors"][0]["field"]), (422, &json!(field)), "{method}: {problem}");
        }
    }
    let (_, problem) = app.post(path, json!({"user_ids": ids(10_001)})).await;
    assert!(problem["errors"][0]["message"].as_str().unwrap().contains("1 to 10000"), "{problem}");
    // Nothing was written, not even the topic.
    assert_eq!(app.get("/v1/topics/doc:1").await.0, 404);
    for list in ["/v1/topics", path, "/v1/users/ada/topics"] {
        for limit in ["0", "1001"] {
            let (status, problem) = app.get(&format!("{list}?limit={limit}")).await;
            assert_eq!((status, &problem["errors"][0]["field"]), (422, &json!("limit")), "{list}: {problem}");
        }
    }
    app.stop().await;
}

async fn duplicates_in_one_call_count_once(backend: Backend) {
    let app = start(backend).await;
    let (status, added) =
        app.post("/v1/topics/doc:7/subscribers", json!({"user_ids": ["ada", "ada", "bob", "ada"]})).await;
    assert_eq!((status, added), (200, json!({"added": 2, "already": 0, "topic_created": true})));
    let (status, more) = app.post("/v1/topics/doc:7/subscribers", json!({"user_ids": ["bob", "cy", "cy"]})).await;
    assert_eq!((status, more), (200, json!({"added": 1, "already": 1, "topic_created": false})));
    app.stop().await;
}

async fn a_users_topics_are_listed_and_erased_with_the_user(backend: Backend) {
    let app = start(backend).await;
    for k in ["doc:3", "doc:1", "doc:2"] {
        app.post(&format!("/v1/topics/{k}/subscribers"), json!({"user_ids": ["ada", "bob"]})).await;
    }
    let (status, page) = app.get("/v1/users/ada/topics?limit=2").await;
    assert_eq!(status, 200, "{page}");
    let keys: Vec<&str> =
        page["subscriptions"].as_array().unwrap().iter().map(|s| s["topic_key"].as_str().unwrap()).collect();
    assert_eq!((keys, &page["next_cursor"]), (vec!["doc:1", "doc:2"], &json!("doc:2")));
    let (_, rest) = app.get("/v1/users/ada/topics?limit=2&cursor=doc:2").await;
    assert_eq!(rest["subscriptions"][0]["topic_key"], "doc:3", "{rest}");

    let (status, erased) = app.call(Method::DELETE, "/v1/users/ada", None).await;
    assert_eq!((status, &erased["topic_subscriptions_deleted"]), (200, &json!(3)), "{erased}");
    let (_, none) = app.get("/v1/users/ada/topics").await;
    assert_eq!(none["subscriptions"], json!([]));
    // Bob still follows all three.
    let (_, topic) = app.get("/v1/topics/doc:1").await;
    assert_eq!(topic["subscribers"], 1, "{topic}");
    app.stop().await;
}

/// The store keeps an existing subscription as it was (its time
/// included), and stamps a new one with the clock it is given.
async fn a_subscription_keeps_the_time_it_was_first_made(db: &TestDb) {
    let s = &db.store;
    let later = T0.plus(Duration::from_secs(60));
    let first = s.subscribe(&key("t:1"), &users(&["ada"]), T0).await.unwrap();
    assert_eq!((first.added, first.topic_created), (1, true));
    let second = s.subscribe(&key("t:1"), &users(&["ada", "bob"]), later).await.unwrap();
    assert_eq!((second.added, second.topic_created), (1, false));
    let subs = s.subscribers(&key("t:1"), FIRST).await.unwrap();
    let times: Vec<(&str, _)> = subs.iter().map(|s| (s.user_id.as_str(), s.created_at)).collect();
    assert_eq!(times, vec![("ada", T0), ("bob", later)]);
    let (topic, count) = s.get_topic(&key("t:1")).await.unwrap().unwrap();
    assert_eq!((topic.created_at, topic.name, count), (T0, None, 2));
    let erased = s.erase_user(&user("bob"), later).await.unwrap();
    assert_eq!(erased.topic_subscriptions_deleted, 1);
    assert_eq!(s.user_topics(&user("bob"), FIRST).await.unwrap(), vec![]);
}

/// docs/topics.md's statement for a host that subscribes a user in its own
/// transaction, as written there for each database: the API sees the row,
/// stamped by the database's clock, and running it twice is harmless.
async fn a_subscription_a_host_inserts_is_seen_by_the_api(db: &TestDb) {
    let insert = match db.store.dialect() {
        Dialect::Sqlite | Dialect::Postgres => {
            "INSERT INTO engagement_topic_subscriptions (topic_key, user_id) VALUES ('doc:42', 'host-user') \
             ON CONFLICT (topic_key, user_id) DO NOTHING"
        }
        Dialect::MySql => {
            "INSERT IGNORE INTO engagement_topic_subscriptions (topic_key, user_id) VALUES ('doc:42', 'host-user')"
        }
    };
    let before = db.store.database_time().await.unwrap();
    for _ in 0..2 {
        let mut tx = db.store.pool().begin().await.unwrap();
        sqlx::query(insert).execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
    }
    let subs = db.store.subscribers(&key("doc:42"), FIRST).await.unwrap();
    assert_eq!(subs.len(), 1, "{subs:?}");
    assert_eq!(subs[0].user_id, "host-user");
    let after = db.store.database_time().await.unwrap();
    // The default is the database's clock in milliseconds (MariaDB's may
    // round a millisecond up from the same instant).
    assert!(before.0 - 1 <= subs[0].created_at.0 && subs[0].created_at.0 <= after.0 + 1, "{subs:?}");
    assert_eq!(db.store.user_topics(&user("host-user"), FIRST).await.unwrap(), subs);
    // No topic row was written, and none is needed: the API adds to it.
    assert!(db.store.get_topic(&key("doc:42")).await.unwrap().is_none());
    let more = db.store.subscribe(&key("doc:42"), &users(&["host-user", "ada"]), T0).await.unwrap();
    assert_eq!((more.added, more.topic_created), (1, true));
    // And a recipient for the same id is a different thing.
    assert!(db.store.get_recipient(&user("host-user")).await.unwrap().is_none());
}

/// `herald topics ARGS` on `db`: whether it succeeded, its output and its errors.
fn herald_topics(db: &TestDb, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("topics")
        .args(args)
        .args(["--database-url", db.url.as_str()])
        .env_remove("HERALD_DATABASE_URL")
        .env("HERALD_LOG", "warn")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.success(), text(out.stdout), text(out.stderr))
}

async fn the_command_line_lists_shows_and_subscribes(db: &TestDb) {
    let (ok, out, err) = herald_topics(db, &["subscribe", "doc:9", "ada", "bob", "ada"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "topic doc:9 created; 2 subscribed, 0 already subscribed");
    let (ok, out, err) = herald_topics(db, &["subscribe", "doc:9", "bob", "cy"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "1 subscribed, 1 already subscribed");
    let (ok, out, err) = herald_topics(db, &["show", "doc:9", "--limit", "2"]);
    assert!(ok, "{err}");
    assert!(out.contains("topic doc:9") && out.contains("3 subscriber(s)"), "{out}");
    assert!(out.contains("  ada  since ") && out.contains("  bob  since ") && !out.contains("cy"), "{out}");
    let (ok, out, err) = herald_topics(db, &["list"]);
    assert!(ok && out.starts_with("doc:9  -  created "), "{out}{err}");
    // Refusals name the argument and what is accepted; nothing is written.
    let (ok, _, err) = herald_topics(db, &["subscribe", "doc 9", "ada"]);
    assert!(!ok && err.contains("KEY") && err.contains("letters, digits and . _ : -"), "{err}");
    let (ok, _, err) = herald_topics(db, &["show", "doc:10"]);
    assert!(!ok && err.contains("no topic \"doc:10\""), "{err}");
    let (ok, _, err) = herald_topics(db, &["list", "--limit", "0"]);
    assert!(!ok && err.contains("--limit"), "{err}");
    assert_eq!(db.store.list_topics(FIRST).await.unwrap().len(), 1);
}

backend_tests!(
    a_subscription_keeps_the_time_it_was_first_made,
    a_subscription_a_host_inserts_is_seen_by_the_api,
    the_command_line_lists_shows_and_subscribes,
);

fn main() -> std::process::ExitCode {
    let mut trials = backend_trials();
    trials.extend(per_backend_tests![
        a_topic_is_created_replaced_read_and_deleted,
        topic_keys_are_checked,
        ten_thousand_subscribers_in_one_call_come_back_once_each_in_order,
        the_limits_are_refused_by_name,
        duplicates_in_one_call_count_once,
        a_users_topics_are_listed_and_erased_with_the_user,
    ]);
    common::harness::main(trials)
}
