//! `/v1/inbox`: the end user's own inbox, called from a browser or an app
//! with a per-user token (see `user_auth`). Every query is scoped to the
//! token's user.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::{Deserialize, Serialize};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

use super::AppState;
use super::credential::Credential;
use super::problem::{ApiError, ApiJson, ApiPath, ApiQuery};
use super::responses::{BadRequest, Invalid, NotFound, Unauthorized};
use super::resume::{self, LastEventId, Resume};
use super::user_auth::{InboxUser, TokenExpiry};
use crate::store::{InboxCounts, InboxFilter, InboxMark, InboxMessage};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    /// inbox (not archived; the default), unread, archived or all
    pub filter: Option<InboxFilter>,
    /// `next_cursor` from the previous page
    #[param(value_type = Option<String>, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub cursor: Option<super::cursor::Cursor>,
    /// 1 to 100 [default: 20]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The user token, for clients that cannot set headers (EventSource)
    pub token: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InboxItem {
    pub id: String,
    pub title: String,
    pub body: Option<String>,
    pub url: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Value>,
    pub created_at: String,
    pub seen_at: Option<String>,
    pub read_at: Option<String>,
    pub archived_at: Option<String>,
}

impl From<&InboxMessage> for InboxItem {
    fn from(m: &InboxMessage) -> Self {
        InboxItem {
            id: m.id.clone(),
            title: m.title.clone(),
            body: m.body.clone(),
            url: m.url.clone(),
            data: m.data.clone(),
            created_at: m.created_at.to_rfc3339(),
            seen_at: m.seen_at.map(|t| t.to_rfc3339()),
            read_at: m.read_at.map(|t| t.to_rfc3339()),
            archived_at: m.archived_at.map(|t| t.to_rfc3339()),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InboxPage {
    pub items: Vec<InboxItem>,
    pub next_cursor: Option<String>,
}

/// The user's messages, newest first.
#[utoipa::path(get, path = "/v1/inbox", tag = "inbox", params(InboxQuery),
    responses((status = 200, body = InboxPage), BadRequest, Unauthorized, Invalid),
    security(("user_token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
    ApiQuery(q): ApiQuery<InboxQuery>,
) -> Result<ApiJson<InboxPage>, ApiError> {
    let limit = ApiError::page_limit(q.limit, 20, 100)?;
    let filter = q.filter.unwrap_or(InboxFilter::Inbox);
    let rows =
        state.store.inbox_page(&user, filter, q.cursor.as_ref().map(super::cursor::Cursor::as_str), limit).await?;
    let next_cursor = super::cursor::next_key(&rows, limit, |m| &m.id);
    Ok(ApiJson(InboxPage { items: rows.iter().map(InboxItem::from).collect(), next_cursor }))
}

/// Unseen (the badge) and unread counts.
#[utoipa::path(get, path = "/v1/inbox/count", tag = "inbox",
    responses((status = 200, body = InboxCounts), Unauthorized),
    security(("user_token" = [])))]
pub async fn count(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
) -> Result<ApiJson<InboxCounts>, ApiError> {
    Ok(ApiJson(state.store.inbox_counts(&user).await?))
}

async fn mark(
    state: &AppState,
    user: &crate::domain::UserId,
    id: &str,
    m: InboxMark,
) -> Result<ApiJson<InboxItem>, ApiError> {
    match state.store.inbox_mark(user, id, m, state.clock.now()).await? {
        Some(msg) => Ok(ApiJson(InboxItem::from(&msg))),
        // The same answer whether the id does not exist or is someone
        // else's: a token must not learn which ids exist.
        None => Err(ApiError::NotFound(format!("no message {id:?} in this inbox"))),
    }
}

macro_rules! mark_route {
    ($name:ident, $path:literal, $mark:expr, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(post, path = $path, tag = "inbox", params(("id" = String, Path)), responses((status = 200, body = InboxItem), Unauthorized, NotFound), security(("user_token" = [])))]
        pub async fn $name(
            State(state): State<AppState>,
            Extension(InboxUser(user)): Extension<InboxUser>,
            ApiPath(id): ApiPath<String>,
        ) -> Result<ApiJson<InboxItem>, ApiError> {
            mark(&state, &user, &id, $mark).await
        }
    };
}

mark_route!(seen, "/v1/inbox/{id}/seen", InboxMark::Seen, "Marks a message seen (shown in a list).");
mark_route!(read, "/v1/inbox/{id}/read", InboxMark::Read, "Marks a message read (and seen).");
mark_route!(unread, "/v1/inbox/{id}/unread", InboxMark::Unread, "Marks a message unread again.");
mark_route!(archive, "/v1/inbox/{id}/archive", InboxMark::Archive, "Archives a message.");

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReadAll {
    pub marked: u64,
}

/// Marks every unread message read.
#[utoipa::path(post, path = "/v1/inbox/read-all", tag = "inbox",
    responses((status = 200, body = ReadAll), Unauthorized),
    security(("user_token" = [])))]
pub async fn read_all(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
) -> Result<ApiJson<ReadAll>, ApiError> {
    Ok(ApiJson(ReadAll { marked: state.store.inbox_read_all(&user, state.clock.now()).await? }))
}

/// How often a stream re-reads even without a signal: the backstop for a
/// missed notification.
const STREAM_BACKSTOP: Duration = Duration::from_secs(15);

/// Server-Sent Events: `message` events for new messages (their `id` is the
/// message's position in commit order; the message's own id is in the data)
/// and `count` events when the counts change. Reconnect with
/// `Last-Event-ID` (browsers do) to receive what was missed, exactly once;
/// a malformed one is a `400` naming the header, one ahead of every
/// position handed out starts the stream from now. The stream ends (after an
/// `end` event saying why) when its token expires: reconnect with a fresh
/// one.
#[utoipa::path(get, path = "/v1/inbox/stream", tag = "inbox",
    params(("Last-Event-ID" = Option<String>, Header,
        description = "The `id` of the last `message` event received: the stream resumes after it; a position (digits), else `400`")),
    responses(
        (status = 200, description = "An event stream", content_type = "text/event-stream"),
        BadRequest, Unauthorized,
    ),
    security(("user_token" = [])))]
pub async fn stream(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
    Extension(TokenExpiry(expires_at)): Extension<TokenExpiry>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // Without Last-Event-ID the stream starts from now: the client reads
    // the existing inbox with GET /v1/inbox. Settled before answering, so a
    // malformed id is a 400 rather than a stream that starts somewhere.
    let mut last = match resume::last_event_id(&headers)? {
        Some(LastEventId::Position(p)) => Resume::check(&*state.store, p).await?.start(),
        Some(LastEventId::Legacy(id)) => state.store.inbox_resume_position(&user, &id).await?,
        None => state.store.inbox_latest_position(&user).await?,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(64);
    let mut changes = state.store.inbox_changes();
    let credential = Credential::UserToken { expires_at };
    tokio::spawn(async move {
        let lapsed = credential.lapsed(&state);
        tokio::pin!(lapsed);
        let mut last_counts: Option<InboxCounts> = None;
        loop {
            // Send what is new since the last position, then the counts if
            // changed. Positions are in commit order: nothing committed later
            // can land behind the last one sent.
            loop {
                let Ok(batch) = state.store.inbox_after(&user, last, 100).await else { break };
                for m in &batch {
                    let data = serde_json::to_string(&InboxItem::from(m)).expect("items serialise");
                    let event = Event::default().event("message").id(m.position.to_string()).data(data);
                    if tx.send(Ok(event)).await.is_err() {
                        return; // the client went away
                    }
                    last = m.position;
                }
                if batch.len() < 100 {
                    break;
                }
            }
            if let Ok(counts) = state.store.inbox_counts(&user).await
                && last_counts != Some(counts)
            {
                let data = serde_json::to_string(&counts).expect("counts serialise");
                if tx.send(Ok(Event::default().event("count").data(data))).await.is_err() {
                    return;
                }
                last_counts = Some(counts);
            }
            // Wait for a change to this user's inbox (anyone else's is not
            // ours to read), the backstop, or the client leaving.
            let wake = async {
                loop {
                    match changes.recv().await {
                        // "*": too many users changed at once to name them all.
                        Ok(u) if u == user.as_str() || u == "*" => return true,
                        Ok(_) => continue,
                        // Missed some signals: re-read to be safe.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
                    }
                }
            };
            tokio::select! {
                // First: once the token has expired, nothing more is sent.
                biased;
                why = &mut lapsed => {
                    let _ = tx.send(Ok(why.event())).await;
                    return;
                }
                alive = wake => if !alive { return },
                _ = tokio::time::sleep(STREAM_BACKSTOP) => {}
                _ = tx.closed() => return,
                // Ending the stream closes the connection; the client
                // reconnects (to another instance) with Last-Event-ID.
                _ = state.shutdown.cancelled() => return,
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::default()))
}
