//! The Web Push transport against push services Herald did not write:
//! - `tests/push/receiver.py`, which verifies the VAPID JWT with Python's
//!   `cryptography` and decrypts with `http_ece` (the reference
//!   implementation of RFC 8188 by one of its authors);
//! - `web-push-testing` (npm), a push service that subscribes, checks and
//!   decrypts as a browser's would.
//!
//! The VAPID keys the Node `web-push` library makes (`npx web-push
//! generate-vapid-keys`) are checked to work as they are.
//!
//! Without python3 + http_ece + cryptography, or without web-push-testing
//! and web-push installed (`npm install --prefix target/web-push-testing
//! web-push-testing@1.2.2 web-push@3.6.7`), these tests end ignored, saying
//! which is missing, except under `CI=true`, where they fail (`.ci/run`
//! installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::harness::{on_request, skip};
use common::in_ci;
use herald::delivery::channel::push::vapid::{VapidKey, generate_key_pair};
use herald::delivery::channel::push::webpush::{EndpointPolicy, WebPush, WebSubscription};
use herald::delivery::channel::push::{DeviceOutcome, PushError, PushNotification, Urgency};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

const SUBJECT: &str = "mailto:ops@herald.test";
const OPEN: EndpointPolicy = EndpointPolicy { allow_private_networks: true };
const STRICT: EndpointPolicy = EndpointPolicy { allow_private_networks: false };

/// How long a helper process may take to say it is ready.
const STARTUP: Duration = Duration::from_secs(20);

/// Skips (or under CI fails) with `why`.
fn unavailable(why: String) -> ! {
    if in_ci() {
        panic!("CI=true but {why}");
    }
    skip(why)
}

/// `tests/push/receiver.py` on a free port; killed when dropped.
struct Receiver {
    port: u16,
    p256dh: String,
    auth: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl Receiver {
    async fn start(vapid_public: &str) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/push/receiver.py");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("requests.jsonl");
        let stderr_path = dir.path().join("stderr.log");
        let spawned = tokio::process::Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(&log)
            .arg(vapid_public)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => unavailable(format!(
                "python3 cannot be run ({e}): apt-get install python3 python3-pip, then pip install http_ece cryptography"
            )),
        };
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(STARTUP, lines.next_line()).await;
        if let Ok(Ok(Some(line))) = &first
            && let Some(keys) = line.strip_prefix("READY ")
        {
            let keys: Value = serde_json::from_str(keys).unwrap();
            return Receiver {
                port,
                p256dh: keys["p256dh"].as_str().unwrap().to_owned(),
                auth: keys["auth"].as_str().unwrap().to_owned(),
                log,
                _dir: dir,
                _child: child,
            };
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        for module in ["http_ece", "cryptography"] {
            if stderr.contains(&format!("No module named '{module}'")) {
                unavailable(format!("the push receiver needs {module}: pip install http_ece cryptography"));
            }
        }
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr");
        panic!("tests/push/receiver.py did not say READY ({first:?}): {last}");
    }

    /// A subscription on this receiver whose path picks its answer.
    fn subscription(&self, path: &str) -> WebSubscription {
        let endpoint = format!("http://127.0.0.1:{}{path}", self.port);
        WebSubscription::parse(&endpoint, &self.p256dh, &self.auth, OPEN).unwrap()
    }

    /// What the receiver logged, one entry per request, in arrival order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn vapid() -> Arc<VapidKey> {
    let (private, _) = generate_key_pair();
    Arc::new(VapidKey::new(&private, SUBJECT).unwrap())
}

fn transport(vapid: Arc<VapidKey>, policy: EndpointPolicy) -> WebPush {
    WebPush::new(vapid, policy, Duration::from_secs(10))
}

fn notification(id: &str) -> PushNotification {
    PushNotification {
        id: id.to_owned(),
        title: "Your export is ready".into(),
        body: Some("3 files, 12 MB — tap to download".into()),
        url: Some("https://app.example.com/exports/42".into()),
        data: json!({ "export_id": 42, "files": ["a.csv", "b.csv"], "owner": { "name": "Ada" } }),
        ttl: Duration::from_secs(3600),
        urgency: Urgency::High,
    }
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

async fn a_notification_arrives_verified_and_decrypted_field_by_field() {
    let key = vapid();
    let receiver = Receiver::start(key.public_key()).await;
    let push = transport(key.clone(), OPEN);
    let n = notification("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    let outcome = push.send(&receiver.subscription("/push/ok/ada"), &n).await;
    let DeviceOutcome::Accepted { message_id: Some(location) } = &outcome else { panic!("{outcome:?}") };
    assert!(location.starts_with(&format!("http://127.0.0.1:{}/message/", receiver.port)), "{location}");

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let r = &requests[0];
    assert_eq!(r["status"], 201, "{r:#}");
    assert!(r.get("error").is_none(), "{r:#}");
    // The payload, field by field, as the receiver decrypted it.
    let p = &r["payload"];
    assert_eq!(p["id"], "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    assert_eq!(p["title"], "Your export is ready");
    assert_eq!(p["body"], "3 files, 12 MB — tap to download");
    assert_eq!(p["url"], "https://app.example.com/exports/42");
    assert_eq!(p["data"], json!({ "export_id": 42, "files": ["a.csv", "b.csv"], "owner": { "name": "Ada" } }));
    assert_eq!(p.as_object().unwrap().len(), 5, "no other fields: {p:#}");
    // RFC 8030 headers.
    let h = &r["headers"];
    assert_eq!(h["ttl"], "3600");
    assert_eq!(h["urgency"], "high");
    assert_eq!(h["content-encoding"], "aes128gcm");
    let topic = h["topic"].as_str().unwrap();
    assert_eq!(topic, n.collapse_key());
    assert!(topic.len() <= 32 && topic.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    // The VAPID claims the receiver verified against the public key.
    let c = &r["claims"];
    assert_eq!(c["aud"], format!("http://127.0.0.1:{}", receiver.port));
    assert_eq!(c["sub"], SUBJECT);
    let exp = c["exp"].as_i64().unwrap();
    assert!(exp > now_secs() + 11 * 3600 && exp <= now_secs() + 24 * 3600, "exp {exp}");

    // A second message to the same origin: a new body, the same cached
    // token, and a different Topic for a different row.
    let second = notification("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c");
    assert!(matches!(push.send(&receiver.subscription("/push/ok/ada"), &second).await, DeviceOutcome::Accepted { .. }));
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["payload"]["id"], "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c");
    assert_eq!(requests[0]["headers"]["authorization"], requests[1]["headers"]["authorization"]);
    assert_ne!(requests[0]["headers"]["topic"], requests[1]["headers"]["topic"]);
}

async fn a_gone_subscription_is_reported_with_the_services_words() {
    let key = vapid();
    let receiver = Receiver::start(key.public_key()).await;
    let outcome = transport(key, OPEN).send(&receiver.subscription("/push/gone/ada"), &notification("n1")).await;
    assert_eq!(
        outcome,
        DeviceOutcome::DeviceGone {
            reason: "the push service answered 410: push subscription has unsubscribed or expired.".into()
        }
    );
    assert_eq!(receiver.requests().len(), 1);
}

async fn a_rate_limit_is_retried_no_sooner_than_retry_after() {
    let key = vapid();
    let receiver = Receiver::start(key.public_key()).await;
    let push = transport(key, OPEN);
    let sub = receiver.subscription("/push/busy/ada");
    let n = notification("n-busy");
    let outcome = push.send(&sub, &n).await;
    let DeviceOutcome::Retry { after: Some(after), reason } = outcome else { panic!("{outcome:?}") };
    assert!(after >= Duration::from_secs(1), "{after:?}");
    assert!(reason.contains("429"), "{reason}");
    // Honour it, as the worker will, then try again.
    tokio::time::sleep(after).await;
    assert!(matches!(push.send(&sub, &n).await, DeviceOutcome::Accepted { .. }));
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1]["t"].as_f64().unwrap() - requests[0]["t"].as_f64().unwrap();
    assert!(gap >= 1.0, "the retry came {gap} s after the 429");
    assert_eq!(requests[1]["payload"]["id"], "n-busy");
    // The same row, so the same Topic: the push service keeps one copy.
    assert_eq!(requests[0]["headers"]["topic"], requests[1]["headers"]["topic"]);
}

async fn an_endpoint_on_a_private_address_is_refused() {
    let key = vapid();
    let receiver = Receiver::start(key.public_key()).await;
    // At registration: not https, and https to loopback, both refused.
    for endpoint in [
        format!("http://127.0.0.1:{}/push/ok/x", receiver.port),
        format!("https://127.0.0.1:{}/push/ok/x", receiver.port),
        format!("https://localhost:{}/push/ok/x", receiver.port),
        "https://169.254.169.254/latest/meta-data".to_owned(),
    ] {
        let err = WebSubscription::parse(&endpoint, &receiver.p256dh, &receiver.auth, STRICT).unwrap_err();
        assert!(matches!(err, PushError::InvalidDevice { field: "endpoint", .. }), "{endpoint}: {err}");
    }
    // At delivery: a subscription accepted under an open policy is not
    // sent by a transport under the strict one.
    let outcome = transport(key, STRICT).send(&receiver.subscription("/push/ok/x"), &notification("n")).await;
    let DeviceOutcome::Refused { reason } = &outcome else { panic!("{outcome:?}") };
    assert!(reason.contains("push.allow_private_networks"), "{reason}");
    assert!(receiver.requests().is_empty(), "nothing reached the receiver");
}

async fn a_wrong_vapid_key_is_a_rejected_credential() {
    let key = vapid();
    let receiver = Receiver::start(key.public_key()).await;
    let outcome = transport(vapid(), OPEN).send(&receiver.subscription("/push/ok/ada"), &notification("n")).await;
    let DeviceOutcome::CredentialRejected { reason } = &outcome else { panic!("{outcome:?}") };
    assert!(reason.contains("403") && reason.contains("application server key"), "{reason}");
}

async fn a_payload_over_the_limit_is_refused_before_sending() {
    let key = vapid();
    let receiver = Receiver::start(key.public_key()).await;
    let mut n = notification("n-large");
    n.data = json!({ "blob": "x".repeat(4000) });
    let outcome = transport(key, OPEN).send(&receiver.subscription("/push/ok/ada"), &n).await;
    let DeviceOutcome::TooLarge { reason } = &outcome else { panic!("{outcome:?}") };
    let size = serde_json::to_vec(&n).unwrap().len();
    assert!(reason.contains(&format!("{size} bytes")) && reason.contains("4096-byte limit"), "{reason}");
    // Just under 4,096 bytes of JSON is still too large once encrypted.
    n.data = json!({ "blob": "x".repeat(3900) });
    let outcome = transport(vapid(), OPEN).send(&receiver.subscription("/push/ok/ada"), &n).await;
    let DeviceOutcome::TooLarge { reason } = &outcome else { panic!("{outcome:?}") };
    assert!(reason.contains("encrypted Web Push body"), "{reason}");
    assert!(receiver.requests().is_empty());
}

/// `web-push-testing`: its package directory, installed by `.ci/run` under
/// `target/web-push-testing` (or named by `WEB_PUSH_TESTING_DIR`: not a
/// `HERALD_*` name, which the binaries the other suites start would read
/// as configuration and refuse as an unknown key).
fn web_push_testing() -> PathBuf {
    let dir = std::env::var_os("WEB_PUSH_TESTING_DIR").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-push-testing/node_modules/web-push-testing")
    });
    if !dir.join("src/bin/server.js").exists() || !dir.join("../web-push/src/index.js").exists() {
        unavailable(format!(
            "web-push-testing and web-push are not installed beside each other at {}: npm install --prefix \
             target/web-push-testing web-push-testing@1.2.2 web-push@3.6.7 (or set WEB_PUSH_TESTING_DIR \
             to web-push-testing's package directory)",
            dir.display()
        ));
    }
    dir
}

/// POSTs JSON to the web-push-testing server; its answer's status and body.
async fn wpt(client: &reqwest::Client, port: u16, path: &str, body: Value) -> (u16, Value) {
    let r = client.post(format!("http://127.0.0.1:{port}{path}")).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn web_push_testing_decrypts_like_a_browser() {
    let dir = web_push_testing();
    let port = free_port();
    let logs = tempfile::tempdir().unwrap();
    let stderr_path = logs.path().join("stderr.log");
    let mut server = tokio::process::Command::new("node")
        .arg(dir.join("src/bin/server.js"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| unavailable(format!("node cannot be run ({e}): apt-get install nodejs npm")));
    let client = reqwest::Client::new();
    let started = Instant::now();
    while client.post(format!("http://127.0.0.1:{port}/status")).send().await.is_err() {
        assert!(started.elapsed() < STARTUP, "web-push-testing did not answer /status within {STARTUP:?}");
        if let Some(status) = server.try_wait().unwrap() {
            panic!("web-push-testing exited ({status}): {}", std::fs::read_to_string(&stderr_path).unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A key pair made by the Node `web-push` library (what `npx web-push
    // generate-vapid-keys` prints) works as `push.vapid_private_key` and
    // gives the same public key; and it accepts a pair Herald made.
    let (ours_private, ours_public) = generate_key_pair();
    let script = format!(
        "const w = require({:?}); w.setVapidDetails({SUBJECT:?}, {ours_public:?}, {ours_private:?}); \
         console.log(JSON.stringify(w.generateVAPIDKeys()))",
        dir.join("../web-push").display().to_string()
    );
    let out = std::process::Command::new("node").arg("-e").arg(&script).output().unwrap();
    assert!(out.status.success(), "web-push: {}", String::from_utf8_lossy(&out.stderr));
    let theirs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = Arc::new(VapidKey::new(theirs["privateKey"].as_str().unwrap(), SUBJECT).unwrap());
    assert_eq!(key.public_key(), theirs["publicKey"].as_str().unwrap());

    // Subscribe as a page would, with that public key.
    let (status, subscribed) = wpt(
        &client,
        port,
        "/subscribe",
        json!({ "applicationServerKey": key.public_key(), "userVisibleOnly": "true" }),
    )
    .await;
    assert_eq!(status, 200, "{subscribed}");
    let data = &subscribed["data"];
    let endpoint = data["endpoint"].as_str().unwrap();
    let sub = WebSubscription::parse(
        endpoint,
        data["keys"]["p256dh"].as_str().unwrap(),
        data["keys"]["auth"].as_str().unwrap(),
        OPEN,
    )
    .unwrap();
    let hash = data["clientHash"].as_str().unwrap();

    let push = transport(key, OPEN);
    let n = notification("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    let outcome = push.send(&sub, &n).await;
    assert!(matches!(outcome, DeviceOutcome::Accepted { .. }), "{outcome:?}");
    let (status, got) = wpt(&client, port, "/get-notifications", json!({ "clientHash": hash })).await;
    assert_eq!(status, 200, "{got}");
    let messages = got["data"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{got}");
    let payload: Value = serde_json::from_str(messages[0].as_str().unwrap()).unwrap();
    assert_eq!(payload, serde_json::to_value(&n).unwrap());
    assert_eq!(payload["title"], "Your export is ready");

    // The browser unsubscribes: the service answers 410 and the device is gone.
    let (status, _) = wpt(&client, port, &format!("/expire-subscription/{hash}"), json!({})).await;
    assert_eq!(status, 200);
    let outcome = push.send(&sub, &notification("n2")).await;
    let DeviceOutcome::DeviceGone { reason } = &outcome else { panic!("{outcome:?}") };
    assert!(reason.contains("410"), "{reason}");
}

/// The CPU time this thread has used (`/proc/thread-self/schedstat`, ns).
fn thread_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    Duration::from_nanos(s.split_whitespace().next().unwrap().parse().unwrap())
}

/// CPU microseconds per Web Push message: encryption (an ephemeral key,
/// ECDH, HKDF, AES-GCM) with the VAPID token cached per origin, and with a
/// fresh ES256 signature each time. Prints the figures; a debug build's
/// are several times too high (unoptimised field arithmetic), so quote
/// numbers from `--release`, or from a debug build with the crypto crates
/// and herald optimised (`--config profile.dev.package.NAME.opt-level=3`
/// for herald, ring, p256 and its field crates, aes-gcm, hkdf, sha2).
async fn cost_of_encryption_and_signing() {
    let key = vapid();
    let push = transport(key.clone(), OPEN);
    let (_, p256dh) = generate_key_pair();
    let sub = WebSubscription::parse("http://127.0.0.1:9/push", &p256dh, "BTBZMqHH6r4Tts7J_aSIgg", OPEN).unwrap();
    let n = notification("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
    let rounds = 2000;
    let measure = |f: &dyn Fn()| {
        let (cpu, wall) = (thread_cpu(), Instant::now());
        for _ in 0..rounds {
            f();
        }
        ((thread_cpu() - cpu) / rounds, wall.elapsed() / rounds)
    };
    let (cached_cpu, cached_wall) = measure(&|| {
        std::hint::black_box(push.prepare(&sub, &n).unwrap());
    });
    let (sign_cpu, sign_wall) = measure(&|| {
        std::hint::black_box(key.sign("https://push.example.net", SystemTime::now() + Duration::from_secs(3600)));
    });
    println!(
        "web push, per message over {rounds}: encrypt + cached VAPID token {:.1} µs CPU ({:.1} µs wall); \
         an uncached ES256 VAPID signature adds {:.1} µs CPU ({:.1} µs wall)",
        cached_cpu.as_secs_f64() * 1e6,
        cached_wall.as_secs_f64() * 1e6,
        sign_cpu.as_secs_f64() * 1e6,
        sign_wall.as_secs_f64() * 1e6
    );
    assert!(cached_cpu > Duration::ZERO && sign_cpu > Duration::ZERO);
}

fn main() -> std::process::ExitCode {
    let mut trials = named_tests![
        a_notification_arrives_verified_and_decrypted_field_by_field,
        a_gone_subscription_is_reported_with_the_services_words,
        a_rate_limit_is_retried_no_sooner_than_retry_after,
        an_endpoint_on_a_private_address_is_refused,
        a_wrong_vapid_key_is_a_rejected_credential,
        a_payload_over_the_limit_is_refused_before_sending,
        web_push_testing_decrypts_like_a_browser,
    ];
    trials.push(on_request(
        "cost_of_encryption_and_signing",
        "a measurement, prints CPU µs per message",
        cost_of_encryption_and_signing,
    ));
    common::harness::main(trials)
}
