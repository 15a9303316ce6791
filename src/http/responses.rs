//! The refusals the v1 handlers document, one type a status, named in their
//! `#[utoipa::path(responses(...))]` next to the success tuple:
//! `responses((status = 200, body = OutboxPage), BadRequest, Unauthorized, Invalid)`.
//!
//! Each is a `utoipa::IntoResponses` whose body is a [`Problem`] as
//! `application/problem+json`, which every refusal is
//! ([`super::problem::ApiError`]). Written once here rather than as the same
//! tuple on thirty routes, where one route's copy could drift from the
//! rest (a lost `content_type` makes the document promise JSON); one type a
//! status rather than one a recurring set (`ListRefusals` = 400, 401, 422)
//! because the sets differ by a status from route to route, and a set per
//! combination would name combinations, not answers.
//!
//! They carry no doc comment on purpose: utoipa takes it as the response's
//! description, and the standard wording for each status is given once by
//! `openapi::Conventions`. A route whose refusal says something particular
//! (a webhook's 401, a rule's 422) keeps its own tuple with a description.
//! The types only document; handlers answer with `ApiError`. The `Problem`
//! schema is registered by the routes that still name it in a tuple, and
//! `openapi.rs` lists it among the components so it stays registered if
//! they stop.

#![allow(dead_code)] // Only the derives are used: the types document, the handlers answer.

use super::problem::Problem;

// 400: a malformed path, query or body.
#[derive(utoipa::IntoResponses)]
#[response(status = 400, content_type = "application/problem+json")]
pub struct BadRequest(Problem);

// 401: no valid credential for the route.
#[derive(utoipa::IntoResponses)]
#[response(status = 401, content_type = "application/problem+json")]
pub struct Unauthorized(Problem);

// 404: no such resource.
#[derive(utoipa::IntoResponses)]
#[response(status = 404, content_type = "application/problem+json")]
pub struct NotFound(Problem);

// 409: conflicts with the resource's current state.
#[derive(utoipa::IntoResponses)]
#[response(status = 409, content_type = "application/problem+json")]
pub struct Conflict(Problem);

// 413: the body is larger than the server accepts.
#[derive(utoipa::IntoResponses)]
#[response(status = 413, content_type = "application/problem+json")]
pub struct TooLarge(Problem);

// 415: the body is not JSON.
#[derive(utoipa::IntoResponses)]
#[response(status = 415, content_type = "application/problem+json")]
pub struct NotJson(Problem);

// 422: a field is invalid; `errors` names each one.
#[derive(utoipa::IntoResponses)]
#[response(status = 422, content_type = "application/problem+json")]
pub struct Invalid(Problem);
