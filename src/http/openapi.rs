//! The OpenAPI document, generated from the handlers' annotations and the
//! request and response types, served at `/v1/openapi.json`.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "Herald", description = "An engagement outbox: triggers in, messages out, and the answer to \"did user X get it, and if not, why\"."),
    paths(
        super::triggers::create,
        super::rules::create, super::rules::list, super::rules::get, super::rules::update, super::rules::delete,
        super::rules::preview,
        super::users::put, super::users::get, super::users::delete, super::users::sends,
        super::outbox::list, super::outbox::retry, super::outbox::cancel,
        super::users::token,
        super::events::stream,
        super::bounces::mail, super::bounces::list,
        super::bounces::sendgrid, super::bounces::mailgun, super::bounces::postmark, super::bounces::ses,
        super::inbox::list, super::inbox::count, super::inbox::seen, super::inbox::read, super::inbox::unread,
        super::inbox::archive, super::inbox::read_all, super::inbox::stream,
        super::suppressions::list, super::suppressions::create, super::suppressions::delete,
        super::unsubscribe::show, super::unsubscribe::unsubscribe,
        super::preferences::get, super::preferences::put, super::preferences::show, super::preferences::save,
    ),
    components(schemas(crate::store::InboxFilter, super::events::From)),
    modifiers(&ApiKeyAuth, &Conventions),
    tags(
        (name = "triggers", description = "Something happened to a user"),
        (name = "rules", description = "What operators switched on"),
        (name = "users", description = "Recipients, and what reached them"),
        (name = "outbox", description = "Scheduled and finished messages"),
        (name = "inbox", description = "An end user's own inbox, with a per-user token"),
        (name = "events", description = "Outcome, hold and suppression events for the host application to follow"),
        (name = "bounces", description = "Bounce and complaint messages, kept as evidence"),
        (name = "suppressions", description = "Addresses Herald will not mail (stored as hashes)"),
        (name = "unsubscribe", description = "One-click unsubscribe links (RFC 8058); no API key, the token is signed"),
        (name = "preferences", description = "The hosted preference page linked from emails; no API key, the token is signed"),
    )
)]
pub struct ApiDoc;

struct ApiKeyAuth;

impl Modify for ApiKeyAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
        components.add_security_scheme("user_token", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// What every operation gets without repeating it in each annotation:
///
/// - an `operationId` of `<tag>_<handler>` (`rules_list`, `inbox_list`):
///   the handlers' own names repeat across modules (`list` five times), and
///   OpenAPI requires them unique, as client generators do;
/// - a `description` on every response, which OpenAPI requires and utoipa
///   leaves empty unless the annotation gives one: the standard wording for
///   its status.
///
/// Done here, once, so a new route cannot bring the document back to
/// invalid; `tests/outside_review.rs` checks the result with
/// openapi-spec-validator and openapi-python-client.
struct Conventions;

impl Modify for Conventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        for (_, item) in openapi.paths.paths.iter_mut() {
            for op in [
                item.get.as_mut(),
                item.put.as_mut(),
                item.post.as_mut(),
                item.delete.as_mut(),
                item.patch.as_mut(),
                item.head.as_mut(),
                item.options.as_mut(),
                item.trace.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                if let (Some(tag), Some(id)) = (op.tags.as_ref().and_then(|t| t.first()), op.operation_id.as_ref())
                    && !id.starts_with(&format!("{tag}_"))
                {
                    op.operation_id = Some(format!("{tag}_{id}"));
                }
                // Every route answers 400 for a NUL in its path or query
                // (`super::nul`), before any handler runs.
                op.responses.responses.entry("400".to_owned()).or_insert_with(|| {
                    RefOr::T(
                        utoipa::openapi::ResponseBuilder::new()
                            .description(
                                "The path, query or form holds a character no value may hold (U+0000), or is \
                                 otherwise malformed; `detail` says what",
                            )
                            .content(
                                "application/problem+json",
                                utoipa::openapi::ContentBuilder::new()
                                    .schema(Some(utoipa::openapi::Ref::from_schema_name("Problem")))
                                    .build(),
                            )
                            .build(),
                    )
                });
                // Every operation that reads or writes the database (all but
                // the few listed) answers 503 with Retry-After while it is
                // away, or after a lost race that replays did not resolve
                // (`problem::ApiError`, `retry`).
                let id = op.operation_id.as_deref().unwrap_or_default();
                if !NO_DATABASE.contains(&id) {
                    op.responses.responses.entry("503".to_owned()).or_insert_with(|| {
                        RefOr::T(
                            utoipa::openapi::ResponseBuilder::new()
                                .description(
                                    "The database is unavailable (a failover, a lost node) or kept losing races \
                                     with other instances; nothing was changed, or, for a trigger, it is recorded \
                                     at most once. Send the request again after `Retry-After` seconds (a trigger \
                                     with the same `idempotency_key`)",
                                )
                                .header(
                                    "Retry-After",
                                    utoipa::openapi::HeaderBuilder::new()
                                        .schema(Some(
                                            utoipa::openapi::ObjectBuilder::new()
                                                .schema_type(utoipa::openapi::schema::Type::Integer),
                                        ))
                                        .description(Some("Seconds to wait before sending the request again"))
                                        .build(),
                                )
                                .content(
                                    "application/problem+json",
                                    utoipa::openapi::ContentBuilder::new()
                                        .schema(Some(utoipa::openapi::Ref::from_schema_name("Problem")))
                                        .build(),
                                )
                                .build(),
                        )
                    });
                }
                for (status, response) in op.responses.responses.iter_mut() {
                    if let RefOr::T(r) = response
                        && r.description.trim().is_empty()
                    {
                        r.description = default_description(status).to_owned();
                    }
                }
            }
        }
    }
}

/// Operations that never touch the database, so never answer 503: the
/// unsubscribe page only checks its token's signature.
const NO_DATABASE: &[&str] = &["unsubscribe_show"];

/// The description a response gets when its annotation gives none.
fn default_description(status: &str) -> &'static str {
    match status {
        "200" => "OK",
        "201" => "Created",
        "202" => "Accepted",
        "204" => "No content",
        "303" => "See other",
        "400" => "The request is malformed (a bad path, query or body); `detail` says what",
        "401" => "No valid credential for this route; nothing changed",
        "403" => "Forbidden",
        "404" => "No such resource",
        "409" => "Conflicts with the current state; `detail` says why",
        "413" => "The body is larger than the server accepts",
        "422" => "A field is invalid; `errors` names each one",
        "429" => "Too many requests; try again later",
        "500" => "The server failed; the cause is in its log",
        "503" => "Not available right now; try again later",
        _ => "See the status code",
    }
}

/// The document as served: utoipa's, finished by [`finish`].
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serialises");
    finish(&mut doc);
    doc
}

/// Component names utoipa takes from a Rust type, and the names clients
/// see instead: a generated client would otherwise have a `BTreeMap` class.
const RENAMED: &[(&str, &str)] = &[("BTreeMap", "UserChoices")];

/// What the annotations cannot say, or would have to repeat on every
/// route, done once on the JSON of the document:
///
/// - every schema that is an object with no properties (a trigger's
///   `payload`, an inbox item's `data`, a rule's `template`, the preference
///   change's `categories`, the SES body) says `additionalProperties: true`:
///   OpenAPI allows any properties there anyway, but `openapi-typescript`
///   reads a bare `type: object` as `Record<string, never>`, so
///   `item.data.url` did not compile;
/// - components named after a Rust type are renamed ([`RENAMED`]);
/// - every `user_id` in a path or a trigger's body states what
///   [`crate::domain::UserId`] accepts, so fuzzers and client generators do
///   not offer ids the server refuses;
/// - every inbox route documents `?token=` (the middleware takes the user
///   token there too, for clients that cannot set headers).
///
/// Done on the JSON rather than on utoipa's types so that a schema nested
/// anywhere (inline in a parameter, a request body, a property) is reached
/// by one walk.
fn finish(doc: &mut serde_json::Value) {
    use serde_json::{Value, json};
    open_objects(doc);
    let mut text = doc.to_string();
    for (from, to) in RENAMED {
        text = text.replace(&format!("\"#/components/schemas/{from}\""), &format!("\"#/components/schemas/{to}\""));
    }
    *doc = serde_json::from_str(&text).expect("still JSON");
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        for (from, to) in RENAMED {
            if let Some(schema) = schemas.remove(*from) {
                schemas.insert((*to).to_owned(), schema);
            }
        }
    }
    let user_id = json!({
        "type": "string",
        "minLength": 1,
        "maxLength": crate::domain::UserId::MAX_LEN,
        // No control characters (Unicode Cc), as `UserId::parse` refuses.
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
        "description": "1 to 255 bytes of UTF-8 text without control characters",
    });
    if let Some(p) = doc.pointer_mut("/components/schemas/TriggerInput/properties/user_id") {
        *p = user_id.clone();
    }
    for (pointer, constraint) in constraints() {
        if let Some(Value::Object(schema)) = doc.pointer_mut(pointer) {
            schema.extend(constraint.as_object().expect("an object").clone());
        }
    }
    let token = json!({
        "name": "token",
        "in": "query",
        "required": false,
        "description": "The user token, for clients that cannot set an Authorization header (EventSource); \
                        the header is preferred, since a URL can end up in logs",
        "schema": { "type": "string" },
    });
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for op in item.values_mut() {
            let inbox = op["tags"].as_array().is_some_and(|t| t.iter().any(|t| t == "inbox"));
            let params = op.as_object_mut().unwrap().entry("parameters").or_insert_with(|| json!([]));
            let Some(params) = params.as_array_mut() else { continue };
            for p in params.iter_mut() {
                if p["name"] == "user_id" && p["in"] == "path" {
                    p["schema"] = user_id.clone();
                }
                if path == "/v1/outbox" && p["name"] == "status" {
                    let statuses: Vec<&str> = crate::domain::OutboxStatus::ALL.iter().map(|s| s.as_str()).collect();
                    p["schema"]["enum"] = json!(statuses);
                }
            }
            if inbox && path.starts_with("/v1/inbox") && !params.iter().any(|p| p["name"] == "token") {
                params.push(token.clone());
            }
            if params.is_empty() {
                op.as_object_mut().unwrap().remove("parameters");
            }
        }
    }
}

/// Text without control characters, as the handlers check names and
/// categories.
const NO_CONTROLS: &str = r"^[^\u0000-\u001f\u007f-\u009f]*$";

/// What the handlers check of a field, stated in the document (the
/// schemas' JSON pointers, and what is added to each). The checks stay in
/// the handlers; these say the same, exactly, for clients and for
/// schemathesis, which found 17 requests the document allowed and the
/// server refused. Exactly, not more strictly: a pattern stricter than the
/// server (an email pattern was tried) is a request the document forbids
/// and the server accepts, which `--checks all` reports as well.
fn constraints() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let date_time = json!({ "format": "date-time" });
    vec![
        ("/components/schemas/TriggerInput/properties/type", json!({ "pattern": "^[A-Za-z0-9._:/-]{1,128}$" })),
        ("/components/schemas/TriggerInput/properties/occurred_at", date_time.clone()),
        (
            "/components/schemas/TriggerInput/properties/idempotency_key",
            json!({ "minLength": 1, "maxLength": 255, "pattern": NO_CONTROLS }),
        ),
        (
            "/components/schemas/SuppressionInput/properties/category",
            json!({ "minLength": 1, "maxLength": 64, "pattern": NO_CONTROLS }),
        ),
        ("/components/schemas/SuppressionInput/properties/detail", json!({ "maxLength": 1000 })),
        ("/components/schemas/SuppressionInput/properties/expires_at", date_time),
        ("/components/schemas/RecipientInput/properties/name", json!({ "maxLength": 255, "pattern": NO_CONTROLS })),
        ("/components/schemas/RecipientInput/properties/locale", json!({ "pattern": "^[A-Za-z0-9_-]{1,35}$" })),
        // Not an `enum` of the tz database: openapi-python-client turns
        // GMT0, GMT-0 and GMT+0 into one Python name and refuses the document.
        ("/components/schemas/RecipientInput/properties/timezone", json!({ "pattern": "^[A-Za-z0-9/_+-]{1,64}$" })),
        (
            "/components/schemas/QuietHoursInput/properties/from",
            json!({ "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$" }),
        ),
        (
            "/components/schemas/QuietHoursInput/properties/until",
            json!({ "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$" }),
        ),
        (
            "/paths/~1v1~1bounces~1mail/post/requestBody/content/application~1octet-stream/schema",
            json!({ "minLength": 1 }),
        ),
    ]
}

/// Adds `additionalProperties: true` to every object schema that lists no
/// properties (see [`finish`]).
fn open_objects(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            let is_object = match map.get("type") {
                Some(serde_json::Value::String(t)) => t == "object",
                Some(serde_json::Value::Array(ts)) => ts.iter().any(|t| t == "object"),
                _ => false,
            };
            if is_object && !map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), serde_json::Value::Bool(true));
            }
            map.values_mut().for_each(open_objects);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(open_objects),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_operation_on_the_database_documents_its_503_with_retry_after() {
        let doc = super::document();
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap();
                let unavailable = &op["responses"]["503"];
                if super::NO_DATABASE.contains(&id) {
                    assert!(unavailable.is_null(), "{method} {path} never reaches the database");
                    continue;
                }
                assert!(unavailable.is_object(), "{method} {path} ({id}) does not document its 503");
                assert_eq!(unavailable["headers"]["Retry-After"]["schema"]["type"], "integer", "{method} {path}");
                assert!(unavailable["content"]["application/problem+json"].is_object(), "{method} {path}");
                checked += 1;
            }
        }
        assert!(checked > 30, "only {checked} operations");
        assert!(doc["paths"]["/v1/triggers"]["post"]["responses"]["503"].is_object());
    }

    /// The five bare objects the review named, and any new one: open, so
    /// generated TypeScript can read their fields.
    #[test]
    fn every_object_without_properties_is_open() {
        let doc = super::document();
        let schemas = &doc["components"]["schemas"];
        for schema in [
            &schemas["TriggerInput"]["properties"]["payload"],
            &schemas["PreferenceChange"]["properties"]["categories"],
            &schemas["InboxItem"]["properties"]["data"],
            &schemas["RuleView"]["properties"]["template"],
            &doc["paths"]["/v1/bounces/ses"]["post"]["requestBody"]["content"]["application/json"]["schema"],
        ] {
            assert_eq!(schema["additionalProperties"], true, "{schema}");
        }
    }

    #[test]
    fn no_component_is_named_after_a_rust_type() {
        let doc = super::document();
        for name in doc["components"]["schemas"].as_object().unwrap().keys() {
            assert!(!["BTreeMap", "HashMap", "Vec", "Option", "Value"].contains(&name.as_str()), "{name}");
        }
        assert!(doc.to_string().contains("#/components/schemas/UserChoices"));
    }

    #[test]
    fn every_inbox_route_takes_the_token_in_the_query_and_both_streams_last_event_id() {
        let doc = super::document();
        for (path, item) in doc["paths"].as_object().unwrap() {
            if !path.starts_with("/v1/inbox") {
                continue;
            }
            for (method, op) in item.as_object().unwrap() {
                let names: Vec<&str> =
                    op["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
                assert!(names.contains(&"token"), "{method} {path}: {names:?}");
            }
        }
        for path in ["/v1/inbox/stream", "/v1/events/stream"] {
            let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
            assert!(params.iter().any(|p| p["name"] == "Last-Event-ID" && p["in"] == "header"), "{path}");
        }
        let ids: Vec<&str> = ["get", "put"]
            .iter()
            .map(|m| doc["paths"]["/v1/inbox/preferences"][m]["operationId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["inbox_preferences_get", "inbox_preferences_put"]);
    }
}
