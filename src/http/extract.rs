//! The extractors every `/v1` handler takes its body, query and path
//! through, so a request the server cannot read is answered the same way
//! on every route: `application/problem+json`, `422` with the field at
//! fault for a value of the wrong shape, `400` only for text that is not
//! JSON (or not a query string) at all.
//!
//! One extractor per part, not a check in each handler: the review found a
//! JSON array read into a struct by position (`PUT /v1/users/x` with
//! `["x@example.com"]` set the email; `POST /v1/suppressions` with
//! `["a@example.com"]` suppressed the address for every category) and
//! `limit=abc` answered `400` with axum's text, on every route at once; a
//! check added handler by handler would miss the next handler.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::problem::ApiError;
use crate::planning::rule::FieldError;

/// The JSON extractor, with rejections as problems.
///
/// A body that is not JSON at all is a `400` (with serde's line and
/// column, which is where the syntax broke). A body that is JSON of the wrong
/// shape (a required field missing, a number where text belongs, a field
/// Herald does not know, an array or a string where the object belongs) is a
/// `422` naming the field in `errors`, exactly like a value the handler
/// refuses: to the caller both are "this field is wrong", and one status
/// with one shape is what a client can act on. axum's own `Json` answers both
/// with a single message carrying serde's position.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::Rejected {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                detail: "expected a JSON body with Content-Type: application/json".to_owned(),
            });
        }
        let body = axum::body::Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            let detail = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "the request body is larger than the server accepts".to_owned()
            } else {
                r.body_text()
            };
            ApiError::Rejected { status, detail }
        })?;
        parse_json(&body).map(ApiJson)
    }
}

/// `application/json`, or any `application/*+json`, as axum's `Json` accepts.
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses a request body, which must be a JSON object, turning serde's
/// complaint into a problem that names the field (see [`ApiJson`]).
///
/// Every request body Herald takes is an object. serde reads a JSON array
/// into a struct field by field, in declaration order, so without this
/// check `["t", "u"]` is a trigger of type `t` for user `u`: the body's
/// first byte is looked at before serde runs. A look at one byte, not a
/// parse into a `serde_json::Value` first: that would parse every trigger
/// twice on the hot path.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // JSON's own whitespace (RFC 8259), not `is_ascii_whitespace`, which
    // also skips a form feed.
    let first = body.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if let Some(&first) = first.filter(|&&b| b != b'{') {
        // Valid JSON of another kind is the wrong shape (422); anything
        // else a syntax error (400), as for an object.
        return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => ApiError::field(
                "body",
                format!("must be a JSON object ({{\"field\": value, ...}}), not {}", kind_of(first)),
            ),
            Err(e) => ApiError::BadRequest(format!("the body is not valid JSON: {e}")),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed: Result<T, ApiError> = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if !inner.is_data() {
            return ApiError::BadRequest(format!("the body is not valid JSON: {inner}"));
        }
        // serde's message ends with where in the text it was; the field
        // says that better.
        let full = inner.to_string();
        let position = format!(" at line {} column {}", inner.line(), inner.column());
        let message = full.strip_suffix(&position).unwrap_or(&full).to_owned();
        ApiError::Invalid(vec![FieldError::new(field_of(&path, &message), message)])
    });
    let value = parsed?;
    de.end().map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?;
    Ok(value)
}

/// What kind of JSON value starts with `first`, for the message.
fn kind_of(first: u8) -> &'static str {
    match first {
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "true or false",
        b'n' => "null",
        _ => "a number",
    }
}

/// The field a shape error is about: the path to it, and for a missing or
/// unknown field (reported at its parent) the field's own name.
fn field_of(path: &str, message: &str) -> String {
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match (path, named) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => "body".to_owned(),
        (p, Some(name)) if !p.ends_with(name) => format!("{p}.{name}"),
        (p, _) => p.to_owned(),
    }
}

impl<T: Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// The query extractor, with rejections as problems: a parameter of the
/// wrong shape (`limit=abc`, `limit=-1`, `filter=nope`, a malformed
/// `cursor`) or one the route does not take is a `422` naming it in
/// `errors`, the same answer as `limit=0`, which the handler refuses.
///
/// axum's `Query` answers `400` with one line of text for all of these, and
/// its rejection does not say which parameter was at fault; the parameters
/// are read here the way axum reads them (serde_urlencoded), through
/// serde_path_to_error, which does.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parse_query(parts.uri.query().unwrap_or_default()).map(ApiQuery)
    }
}

/// Parses a query string into `T` (see [`ApiQuery`]).
pub fn parse_query<T: serde::de::DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let field = field_of(&path, &message);
        // Quote what was sent: serde_urlencoded's own words
        // ("invalid digit found in string") do not.
        let given = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| *k == field).map(|(_, v)| v);
        let message = match given {
            Some(v) if !message.starts_with("unknown field") => format!("{v:?} is not accepted: {message}"),
            _ => message,
        };
        ApiError::Invalid(vec![FieldError::new(field, message)])
    })
}

/// For an optional field whose `null` must be refused, not taken as
/// absent (`#[serde(default, deserialize_with = "...")]`): serde reads
/// `null` into `Option::None`, so `"payload": null` passed as "no payload"
/// although the OpenAPI document says an object. With this, `null` arrives
/// as `Some(Value::Null)`, for the handler to refuse naming the field.
pub fn null_is_a_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    <serde_json::Value as serde::Deserialize>::deserialize(d).map(Some)
}

/// The path extractor, with rejections as problems.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Two {
        a: String,
        b: String,
    }

    fn fields(e: ApiError) -> Vec<String> {
        match e {
            ApiError::Invalid(errors) => errors.into_iter().map(|e| format!("{}: {}", e.field, e.message)).collect(),
            other => panic!("not a 422: {other:?}"),
        }
    }

    #[test]
    fn a_body_that_is_json_but_not_an_object_is_refused_naming_the_body() {
        for (body, kind) in [
            (&b"[\"x\", \"y\"]"[..], "an array"),
            (b" \n[]", "an array"),
            (b"\"x\"", "a string"),
            (b"12", "a number"),
            (b"-1", "a number"),
            (b"true", "true or false"),
            (b"null", "null"),
        ] {
            let said = fields(parse_json::<Two>(body).unwrap_err());
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].starts_with("body: must be a JSON object"), "{said:?}");
            assert!(said[0].ends_with(kind), "{said:?}");
        }
        assert!(parse_json::<Two>(br#"{"a": "x", "b": "y"}"#).is_ok());
    }

    #[test]
    fn text_that_is_not_json_stays_a_syntax_error() {
        for body in [&b"[1,"[..], b"nope", b"\x0c{}", b""] {
            assert!(matches!(parse_json::<Two>(body), Err(ApiError::BadRequest(_))), "{body:?}");
        }
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Page {
        limit: Option<u32>,
    }

    #[test]
    fn a_query_parameter_of_the_wrong_shape_is_named() {
        let said = fields(parse_query::<Page>("limit=abc").unwrap_err());
        assert_eq!(said, ["limit: \"abc\" is not accepted: invalid digit found in string"]);
        let said = fields(parse_query::<Page>("limit=-1").unwrap_err());
        assert!(said[0].starts_with("limit: \"-1\""), "{said:?}");
        let said = fields(parse_query::<Page>("other=1").unwrap_err());
        assert!(said[0].starts_with("other: unknown field"), "{said:?}");
        assert_eq!(parse_query::<Page>("limit=5").unwrap().limit, Some(5));
        assert_eq!(parse_query::<Page>("").unwrap().limit, None);
    }
}
