//! The end user's preference center: `GET/PUT /v1/inbox/preferences` (with
//! the user's inbox token, for apps and the widget) and the hosted page
//! `GET/POST /p/{token}` (a signed link from every non-transactional
//! email's footer, a plain form that works without JavaScript).
//!
//! # What a user can choose
//! The categories of the enabled rules, each with the channels its rules
//! deliver on that reach a person (email and the in-app inbox, an
//! escalating rule's follow-up channel included; not a webhook, the host's
//! own integration), named by the rules' `display_name` and `description`
//! (else the category made readable). `transactional` is listed but locked
//! on.
//!
//! And the topics the user follows (`doc:42`), each of which they can mute:
//! a trigger to a muted topic reaches them on no channel, whatever its
//! category, while they stay subscribed (the host decides who follows
//! what; the user decides whether it notifies them). A mute is kept in the
//! user's choices as `topic:KEY` -> `*` (see
//! [`crate::planning::recipient::topic_muted`]), which is why no category
//! starting with `topic:` is the user's to choose here.
//!
//! # Precedence
//! The user's own choice for a category and channel wins over the host's
//! `preferences` (`PUT /v1/users/{id}`), whichever came last: a host sync
//! replaces the host's preferences and never touches the user's choices, so
//! it cannot silently undo them. Where the user has not chosen, the host's
//! preferences decide (and then "on"). Every change is written to the audit
//! log with who made it (the user through the API or the hosted page, a
//! host API key, an operator), shown on the user's send-log page.

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::preference_form::FormBoxes;
use super::problem::{ApiError, ApiJson, ApiPath, Problem};
use super::user_auth::InboxUser;
use crate::delivery::channel::email::message::TRANSACTIONAL;
use crate::domain::TopicKey;
use crate::domain::UserId;
use crate::planning::recipient::{EVERY_CHANNEL, Preferences, TOPIC_CHOICE_PREFIX, UserChoices};
use crate::planning::rule::FieldError;
use crate::store::{AuditEntry, ChoicesMerged, Page, RecipientRow};

/// How many of the topics a user follows the center lists: the first by
/// key, read in one page. A user following more can still mute any of them
/// through `PUT` (`topics` takes any valid key); listing all would read an
/// unbounded number of rows for every view of the page.
pub const TOPICS_SHOWN: u32 = 200;

/// One category the user can receive.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CategoryChoice {
    pub category: String,
    /// The rules' `display_name`, else the category made readable
    /// (`product_updates`: "Product updates").
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Transactional messages cannot be turned off.
    pub locked: bool,
    pub channels: Vec<ChannelChoice>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ChannelChoice {
    pub channel: String,
    /// The channel as a person reads it ("Email", "In the app").
    pub name: String,
    pub enabled: bool,
    /// Who decided: `user` (their own choice), `host` (the host's
    /// preferences) or `default`.
    pub decided_by: String,
}

/// One topic the user follows.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TopicChoice {
    /// The topic's key (`doc:42`).
    pub topic: String,
    /// The name the host gave it (`PUT /v1/topics/{key}`); null when none.
    pub name: Option<String>,
    /// The user muted it: a trigger to it reaches them on no channel. They
    /// stay subscribed.
    pub muted: bool,
}

/// `GET /v1/inbox/preferences`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PreferenceCenter {
    pub categories: Vec<CategoryChoice>,
    /// The topics the user follows, the first 200 by key.
    pub topics: Vec<TopicChoice>,
}

/// The body of `PUT /v1/inbox/preferences`: category -> channel -> on/off,
/// and topic -> on (`false` mutes it, `true` unmutes it). Either may be
/// left out; what is left out keeps its current choice.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreferenceChange {
    #[serde(default)]
    #[schema(value_type = Object)]
    pub categories: BTreeMap<String, BTreeMap<String, bool>>,
    #[serde(default)]
    pub topics: BTreeMap<String, bool>,
}

impl PreferenceChange {
    /// The change as the user's choices store it: each topic as
    /// `topic:KEY` -> `*`.
    fn as_choices(&self) -> UserChoices {
        let mut choices = self.categories.clone();
        for (topic, on) in &self.topics {
            let key = crate::planning::recipient::topic_choice_key(topic);
            choices.entry(key).or_default().insert(EVERY_CHANNEL.into(), *on);
        }
        choices
    }
}

/// One stored change in words, for the audit log and the operator: a
/// topic's as "topic doc:42: muted", not its encoding.
fn said((category, channel, on): &(String, String, bool)) -> String {
    match category.strip_prefix(TOPIC_CHOICE_PREFIX) {
        Some(topic) if channel == EVERY_CHANNEL => format!("topic {topic}: {}", if *on { "on" } else { "muted" }),
        _ => format!("{category} by {channel}: {}", if *on { "on" } else { "off" }),
    }
}

struct Offered {
    name: String,
    description: Option<String>,
    channels: BTreeSet<String>,
}

/// The categories and channels the enabled rules offer.
async fn offered(state: &AppState) -> Result<BTreeMap<String, Offered>, ApiError> {
    let book = state.planner.rules().current().await?;
    Ok(offered_by(book.all().map(|rule| (&rule.row, rule.follow_up_channels().collect()))))
}

/// [`offered`] read from the store, for the command line (no rule cache):
/// the enabled rules, each with its escalation's channels.
async fn offered_in_store(store: &dyn crate::store::Store) -> Result<BTreeMap<String, Offered>, ApiError> {
    let rules: Vec<crate::planning::planner::PlanRule> = store
        .list_rules()
        .await?
        .into_iter()
        .filter(|r| r.enabled)
        .map(crate::planning::planner::PlanRule::new)
        .collect();
    Ok(offered_by(rules.iter().map(|rule| (&rule.row, rule.follow_up_channels().collect()))))
}

fn offered_by<'a>(rules: impl Iterator<Item = (&'a crate::store::RuleRow, Vec<&'a str>)>) -> BTreeMap<String, Offered> {
    let mut out: BTreeMap<String, Offered> = BTreeMap::new();
    for (row, follow_up) in rules {
        let w: crate::planning::workflow::WorkflowInput =
            row.workflow.clone().and_then(|w| serde_json::from_value(w).ok()).unwrap_or_default();
        // Only the channels that reach a person (not a webhook): a category
        // sent on none of them is not the user's to choose.
        let channels: Vec<&str> = std::iter::once(row.channel.as_str())
            .chain(follow_up)
            .filter(|c| crate::delivery::channel::catalog::personal_name(c).is_some())
            .collect();
        if channels.is_empty() {
            continue;
        }
        let entry = out.entry(row.category.clone()).or_insert_with(|| Offered {
            name: crate::planning::category::readable(&row.category),
            description: None,
            channels: BTreeSet::new(),
        });
        if let Some(n) = w.display_name {
            entry.name = n;
        }
        if w.description.is_some() {
            entry.description = w.description;
        }
        entry.channels.extend(channels.into_iter().map(str::to_owned));
    }
    out
}

/// The user's center as stored now: every reader (the API, the hosted
/// page, the operator screen, the command line, the answer to a change)
/// goes through here, so what it lists is decided in one place. The
/// topics are one page of [`crate::store::TopicStore::user_topics`] and
/// their names in one more statement.
async fn center_of(
    store: &dyn crate::store::Store,
    offered: &BTreeMap<String, Offered>,
    user: &UserId,
) -> Result<PreferenceCenter, ApiError> {
    let recipient = store.get_recipient(user).await?;
    let follows = store.user_topics(user, Page { after: None, limit: TOPICS_SHOWN }).await?;
    let keys: Vec<&str> = follows.iter().map(|s| s.topic_key.as_str()).collect();
    let mut names = store.topic_names(&keys).await?;
    let mut center = center(offered, recipient.as_ref());
    center.topics = follows
        .into_iter()
        .map(|s| TopicChoice {
            name: names.remove(&s.topic_key),
            muted: recipient
                .as_ref()
                .is_some_and(|r| crate::planning::recipient::topic_muted(&r.user_choices, &s.topic_key).is_some()),
            topic: s.topic_key,
        })
        .collect();
    Ok(center)
}

/// The categories part of the center (its `topics` empty).
fn center(offered: &BTreeMap<String, Offered>, recipient: Option<&RecipientRow>) -> PreferenceCenter {
    let empty = UserChoices::new();
    let choices = recipient.map_or(&empty, |r| &r.user_choices);
    let host: Preferences =
        recipient.and_then(|r| serde_json::from_value(r.preferences.clone()).ok()).unwrap_or_default();
    let categories = offered
        .iter()
        .map(|(category, o)| {
            let locked = category == TRANSACTIONAL;
            let channels = o
                .channels
                .iter()
                .map(|channel| {
                    let (enabled, decided_by) = if locked {
                        (true, "default")
                    } else if let Some(on) = choices.get(category).and_then(|c| c.get(channel)) {
                        (*on, "user")
                    } else if host.opt_out(category, channel).is_some() {
                        (false, "host")
                    } else {
                        (true, "default")
                    };
                    let name = crate::delivery::channel::catalog::personal_name(channel).unwrap_or(channel);
                    ChannelChoice {
                        channel: channel.clone(),
                        name: name.to_owned(),
                        enabled,
                        decided_by: decided_by.into(),
                    }
                })
                .collect();
            CategoryChoice {
                category: category.clone(),
                name: o.name.clone(),
                description: o.description.clone(),
                locked,
                channels,
            }
        })
        .collect();
    PreferenceCenter { categories, topics: Vec::new() }
}

/// Checks a change against what is offered; the 422's fields are
/// `categories.CATEGORY`, `categories.CATEGORY.CHANNEL` and `topics.KEY`.
/// A topic need not be one the user follows (muting one before being
/// added to it is harmless), but its key must be one a topic can have.
fn check(change: &PreferenceChange, offered: &BTreeMap<String, Offered>) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    for topic in change.topics.keys() {
        if let Err(e) = TopicKey::parse("topics", topic) {
            errors.push(FieldError::new(
                format!("topics.{}", e.value),
                format!("{:?} is not a topic key: expected {}", e.value, e.expected),
            ));
        }
    }
    for (category, channels) in &change.categories {
        if let Some(topic) = category.strip_prefix(TOPIC_CHOICE_PREFIX) {
            errors.push(FieldError::new(
                format!("categories.{category}"),
                format!(
                    "{category:?} is not a category: a topic is muted under \"topics\" \
                     (for example {{\"topics\": {{{topic:?}: false}}}})"
                ),
            ));
            continue;
        }
        let Some(o) = offered.get(category) else {
            let known: Vec<&str> = offered.keys().map(String::as_str).collect();
            errors.push(FieldError::new(
                format!("categories.{category}"),
                format!("no enabled rule sends category {category:?}; the categories are {}", known.join(", ")),
            ));
            continue;
        };
        for (channel, on) in channels {
            if !o.channels.contains(channel) {
                let known: Vec<&str> = o.channels.iter().map(String::as_str).collect();
                use crate::delivery::channel::catalog;
                // A webhook: the host's integration, not the user's.
                let why = if catalog::check_known(channel).is_ok() && catalog::personal_name(channel).is_none() {
                    format!("{channel} does not reach a person, so it is not the user's to switch")
                } else {
                    format!("category {category:?} is not sent by {channel}")
                };
                errors.push(FieldError::new(
                    format!("categories.{category}.{channel}"),
                    format!("{why}; the channels of category {category:?} are {}", known.join(", ")),
                ));
            } else if category == TRANSACTIONAL && !on {
                errors.push(FieldError::new(
                    format!("categories.{category}.{channel}"),
                    "transactional messages (receipts, password resets) cannot be turned off",
                ));
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Applies a checked change to the user's choices and records it in the
/// audit log as made by `who`. Returns the new center.
async fn apply(
    state: &AppState,
    user: &UserId,
    change: PreferenceChange,
    who: &str,
    offered: &BTreeMap<String, Offered>,
) -> Result<PreferenceCenter, ApiError> {
    Ok(apply_in(&*state.store, state.clock.now(), user, change, who, offered).await?.0)
}

/// [`apply`] on a store at `now`, for the command line too. The store
/// merges the change under the row's lock (see
/// [`crate::store::RecipientStore::merge_user_choices`]), so what is audited
/// is what this change did to what was stored when it ran.
async fn apply_in(
    store: &dyn crate::store::Store,
    now: crate::clock::Millis,
    user: &UserId,
    change: PreferenceChange,
    who: &str,
    offered: &BTreeMap<String, Offered>,
) -> Result<(PreferenceCenter, Vec<String>), ApiError> {
    let changed = match store.merge_user_choices(user, &change.as_choices(), now).await? {
        ChoicesMerged::Merged { changed } => changed,
        ChoicesMerged::Erased => return Err(erased(user)),
    };
    let said: Vec<String> = changed.iter().map(said).collect();
    if !said.is_empty() {
        audit_preferences_in(store, now, who, user, said.join("; ")).await;
    }
    Ok((center_of(store, offered, user).await?, said))
}

/// The answer to a change for a user the host deleted: as for a user
/// Herald does not know (404), and nothing is stored, so an old inbox token
/// or a preference link from an earlier email cannot bring the user back.
fn erased(user: &UserId) -> ApiError {
    ApiError::NotFound(format!(
        "no user {:?}: the user was deleted; nothing was changed (the host's PUT /v1/users/{{user_id}} describes them again)",
        user.as_str()
    ))
}

/// One preference change in the audit log (target `user:ID`), shown on the
/// user's send-log page.
pub async fn audit_preferences(state: &AppState, who: &str, user: &UserId, detail: String) {
    audit_preferences_in(&*state.store, state.clock.now(), who, user, detail).await
}

async fn audit_preferences_in(
    store: &dyn crate::store::Store,
    now: crate::clock::Millis,
    who: &str,
    user: &UserId,
    detail: String,
) {
    let entry = AuditEntry {
        operator_email: who.to_owned(),
        action: "preferences.change".into(),
        target: format!("user:{user}"),
        detail: Some(detail),
    };
    if let Err(e) = store.append_audit(&entry, now).await {
        tracing::error!(error = %e, user = %user, "could not write the preference change to the audit log");
    }
}

/// The categories the user can receive, each channel on or off, and the
/// topics they follow (the first 200 by key), each muted or not.
#[utoipa::path(get, path = "/v1/inbox/preferences", tag = "inbox", operation_id = "inbox_preferences_get",
    responses((status = 200, body = PreferenceCenter), (status = 401, body = Problem, content_type = "application/problem+json")),
    security(("user_token" = [])))]
pub async fn get(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
) -> Result<ApiJson<PreferenceCenter>, ApiError> {
    let offered = offered(&state).await?;
    Ok(ApiJson(center_of(&*state.store, &offered, &user).await?))
}

/// Turns categories on or off per channel, and mutes or unmutes topics, as
/// the user's own choice (which a host's `PUT /v1/users` does not override).
#[utoipa::path(put, path = "/v1/inbox/preferences", tag = "inbox", operation_id = "inbox_preferences_put", request_body = PreferenceChange,
    responses(
        (status = 200, body = PreferenceCenter),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The host deleted the user; nothing was changed", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An unknown category or channel, transactional turned off, or a topic key that is not one", body = Problem, content_type = "application/problem+json"),
    ),
    security(("user_token" = [])))]
pub async fn put(
    State(state): State<AppState>,
    Extension(InboxUser(user)): Extension<InboxUser>,
    ApiJson(change): ApiJson<PreferenceChange>,
) -> Result<ApiJson<PreferenceCenter>, ApiError> {
    let offered = offered(&state).await?;
    check(&change, &offered).map_err(ApiError::Invalid)?;
    let who = format!("user {user} (inbox API)");
    Ok(ApiJson(apply(&state, &user, change, &who, &offered).await?))
}

/// The hosted page: `center` as a form (see `ui/templates/hosted_preferences.html`),
/// with "Saved." after a save.
fn page(center: &PreferenceCenter, saved: bool) -> Response {
    crate::http::ui::hosted_page("hosted_preferences.html", serde_json::json!({ "center": center, "saved": saved }))
}

fn verify(state: &AppState, token: &str) -> Result<UserId, ApiError> {
    let bad = || {
        ApiError::BadRequest(
            "this preferences link is not valid: it was altered or was not issued by this server; nothing was changed"
                .into(),
        )
    };
    let user = state.keys.verify_preferences(token).ok_or_else(bad)?;
    UserId::parse("user_id", &user).map_err(|_| bad())
}

/// The hosted page: the same choices as a form. Changes nothing.
#[utoipa::path(get, path = "/p/{token}", tag = "preferences", params(("token" = String, Path)),
    responses(
        (status = 200, description = "The preference form", content_type = "text/html"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn show(State(state): State<AppState>, ApiPath(token): ApiPath<String>) -> Result<Response, ApiError> {
    let user = verify(&state, &token)?;
    let offered = offered(&state).await?;
    Ok(page(&center_of(&*state.store, &offered, &user).await?, false))
}

/// The hosted page's form: each box the user ticked or unticked is turned
/// on or off; the others are left as they were (see `http::preference_form`).
#[utoipa::path(post, path = "/p/{token}", tag = "preferences", params(("token" = String, Path)),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`shown=[\"CATEGORY\",\"CHANNEL\"]` (a topic's: `[\"topic:KEY\",\"*\"]`) for each box on the form that can change, `was=…` the same for each drawn ticked, `on=…` for each ticked now; only boxes whose `on` differs from `was` change (see `http::preference_form`)"),
    responses(
        (status = 200, description = "Saved; the form again", content_type = "text/html"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The host deleted the user; nothing was changed", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn save(
    State(state): State<AppState>,
    ApiPath(token): ApiPath<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let user = verify(&state, &token)?;
    let offered = offered(&state).await?;
    let change = FormBoxes::from_body(&body).map_err(ApiError::Invalid)?.change();
    check(&change, &offered).map_err(ApiError::Invalid)?;
    let who = format!("user {user} (preference page)");
    let center = apply(&state, &user, change, &who, &offered).await?;
    Ok(page(&center, true))
}

/// The user's preference center as they see it, for the operator screen.
pub async fn center_for(state: &AppState, user: &UserId) -> Result<PreferenceCenter, ApiError> {
    let offered = offered(state).await?;
    center_of(&*state.store, &offered, user).await
}

/// A change an operator makes for the user from the operator screen (the
/// same form as the hosted page): checked like the user's own, stored as
/// the user's choice (so a host's sync does not undo it either) and audited
/// with `who` naming the operator. Returns what changed, in words (empty:
/// nothing did).
pub async fn change_by_operator(
    state: &AppState,
    user: &UserId,
    boxes: &FormBoxes,
    who: &str,
) -> Result<Vec<String>, ApiError> {
    let offered = offered(state).await?;
    let change = boxes.change();
    check(&change, &offered).map_err(ApiError::Invalid)?;
    Ok(apply_in(&*state.store, state.clock.now(), user, change, who, &offered).await?.1)
}

/// The user's preference center read from the store, and a change an
/// operator makes from the command line (`herald preferences`): checked,
/// stored as the user's choice and audited as [`change_by_operator`] does.
/// `None` reads only.
pub async fn center_or_change_in_store(
    store: &dyn crate::store::Store,
    now: crate::clock::Millis,
    user: &UserId,
    change: Option<PreferenceChange>,
    who: &str,
) -> Result<(PreferenceCenter, Vec<String>), ApiError> {
    let offered = offered_in_store(store).await?;
    let changed = match change {
        Some(change) => {
            check(&change, &offered).map_err(ApiError::Invalid)?;
            apply_in(store, now, user, change, who, &offered).await?.1
        }
        None => Vec::new(),
    };
    Ok((center_of(store, &offered, user).await?, changed))
}
