//! The defects an outside review found, each end to end through a
//! running server: what once crashed it, exhausted it or let someone past
//! it. Each test here failed on the code before its fix.

mod common;

use common::Backend;
use common::app::{App, login_form, one_click};

/// 50,000 levels of `message/rfc822` (1.6 MB) once aborted the whole process
/// with a stack overflow. Now the bounce is refused with a 422 naming why,
/// and the server goes on answering.
async fn a_deeply_nested_bounce_is_refused_and_the_server_survives() {
    let app = App::start().await;
    let mut body = b"From: MAILER-DAEMON@example.com\r\nSubject: Undelivered Mail Returned to Sender\r\n".to_vec();
    for _ in 0..50_000 {
        body.extend_from_slice(b"Content-Type: message/rfc822\r\n\r\n");
    }
    body.extend_from_slice(b"From: a@example.com\r\n\r\nbody\r\n");
    let resp = app
        .http
        .post(app.url("/v1/bounces/mail"))
        .bearer_auth(&app.key)
        .header("content-type", "message/rfc822")
        .body(body)
        .send()
        .await
        .expect("the server answers instead of dying");
    assert_eq!(resp.status().as_u16(), 422);
    let problem: serde_json::Value = resp.json().await.unwrap();
    assert!(problem.to_string().contains("manual review"), "{problem}");
    let health = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    app.stop().await;
}

/// A connection that sends half a header block is closed once
/// `http.header_read_timeout` has passed; before, it was held forever.
async fn half_sent_request_headers_are_timed_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = App::start_with(|c| c.http.header_read_timeout = std::time::Duration::from_secs(1)).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 1024];
    // The bound only keeps a broken build from hanging the test.
    let read = tokio::time::timeout(std::time::Duration::from_secs(30), conn.read(&mut buf))
        .await
        .expect("the server closes a connection whose headers never finish");
    // Closed (0 bytes), reset, or a 408: anything but a served request.
    if let Ok(n) = read {
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(n == 0 || answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    assert!(started.elapsed() >= std::time::Duration::from_millis(900), "closed before the timeout");
    app.stop().await;
}

/// At `http.max_connections` the server stops accepting: a further client
/// waits until an open connection closes, then is served.
async fn open_connections_are_bounded() {
    use tokio::io::AsyncWriteExt;
    let app = App::start_with(|c| c.http.max_connections = 2).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        held.push(c);
    }
    let client = reqwest::Client::new();
    let url = app.url("/healthz");
    let third = tokio::spawn(async move { client.get(url).send().await.map(|r| r.status().as_u16()) });
    // Not served while both slots are taken (the header timeout is 10 s).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!third.is_finished(), "a third connection was served past http.max_connections = 2");
    drop(held.pop());
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), third).await.unwrap().unwrap().unwrap();
    assert_eq!(status, 200);
    drop(held);
    app.stop().await;
}

/// Every URL the review found answering 500 on PostgreSQL because of a
/// `%00` in an id, cursor or filter, with the credentials each needs, must
/// answer 4xx on all three databases.
async fn nul_in_ids_cursors_and_filters_is_a_4xx(backend: Backend) {
    let app = App::start_on(backend, |_| {}).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let (_, session) = app.operator_session().await;
    let csrf = herald::http::ui::session::csrf_token(session);
    let (_, user_token) = app.post("/v1/users/u-1/token", serde_json::json!({})).await;
    let user_token = user_token["token"].as_str().expect("a user token").to_owned();

    let api = |m: reqwest::Method, p: &str| http.request(m, app.url(p)).bearer_auth(&app.key);
    let inbox = |m: reqwest::Method, p: &str| http.request(m, app.url(p)).bearer_auth(&user_token);
    let ui =
        |m: reqwest::Method, p: &str| http.request(m, app.url(p)).header("cookie", format!("herald_session={session}"));
    use reqwest::Method as M;
    let requests = vec![
        ("GET /v1/outbox?cursor=%00", api(M::GET, "/v1/outbox?cursor=%00")),
        ("GET /v1/outbox?user_id=%00", api(M::GET, "/v1/outbox?user_id=%00")),
        ("GET /v1/outbox?rule_id=%00", api(M::GET, "/v1/outbox?rule_id=%00")),
        ("GET /v1/rules/%00", api(M::GET, "/v1/rules/%00")),
        ("POST /v1/outbox/%00/retry", api(M::POST, "/v1/outbox/%00/retry")),
        ("GET /v1/inbox?cursor=%00", inbox(M::GET, "/v1/inbox?cursor=%00")),
        ("POST /v1/inbox/%00/seen", inbox(M::POST, "/v1/inbox/%00/seen")),
        ("GET /ui/outbox/%00", ui(M::GET, "/ui/outbox/%00")),
        ("GET /ui/audit?before=%00", ui(M::GET, "/ui/audit?before=%00")),
        ("GET /ui/rules/%00", ui(M::GET, "/ui/rules/%00")),
        ("GET /v1/users/%00", api(M::GET, "/v1/users/%00")),
        ("GET /v1/users/%00/sends", api(M::GET, "/v1/users/%00/sends")),
        ("GET /ui/sends?q=%00", ui(M::GET, "/ui/sends?q=%00")),
        (
            "POST /ui/suppressions (form)",
            ui(M::POST, "/ui/suppressions")
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("csrf={csrf}&email=a%00@example.com&reason=manual")),
        ),
    ];
    for (what, req) in requests {
        let status = req.send().await.unwrap().status().as_u16();
        assert!((400..500).contains(&status), "{backend:?}: {what} answered {status}");
    }
    // The login form, unauthenticated, with a NUL in the email.
    let (cookie, login_csrf) = login_form(&http, &app.base).await;
    let status = http
        .post(app.url("/ui/login"))
        .header("cookie", cookie)
        .form(&[("email", "ops\0@b.c"), ("password", "whatever it is"), ("csrf", &login_csrf), ("next", "")])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert!((400..500).contains(&status), "{backend:?}: POST /ui/login with email=ops%00@b.c answered {status}");
    app.stop().await;
}

async fn nul_in_urls_and_forms_sqlite() {
    nul_in_ids_cursors_and_filters_is_a_4xx(Backend::Sqlite).await;
}

async fn nul_in_urls_and_forms_postgres() {
    nul_in_ids_cursors_and_filters_is_a_4xx(Backend::Postgres).await;
}

async fn nul_in_urls_and_forms_mysql() {
    nul_in_ids_cursors_and_filters_is_a_4xx(Backend::MySql).await;
}

/// A login through the form from `local` (a loopback address: the server
/// sees it as the client's), its status.
async fn log_in(base: &str, local: std::net::IpAddr, email: &str, password: &str) -> u16 {
    let http =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).local_address(local).build().unwrap();
    let (cookie, csrf) = login_form(&http, base).await;
    http.post(format!("{base}/ui/login"))
        .header("cookie", cookie)
        .form(&[("email", email), ("password", password), ("csrf", &csrf), ("next", "")])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// 60 wrong passwords at once for one email: at most
/// `ui.login_max_failures` (5) reach Argon2 (the review saw 59, and then
/// the right password was accepted), the rest are refused at once (429, or
/// 503 when every checking slot is busy); the right password from the same
/// address is then refused too, while the operator, from the address they
/// use, still gets in.
async fn concurrent_wrong_logins_are_counted_before_they_are_checked() {
    use herald::clock::{Clock, SystemClock};
    use herald::store::OperatorStore;
    let app = App::start().await;
    let password = "the operator's right password";
    herald::http::ui::session::add_operator(&app.db.store, "ops@example.com", password, SystemClock.now())
        .await
        .unwrap();
    let attacker: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let operator: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let guesses: Vec<_> = (0..60)
        .map(|i| {
            let base = app.base.clone();
            tokio::spawn(async move { log_in(&base, attacker, "ops@example.com", &format!("guess {i}")).await })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for g in guesses {
        *statuses.entry(g.await.unwrap()).or_default() += 1;
    }
    let attempts = app.db.store.recent_login_attempts(1000).await.unwrap();
    let checked = attempts.iter().filter(|a| a.outcome == "wrong_password").count();
    assert!(checked <= 5, "{checked} wrong passwords were checked; statuses {statuses:?}");
    assert!(statuses.keys().all(|s| [401, 429, 503].contains(s)), "{statuses:?}");
    assert!(!attempts.iter().any(|a| a.outcome == "pending"), "every checked attempt is finished");
    // Keep guessing until the address is locked out (a 503 only means the
    // slots were busy; it checked nothing).
    let mut status = 0;
    for _ in 0..20 {
        status = log_in(&app.base, attacker, "ops@example.com", "another guess").await;
        if status == 429 {
            break;
        }
    }
    assert_eq!(status, 429, "the guessing address is locked out");
    assert_eq!(log_in(&app.base, attacker, "ops@example.com", password).await, 429, "even with the right password");
    assert_eq!(log_in(&app.base, operator, "ops@example.com", password).await, 303, "the operator elsewhere gets in");
    app.stop().await;
}

fn rule(category: &str) -> serde_json::Value {
    serde_json::json!({
        "name": "news", "trigger_type": "news.posted", "channel": "email", "category": category,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "S", "text": "T"}}}
    })
}

/// A rule in category `*` put "every category" in each unsubscribe link it
/// sent, so one click stopped transactional mail too. The name is reserved
/// now, on create and on update, and a link that names it changes nothing.
async fn the_all_categories_name_is_reserved() {
    use herald::store::SuppressionStore;
    let app = App::start().await;
    let (status, body) = app.post("/v1/rules", rule("*")).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["field"], "category", "{body}");
    let (status, created) = app.post("/v1/rules", rule("news")).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let (status, body) = app
        .call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(serde_json::json!({"category": " * "})))
        .await;
    assert_eq!(status, 422, "{body}");
    // `topic:…` is how a user's mute of a topic is kept, and the preference
    // center offers no category spelled so: a rule in one would send
    // messages nobody could turn off.
    let (status, body) = app.post("/v1/rules", rule("topic:doc:42")).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errors"][0]["field"], "category", "{body}");
    let (status, body) = app
        .call(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(serde_json::json!({"category": "topic:x"})))
        .await;
    assert_eq!(status, 422, "{body}");

    // A link a rule saved before the fix could have sent.
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let hash = keys.hash("ann@example.com").unwrap();
    let token = keys.sign_unsubscribe(&herald::address::UnsubscribeToken {
        address_hash: hash.clone(),
        category: "*".into(),
        user_id: "u-1".into(),
    });
    let resp = one_click(&app.http, &app.url(&format!("/u/{token}"))).await;
    assert_eq!(resp.status().as_u16(), 400);
    let now = herald::clock::Millis(i64::MAX / 2);
    assert!(app.db.store.active_suppression(&hash, Some("transactional"), now).await.unwrap().is_none());
    app.stop().await;
}

/// `herald.db` was created world-readable (the process umask); it holds
/// every recipient's address.
async fn the_sqlite_file_is_created_private() {
    use herald::store::Store;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.db");
    let config = herald::config::Config {
        database_url: format!("sqlite://{}", path.display()),
        ..herald::config::Config::default()
    };
    let store = herald::app::open_store(&config).await.unwrap();
    store.migrate().await.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "herald.db is {mode:o}");
    for side in ["herald.db-wal", "herald.db-shm"] {
        if let Ok(meta) = std::fs::metadata(dir.path().join(side)) {
            assert_eq!(meta.permissions().mode() & 0o077, 0, "{side} is readable by others");
        }
    }
    store.close().await;
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether `tool` runs. Outside CI a missing tool ends the test as ignored,
/// naming the tool (the checks before it ran and passed; the rest did not);
/// under `CI=true` it fails the test.
fn have(tool: &str, install: &str, probe: &[&str]) -> bool {
    let ok = std::process::Command::new(tool).args(probe).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(!in_ci(), "CI=true but {tool} is not installed (.ci/run installs it)");
        common::harness::skip(format!("needs {tool} for the rest of its checks (those before it passed): {install}"));
    }
    ok
}

/// `/metrics` answered OpenMetrics to everyone, and `promtool check
/// metrics` (which reads the classic format) reported missing help text.
/// Now the format follows `Accept`, and promtool passes the default one.
async fn metrics_follow_accept_and_pass_promtool() {
    let app = App::start().await;
    // Something in every metric family that has samples.
    app.deliver().await;
    let get = |accept: Option<&'static str>| {
        let mut req = app.http.get(app.url("/metrics"));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        async move {
            let resp = req.send().await.unwrap();
            let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
            (ct, resp.text().await.unwrap())
        }
    };
    let (ct, text) = get(None).await;
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    assert!(!text.contains("# EOF"), "{text}");
    let (ct, _) = get(Some("text/plain;version=0.0.4")).await;
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let (ct, om) =
        get(Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")).await;
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    if have("promtool", "apt-get install prometheus", &["--version"]) {
        use std::io::Write;
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    app.stop().await;
}

/// The OpenAPI document was invalid (112 responses without a description,
/// a dangling `$ref`, query parameters declared as path parameters,
/// repeated operation ids) and client generators refused it. Checked here
/// structurally, then by openapi-spec-validator and by generating a Python
/// client with openapi-python-client (both from PyPI; `.ci/run` installs
/// them).
async fn the_openapi_document_is_valid_and_generates_a_client() {
    let app = App::start().await;
    let doc: serde_json::Value = app.http.get(app.url("/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    app.stop().await;

    let text = doc.to_string();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for r in text.split("\"$ref\":\"").skip(1) {
        let target = r.split('"').next().unwrap();
        let name = target.strip_prefix("#/components/schemas/").unwrap_or(target);
        assert!(schemas.contains_key(name), "dangling $ref {target}");
    }
    let mut ids = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_owned()), "operationId {id} is repeated");
            for (status, r) in op["responses"].as_object().unwrap() {
                let d = r["description"].as_str().unwrap_or("");
                assert!(!d.trim().is_empty(), "{method} {path} {status} has no description");
            }
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap();
                if p["in"] == "path" {
                    assert!(path.contains(&format!("{{{name}}}")), "{method} {path}: {name} is not in the path");
                }
            }
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let run = |cmd: &str, args: &[&str]| {
        let out = std::process::Command::new(cmd).args(args).current_dir(dir.path()).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    if have("openapi-spec-validator", "pip install openapi-spec-validator", &["--help"]) {
        let said = run("openapi-spec-validator", &[file.to_str().unwrap()]);
        assert!(said.contains("OK"), "{said}");
    }
    if have("openapi-python-client", "pip install openapi-python-client", &["--version"]) {
        run(
            "openapi-python-client",
            &[
                "generate",
                "--path",
                file.to_str().unwrap(),
                "--output-path",
                "client",
                "--overwrite",
                "--fail-on-warning",
            ],
        );
        assert!(dir.path().join("client").join("pyproject.toml").exists(), "no client was generated");
    }
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        a_deeply_nested_bounce_is_refused_and_the_server_survives,
        half_sent_request_headers_are_timed_out,
        open_connections_are_bounded,
        nul_in_urls_and_forms_sqlite,
        nul_in_urls_and_forms_postgres,
        nul_in_urls_and_forms_mysql,
        concurrent_wrong_logins_are_counted_before_they_are_checked,
        the_all_categories_name_is_reserved,
        the_sqlite_file_is_created_private,
        metrics_follow_accept_and_pass_promtool,
        the_openapi_document_is_valid_and_generates_a_client,
    ])
}
