//! The defects an outside review found (issue 13), each end to end through a
//! running server: what once crashed it, exhausted it or let someone past
//! it. Each test here failed on the code before its fix.

mod common;

use common::Backend;
use common::app::App;

/// 50,000 levels of `message/rfc822` (1.6 MB) once aborted the whole process
/// with a stack overflow. Now the bounce is refused with a 422 naming why,
/// and the server goes on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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

#[allow(dead_code)]
fn backends() -> [Backend; 3] {
    [Backend::Sqlite, Backend::Postgres, Backend::MySql]
}

/// A connection that sends half a header block is closed once
/// `http.header_read_timeout` has passed; before, it was held forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
