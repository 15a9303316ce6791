//! `/v1/topics`: topics a host names (`doc:42`) and the users who follow
//! them, which a trigger addressed to a topic reaches (see docs/topics.md).
//!
//! Subscribers come and go in lists of up to [`MAX_USER_IDS`], each list one
//! statement (see `store::topics`), so a host that mirrors "who watches
//! this document" makes one call per change, not one per user.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::Caller;
use super::cursor::next_key;
use super::problem::{ApiError, ApiJson, ApiPath, ApiQuery};
use super::responses::{BadRequest, Invalid, NotFound, NotJson, TooLarge, Unauthorized};
use crate::domain::{TopicKey, UserId};
use crate::planning::rule::FieldError;
use crate::store::{Page, Subscription, TopicRow};

/// How many user ids one call may add or remove, all in one statement (one
/// JSON parameter): enough for a host to mirror a large group in a few
/// calls, small enough that one call holds its locks briefly and its body
/// stays a few megabytes. A host with more sends more calls.
pub const MAX_USER_IDS: usize = 10_000;

/// The body limit of the subscriber routes: [`MAX_USER_IDS`] ids of the
/// longest a user id may be (255 bytes), quoted and separated, is 2.6 MB,
/// over `http.max_body_bytes`'s default; the rest of the API keeps that.
pub const MAX_SUBSCRIBERS_BYTES: usize = 4 * 1024 * 1024;

/// The largest page the lists here answer, and the one they answer by default.
const MAX_PAGE: u32 = 1000;
const DEFAULT_PAGE: u32 = 100;

/// How long a topic's name and description may be.
const MAX_NAME: usize = 200;
const MAX_DESCRIPTION: usize = 2000;

/// The `key` of a path, parsed (a `422` naming `topic_key` when refused).
fn topic(key: &str) -> Result<TopicKey, ApiError> {
    TopicKey::parse("topic_key", key).map_err(|e| ApiError::Invalid(vec![e.into()]))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicInput {
    /// For people: the operator's screens and lists. At most 200 characters.
    #[serde(default)]
    pub name: Option<String>,
    /// At most 2000 characters.
    #[serde(default)]
    pub description: Option<String>,
}

impl TopicInput {
    fn check(&self) -> Result<(), ApiError> {
        let mut errors = Vec::new();
        for (field, value, max) in [("name", &self.name, MAX_NAME), ("description", &self.description, MAX_DESCRIPTION)]
        {
            let Some(value) = value else { continue };
            if value.chars().count() > max {
                errors.push(FieldError::new(field, format!("at most {max} characters")));
            } else if value.contains('\0') {
                errors.push(FieldError::new(field, crate::domain::NUL_REFUSED));
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(ApiError::Invalid(errors)) }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TopicView {
    pub topic_key: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// How many users follow it (one topic only: a list leaves it out,
    /// since counting every topic of a page reads every subscription).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscribers: Option<u64>,
}

impl TopicView {
    fn new(t: &TopicRow, subscribers: Option<u64>) -> TopicView {
        TopicView {
            topic_key: t.topic_key.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            created_at: t.created_at.to_rfc3339(),
            updated_at: t.updated_at.to_rfc3339(),
            subscribers,
        }
    }
}

/// A list's parameters: after which key (or user id) to start, and how many.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// `next_cursor` from the previous page
    #[param(min_length = 1, max_length = 255)]
    pub cursor: Option<String>,
    /// 1 to 1000 [default: 100]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

impl PageQuery {
    /// The page, its cursor checked as what the list is keyed by (a topic
    /// key or a user id), so a mangled cursor is refused rather than read as
    /// a place in the list.
    fn page<T>(
        &self,
        parse: impl FnOnce(&'static str, &str) -> Result<T, crate::domain::InvalidValue>,
    ) -> Result<Page<'_>, ApiError> {
        let limit = ApiError::page_limit(self.limit, DEFAULT_PAGE, MAX_PAGE)?;
        if let Some(c) = &self.cursor {
            parse("cursor", c).map_err(|e| ApiError::Invalid(vec![e.into()]))?;
        }
        Ok(Page { after: self.cursor.as_deref(), limit })
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TopicPage {
    /// In key order.
    pub topics: Vec<TopicView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SubscriptionView {
    pub topic_key: String,
    pub user_id: String,
    /// When the user subscribed: a trigger to the topic recorded at this
    /// time or later reaches them.
    pub subscribed_at: String,
}

impl From<&Subscription> for SubscriptionView {
    fn from(s: &Subscription) -> Self {
        SubscriptionView {
            topic_key: s.topic_key.clone(),
            user_id: s.user_id.clone(),
            subscribed_at: s.created_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SubscriptionPage {
    /// In user-id order (a topic's subscribers) or key order (a user's topics).
    pub subscriptions: Vec<SubscriptionView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl SubscriptionPage {
    fn new(rows: &[Subscription], limit: u32, key: impl Fn(&Subscription) -> &str) -> SubscriptionPage {
        SubscriptionPage {
            subscriptions: rows.iter().map(SubscriptionView::from).collect(),
            next_cursor: next_key(rows, limit, key),
        }
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribersInput {
    /// 1 to 10,000 user ids (each 1 to 255 bytes without control
    /// characters); an id listed twice counts once.
    pub user_ids: Vec<String>,
}

impl SubscribersInput {
    /// The ids, each checked; a 422 names every refused one (the first 20)
    /// by its place in the list.
    pub fn users(&self) -> Result<Vec<UserId>, ApiError> {
        let n = self.user_ids.len();
        if !(1..=MAX_USER_IDS).contains(&n) {
            return Err(ApiError::field("user_ids", format!("must list 1 to {MAX_USER_IDS} user ids, not {n}")));
        }
        let mut errors = Vec::new();
        let mut users = Vec::with_capacity(n);
        for (i, id) in self.user_ids.iter().enumerate() {
            match UserId::parse("user_ids", id) {
                Ok(u) => users.push(u),
                Err(e) if errors.len() < 20 => {
                    errors.push(FieldError::new(format!("user_ids[{i}]"), e.to_string()));
                }
                Err(_) => {}
            }
        }
        if errors.is_empty() { Ok(users) } else { Err(ApiError::Invalid(errors)) }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SubscribersAdded {
    /// Subscribed now.
    pub added: u64,
    /// Of the distinct ids listed, those subscribed before (left as they
    /// were, their subscription time included).
    pub already: u64,
    /// The topic had no row and has one now (without name or description).
    pub topic_created: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SubscribersRemoved {
    /// Of the ids listed, those that were subscribed.
    pub removed: u64,
}

/// Creates a topic, or replaces its name and description (a field left
/// out becomes null).
#[utoipa::path(put, path = "/v1/topics/{key}", tag = "topics", params(("key" = String, Path)),
    request_body = TopicInput,
    responses(
        (status = 200, description = "Replaced", body = TopicView),
        (status = 201, description = "Created", body = TopicView),
        BadRequest, Unauthorized, TooLarge, NotJson, Invalid,
    ),
    security(("api_key" = [])))]
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(key): ApiPath<String>,
    ApiJson(input): ApiJson<TopicInput>,
) -> Result<(StatusCode, ApiJson<TopicView>), ApiError> {
    let key = topic(&key)?;
    input.check()?;
    let (row, created) =
        state.store.put_topic(&key, input.name.as_deref(), input.description.as_deref(), state.clock.now()).await?;
    let (status, action) =
        if created { (StatusCode::CREATED, "topic.create") } else { (StatusCode::OK, "topic.update") };
    let detail = row.name.as_deref().map_or_else(|| "no name".to_owned(), |n| format!("name {n:?}"));
    super::audit_api(&state, &caller, action, &audit_target(&key), Some(detail)).await;
    Ok((status, ApiJson(TopicView::new(&row, None))))
}

/// A topic in the audit log, as a user is `user:ID` there.
fn audit_target(key: &TopicKey) -> String {
    format!("topic:{}", key.as_str())
}

/// A topic, with how many users follow it.
#[utoipa::path(get, path = "/v1/topics/{key}", tag = "topics", params(("key" = String, Path)),
    responses((status = 200, body = TopicView), Unauthorized, NotFound, Invalid),
    security(("api_key" = [])))]
pub async fn get(State(state): State<AppState>, ApiPath(key): ApiPath<String>) -> Result<ApiJson<TopicView>, ApiError> {
    let key = topic(&key)?;
    let (row, subscribers) =
        state.store.get_topic(&key).await?.ok_or_else(|| ApiError::NotFound(format!("no topic {:?}", key.as_str())))?;
    Ok(ApiJson(TopicView::new(&row, Some(subscribers))))
}

/// Deletes a topic and every subscription to it.
#[utoipa::path(delete, path = "/v1/topics/{key}", tag = "topics", params(("key" = String, Path)),
    responses((status = 204, description = "Deleted"), Unauthorized, NotFound, Invalid),
    security(("api_key" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiPath(key): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let key = topic(&key)?;
    let deleted = state.store.delete_topic(&key).await?;
    if deleted.nothing() {
        return Err(ApiError::NotFound(format!("no topic {:?}", key.as_str())));
    }
    tracing::info!(topic = %key, subscriptions = deleted.subscriptions, "topic deleted");
    let detail = format!("{} subscription(s) deleted with it", deleted.subscriptions);
    super::audit_api(&state, &caller, "topic.delete", &audit_target(&key), Some(detail)).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Topics in key order.
#[utoipa::path(get, path = "/v1/topics", tag = "topics", params(PageQuery),
    responses((status = 200, body = TopicPage), BadRequest, Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<ApiJson<TopicPage>, ApiError> {
    let page = q.page(TopicKey::parse)?;
    let rows = state.store.list_topics(page).await?;
    Ok(ApiJson(TopicPage {
        topics: rows.iter().map(|t| TopicView::new(t, None)).collect(),
        next_cursor: next_key(&rows, page.limit, |t| &t.topic_key),
    }))
}

/// Subscribes users to a topic, creating the topic when it does not exist.
/// Users already subscribed are left as they were.
#[utoipa::path(post, path = "/v1/topics/{key}/subscribers", tag = "topics", params(("key" = String, Path)),
    request_body = SubscribersInput,
    responses((status = 200, body = SubscribersAdded), BadRequest, Unauthorized, TooLarge, NotJson, Invalid),
    security(("api_key" = [])))]
pub async fn subscribe(
    State(state): State<AppState>,
    ApiPath(key): ApiPath<String>,
    ApiJson(input): ApiJson<SubscribersInput>,
) -> Result<ApiJson<SubscribersAdded>, ApiError> {
    let key = topic(&key)?;
    let users = input.users()?;
    let done = state.store.subscribe(&key, &users, state.clock.now()).await?;
    let distinct = users.iter().collect::<std::collections::HashSet<_>>().len() as u64;
    Ok(ApiJson(SubscribersAdded {
        added: done.added,
        already: distinct.saturating_sub(done.added),
        topic_created: done.topic_created,
    }))
}

/// Removes users from a topic.
#[utoipa::path(delete, path = "/v1/topics/{key}/subscribers", tag = "topics", params(("key" = String, Path)),
    request_body = SubscribersInput,
    responses((status = 200, body = SubscribersRemoved), BadRequest, Unauthorized, TooLarge, NotJson, Invalid),
    security(("api_key" = [])))]
pub async fn unsubscribe(
    State(state): State<AppState>,
    ApiPath(key): ApiPath<String>,
    ApiJson(input): ApiJson<SubscribersInput>,
) -> Result<ApiJson<SubscribersRemoved>, ApiError> {
    let key = topic(&key)?;
    let users = input.users()?;
    let removed = state.store.unsubscribe(&key, &users).await?;
    Ok(ApiJson(SubscribersRemoved { removed }))
}

/// A topic's subscribers, in user-id order.
#[utoipa::path(get, path = "/v1/topics/{key}/subscribers", tag = "topics", params(("key" = String, Path), PageQuery),
    responses((status = 200, body = SubscriptionPage), BadRequest, Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn subscribers(
    State(state): State<AppState>,
    ApiPath(key): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<ApiJson<SubscriptionPage>, ApiError> {
    let key = topic(&key)?;
    let page = q.page(UserId::parse)?;
    let rows = state.store.subscribers(&key, page).await?;
    Ok(ApiJson(SubscriptionPage::new(&rows, page.limit, |s| &s.user_id)))
}

/// The topics a user follows, in key order.
#[utoipa::path(get, path = "/v1/users/{user_id}/topics", tag = "topics", params(("user_id" = String, Path), PageQuery),
    responses((status = 200, body = SubscriptionPage), BadRequest, Unauthorized, Invalid),
    security(("api_key" = [])))]
pub async fn user_topics(
    State(state): State<AppState>,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> Result<ApiJson<SubscriptionPage>, ApiError> {
    let user = super::users::user(&user_id)?;
    let page = q.page(TopicKey::parse)?;
    let rows = state.store.user_topics(&user, page).await?;
    Ok(ApiJson(SubscriptionPage::new(&rows, page.limit, |s| &s.topic_key)))
}
