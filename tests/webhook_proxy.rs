//! Outbound requests ignore `HTTP_PROXY`/`HTTPS_PROXY`.
//!
//! With a proxy in the environment, reqwest sent webhook deliveries through
//! it: the guarded resolver then resolved only the proxy's own name, and the
//! proxy reached whatever the rule's URL named, loopback included. This test
//! sets the proxy variables (in its own process, before any thread starts,
//! hence a binary of its own) to a local "proxy" that answers 200 to
//! anything and counts connections, then delivers a webhook and fetches an
//! SNS certificate: neither may reach the proxy.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use herald::delivery::channel::webhook::{SigningSecret, WebhookChannel, WebhookPolicy};
use herald::delivery::channel::{Channel, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn webhook_and_sns_requests_do_not_go_through_an_environment_proxy() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    // SAFETY: no other thread exists yet in this process (the runtime is
    // built below), so nothing reads the environment concurrently.
    unsafe {
        for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
            std::env::set_var(var, &proxy);
        }
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = connections.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { return };
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
                });
            }
        });
        let channel = WebhookChannel::new(
            SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap(),
            WebhookPolicy::default(),
            Duration::from_secs(5),
        );
        // A name the guarded resolver must judge; through the proxy it was
        // never resolved here at all.
        let outcome = channel.deliver(&common::webhook_delivery("http://hooks.example.test/x", "{}")).await;
        assert!(!matches!(outcome, Outcome::Sent { .. }), "delivered through the proxy: {outcome:?}");
        let fetched = herald::feedback::providers::ses::client()
            .get("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem")
            .send()
            .await;
        assert!(fetched.is_err(), "fetched through the proxy: {fetched:?}");
        assert_eq!(connections.load(Ordering::SeqCst), 0, "a request went to the proxy");
    });
}
