//! `GET /v1/events/stream`: outcome events for the host application, as
//! Server-Sent Events, resumable with `Last-Event-ID`.
//!
//! Every terminal outcome (sent, failed, suppressed, bounced, expired,
//! cancelled), every hold (a send window, quiet hours or an escalation's
//! wait put a message back, with until when and why), every suppression added (unsubscribes, hard bounces) and every
//! suppression lifted, in the order they committed. The events are rows of
//! `engagement_events`, written in the same transaction as what they
//! report and numbered in commit order (their `position`), so a follower
//! that resumes from the last position it saw misses nothing and sees
//! nothing twice, however many instances write.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Deserialize;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

use super::AppState;
use super::auth::Caller;
use super::credential::Credential;
use super::problem::{ApiError, ApiQuery};
use super::responses::{BadRequest, Unauthorized};
use super::resume::{self, LastEventId, Resume};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Without `Last-Event-ID`: `now` (only new events; the default) or
    /// `start` (every event kept).
    pub from: Option<From>,
}

#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = EventsFrom)]
pub enum From {
    Now,
    Start,
}

/// How often a stream re-reads without a signal: the backstop for other
/// instances on SQLite or MariaDB, which have no LISTEN/NOTIFY.
const BACKSTOP: Duration = Duration::from_secs(2);

/// Outcome events as Server-Sent Events. First a `ready` event (where the
/// stream starts: `{"after": position}`, plus a `note` when a
/// `Last-Event-ID` ahead of every position handed out made it start from
/// now); then each event's `event` is its kind (`outcome`, `held`,
/// `suppression`, `suppression_lifted`), its `id` the event's position in
/// commit order (send it back as `Last-Event-ID` to resume; an event id from
/// an older version is accepted too), its `data` the event as JSON. A
/// malformed `Last-Event-ID` is a `400` naming the header. The stream ends
/// (after an `end` event saying why) within five seconds of its API key's
/// revocation, like any other request with that key.
#[utoipa::path(get, path = "/v1/events/stream", tag = "events",
    params(EventsQuery, ("Last-Event-ID" = Option<String>, Header,
        description = "The `id` of the last event received: the stream resumes after it (`from` is then ignored); a position (digits) or an older version's event id, else `400`")),
    responses(
        (status = 200, description = "An event stream", content_type = "text/event-stream"),
        BadRequest, Unauthorized,
    ),
    security(("api_key" = [])))]
pub async fn stream(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // Where to start is settled before answering, so a malformed id is a
    // 400 rather than a stream that starts somewhere.
    let mut note = None;
    let mut last = match (resume::last_event_id(&headers)?, q.from) {
        (Some(LastEventId::Position(p)), _) => {
            let resume = Resume::check(&*state.store, p).await?;
            note = resume.note();
            resume.start()
        }
        // An event id, from a follower of an older version.
        (Some(LastEventId::Legacy(id)), _) => state.store.event_position(&id).await?.unwrap_or(0),
        (None, Some(From::Start)) => 0,
        (None, _) => state.store.latest_event_position().await?,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(64);
    let mut signal = state.store.event_signal();
    let credential = Credential::ApiKey { hash: caller.key_hash };
    tokio::spawn(async move {
        let lapsed = credential.lapsed(&state);
        tokio::pin!(lapsed);
        // Tells the follower where the stream starts, and that anything
        // committed from now on will reach it.
        let mut ready = serde_json::json!({ "after": last });
        if let Some(note) = note {
            ready["note"] = note.into();
        }
        if tx.send(Ok(Event::default().event("ready").data(ready.to_string()))).await.is_err() {
            return;
        }
        loop {
            loop {
                let Ok(batch) = state.store.events_after(last, 200).await else { break };
                for e in &batch {
                    let data = serde_json::json!({
                        "id": e.id, "position": e.position, "kind": e.kind, "user_id": e.user_id,
                        "outbox_id": e.outbox_id, "created_at": e.created_at.to_rfc3339(), "data": e.data,
                    });
                    let event =
                        Event::default().event(e.kind.clone()).id(e.position.to_string()).data(data.to_string());
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                    last = e.position;
                }
                if batch.len() < 200 {
                    break;
                }
            }
            tokio::select! {
                // First: once the key is revoked, nothing more is sent.
                biased;
                why = &mut lapsed => {
                    let _ = tx.send(Ok(why.event())).await;
                    return;
                }
                changed = signal.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(BACKSTOP) => {}
                _ = tx.closed() => return,
                _ = state.shutdown.cancelled() => return,
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::default()))
}
