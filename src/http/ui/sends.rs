//! The send log: "did they get it, and if not, why", by user id, by email
//! address or by phone number (see [`SearchBy`] for text that can be both).
//! An address or a number is hashed before anything is searched (the send
//! log holds only hashes), with the same deployment key the channels use.
//! A phone number also finds the users who have it (by the same hash), with
//! their messages still held back or waiting, which the send log has no
//! row for yet. A user's page lists their push devices, removed ones too.

use axum::body::Bytes;
use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Page, Ui, UiError, redirect_with};
use crate::domain::UserId;
use crate::http::AppState;
use crate::http::users::timeline;
use crate::store::PushDeviceRow;

const ACTIVE: &str = "/ui/sends";
const LIMIT: u32 = 200;

#[derive(Debug, Default, Deserialize)]
pub struct SendsQuery {
    /// A user id, or an email address.
    #[serde(default)]
    pub q: String,
    /// What `q` is, when the operator says (the form's "search as").
    #[serde(default)]
    pub by: SearchBy,
}

/// What the search text is taken as. `Address` is an email address or,
/// starting with `+`, a phone number (`AddressKeys::hash_either`).
///
/// A user id may itself be an email address (hosts that key users on their
/// address), so "contains `@`" cannot decide alone: such a user could not
/// be opened at all. Unsaid, text with `@` is a user id when a user by that
/// id is known (a recipient, or anything in the send log), and an address
/// otherwise; the page links to the other reading, and the form lets the
/// operator say which.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBy {
    #[default]
    Auto,
    User,
    Address,
}

impl SearchBy {
    fn as_str(self) -> &'static str {
        match self {
            SearchBy::Auto => "auto",
            SearchBy::User => "user",
            SearchBy::Address => "address",
        }
    }
}

/// Whether `q` names a user Herald knows: a stored recipient, or a message
/// or trigger for that id.
async fn known_user(state: &AppState, user: &UserId) -> Result<bool, crate::store::StoreError> {
    if state.store.get_recipient(user).await?.is_some() {
        return Ok(true);
    }
    let h = state.store.user_history(user, 1).await?;
    Ok(!(h.rows.is_empty() && h.log.is_empty() && h.triggers.is_empty()))
}

/// The link to the same text read the other way, for text that can be both.
fn other_reading(q: &str, now: SearchBy) -> Option<serde_json::Value> {
    let phone = q.starts_with('+');
    if !(q.contains('@') || phone) || UserId::parse("user id", q).is_err() {
        return None;
    }
    let encoded: String = url::form_urlencoded::byte_serialize(q.as_bytes()).collect();
    Some(match now {
        SearchBy::Address => serde_json::json!({
            "href": format!("/ui/sends?q={encoded}&by=user"), "label": "Open the user with this id instead",
        }),
        _ => serde_json::json!({
            "href": format!("/ui/sends?q={encoded}&by=address"),
            "label": if phone { "Search this phone number instead" } else { "Search this email address instead" },
        }),
    })
}

pub async fn search(Ui { state, op }: Ui, Query(query): Query<SendsQuery>) -> Result<Response, UiError> {
    let q = query.q.trim();
    let page = Page::new(&op, ACTIVE, "sends.html", "Send log");
    if q.is_empty() {
        return Ok(page.with(serde_json::json!({ "q": "" })).into_response());
    }
    let as_address = match query.by {
        SearchBy::Address => true,
        SearchBy::User => false,
        SearchBy::Auto => {
            (q.contains('@') || q.starts_with('+'))
                && match UserId::parse("user id", q) {
                    Ok(user) => !known_user(&state, &user).await?,
                    Err(_) => true,
                }
        }
    };
    if as_address {
        let (kind, hash) = match state.keys.hash_either(q) {
            Ok(found) => found,
            Err(why) => {
                return Ok(page
                    .with(serde_json::json!({ "q": q, "chosen": query.by.as_str(), "error": why }))
                    .into_response());
            }
        };
        let phone_users = match kind {
            crate::address::AddressKind::Phone => held_for_phone(&state, &hash).await?,
            crate::address::AddressKind::Email => Vec::new(),
        };
        let sends = state.store.sends_for_address(&hash, LIMIT).await?;
        let subjects = crate::headline::for_sends(&*state.store, &sends).await?;
        let suppressions = state.store.list_suppressions(Some(&hash), 100).await?;
        let lifts = state.store.suppression_lifts(Some(&hash), 20).await?;
        return Ok(page
            .with(serde_json::json!({
                "q": q, "chosen": query.by.as_str(), "mode": "address", "address_hash": hash, "sends": sends, "subjects": subjects,
                "address_kind": kind, "phone_users": phone_users,
                "suppressions": suppressions, "lifts": lifts, "other": other_reading(q, SearchBy::Address),
            }))
            .into_response());
    }
    let user = match UserId::parse("user id", q) {
        Ok(u) => u,
        Err(e) => {
            return Ok(page
                .with(serde_json::json!({ "q": q, "chosen": query.by.as_str(), "error": e.to_string() }))
                .into_response());
        }
    };
    let timeline = timeline(&state, &user).await?;
    let recipient = state.store.get_recipient(&user).await?;
    // What stops mail or texts to this user now, if anything: their
    // address's and their phone's suppressions.
    let mut suppressions = Vec::new();
    let email_hash = recipient.as_ref().and_then(|r| r.email.as_deref()).and_then(|e| state.keys.hash(e));
    let phone_hash = recipient.as_ref().and_then(|r| r.phone.as_deref()).map(|p| state.keys.hash_normalized(p));
    for h in email_hash.iter().chain(phone_hash.iter()) {
        suppressions.extend(state.store.list_suppressions(Some(h), 100).await?);
    }
    let preference_changes = state.store.audit_for_target(&format!("user:{user}"), 50).await?;
    // Where push reaches them, and the devices that were removed, with
    // when, by whom and why: the answer to "why did no push arrive" when a
    // provider said the device is gone, as a suppression answers it for
    // email.
    let devices: Vec<serde_json::Value> =
        state.store.push_devices(user.as_str(), true).await?.iter().map(PushDeviceRow::shown).collect();
    let center = crate::http::preferences::center_for(&state, &user).await?;
    let rules = state.store.list_rules().await?;
    // What cancels each escalating rule's follow-ups, as the rule says now.
    let follow_up_unless: std::collections::HashMap<&str, &str> = rules
        .iter()
        .filter_map(|r| {
            let escalate = crate::planning::workflow::RuleWorkflow::from_stored(r.workflow.as_ref()).ok()?.escalate?;
            Some((r.id.as_str(), escalate.cancelled_by()))
        })
        .collect();
    let rule_names: std::collections::HashMap<&str, &str> =
        rules.iter().map(|r| (r.id.as_str(), r.name.as_str())).collect();
    Ok(page
        .with(serde_json::json!({
            "q": q, "chosen": query.by.as_str(), "mode": "user", "timeline": timeline, "recipient": recipient,
            "other": other_reading(q, SearchBy::User),
            "suppressions": suppressions, "rule_names": rule_names, "follow_up_unless": follow_up_unless,
            "preference_changes": preference_changes,
            "center": center, "devices": devices,
        }))
        .into_response())
}

/// The users who have this phone number (by its hash), each with the
/// messages still waiting for them: held by quiet hours or a send window,
/// or not yet delivered, which the send log holds nothing of yet.
async fn held_for_phone(state: &AppState, hash: &str) -> Result<Vec<serde_json::Value>, UiError> {
    let mut users = Vec::new();
    for user_id in state.store.users_by_phone_hash(hash, 20).await? {
        let Ok(user) = UserId::parse("user id", &user_id) else { continue };
        let pending: Vec<serde_json::Value> = state
            .store
            .pending_for_user(&user, 50)
            .await?
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r.id, "channel": r.channel, "status": r.status.as_str(), "due_at": r.due_at,
                    "held": r.hold_detail(), "last_error": r.last_error,
                })
            })
            .collect();
        users.push(serde_json::json!({ "user_id": user_id, "pending": pending }));
    }
    Ok(users)
}

/// An operator changes the user's preferences (the preference center's
/// choices, for a user who asked support, say): `user`, then the boxes as
/// `crate::http::preference_form` reads them; only the boxes the operator
/// ticked or unticked change. Audited with the
/// operator as who, on the user's send-log page like the user's own.
pub async fn change_preferences(Ui { state, op }: Ui, body: Bytes) -> Result<Response, UiError> {
    let fields: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let user = fields.iter().find(|(k, _)| k == "user").map(|(_, v)| v.trim()).unwrap_or_default();
    let user = UserId::parse("user", user).map_err(|e| UiError::BadRequest(e.to_string()))?;
    // `by=user` for a user id with `@`, which could come back as an address.
    let back = format!(
        "/ui/sends?q={}{}",
        url::form_urlencoded::byte_serialize(user.as_str().as_bytes()).collect::<String>(),
        if user.as_str().contains('@') { "&by=user" } else { "" }
    );
    let who = format!("operator {} (operator screen)", op.email);
    let boxes = match crate::http::preference_form::FormBoxes::from_fields(fields) {
        Ok(boxes) => boxes,
        Err(errors) => {
            let said: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
            return Ok(redirect_with(&state, &back, format!("Not changed: {}", said.join("; "))));
        }
    };
    match crate::http::preferences::change_by_operator(&state, &user, &boxes, &who).await {
        Ok(changed) if changed.is_empty() => Ok(redirect_with(&state, &back, "Nothing changed.")),
        Ok(changed) => Ok(redirect_with(
            &state,
            &back,
            format!("Preferences of {user} changed ({}); recorded in the audit log.", changed.join("; ")),
        )),
        Err(crate::http::problem::ApiError::Invalid(errors)) => {
            let said: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
            Ok(redirect_with(&state, &back, format!("Not changed: {}", said.join("; "))))
        }
        Err(e) => Err(e.into()),
    }
}
