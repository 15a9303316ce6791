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
