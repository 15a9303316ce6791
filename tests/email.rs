//! The email channel against a real SMTP server: `tests/smtp/server.py`
//! (aiosmtpd) on 127.0.0.1, started per test. Nothing about lettre is mocked.
//!
//! Without python3 + aiosmtpd these tests end ignored, saying which is
//! missing, except under `CI=true`, where they fail (`.ci/run` installs
//! aiosmtpd).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, TestDb};
use herald::address::AddressKeys;
use herald::clock::{Clock, SystemClock};
use herald::config::{Config, EmailSettings};
use herald::delivery::channel::email::EmailChannel;
use herald::delivery::channel::{Channel, Delivery};
use herald::delivery::worker::{Worker, WorkerConfig, WorkerParts};
use herald::domain::{ChannelName, OutboxStatus};
use herald::metrics::Metrics;
use herald::store::{NewOutboxRow, RecipientStore, Store, SuppressionReason, new_id};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SECRET: &str = "email tests secret, long enough";

use common::smtp::SmtpSink as Sink;

fn settings(sink: &Sink, pool: bool) -> EmailSettings {
    EmailSettings {
        transport: Some(sink.url()),
        from: Some("Herald Tests <news@herald.test>".into()),
        address_secret: Some(SECRET.into()),
        public_url: Some("https://herald.test".into()),
        unsubscribe_mailto: Some("unsubscribe@herald.test".into()),
        bounce_domain: Some("bounces.herald.test".into()),
        pool,
        timeout: Duration::from_secs(5),
        ..EmailSettings::default()
    }
}

fn keys() -> AddressKeys {
    AddressKeys::from_secret(SECRET.as_bytes())
}

fn worker_with(store: Arc<dyn Store>, settings: &EmailSettings, public_url: &str, metrics: Metrics) -> Worker {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let email =
        EmailChannel::from_settings(settings, public_url, store.clone(), clock.clone(), keys(), metrics.clone())
            .unwrap();
    let registry = herald::app::registry_with_email(Some(Arc::new(email)));
    let config = WorkerConfig { deliver_timeout: Duration::from_secs(20), ..WorkerConfig::default() };
    Worker::new(WorkerParts { store, registry, clock, config, metrics, address_keys: None, lease: None })
}

/// A hand-enqueued email row.
async fn enqueue(store: &dyn Store, to: &str, category: &str) -> String {
    let id = new_id();
    let row = NewOutboxRow {
        dedupe_key: format!("test:{id}"),
        id: id.clone(),
        rule_id: None,
        trigger_id: None,
        user_id: common::user("u-email"),
        channel: ChannelName::parse("channel", "email").unwrap(),
        payload: json!({ "to": to, "subject": "Hi there", "text": "plain words", "html": "<p>html words</p>",
                         "category": category }),
        due_at: SystemClock.now(),
        expires_at: None,
        follow_up_at: None,
    };
    store.enqueue(&[row], SystemClock.now()).await.unwrap();
    id
}

async fn last_send(store: &dyn Store, id: &str) -> (OutboxStatus, herald::store::SendRecord) {
    let row = store.get_outbox(id).await.unwrap().unwrap();
    let sends = store.sends_for_outbox(id).await.unwrap();
    (row.status, sends.last().cloned().unwrap_or_else(|| panic!("no send log for {id}; row {row:?}")))
}

async fn transient_replies_and_dropped_connections_are_retried() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let w = worker_with(store.clone(), &settings(&sink, true), "https://herald.test", Metrics::new());
    let defer = enqueue(&*store, "defer@example.org", "news").await;
    let closing = enqueue(&*store, "closing@example.org", "news").await;
    let drop = enqueue(&*store, "drop@example.org", "news").await;
    let report = tokio::time::timeout(Duration::from_secs(60), w.tick()).await.unwrap().unwrap();
    assert_eq!((report.claimed, report.retried), (3, 3), "{report:?}");
    for (id, expect) in [(&defer, "451"), (&closing, "421"), (&drop, "dropped")] {
        let row = store.get_outbox(id).await.unwrap().unwrap();
        assert_eq!(row.status, OutboxStatus::Scheduled, "{row:?}");
        let err = row.last_error.unwrap();
        assert!(err.contains(expect), "{expect}: {err}");
        assert!(store.sends_for_outbox(id).await.unwrap().is_empty(), "a retry writes no send-log row");
    }
    assert!(sink.messages().is_empty());
    db.cleanup().await;
}

async fn a_hard_bounce_suppresses_and_the_next_message_makes_no_connection() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let metrics = Metrics::new();
    let w = worker_with(store.clone(), &settings(&sink, true), "https://herald.test", metrics.clone());

    let first = enqueue(&*store, "NoUser@Example.org", "news").await;
    let report = tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    assert_eq!(report.bounced, 1, "{report:?}");
    let (status, send) = last_send(&*store, &first).await;
    assert_eq!((status, send.status.as_str()), (OutboxStatus::Failed, "bounced"));
    assert!(send.detail.as_deref().unwrap().contains("5.1.1"), "{send:?}");
    let hash = keys().hash("nouser@example.org").unwrap();
    assert_eq!(send.address_hash.as_deref(), Some(hash.as_str()));
    let s = store.active_suppression(&hash, Some("news"), SystemClock.now()).await.unwrap().unwrap();
    assert_eq!((s.reason, s.category.as_str()), (SuppressionReason::HardBounce, "*"));

    let connections = sink.connections();
    let second = enqueue(&*store, "nouser@example.org", "billing").await;
    let report = tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    assert_eq!(report.suppressed, 1, "{report:?}");
    let (status, send) = last_send(&*store, &second).await;
    assert_eq!((status, send.status.as_str()), (OutboxStatus::Suppressed, "suppressed"));
    assert!(send.detail.as_deref().unwrap().contains("hard_bounce"), "{send:?}");
    assert_eq!(send.address_hash.as_deref(), Some(hash.as_str()));
    assert_eq!(sink.connections(), connections, "no SMTP connection for a suppressed address");
    // The send log is searchable by address without holding it.
    assert_eq!(store.sends_for_address(&hash, 10).await.unwrap().len(), 2);
    db.cleanup().await;
}

async fn a_policy_rejection_is_terminal_without_suppression_and_counted() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let metrics = Metrics::new();
    let w = worker_with(store.clone(), &settings(&sink, true), "https://herald.test", metrics.clone());
    let id = enqueue(&*store, "policy@example.org", "news").await;
    tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    let (status, send) = last_send(&*store, &id).await;
    assert_eq!((status, send.status.as_str()), (OutboxStatus::Failed, "failed"));
    let detail = send.detail.unwrap();
    assert!(detail.contains("554") && detail.contains("5.7.1 Message rejected by policy"), "{detail}");
    let hash = keys().hash("policy@example.org").unwrap();
    assert!(store.active_suppression(&hash, Some("news"), SystemClock.now()).await.unwrap().is_none());
    assert!(metrics.encode().contains("herald_email_policy_rejections_total 1"), "{}", metrics.encode());
    db.cleanup().await;
}

async fn one_connection_per_message_also_delivers() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let w = worker_with(store.clone(), &settings(&sink, false), "https://herald.test", Metrics::new());
    for i in 0..3 {
        enqueue(&*store, &format!("ok{i}@example.org"), "transactional").await;
    }
    let report = tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    assert_eq!(report.sent, 3, "{report:?}");
    assert_eq!(sink.messages().len(), 3);
    assert_eq!(sink.connections(), 3);
    // Transactional mail carries no List-Unsubscribe.
    let raw = std::fs::read(&sink.messages()[0]).unwrap();
    let msg = mail_parser::MessageParser::default().parse(&raw).unwrap();
    assert!(msg.header("List-Unsubscribe").is_none());
    db.cleanup().await;
}

struct Server {
    base: String,
    key: String,
    http: reqwest::Client,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn serve(db: &TestDb) -> Server {
    let (key, row) = herald::http::auth::generate("tests", SystemClock.now());
    db.store.insert_api_key(&row).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut config = Config { database_url: db.url.clone(), ..Config::default() };
    config.email.address_secret = Some(SECRET.into());
    // Email is configured (this server's worker is off; each test runs its
    // own against the sink), so email rules can be turned on.
    config.email.transport = Some("file:///nonexistent-herald-test-dir".into());
    config.email.from = Some("Herald Tests <news@herald.test>".into());
    config.worker.enabled = false;
    config.planner.enabled = false;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(herald::app::serve_until(config, db.store.clone(), listener, shutdown.clone()));
    Server { base, key, http: reqwest::Client::new(), shutdown, task }
}

impl Server {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or_default())
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

/// Rule → trigger → SMTP → parsed back; then the message's own one-click
/// unsubscribe link, and a tampered copy of it.
async fn a_rule_planned_message_arrives_whole_and_unsubscribes_in_one_click() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let server = serve(&db).await;
    let store = db.arc();
    let mut st = settings(&sink, true);
    st.public_url = Some(server.base.clone());
    // Signed with DKIM (an Ed25519 seed in a key file).
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("dkim.key");
    std::fs::write(&key_file, "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=").unwrap();
    st.dkim_selector = Some("s2026".into());
    st.dkim_private_key_file = Some(key_file);
    let w = worker_with(store.clone(), &st, &server.base, Metrics::new());

    let (s, _) = server
        .call(reqwest::Method::PUT, "/v1/users/ann", Some(json!({"email": "Ann@Example.org", "name": "Ann Lee"})))
        .await;
    assert_eq!(s, 201);
    let rule = json!({
        "name": "weekly news", "trigger_type": "news.ready", "channel": "email", "category": "news",
        "delay": 0, "enabled": true,
        "template": { "fallback_locale": "en", "locales": { "en": {
            "subject": "News for {{ user.name }}", "text": "Plain: {{ payload.headline }}",
            "html": "<h1>{{ payload.headline }}</h1>" } } }
    });
    let (s, body) = server.call(reqwest::Method::POST, "/v1/rules", Some(rule)).await;
    assert_eq!(s, 201, "{body}");
    let trigger = json!({"type": "news.ready", "user_id": "ann", "payload": {"headline": "Rust 2024"}});
    let (s, body) = server.call(reqwest::Method::POST, "/v1/triggers", Some(trigger.clone())).await;
    assert_eq!(s, 202, "{body}");
    let outbox_id = body["planned"][0]["id"].as_str().unwrap().to_owned();

    let report = tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    assert_eq!(report.sent, 1, "{report:?}");
    let (status, send) = last_send(&*store, &outbox_id).await;
    assert_eq!((status, send.status.as_str()), (OutboxStatus::Sent, "sent"));
    let hash = keys().hash("ann@example.org").unwrap();
    assert_eq!(send.address_hash.as_deref(), Some(hash.as_str()));

    let files = sink.messages();
    assert_eq!(files.len(), 1);
    let raw = std::fs::read(&files[0]).unwrap();
    let msg = mail_parser::MessageParser::default().parse(&raw).unwrap();
    assert_eq!(msg.message_id(), Some(format!("{outbox_id}@herald.test").as_str()));
    assert_eq!(msg.subject(), Some("News for Ann Lee"));
    assert_eq!(msg.header_raw("X-Herald-Outbox-Id").map(str::trim), Some(outbox_id.as_str()));
    assert_eq!(msg.header_raw("List-Unsubscribe-Post").map(str::trim), Some("List-Unsubscribe=One-Click"));
    let list_unsubscribe = msg.header_raw("List-Unsubscribe").unwrap().replace(['\r', '\n'], "");
    assert!(list_unsubscribe.contains("<mailto:unsubscribe@herald.test?subject="), "{list_unsubscribe}");
    assert!(msg.body_text(0).unwrap().contains("Plain: Rust 2024"));
    assert!(msg.body_html(0).unwrap().contains("<h1>Rust 2024</h1>"));
    assert!(msg.date().is_some());
    let dkim = msg.header_raw("DKIM-Signature").unwrap().replace(['\r', '\n', ' ', '\t'], "");
    assert!(dkim.contains("d=herald.test;") && dkim.contains("s=s2026;"), "{dkim}");
    let to = msg.to().unwrap().first().unwrap();
    assert_eq!(to.address(), Some("Ann@Example.org"));

    // The https link from the header.
    let start = list_unsubscribe.find(&format!("<{}/u/", server.base)).unwrap() + 1;
    let link = &list_unsubscribe[start..start + list_unsubscribe[start..].find('>').unwrap()];
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    // GET shows a page and changes nothing.
    let page = http.get(link).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("<form method=\"post\""));
    assert!(store.active_suppression(&hash, Some("news"), SystemClock.now()).await.unwrap().is_none());

    // A tampered token is refused and changes nothing.
    let token = link.rsplit('/').next().unwrap();
    let (payload, sig) = token.split_once('.').unwrap();
    let mut forged_sig = sig.to_owned();
    let last = if forged_sig.ends_with('A') { "B" } else { "A" };
    forged_sig.replace_range(forged_sig.len() - 1.., last);
    let other_payload = {
        use base64::Engine;
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let text = String::from_utf8(b.decode(payload).unwrap()).unwrap().replace("\nnews\n", "\nbilling\n");
        b.encode(text)
    };
    for bad in [format!("{payload}.{forged_sig}"), format!("{other_payload}.{sig}"), "nonsense".to_owned()] {
        let resp = common::app::one_click(&http, &format!("{}/u/{bad}", server.base)).await;
        assert_eq!(resp.status().as_u16(), 400);
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
    }
    assert!(store.list_suppressions(Some(&hash), 10).await.unwrap().is_empty());

    // One click, twice: 200 both times, no redirect, one suppression.
    for _ in 0..2 {
        let resp = common::app::one_click(&http, link).await;
        assert_eq!(resp.status().as_u16(), 200);
        assert!(resp.text().await.unwrap().contains("Unsubscribed"));
    }
    let all = store.list_suppressions(Some(&hash), 10).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!((all[0].reason, all[0].category.as_str()), (SuppressionReason::Unsubscribe, "news"));

    // The next news message is suppressed, without connecting.
    let connections = sink.connections();
    let trigger = json!({"type": "news.ready", "user_id": "ann", "payload": {"headline": "again"}});
    let (_, body) = server.call(reqwest::Method::POST, "/v1/triggers", Some(trigger)).await;
    let second = body["planned"][0]["id"].as_str().unwrap().to_owned();
    tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    let (status, send) = last_send(&*store, &second).await;
    assert_eq!(status, OutboxStatus::Suppressed);
    assert!(send.detail.as_deref().unwrap().contains("unsubscribe"), "{send:?}");
    assert_eq!(sink.connections(), connections);
    assert_eq!(sink.messages().len(), 1);

    server.stop().await;
    db.cleanup().await;
}

async fn the_message_id_is_stable_per_row() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let channel = EmailChannel::from_settings(
        &settings(&sink, true),
        "https://herald.test",
        store.clone(),
        clock,
        keys(),
        Metrics::new(),
    )
    .unwrap();
    let id = enqueue(&*store, "ok@example.org", "news").await;
    let row = store.get_outbox(&id).await.unwrap().unwrap();
    // Two attempts at one row (a redelivery after a crash): one Message-ID.
    for _ in 0..2 {
        let outcome = channel.deliver(&Delivery::bare(row.clone())).await;
        assert_eq!(outcome.label(), "sent", "{outcome:?}");
    }
    let ids: Vec<String> = sink
        .messages()
        .iter()
        .map(|p| {
            let raw = std::fs::read(p).unwrap();
            mail_parser::MessageParser::default().parse(&raw).unwrap().message_id().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids, vec![format!("{id}@herald.test"); 2]);
    db.cleanup().await;
}

async fn the_file_transport_writes_one_eml_per_row() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let dir = tempfile::tempdir().unwrap();
    let st = EmailSettings {
        transport: Some(format!("file://{}", dir.path().display())),
        from: Some("news@herald.test".into()),
        address_secret: Some(SECRET.into()),
        ..EmailSettings::default()
    };
    let w = worker_with(store.clone(), &st, "http://127.0.0.1:8080", Metrics::new());
    let id = enqueue(&*store, "ok@example.org", "news").await;
    let report = w.tick().await.unwrap();
    assert_eq!(report.sent, 1, "{report:?}");
    let (_, send) = last_send(&*store, &id).await;
    assert_eq!(send.transport.as_deref(), Some(format!("file {}", dir.path().display()).as_str()));
    let raw = std::fs::read(dir.path().join(format!("{id}.eml"))).unwrap();
    let msg = mail_parser::MessageParser::default().parse(&raw).unwrap();
    assert_eq!(msg.subject(), Some("Hi there"));
    let unsubscribe = msg.header_raw("List-Unsubscribe").unwrap();
    assert!(unsubscribe.contains("<http://127.0.0.1:8080/u/"), "{unsubscribe}");
    db.cleanup().await;
}

async fn pooled_connections_are_reused() {
    let sink = Sink::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let mut st = settings(&sink, true);
    st.concurrency = 1;
    let w = worker_with(store.clone(), &st, "https://herald.test", Metrics::new());
    for i in 0..4 {
        enqueue(&*store, &format!("ok{i}@example.org"), "news").await;
    }
    let report = tokio::time::timeout(Duration::from_secs(30), w.tick()).await.unwrap().unwrap();
    assert_eq!(report.sent, 4, "{report:?}");
    assert_eq!(sink.messages().len(), 4);
    assert_eq!(sink.connections(), 1, "one pooled connection carried all four");
    db.cleanup().await;
}

/// No SMTP server process needed: a refused connection, a server that never
/// answers, and STARTTLS required but not offered are all retried.
async fn refused_silent_and_tls_failures_are_retried() {
    let db = TestDb::new(Backend::Sqlite).await;
    let store = db.arc();
    let base = |url: String| EmailSettings {
        transport: Some(url),
        from: Some("news@herald.test".into()),
        address_secret: Some(SECRET.into()),
        public_url: Some("https://herald.test".into()),
        timeout: Duration::from_millis(500),
        ..EmailSettings::default()
    };
    // Refused: a port nobody listens on.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // Silent: accepts, never greets.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let mut cases = vec![
        (format!("smtp://127.0.0.1:{closed}?tls=none"), "cannot connect"),
        (format!("smtp://127.0.0.1:{silent_port}?tls=none"), "did not answer within"),
    ];
    // STARTTLS required (the default) against a server that does not offer it.
    let sink = Sink::start().await;
    cases.push((format!("smtp://127.0.0.1:{}", sink.port), "STARTTLS"));
    for (url, expect) in cases {
        let w = worker_with(store.clone(), &base(url.clone()), "https://herald.test", Metrics::new());
        let id = enqueue(&*store, "ok@example.org", "news").await;
        let report = tokio::time::timeout(Duration::from_secs(20), w.tick()).await.unwrap().unwrap();
        assert_eq!(report.retried, 1, "{url}: {report:?}");
        let row = store.get_outbox(&id).await.unwrap().unwrap();
        let err = row.last_error.unwrap_or_default();
        assert!(err.contains(expect), "{url}: {err}");
    }
    assert!(sink.messages().is_empty());
    db.cleanup().await;
}

/// A private CA and a certificate it issued for 127.0.0.1, made with the
/// openssl command line in `dir`: (ca.pem, server chain, server key).
fn private_ca(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let openssl = |args: &[&str]| {
        std::process::Command::new("openssl").args(args).current_dir(dir).output().is_ok_and(|o| o.status.success())
    };
    let ok = openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Herald Test Private CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]) && {
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ])
    };
    if !ok {
        assert!(!common::in_ci(), "CI=true but the openssl command line could not make a test CA");
        common::harness::skip("needs the openssl command line to make a test CA: apt-get install openssl");
    }
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// A relay whose certificate a private CA issued failed
/// every handshake (`UnknownIssuer`) under `tls=required`, `tls=starttls`
/// and `smtps://`. With the CA in `email.tls_ca_file` each delivers, pooled
/// and not; without it, each still refuses (a retry, nothing sent).
async fn a_private_ca_is_trusted_through_tls_ca_file() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, chain, key) = private_ca(certs.path());
    for (mode, scheme, query) in
        [("starttls", "smtp", "?tls=required"), ("starttls", "smtp", "?tls=starttls"), ("implicit", "smtps", "")]
    {
        let sink = Sink::start_tls(mode, &chain, &key).await;
        for pool in [true, false] {
            let db = TestDb::new(Backend::Sqlite).await;
            let store = db.arc();
            let mut s = settings(&sink, pool);
            s.transport = Some(format!("{scheme}://127.0.0.1:{}{query}", sink.port));
            let what = format!("{scheme}://…{query} (pool {pool})");

            // Without the CA: the handshake fails, the row waits for a retry.
            let w = worker_with(store.clone(), &s, "https://herald.test", Metrics::new());
            let id = enqueue(&*store, "ok@example.org", "news").await;
            tokio::time::timeout(Duration::from_secs(60), w.tick()).await.unwrap().unwrap();
            let row = store.get_outbox(&id).await.unwrap().unwrap();
            assert_eq!(row.status, OutboxStatus::Scheduled, "{what}: {row:?}");
            let err = row.last_error.clone().unwrap_or_default();
            assert!(err.to_lowercase().contains("unknownissuer") || err.contains("certificate"), "{what}: {err}");

            // With it: delivered over TLS.
            s.tls_ca_file = Some(ca.clone());
            let before = sink.messages().len();
            let w = worker_with(store.clone(), &s, "https://herald.test", Metrics::new());
            let id = enqueue(&*store, "ok@example.org", "news").await;
            tokio::time::timeout(Duration::from_secs(60), w.tick()).await.unwrap().unwrap();
            let (status, send) = last_send(&*store, &id).await;
            assert_eq!(status, OutboxStatus::Sent, "{what}: {send:?}");
            assert_eq!(sink.messages().len(), before + 1, "{what}: the server received it");
            db.cleanup().await;
        }
    }
}

/// `http.public_url` is the base of an email's links when set alone (the
/// service's email channel reads it, and `email.public_url` only as its
/// older name).
async fn http_public_url_is_the_base_of_an_emails_links() {
    let mail = tempfile::tempdir().unwrap();
    let transport = format!("file://{}", mail.path().display());
    let app = common::app::App::start_on(Backend::Sqlite, |c| {
        c.worker.enabled = true;
        c.email.transport = Some(transport);
        c.email.from = Some("Herald <news@herald.test>".into());
        c.email.public_url = None;
        c.http.public_url = Some("https://links.example/herald/".into());
    })
    .await;
    let (s, _) = app.call(reqwest::Method::PUT, "/v1/users/ann", Some(json!({"email": "ann@example.org"}))).await;
    assert_eq!(s, 201);
    let rule = json!({
        "name": "news", "trigger_type": "news", "channel": "email", "category": "news", "delay": 0, "enabled": true,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "News", "text": "Hello"}}}
    });
    assert_eq!(app.post("/v1/rules", rule).await.0, 201);
    assert_eq!(app.post("/v1/triggers", json!({"type": "news", "user_id": "ann"})).await.0, 202);
    // The service's worker writes it; the bound only keeps a broken build
    // from hanging the test.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let file = loop {
        if let Some(f) =
            std::fs::read_dir(mail.path()).unwrap().flatten().find(|f| f.path().extension().is_some_and(|e| e == "eml"))
        {
            break f.path();
        }
        assert!(std::time::Instant::now() < deadline, "no message was written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let raw = String::from_utf8_lossy(&std::fs::read(file).unwrap()).replace(['\r', '\n'], "");
    assert!(raw.contains("<https://links.example/herald/u/"), "{raw}");
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        http_public_url_is_the_base_of_an_emails_links,
        transient_replies_and_dropped_connections_are_retried,
        a_hard_bounce_suppresses_and_the_next_message_makes_no_connection,
        a_policy_rejection_is_terminal_without_suppression_and_counted,
        one_connection_per_message_also_delivers,
        a_rule_planned_message_arrives_whole_and_unsubscribes_in_one_click,
        the_message_id_is_stable_per_row,
        the_file_transport_writes_one_eml_per_row,
        pooled_connections_are_reused,
        refused_silent_and_tls_failures_are_retried,
        a_private_ca_is_trusted_through_tls_ca_file,
    ])
}
