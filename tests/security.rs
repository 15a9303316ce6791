//! The security review, as tests: every route in `herald::http::access::ROUTES`
//! is called as each kind of caller that must be refused, and refused; the
//! table agrees with the OpenAPI document and docs/security.md; secrets given to
//! the server never appear in its log; hostile text goes into SQL only as
//! bound values.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Backend;
use common::app::{App, login_form};
use herald::clock::{Clock, Millis, SystemClock};
use herald::domain::UserId;
use herald::http::access::{Access, ROUTES, Route};
use herald::http::user_auth::TokenKey;
use herald::store::{NewInboxMessage, RecipientStore, RuleStore, Store, SuppressionStore, new_id};
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN_SECRET: &str = "an inbox token secret of at least thirty-two characters";
/// A Web Push private key: its public half is served to anyone, it never is.
const VAPID_PRIVATE_KEY: &str = "GKe9tMZoLVTikE6tJnZ1PfWJH8QDp2mmVzXY5OnU2Yo";

fn routes(access: Access) -> impl Iterator<Item = &'static Route> {
    ROUTES.iter().filter(move |r| r.access == access)
}

/// The route with its placeholders filled in; `id` for every one.
fn concrete(route: &Route, id: &str) -> String {
    let mut path = route.path.to_owned();
    for p in ["{id}", "{user_id}", "{token}", "{key}"] {
        path = path.replace(p, id);
    }
    path
}

fn method(route: &Route) -> Method {
    Method::from_bytes(route.method.as_bytes()).unwrap()
}

/// Sends `route` with an optional `Authorization` header and a small JSON
/// body (the body must not matter: refusal comes before the handler).
async fn send(app: &App, route: &Route, id: &str, authorization: Option<&str>) -> reqwest::Response {
    let mut req = app.http.request(method(route), app.url(&concrete(route, id)));
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    if route.method != "GET" {
        req = req.json(&json!({}));
    }
    req.send().await.unwrap()
}

async fn start() -> App {
    App::start_with(|c| {
        c.inbox.token_secret = Some(TOKEN_SECRET.into());
        c.push.vapid_private_key = Some(VAPID_PRIVATE_KEY.into());
        c.push.vapid_subject = Some("mailto:ops@example.com".into());
    })
    .await
}

async fn the_route_table_and_the_openapi_document_agree() {
    let app = start().await;
    let doc: Value = app.http.get(app.url("/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    let mut documented = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (m, op) in item.as_object().unwrap() {
            let route = ROUTES
                .iter()
                .find(|r| r.path == path && r.method.eq_ignore_ascii_case(m))
                .unwrap_or_else(|| panic!("{m} {path} is in the OpenAPI document but not in access::ROUTES"));
            let schemes: Vec<&str> = op["security"]
                .as_array()
                .map(|a| a.iter().flat_map(|s| s.as_object().unwrap().keys().map(String::as_str)).collect())
                .unwrap_or_default();
            let expected = match route.access {
                Access::ApiKey => vec!["api_key"],
                // The header, or `?token=` for clients that cannot set one.
                Access::UserToken => vec!["user_token", "user_token_query"],
                _ => vec![],
            };
            assert_eq!(schemes, expected, "{m} {path}: the document's security does not match {:?}", route.access);
            documented += 1;
        }
    }
    for r in ROUTES.iter().filter(|r| r.path.starts_with("/v1/") || r.path.starts_with("/u/")) {
        if r.path == "/v1/openapi.json" {
            continue;
        }
        let op = &doc["paths"][r.path][r.method.to_ascii_lowercase()];
        assert!(op.is_object(), "{} {} is in access::ROUTES but not in the OpenAPI document", r.method, r.path);
    }
    assert!(documented >= 30, "only {documented} operations documented");
    app.stop().await;
}

fn the_readme_lists_every_route_with_who_may_call_it() {
    // The access table moved from the README to docs/security.md.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md")).unwrap();
    for r in ROUTES {
        let row = format!("| `{} {}` | {} |", r.method, r.path, r.access.describe());
        assert!(doc.contains(&row), "docs/security.md's access table lacks the row\n{row}");
    }
}

async fn api_key_routes_refuse_every_other_caller_and_change_nothing() {
    let app = start().await;
    let now = SystemClock.now();
    let (revoked, row) = herald::http::auth::generate("revoked", now);
    app.db.store.insert_api_key(&row).await.unwrap();
    app.db.store.revoke_api_key(&row.id, now).await.unwrap();
    let user_token =
        TokenKey::new(TOKEN_SECRET.as_bytes()).issue(&UserId::parse("u", "ada").unwrap(), Millis(now.0 + 3_600_000));
    let basic = format!("Basic {}", base64_encode(&format!("x:{}", app.key)));
    let refused = [
        None,
        Some("Bearer hrld_not-a-key-this-server-issued".to_owned()),
        Some(format!("Bearer {revoked}")),
        Some(format!("Bearer {user_token}")),
        Some(basic),
        Some(app.key.clone()), // no scheme
    ];
    let mut checked = 0;
    for route in routes(Access::ApiKey) {
        for auth in &refused {
            let resp = send(&app, route, "x1", auth.as_deref()).await;
            assert_eq!(resp.status(), 401, "{} {} with {auth:?}", route.method, route.path);
            assert_eq!(resp.headers()["www-authenticate"], "Bearer");
            checked += 1;
        }
        // The key itself gets past the gate (whatever the handler then says).
        let resp = send(&app, route, "x1", Some(&format!("Bearer {}", app.key))).await;
        assert_ne!(resp.status(), 401, "{} {} refused the valid key", route.method, route.path);
    }
    assert!(checked >= 6 * 20, "{checked}");
    // Nothing a refused call asked for happened. (The valid calls above sent
    // empty bodies, which every creating route refuses with 422.)
    assert!(app.db.store.list_rules().await.unwrap().is_empty());
    assert!(app.db.store.list_suppressions(None, 10).await.unwrap().is_empty());
    app.stop().await;
}

fn base64_encode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn inbox_routes_take_only_a_genuine_token_and_reach_only_its_user() {
    let app = start().await;
    let now = SystemClock.now();
    let key = TokenKey::new(TOKEN_SECRET.as_bytes());
    let ada = UserId::parse("u", "ada").unwrap();
    let bob = UserId::parse("u", "bob").unwrap();
    let ada_token = key.issue(&ada, Millis(now.0 + 3_600_000));
    let bob_token = key.issue(&bob, Millis(now.0 + 3_600_000));
    let expired = key.issue(&ada, Millis(now.0 - 1_000));
    let foreign = TokenKey::new(b"another deployment's secret, also 32+ chars").issue(&ada, Millis(now.0 + 3_600_000));
    // A token for ada with bob's signature spliced on.
    let spliced = format!("{}.{}", ada_token.split('.').next().unwrap(), bob_token.split('.').nth(1).unwrap());
    let refused = [
        None,
        Some(format!("Bearer {}", app.key)),
        Some(format!("Bearer {expired}")),
        Some(format!("Bearer {foreign}")),
        Some(format!("Bearer {spliced}")),
        Some("Bearer not.a-token".to_owned()),
    ];
    for route in routes(Access::UserToken) {
        for auth in &refused {
            let resp = send(&app, route, "x1", auth.as_deref()).await;
            assert_eq!(resp.status(), 401, "{} {} with {auth:?}", route.method, route.path);
        }
        // The stream's `?token=` form is checked the same way.
        let url = format!("{}?token={foreign}", app.url(&concrete(route, "x1")));
        assert_eq!(app.http.request(method(route), url).send().await.unwrap().status(), 401);
        let resp = send(&app, route, "x1", Some(&format!("Bearer {ada_token}"))).await;
        assert_ne!(resp.status(), 401, "{} {} refused a genuine token", route.method, route.path);
    }

    // Bob's genuine token does not reach ada's message.
    let id = new_id();
    let msg = NewInboxMessage {
        outbox_id: id.clone(),
        user_id: "ada".into(),
        title: "for ada only".into(),
        body: None,
        url: None,
        data: None,
    };
    common::deliver_inbox(&app.db.store, &msg, now).await;
    let ada_msg = app.db.store.inbox_for_user(&ada, 10).await.unwrap().remove(0).id;
    for route in routes(Access::UserToken).filter(|r| r.path.contains("{id}")) {
        let resp = send(&app, route, &ada_msg, Some(&format!("Bearer {bob_token}"))).await;
        assert_eq!(resp.status(), 404, "{} {} let bob touch ada's message", route.method, route.path);
    }
    let bob_list: Value =
        app.http.get(app.url("/v1/inbox")).bearer_auth(&bob_token).send().await.unwrap().json().await.unwrap();
    assert!(!bob_list.to_string().contains("for ada only"), "{bob_list}");
    let read_all = app.http.post(app.url("/v1/inbox/read-all")).bearer_auth(&bob_token).send().await.unwrap();
    assert_eq!(read_all.status(), 200);
    let after = app.db.store.inbox_for_user(&ada, 10).await.unwrap().remove(0);
    assert!(after.read_at.is_none() && after.seen_at.is_none() && after.archived_at.is_none(), "{after:?}");
    app.stop().await;
}

async fn provider_webhooks_refuse_requests_without_the_providers_proof() {
    // Unconfigured: every provider route refuses everything.
    let app = start().await;
    for route in routes(Access::ProviderSignature) {
        let resp = send(&app, route, "", Some(&format!("Bearer {}", app.key))).await;
        // 401 for the bounce webhooks; 403 for the SMS callbacks, which the
        // issue that asked for them names (Twilio's own convention).
        let status = resp.status().as_u16();
        assert!(
            status == 401 || status == 403,
            "{} {} answered while unconfigured: {status}",
            route.method,
            route.path
        );
    }
    app.stop().await;

    // Configured: a request without the proof, or with a wrong one, is refused.
    let app = App::start_with(|c| {
        c.bounces.mailgun_signing_key = Some("key-mailgun-signing".into());
        c.bounces.postmark_user = Some("postmark".into());
        c.bounces.postmark_password = Some("the-right-password".into());
        c.bounces.ses_topic_arns = vec!["arn:aws:sns:us-east-1:123456789012:bounces".into()];
    })
    .await;
    let wrong_basic = format!("Basic {}", base64_encode("postmark:a-wrong-password"));
    for (path, auth) in [
        ("/v1/bounces/postmark", None),
        ("/v1/bounces/postmark", Some(wrong_basic.as_str())),
        ("/v1/bounces/mailgun", None),
        ("/v1/bounces/ses", None),
    ] {
        let route = ROUTES.iter().find(|r| r.path == path).unwrap();
        let body = json!({
            "RecordType": "Bounce", "Email": "ada@example.com", "Type": "HardBounce",
            "signature": {"timestamp": "1", "token": "t", "signature": "00"},
            "event-data": {"event": "failed", "recipient": "ada@example.com"},
            "Type_": "Notification", "TopicArn": "arn:aws:sns:us-east-1:123456789012:bounces"
        });
        let mut req = app.http.post(app.url(route.path)).json(&body);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        assert_eq!(req.send().await.unwrap().status(), 401, "{path} with {auth:?}");
    }
    assert!(app.db.store.list_suppressions(None, 10).await.unwrap().is_empty());
    app.stop().await;
}

async fn unsubscribe_links_refuse_forged_tokens_and_change_nothing() {
    let app = start().await;
    for route in routes(Access::SignedLink) {
        for token in ["forged", "eyJhIjoiYiJ9.AAAA", ""] {
            let resp = app
                .http
                .request(method(route), app.url(&concrete(route, token)))
                .header("content-type", "application/x-www-form-urlencoded")
                .body("List-Unsubscribe=One-Click")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            // 403 for a delivery report or inbound text without Herald's token.
            assert!(
                status == 400 || status == 403 || status == 404,
                "{} {} with {token:?}: {status}",
                route.method,
                route.path
            );
        }
    }
    assert!(app.db.store.list_suppressions(None, 10).await.unwrap().is_empty());
    app.stop().await;
}

async fn public_routes_answer_anyone_and_reveal_no_secret() {
    let app = start().await;
    for route in routes(Access::Public) {
        let resp = send(&app, route, "", None).await;
        if route.method == "GET" {
            assert_eq!(resp.status(), 200, "{} {}", route.method, route.path);
        } else {
            // The login form: open to anyone, and a body that is not a login is refused plainly.
            assert!(resp.status().is_client_error(), "{} {}: {}", route.method, route.path, resp.status());
        }
        let body = resp.text().await.unwrap();
        for secret in [app.key.as_str(), TOKEN_SECRET, "a test secret of sufficient length", VAPID_PRIVATE_KEY] {
            assert!(!body.contains(secret), "{} {} shows a secret", route.method, route.path);
        }
    }
    app.stop().await;
}

async fn operator_screen_routes_refuse_everyone_without_a_session_and_forms_without_their_token() {
    use herald::store::OperatorStore;
    let app = start().await;
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let now = SystemClock.now();
    let (op, session) = app.operator_session().await;
    let hash = herald::http::ui::session::session_hash(session);
    let expired = "an-expired-session-token";
    app.db
        .store
        .create_session(
            &herald::http::ui::session::session_hash(expired),
            &op,
            Millis(now.0 - 7_200_000),
            Millis(now.0 - 1),
        )
        .await
        .unwrap();
    let csrf = herald::http::ui::session::csrf_token(session);
    let refused: [(&str, Option<String>); 4] = [
        ("cookie", None),
        ("cookie", Some("herald_session=forged-session-token".into())),
        ("cookie", Some(format!("herald_session={expired}"))),
        ("authorization", Some(format!("Bearer {}", app.key))),
    ];
    let mut checked = 0;
    for route in routes(Access::OperatorSession) {
        let url = app.url(&concrete(route, "x1"));
        for (header, value) in &refused {
            let mut req = no_redirects.request(method(route), &url);
            if let Some(v) = value {
                req = req.header(*header, v);
            }
            if route.method == "POST" {
                // Even with the right token for some session, no session is no entry.
                req = req.form(&[("csrf", csrf.as_str())]);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 303, "{} {} with {header}: {value:?}", route.method, route.path);
            let to = resp.headers()["location"].to_str().unwrap();
            assert!(to.starts_with("/ui/login"), "{} {} sent to {to}", route.method, route.path);
            checked += 1;
        }
        let cookie = format!("herald_session={session}");
        if route.method == "POST" {
            for form in [
                vec![],
                vec![("csrf", "not-the-token")],
                vec![("csrf", herald::http::ui::session::csrf_token("another").leak() as &str)],
            ] {
                let resp = no_redirects.post(&url).header("cookie", &cookie).form(&form).send().await.unwrap();
                assert_eq!(resp.status(), 403, "{} {} with form {form:?}", route.method, route.path);
            }
        }
        // The session itself gets past the gate (logout is checked last: it ends the session).
        if route.path == "/ui/logout" {
            continue;
        }
        let mut req = no_redirects.request(method(route), &url).header("cookie", &cookie);
        if route.method == "POST" {
            req = req.form(&[("csrf", csrf.as_str())]);
        }
        let resp = req.send().await.unwrap();
        let to = resp.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("");
        assert!(!to.starts_with("/ui/login"), "{} {} refused a live session", route.method, route.path);
    }
    assert!(checked >= 4 * 20, "{checked}");
    let resp = no_redirects
        .post(app.url("/ui/logout"))
        .header("cookie", format!("herald_session={session}"))
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!((resp.status().as_u16(), resp.headers()["location"].to_str().unwrap()), (303, "/ui/login?m=out"));
    assert!(app.db.store.session(&hash).await.unwrap().is_none(), "logout ends the session in the database");
    // The refused forms changed nothing (the last, valid, calls carried empty forms).
    assert!(app.db.store.list_rules().await.unwrap().is_empty());
    assert!(app.db.store.list_suppressions(None, 10).await.unwrap().is_empty());

    // The login form itself: without its own token, or with another
    // browser's, no session is made even with the right password.
    let (cookie, token) = login_form(&app.http, &app.base).await;
    let (_, other_token) = login_form(&app.http, &app.base).await;
    for (c, t) in [(None, token.as_str()), (Some(cookie.as_str()), ""), (Some(cookie.as_str()), other_token.as_str())] {
        let mut req = no_redirects.post(app.url("/ui/login")).form(&[
            ("email", "ops@example.com"),
            ("password", "a long enough password"),
            ("csrf", t),
        ]);
        if let Some(c) = c {
            req = req.header("cookie", c);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 403, "login with cookie {c:?} and token {t:?}");
        assert!(
            resp.headers().get_all("set-cookie").iter().all(|v| !v.to_str().unwrap().starts_with("herald_session="))
        );
    }
    app.stop().await;
}

/// A user id made of SQL syntax is stored and read back as the text it is,
/// on every backend: the store binds values and never splices them into SQL.
async fn hostile_text_is_data_not_sql(backend: Backend) {
    let app = App::start_on(backend, |c| c.inbox.token_secret = Some(TOKEN_SECRET.into())).await;
    let hostile = "o'brien\"; DROP TABLE engagement_outbox; -- \\' OR '1'='1";
    let path = format!("/v1/users/{}", urlencode(hostile));
    let (status, body) = app
        .call(
            Method::PUT,
            &path,
            Some(json!({"email": "ob@example.com", "name": "x'); DELETE FROM engagement_rules;--"})),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, body) = app.get(&path).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["user_id"], hostile, "{body}");
    assert_eq!(body["name"], "x'); DELETE FROM engagement_rules;--", "{body}");
    let payload = json!({"note": "'; DROP TABLE engagement_triggers;--"});
    let (status, body) =
        app.post("/v1/triggers", json!({"type": "sql.check", "user_id": hostile, "payload": payload})).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = app.get(&format!("{path}/sends")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("sql.check"), "the trigger is in the user's timeline: {body}");
    // The tables are all still there and answer.
    let (status, _) = app.get("/v1/outbox").await;
    assert_eq!(status, 200);
    let (status, _) = app.get("/v1/rules").await;
    assert_eq!(status, 200);
    app.stop().await;
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

async fn hostile_text_is_data_not_sql_sqlite() {
    hostile_text_is_data_not_sql(Backend::Sqlite).await;
}

async fn hostile_text_is_data_not_sql_postgres() {
    hostile_text_is_data_not_sql(Backend::Postgres).await;
}

async fn hostile_text_is_data_not_sql_mysql() {
    hostile_text_is_data_not_sql(Backend::MySql).await;
}

/// `herald serve` as a process, its stderr collected.
struct Served {
    child: Child,
    log: Arc<Mutex<String>>,
    base: String,
}

impl Served {
    fn start(dir: &std::path::Path) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
            .current_dir(dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            // Everything Herald says, and its libraries' debug output.
            .env("HERALD_LOG", "debug,herald=trace")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(addr) = line.split("addr=").nth(1) {
                    let _ = tx.send(addr.split_whitespace().next().unwrap_or("").to_owned());
                }
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
            let mut rest = String::new();
            let _ = reader.read_to_string(&mut rest);
        });
        let addr = rx.recv_timeout(Duration::from_secs(30)).expect("serve did not say where it listens");
        Served { child, log, base: format!("http://{addr}") }
    }

    fn stop(mut self) -> String {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(100));
        self.log.lock().unwrap().clone()
    }
}

async fn secrets_given_to_the_server_never_reach_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = [
        "addr-secret-XYZZY-0001",
        "inbox-token-secret-XYZZY-0002-padding-padding",
        "smtp-password-XYZZY-0003",
        "mailgun-key-XYZZY-0004",
        "postmark-password-XYZZY-0005",
        "postmark-wrong-XYZZY-0006",
        "operator-password-XYZZY-0009",
        "operator-wrong-XYZZY-0010",
    ];
    let webhook_secret = format!("whsec_{}", base64_encode("webhook-secret-XYZZY-0007"));
    std::fs::write(
        dir.path().join("herald.toml"),
        format!(
            r#"
database_url = "sqlite://{db}"
[worker]
poll = "100ms"
retry = "1h"
[webhook]
signing_secret = "{webhook_secret}"
[inbox]
token_secret = "{tok}"
[email]
transport = "smtp://mailer:{smtp}@127.0.0.1:1"
from = "Herald <herald@example.com>"
public_url = "http://127.0.0.1:1"
address_secret = "{addr}"
[bounces]
mailgun_signing_key = "{mg}"
postmark_user = "postmark"
postmark_password = "{pm}"
[push]
vapid_private_key = "{VAPID_PRIVATE_KEY}"
vapid_subject = "mailto:ops@example.com"
"#,
            db = dir.path().join("herald.db").display(),
            tok = secrets[1],
            smtp = secrets[2],
            addr = secrets[0],
            mg = secrets[3],
            pm = secrets[4],
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_herald"))
        .current_dir(dir.path())
        .args(["keys", "create", "--name", "review"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let key = stdout.split_whitespace().find(|w| w.starts_with("hrld_")).expect("the key is printed").to_owned();

    let mut add = Command::new(env!("CARGO_BIN_EXE_herald"))
        .current_dir(dir.path())
        .args(["operators", "add", "--email", "ops@example.com", "--password-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut add.stdin.take().unwrap(), format!("{}\n", secrets[6]).as_bytes()).unwrap();
    let out = add.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let served = Served::start(dir.path());
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", served.base);
    let wrong_key = "hrld_wrong-key-XYZZY-0008";
    assert_eq!(http.get(url("/v1/rules")).bearer_auth(&key).send().await.unwrap().status(), 200);
    assert_eq!(http.get(url("/v1/rules")).bearer_auth(wrong_key).send().await.unwrap().status(), 401);
    let put = http.put(url("/v1/users/ada")).bearer_auth(&key).json(&json!({"email": "ada@example.com"}));
    assert!(put.send().await.unwrap().status().is_success());
    let token: Value =
        http.post(url("/v1/users/ada/token")).bearer_auth(&key).send().await.unwrap().json().await.unwrap();
    let token = token["token"].as_str().expect("a token").to_owned();
    assert_eq!(http.get(url("/v1/inbox")).bearer_auth(&token).send().await.unwrap().status(), 200);
    let mut stream = http.get(url(&format!("/v1/inbox/stream?token={token}"))).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let _ = tokio::time::timeout(Duration::from_millis(200), stream.chunk()).await;
    drop(stream);
    for password in [secrets[4], secrets[5]] {
        let resp = http
            .post(url("/v1/bounces/postmark"))
            .basic_auth("postmark", Some(password))
            .json(&json!({"RecordType": "Delivery"}))
            .send()
            .await
            .unwrap();
        assert!(resp.status().as_u16() < 500, "{}", resp.status());
    }
    // Operator logins, refused and accepted: the log says who and why, never the password.
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    for (password, status) in [(secrets[7], 401), (secrets[6], 303)] {
        let (cookie, csrf) = login_form(&http, &served.base).await;
        let resp = no_redirects
            .post(url("/ui/login"))
            .header("cookie", cookie)
            .form(&[("email", "ops@example.com"), ("password", password), ("csrf", csrf.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), status);
    }
    // An email the worker tries to send to an SMTP server that refuses the
    // connection: the failure is logged, the password in the URL is not.
    let rule = json!({
        "name": "mail", "trigger_type": "hello", "channel": "email", "category": "c", "delay": 0, "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Hi", "text": "Hello"}}}
    });
    assert_eq!(http.post(url("/v1/rules")).bearer_auth(&key).json(&rule).send().await.unwrap().status(), 201);
    let trigger = json!({"type": "hello", "user_id": "ada", "payload": {}});
    assert!(
        http.post(url("/v1/triggers")).bearer_auth(&key).json(&trigger).send().await.unwrap().status().is_success()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sends: Value =
            http.get(url("/v1/users/ada/sends")).bearer_auth(&key).send().await.unwrap().json().await.unwrap();
        if sends.to_string().contains("127.0.0.1") || sends.to_string().contains("onnect") {
            break;
        }
        assert!(Instant::now() < deadline, "the worker did not try the SMTP server: {sends}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = served.stop();
    assert!(
        log.contains("herald serving") && log.lines().count() > 20,
        "the log is too thin to prove anything:\n{log}"
    );
    for secret in secrets.iter().copied().chain([
        key.as_str(),
        wrong_key,
        token.as_str(),
        webhook_secret.as_str(),
        VAPID_PRIVATE_KEY,
    ]) {
        assert!(!log.contains(secret), "the log contains the secret {secret:?}:\n{log}");
    }
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        the_route_table_and_the_openapi_document_agree,
        #[sync]
        the_readme_lists_every_route_with_who_may_call_it,
        api_key_routes_refuse_every_other_caller_and_change_nothing,
        inbox_routes_take_only_a_genuine_token_and_reach_only_its_user,
        provider_webhooks_refuse_requests_without_the_providers_proof,
        unsubscribe_links_refuse_forged_tokens_and_change_nothing,
        public_routes_answer_anyone_and_reveal_no_secret,
        operator_screen_routes_refuse_everyone_without_a_session_and_forms_without_their_token,
        hostile_text_is_data_not_sql_sqlite,
        hostile_text_is_data_not_sql_postgres,
        hostile_text_is_data_not_sql_mysql,
        secrets_given_to_the_server_never_reach_its_log,
    ])
}
