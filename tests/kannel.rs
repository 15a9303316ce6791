//! The Kannel transport against a real Kannel: Debian's `bearerbox` and
//! `smsbox`, with the fake SMS centre Kannel ships for its own tests
//! (`fakesmsc`, in `kannel-extras`) standing in for an operator, all on
//! 127.0.0.1 under a temporary directory and killed when the test ends.
//!
//! A text goes Herald → smsbox → bearerbox → fake SMSC, which prints what
//! it got; the fake SMSC acknowledges it, and bearerbox fetches the signed
//! `dlr-url` Herald gave, which a local receiver checks with the
//! deployment's keys. An inbound STOP goes the other way: the fake SMSC
//! sends it, smsbox's `sms-service` fetches its `get-url`, and the receiver
//! reads the keyword.
//!
//! Without Kannel these tests end ignored, saying what to install, except
//! under `CI=true`, where they fail (`.ci/run` installs `kannel` and
//! `kannel-extras`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::routing::get;
use common::in_ci;
use herald::address::AddressKeys;
use herald::delivery::channel::answer::Answer;
use herald::delivery::channel::sms::Text;
use herald::delivery::channel::sms::kannel::{DeliveryReport, DlrState, KannelClient, KannelEndpoint, status_callback};
use herald::delivery::channel::sms::keywords::{Keyword, keyword};
use herald::delivery::channel::sms::phone::PhoneNumber;
use herald::delivery::channel::sms::segments::measure;
use herald::delivery::channel::sms::sender::Sender;
use tokio::sync::mpsc;
use url::Url;

const BEARERBOX: &str = "/usr/sbin/bearerbox";
const SMSBOX: &str = "/usr/sbin/smsbox";
const FAKESMSC: &str = "/usr/lib/kannel/test/fakesmsc";

/// How long Kannel gets for each step (start, deliver, report).
const STEP: Duration = Duration::from_secs(15);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something accepts connections on `port`.
async fn listening(port: u16) -> bool {
    let deadline = tokio::time::Instant::now() + STEP;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// What the local receiver got: the path and the raw query of each call.
type Calls = mpsc::UnboundedSender<(String, String)>;

async fn receiver() -> (u16, mpsc::UnboundedReceiver<(String, String)>) {
    async fn record(State(calls): State<Calls>, uri: axum::http::Uri, RawQuery(q): RawQuery) -> &'static str {
        let _ = calls.send((uri.path().to_owned(), q.unwrap_or_default()));
        ""
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new().route("/dlr", get(record)).route("/inbound", get(record)).with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, rx)
}

/// bearerbox, smsbox and the fake SMSC, killed on drop.
struct Kannel {
    dir: tempfile::TempDir,
    sendsms_port: u16,
    children: Vec<std::process::Child>,
}

/// Kills and reaps every process, whether the test passed or panicked
/// (tokio's `kill_on_drop` kills but leaves the reaping to a runtime that
/// is gone by then).
impl Drop for Kannel {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Kannel {
    fn endpoint(&self, password: &str) -> KannelEndpoint {
        KannelEndpoint {
            base: Url::parse(&format!("http://127.0.0.1:{}/", self.sendsms_port)).unwrap(),
            username: "herald".into(),
            password: password.into(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn logs(&self) -> String {
        ["bearerbox.log", "smsbox.log", "fakesmsc.log"]
            .iter()
            .map(|n| format!("--- {n}\n{}", std::fs::read_to_string(self.file(n)).unwrap_or_default()))
            .collect()
    }

    /// The messages the fake SMSC received, as it prints them
    /// (`<from to type text>`).
    fn smsc_received(&self) -> Vec<String> {
        std::fs::read_to_string(self.file("fakesmsc.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                l.split_once("Got message ").and_then(|(_, rest)| rest.split_once(": ")).map(|(_, m)| m.to_owned())
            })
            .collect()
    }

    /// Waits until the fake SMSC has printed a message matching `wanted`.
    async fn smsc_got(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            if let Some(m) = self.smsc_received().into_iter().find(|m| wanted(m)) {
                return m;
            }
            assert!(tokio::time::Instant::now() < deadline, "the fake SMSC never got it\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn spawn(program: &str, args: &[&str], log: &Path) -> std::process::Child {
    let out = std::fs::File::create(log).unwrap();
    std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

/// Starts Kannel with `receiver_port` as the inbound `get-url`'s host, and
/// the fake SMSC sending `mo` (an inbound message) once it is connected.
async fn start_kannel(receiver_port: u16, mo: &str) -> Kannel {
    let get_url = format!("http://127.0.0.1:{receiver_port}/inbound?from=%p&to=%P&text=%a");
    start_kannel_with(&get_url, mo, free_port()).await
}

/// Starts Kannel with `get_url` for inbound texts and `sendsms` as its
/// `sendsms` port.
async fn start_kannel_with(get_url: &str, mo: &str, sendsms: u16) -> Kannel {
    let missing: Vec<&str> = [BEARERBOX, SMSBOX, FAKESMSC].into_iter().filter(|p| !Path::new(p).exists()).collect();
    if !missing.is_empty() {
        let why = format!("needs Kannel ({} missing): apt-get install kannel kannel-extras", missing.join(", "));
        if in_ci() {
            panic!("CI=true but this test {why}");
        }
        common::harness::skip(why);
    }
    let dir = tempfile::tempdir().unwrap();
    let (admin, boxes, smsc) = (free_port(), free_port(), free_port());
    let d = dir.path().display();
    let conf = format!(
        r#"group = core
admin-port = {admin}
admin-password = test-admin
admin-interface = 127.0.0.1
smsbox-port = {boxes}
box-allow-ip = 127.0.0.1
log-file = "{d}/bearerbox-core.log"
log-level = 0
dlr-storage = internal
store-type = spool
store-location = "{d}/spool"

group = smsc
smsc = fake
smsc-id = fake
port = {smsc}
connect-allow-ip = 127.0.0.1

group = smsbox
bearerbox-host = 127.0.0.1
bearerbox-port = {boxes}
sendsms-port = {sendsms}
sendsms-interface = 127.0.0.1
log-file = "{d}/smsbox-core.log"
log-level = 0

group = sendsms-user
username = herald
password = test-secret
max-messages = 3
concatenation = true

group = sms-service
keyword = default
get-url = "{get_url}"
max-messages = 0
"#
    );
    std::fs::create_dir(dir.path().join("spool")).unwrap();
    let conf_path = dir.path().join("kannel.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let conf_arg = conf_path.to_str().unwrap().to_owned();
    let mut kannel = Kannel { sendsms_port: sendsms, children: Vec::new(), dir };
    kannel.children.push(spawn(BEARERBOX, &[&conf_arg], &kannel.file("bearerbox.log")));
    assert!(listening(smsc).await, "bearerbox did not open the SMSC port\n{}", kannel.logs());
    // -m 1: the one inbound message, sent at once; -i: then no other for
    // longer than the test lasts, while it keeps receiving.
    let smsc_arg = smsc.to_string();
    kannel.children.push(spawn(
        FAKESMSC,
        &["-H", "127.0.0.1", "-r", &smsc_arg, "-i", "3600", "-m", "1", mo],
        &kannel.file("fakesmsc.log"),
    ));
    kannel.children.push(spawn(SMSBOX, &[&conf_arg], &kannel.file("smsbox.log")));
    assert!(listening(sendsms).await, "smsbox did not open the sendsms port\n{}", kannel.logs());
    kannel
}

/// The next call the receiver got on `path`.
async fn next_call(rx: &mut mpsc::UnboundedReceiver<(String, String)>, path: &str, kannel: &Kannel) -> String {
    loop {
        match tokio::time::timeout(STEP, rx.recv()).await {
            Ok(Some((p, q))) if p == path => return q,
            Ok(Some(_)) => continue,
            _ => panic!("no call to {path} came\n{}", kannel.logs()),
        }
    }
}

fn pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes()).into_owned().collect()
}

async fn a_text_reaches_the_smsc_and_its_delivery_report_comes_back() {
    let (port, mut calls) = receiver().await;
    let kannel = start_kannel(port, "+14155550199 12345 text hello").await;
    let keys = AddressKeys::from_secret(b"kannel test deployment");
    let status = Url::parse(&format!("http://127.0.0.1:{port}/dlr")).unwrap();
    let callback = status_callback(&status, &keys, "row-kannel-1");
    let client = KannelClient::new(reqwest::Client::new(), kannel.endpoint("test-secret"));
    let to = PhoneNumber::parse("phone", "+1 415 555 0101").unwrap();
    let from = Sender::parse("Herald").unwrap();

    let answer =
        client.send(&Text { to: &to, from: &from, body: "Your code is 123456", callback: Some(&callback) }).await;
    assert!(answer.accepted(), "{answer:?}\n{}", kannel.logs());
    let got = kannel.smsc_got(|m| m.contains("Your code is 123456")).await;
    assert_eq!(got, "<Herald +14155550101 text Your code is 123456>");

    // The fake SMSC acknowledges at once; bearerbox reports "delivered"
    // (1) to the dlr-url, whose token names the row.
    let query = next_call(&mut calls, "/dlr", &kannel).await;
    let q = pairs(&query);
    let report = DeliveryReport::parse(q.iter().map(|(k, v)| (k.as_str(), v.as_str())), &keys).unwrap();
    assert_eq!((report.outbox_id.as_str(), report.state), ("row-kannel-1", DlrState::Delivered), "{query}");
    // Read with another deployment's keys, the same report names nothing.
    let other = AddressKeys::from_secret(b"another deployment");
    assert!(DeliveryReport::parse(q.iter().map(|(k, v)| (k.as_str(), v.as_str())), &other).is_err());
}

async fn a_ucs2_text_is_sent_as_unicode_and_a_wrong_password_is_a_credential_failure() {
    let (port, _calls) = receiver().await;
    let kannel = start_kannel(port, "+14155550199 12345 text hello").await;
    let to = PhoneNumber::parse("phone", "+14155550101").unwrap();
    let from = Sender::parse("+14155550100").unwrap();
    let client = KannelClient::new(reqwest::Client::new(), kannel.endpoint("test-secret"));
    let answer = client.send(&Text { to: &to, from: &from, body: "Привет 🙂", callback: None }).await;
    assert!(answer.accepted(), "{answer:?}\n{}", kannel.logs());
    // fakesmsc prints a UCS-2 message as "ucs-2" and its UTF-16BE bytes,
    // URL-encoded: U+041F 'П' … U+0020 as '+', then the emoji as the
    // surrogate pair D83D DE42.
    let got = kannel.smsc_got(|m| m.starts_with("<+14155550100 +14155550101 ")).await;
    assert_eq!(got, "<+14155550100 +14155550101 ucs-2 %04%1F%04%40%048%042%045%04B%00+%D8%3D%DEB>");

    let wrong = KannelClient::new(reqwest::Client::new(), kannel.endpoint("not-the-password"));
    let answer = wrong.send(&Text { to: &to, from: &from, body: "hi", callback: None }).await;
    assert!(matches!(answer, Answer::CredentialRejected { .. }), "{answer:?}");
    assert!(answer.reason().contains("Authorization failed"), "{answer:?}");
}

/// Kannel splits a long text itself (the `sendsms-user` group's
/// `max-messages`, 3 here; at its default of 1 it cuts the text at 160):
/// the parts the SMSC gets are the segments `segments::measure` counted.
async fn a_long_text_arrives_in_as_many_segments_as_counted() {
    let (port, _calls) = receiver().await;
    let kannel = start_kannel(port, "+14155550199 12345 text hello").await;
    let to = PhoneNumber::parse("phone", "+14155550101").unwrap();
    let from = Sender::parse("Herald").unwrap();
    let body = format!("{}{}", "a".repeat(153), "b".repeat(47));
    assert_eq!(measure(&body).segments, 2);
    let client = KannelClient::new(reqwest::Client::new(), kannel.endpoint("test-secret"));
    let answer = client.send(&Text { to: &to, from: &from, body: &body, callback: None }).await;
    assert!(answer.accepted(), "{answer:?}");
    // Concatenated parts carry a UDH: 05 00 03, a reference, the count
    // (02) and the part's number.
    let last = kannel.smsc_got(|m| m.contains("%02%02 data ")).await;
    let first = kannel.smsc_got(|m| m.contains("%02%01 data ")).await;
    assert!(first.ends_with(&format!(" data {}>", "a".repeat(153))), "{first}");
    assert!(last.ends_with(&format!(" data {}>", "b".repeat(47))), "{last}");
    assert!(first.starts_with("<Herald +14155550101 udh %05%00%03"), "{first}");
}

async fn an_inbound_stop_reaches_the_get_url_as_a_keyword() {
    let (port, mut calls) = receiver().await;
    let kannel = start_kannel(port, "+14155550199 12345 text Stop").await;
    let query = next_call(&mut calls, "/inbound", &kannel).await;
    let q = pairs(&query);
    let field = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default();
    assert_eq!(PhoneNumber::parse("from", &field("from")).unwrap().as_str(), "+14155550199", "{query}");
    assert_eq!(keyword(&field("text")), Some(Keyword::Stop), "{query}");
}

/// Herald itself: a rule, a trigger, the serve instance's worker, Kannel
/// and the fake SMSC, the delivery report back at
/// `/v1/sms/status/kannel` (kept as evidence for the row, and a row in its
/// send log), and an inbound
/// STOP at `/v1/sms/inbound/kannel` suppressing the number it came from.
async fn herald_texts_through_kannel_and_hears_back() {
    use common::app::App;
    use serde_json::json;
    let sendsms = free_port();
    let secret = "a test secret of sufficient length";
    let app = App::start_on_at(common::Backend::Sqlite, |c, base| {
        c.email.address_secret = Some(secret.into());
        c.worker.enabled = true;
        c.worker.poll = Duration::from_millis(50);
        c.sms.transport = Some(format!("kannel://herald:test-secret@127.0.0.1:{sendsms}"));
        c.sms.from = Some("Herald".into());
        c.http.public_url = Some(base.to_owned());
    })
    .await;
    let keys = AddressKeys::from_secret(secret.as_bytes());
    let get_url = herald::http::sms::kannel_inbound_url(&app.base, &keys);
    let kannel = start_kannel_with(&get_url, "+14155550199 12345 text STOP", sendsms).await;

    let (status, body) = app
        .post(
            "/v1/rules",
            json!({"name": "code", "trigger_type": "code.sent", "channel": "sms", "category": "transactional",
                   "enabled": true, "template": {"fallback_locale": "en", "locales": {"en": {"text": "Code {{ payload.code }}"}}}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = app.call(reqwest::Method::PUT, "/v1/users/ada", Some(json!({"phone": "+14155550101"}))).await;
    assert!(status < 300, "{body}");
    let (status, body) =
        app.post("/v1/triggers", json!({"type": "code.sent", "user_id": "ada", "payload": {"code": "123456"}})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(kannel.smsc_got(|m| m.contains("Code 123456")).await, "<Herald +14155550101 text Code 123456>");

    // The report comes back signed and is kept for the row; the STOP the
    // fake SMSC sent suppressed its number.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let (_, bounces) = app.get("/v1/bounces").await;
        let (_, suppressions) = app.get("/v1/suppressions").await;
        let reported = bounces["bounces"].as_array().unwrap().iter().any(|b| b["status"] == "delivered");
        let stopped = suppressions["suppressions"].as_array().unwrap().iter().any(|s| s["reason"] == "stop");
        if reported && stopped {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{bounces}\n{suppressions}\n{}", kannel.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, sends) = app.get("/v1/users/ada/sends").await;
    assert_eq!(sends["messages"][0]["status"], "sent", "{sends}");
    // The report is filed under the number the text went to: the send
    // log's hash of it.
    let (_, bounces) = app.get("/v1/bounces").await;
    let report = bounces["bounces"].as_array().unwrap().iter().find(|b| b["status"] == "delivered").unwrap();
    let outbox = report["outbox_id"].as_str().unwrap();
    let sent = herald::store::Store::sends_for_outbox(&app.db.store, outbox).await.unwrap();
    assert_eq!(report["address_hash"].as_str(), sent[0].address_hash.as_deref(), "{report}");
    assert!(report["address_hash"].is_string(), "{report}");
    // Kannel's report is a `delivered` row in the message's send log, after
    // `sent`; the message stays `sent`. (The fake SMSC reports within
    // milliseconds, before the worker's outcome is flushed: the report
    // waits for it.)
    let history = |sends: &serde_json::Value| -> Vec<(String, String)> {
        let h = sends["messages"][0]["history"].as_array().unwrap();
        h.iter().map(|e| (e["status"].as_str().unwrap().into(), e["detail"].as_str().unwrap_or("").into())).collect()
    };
    let h = history(&sends);
    assert_eq!((h.len(), h[0].0.as_str(), h[1].0.as_str()), (2, "sent", "delivered"), "{sends}");
    assert!(h[1].1.starts_with("Kannel: delivered"), "{sends}");
    // A refusal (16) signed for the row, as bearerbox would fetch it, twice:
    // one `undelivered` row naming Kannel's word and the SMSC's reply.
    let failed = format!(
        "/v1/sms/status/kannel?token={}&type=16&reply=id%3A7%20stat%3AREJECTD%20err%3A00B&smsc_id=7",
        keys.sign_delivery_report(outbox)
    );
    for _ in 0..2 {
        assert_eq!(app.http.get(app.url(&failed)).send().await.unwrap().status(), 204);
    }
    let (_, sends) = app.get("/v1/users/ada/sends").await;
    let h = history(&sends);
    assert_eq!(h.len(), 3, "{sends}");
    assert_eq!((h[2].0.as_str(), h[2].1.as_str()), ("undelivered", "Kannel: failed (id:7 stat:REJECTD err:00B)"));
    assert_eq!(sends["messages"][0]["history"][2]["provider_id"], "7", "the SMSC's id");
    assert_eq!(sends["messages"][0]["status"], "sent", "{sends}");
    // A report or an inbound text without Herald's token changes nothing.
    let forged = app.http.get(app.url("/v1/sms/status/kannel?token=x.y&type=16")).send().await.unwrap();
    assert_eq!(forged.status(), 403);
    let forged = app.http.get(app.url("/v1/sms/inbound/kannel?from=%2B14155550101&text=STOP")).send().await.unwrap();
    assert_eq!(forged.status(), 403);
    let (_, suppressions) = app.get("/v1/suppressions").await;
    assert_eq!(suppressions["suppressions"].as_array().unwrap().len(), 1, "{suppressions}");
    let (_, sends) = app.get("/v1/users/ada/sends").await;
    assert_eq!(history(&sends).len(), 3, "a forged report adds no row: {sends}");
    drop(kannel);
    app.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(named_tests![
        a_text_reaches_the_smsc_and_its_delivery_report_comes_back,
        a_ucs2_text_is_sent_as_unicode_and_a_wrong_password_is_a_credential_failure,
        a_long_text_arrives_in_as_many_segments_as_counted,
        an_inbound_stop_reaches_the_get_url_as_a_keyword,
        herald_texts_through_kannel_and_hears_back,
    ])
}
