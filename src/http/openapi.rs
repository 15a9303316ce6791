//! The OpenAPI document, generated from the handlers' annotations and the
//! request and response types, served at `/v1/openapi.json`.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "Herald", description = "An engagement outbox: triggers in, messages out, and the answer to \"did user X get it, and if not, why\"."),
    paths(
        super::triggers::create, super::trigger_report::get, super::trigger_report::cancel,
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
        super::topics::put, super::topics::get, super::topics::delete, super::topics::list,
        super::topics::subscribe, super::topics::unsubscribe, super::topics::subscribers, super::topics::user_topics,
        super::unsubscribe::show, super::unsubscribe::unsubscribe,
        super::preferences::get, super::preferences::put, super::preferences::show, super::preferences::save,
        super::push::vapid_public_key,
        super::push_subscriptions::create, super::push_subscriptions::index, super::push_subscriptions::delete,
        super::push_subscriptions::inbox_create, super::push_subscriptions::inbox_index,
        super::push_subscriptions::inbox_delete,
        super::sms::twilio_status, super::sms::kannel_status, super::sms::twilio_inbound, super::sms::kannel_inbound,
    ),
    // The push subscriptions' answers and the refusals of `super::responses`
    // are `IntoResponses` types, which refer to their schemas without
    // registering them.
    components(schemas(
        super::problem::Problem,
        crate::store::InboxFilter,
        super::events::From,
        super::push_subscriptions::PushSubscriptionView,
        super::push_subscriptions::PushSubscriptionList,
    )),
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
        (name = "topics", description = "Topics a host names (doc:42) and the users who follow them"),
        (name = "unsubscribe", description = "One-click unsubscribe links (RFC 8058); no API key, the token is signed"),
        (name = "preferences", description = "The hosted preference page linked from emails; no API key, the token is signed"),
        (name = "push", description = "Push notifications: the Web Push key pages subscribe with, and a user's devices"),
        (name = "sms", description = "What SMS providers call back with: delivery reports and inbound STOP/START/HELP; no API key, each call is signed"),
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
                            .content("application/problem+json", problem())
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
                                .content("application/problem+json", problem())
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

/// A [`super::problem::Problem`] body, as every refusal has.
fn problem() -> utoipa::openapi::Content {
    utoipa::openapi::ContentBuilder::new().schema(Some(utoipa::openapi::Ref::from_schema_name("Problem"))).build()
}

/// Operations that never touch the database, so never answer 503: the
/// unsubscribe page only checks its token's signature, the VAPID key comes
/// from the configuration.
const NO_DATABASE: &[&str] = &["unsubscribe_show", "push_vapid_public_key"];

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
/// - every inbox route documents `?token=` as a second security scheme
///   (the middleware takes the user token there too, for clients that
///   cannot set headers);
/// - every text in a path or query says it holds no NUL, the two signed
///   links' tokens their shape, and the two forms their fields.
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
    // Optional since a trigger may name `user_ids` or a `topic` instead
    // (null is "not this one", as for the other optional fields).
    if let Some(p) = doc.pointer_mut("/components/schemas/TriggerInput/properties/user_id") {
        let mut optional = user_id.clone();
        optional["type"] = json!(["string", "null"]);
        *p = optional;
    }
    let topic_key = json!({
        "type": "string",
        "minLength": 1,
        "maxLength": crate::domain::TopicKey::MAX_LEN,
        "pattern": "^[A-Za-z0-9._:-]+$",
        "description": crate::domain::TopicKey::EXPECTED,
    });
    // A topic's mute in the preference center: each key a topic key.
    if let Some(p) = doc.pointer_mut("/components/schemas/PreferenceChange/properties/topics") {
        p["propertyNames"] = topic_key.clone();
    }
    if let Some(p) = doc.pointer_mut("/components/schemas/SubscribersInput/properties/user_ids") {
        p["items"] = user_id.clone();
        p["minItems"] = json!(1);
        p["maxItems"] = json!(super::topics::MAX_USER_IDS);
    }
    for (pointer, constraint) in constraints() {
        if let Some(Value::Object(schema)) = doc.pointer_mut(&pointer) {
            schema.extend(constraint.as_object().expect("an object").clone());
            // An `enum` on a field that may be null (a PATCH's "leave it
            // as it is") must list null too, or null breaks it.
            let nullable = schema.get("type").and_then(Value::as_array).is_some_and(|t| t.iter().any(|t| t == "null"));
            if nullable && let Some(Value::Array(values)) = schema.get_mut("enum") {
                values.push(Value::Null);
            }
        }
    }
    // `?token=`: the user token for clients that cannot set a header
    // (EventSource), stated as what it is, a second way to authenticate,
    // rather than as a parameter: the header wins when both are sent, so
    // a parameter would be one whose value does not matter, and a fuzzer
    // rightly reports a malformed one "accepted".
    if let Some(schemes) = doc.pointer_mut("/components/securitySchemes").and_then(Value::as_object_mut) {
        schemes.insert(
            "user_token_query".to_owned(),
            json!({
                "type": "apiKey",
                "in": "query",
                "name": "token",
                "description": "The user token in `?token=`, for clients that cannot set an Authorization \
                                header (EventSource); the header is preferred, since a URL can end up in logs, \
                                and wins when both are sent",
            }),
        );
    }
    // The two forms a person's browser or mail client posts, as the fields
    // they carry: a bare `type: string` body cannot be form-encoded, so
    // schemathesis filtered out every body it made for them and stopped
    // ("Failed Health Check (filter_too_much)" on `POST /u/{token}`).
    // Any field, as long as it holds no NUL (`super::nul` answers 400).
    let form_value = json!({ "type": "string", "pattern": NO_NUL });
    let forms = [
        (
            "/paths/~1u~1{token}/post/requestBody/content/application~1x-www-form-urlencoded/schema",
            json!({
                "type": "object",
                "required": ["List-Unsubscribe"],
                "properties": { "List-Unsubscribe": { "type": "string", "enum": ["One-Click"] } },
                "propertyNames": { "pattern": NO_NUL },
                "additionalProperties": form_value.clone(),
            }),
        ),
        (
            "/paths/~1p~1{token}/post/requestBody/content/application~1x-www-form-urlencoded/schema",
            json!({
                "type": "object",
                "properties": {
                    "shown": { "type": "array", "items": form_value,
                               "description": "Each box the form drew that can change, as `[\"CATEGORY\",\"CHANNEL\"]`" },
                    "was": { "type": "array", "items": form_value,
                             "description": "Each of those drawn ticked" },
                    "on": { "type": "array", "items": form_value,
                            "description": "Each box ticked when sent" },
                },
                "propertyNames": { "pattern": NO_NUL },
                "additionalProperties": form_value,
            }),
        ),
    ];
    for (pointer, schema) in forms {
        if let Some(body) = doc.pointer_mut(pointer) {
            *body = schema;
        }
    }
    // An empty form saves nothing and shows the page again.
    if let Some(required) = doc.pointer_mut("/paths/~1p~1{token}/post/requestBody/required") {
        *required = json!(false);
    }
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
                // A topic's key, and the cursors of the topic lists: a topic
                // key, or for a topic's subscribers a user id.
                if path.contains("/topics") && ((p["name"] == "key" && p["in"] == "path") || p["name"] == "cursor") {
                    let by_user = p["name"] == "cursor" && path.ends_with("/subscribers");
                    p["schema"] = if by_user { user_id.clone() } else { topic_key.clone() };
                }
                if p["name"] == "token" && p["in"] == "path" {
                    p["schema"]["pattern"] = json!(SIGNED_TOKEN);
                }
                if path == "/v1/suppressions" && p["name"] == "email" {
                    p["schema"]["pattern"] = json!(HASHABLE_EMAIL);
                }
                if path == "/v1/suppressions" && p["name"] == "phone" {
                    p["schema"]["pattern"] = json!(PHONE);
                }
                if path == "/v1/suppressions" && p["name"] == "category" {
                    p["schema"]["pattern"] = json!(NOT_BLANK);
                }
                // Every other text in a path or query: anything but NUL,
                // which `super::nul` refuses on every route.
                if (p["in"] == "path" || p["in"] == "query")
                    && p["schema"]["type"] == "string"
                    && p["schema"].get("pattern").is_none()
                    && p["schema"].get("enum").is_none()
                    && p["schema"].get("format").is_none()
                {
                    p["schema"]["pattern"] = json!(NO_NUL);
                }
                if path == "/v1/outbox" && p["name"] == "status" {
                    let statuses: Vec<&str> = crate::domain::OutboxStatus::ALL.iter().map(|s| s.as_str()).collect();
                    p["schema"]["enum"] = json!(statuses);
                }
            }
            if params.is_empty() {
                op.as_object_mut().unwrap().remove("parameters");
            }
            if inbox
                && path.starts_with("/v1/inbox")
                && let Some(security) = op.get_mut("security").and_then(Value::as_array_mut)
                && !security.iter().any(|s| s.get("user_token_query").is_some())
            {
                security.push(json!({ "user_token_query": [] }));
            }
        }
    }
}

/// Text without control characters, as the handlers check names and
/// categories.
const NO_CONTROLS: &str = r"^[^\u0000-\u001f\u007f-\u009f]*$";

/// Any text but U+0000, which `super::nul` refuses in a path, query or
/// form, and the handlers in a suppression's `detail`, a rule's `condition`
/// and `webhook_url` and a digest's `key` (PostgreSQL cannot store it).
const NO_NUL: &str = r"^[^\u0000]*$";

/// Text without control characters that is not blank, as `check_text` and
/// `category::check` read it: at least one character that is neither a
/// control character nor white space by Rust's `char::is_whitespace`
/// (Unicode White_Space; the ones that are not controls are listed, since
/// `\s` means something else in ECMAScript, which counts U+FEFF, and in
/// Python, which schemathesis generates with).
const NOT_BLANK: &str = concat!(
    r"^[^\u0000-\u001f\u007f-\u009f]*",
    r"[^\u0000-\u001f\u007f-\u009f \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
    r"[^\u0000-\u001f\u007f-\u009f]*$"
);

/// A phone number as the handlers take it: `+` first, after white space.
/// `\s` is the loose reading here (ECMAScript's, Python's and Rust's white
/// space differ at the edges): a number libphonenumber refuses is a `422`
/// the schemathesis configuration allows on these routes anyway.
const PHONE: &str = r"^\s*\+[\s\S]*$";

/// What `address::normalize` accepts (the suppressions' `email`): around
/// optional white space, text without white space whose last `@` has
/// something before it and something after. White space as Rust's
/// `char::is_whitespace`, spelled out (see [`NOT_BLANK`]).
const HASHABLE_EMAIL: &str = concat!(
    r"^[\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*",
    r"[^\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+",
    r"@[^@\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+",
    r"[\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$"
);

/// A signed token (`/u/{token}`, `/p/{token}`, an inbox token): two
/// base64url parts without padding, joined by a dot. Only the signature
/// tells a real one.
const SIGNED_TOKEN: &str = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$";

/// Every zone name `Tz::from_str` takes that `valid_zone` lets through, as
/// one alternation: exactly the zones `PUT /v1/users` accepts. Not an
/// `enum`: openapi-python-client turns GMT0, GMT-0 and GMT+0 into one
/// Python name and refuses the document, while a pattern stays a string.
fn zone_pattern() -> String {
    let names: Vec<String> = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|z| z.name())
        .filter(|n| {
            n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'+'))
        })
        .map(|n| n.replace('+', r"\+"))
        .collect();
    format!("^(?:{})$", names.join("|"))
}

/// What the handlers check of a field, stated in the document (the
/// schemas' JSON pointers, and what is added to each). The checks stay in
/// the handlers; these say the same, exactly, for clients and for
/// schemathesis, which found 17 requests the document allowed and the
/// server refused. Exactly, not more strictly: a pattern stricter than the
/// server (an email pattern was tried) is a request the document forbids
/// and the server accepts, which `--checks all` reports as well.
fn constraints() -> Vec<(String, serde_json::Value)> {
    use serde_json::json;
    let date_time = json!({ "format": "date-time" });
    let trigger_type = json!({ "pattern": "^[A-Za-z0-9._:/-]{1,128}$" });
    let category = json!({ "minLength": 1, "maxLength": crate::planning::category::MAX_LEN, "pattern": NOT_BLANK });
    let rule_name = json!({ "minLength": 1, "maxLength": 255, "pattern": NOT_BLANK });
    let channel = json!({ "enum": crate::delivery::channel::catalog::KNOWN });
    let seconds = json!({ "minimum": 0, "maximum": 366 * 24 * 3600 });
    let hh_mm = json!({ "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$" });
    let days = json!({ "items": { "enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] } });
    let mut rules = Vec::new();
    for rule in ["RuleInput", "RulePatch"] {
        let at = |field: &str| format!("/components/schemas/{rule}/properties/{field}");
        rules.extend([
            (at("name"), rule_name.clone()),
            (at("trigger_type"), trigger_type.clone()),
            (at("category"), category.clone()),
            (at("channel"), channel.clone()),
            (at("delay"), seconds.clone()),
            (at("grace"), seconds.clone()),
            (at("webhook_url"), json!({ "maxLength": 2048, "pattern": NO_NUL })),
            (at("condition"), json!({ "pattern": NO_NUL })),
        ]);
    }
    let all = vec![
        // A rule the handler accepts, for readers, and for schemathesis's
        // examples phase: of 104 rules it generated, none was accepted (a
        // `fallback_locale` must name a key of `locales`, templates must
        // compile), so no rule existed for the routes under /v1/rules/{id}.
        ("/components/schemas/RuleInput", json!({ "examples": [rule_example()] })),
        ("/components/schemas/DigestInput/properties/window", json!({ "minimum": 1, "maximum": 31 * 24 * 3600 })),
        ("/components/schemas/DigestInput/properties/max_items", json!({ "minimum": 1, "maximum": 1000 })),
        ("/components/schemas/DigestScheduleInput/properties/at", hh_mm.clone()),
        ("/components/schemas/DigestScheduleInput/properties/days", days.clone()),
        ("/components/schemas/SendWindowInput/properties/from", hh_mm.clone()),
        ("/components/schemas/SendWindowInput/properties/until", hh_mm.clone()),
        ("/components/schemas/SendWindowInput/properties/days", days),
        (
            "/components/schemas/ThrottleInput/properties/limit",
            json!({ "minimum": 1, "maximum": crate::planning::workflow::MAX_THROTTLE_LIMIT }),
        ),
        ("/components/schemas/ThrottleInput/properties/per", json!({ "minimum": 1, "maximum": 366 * 24 * 3600 })),
        ("/components/schemas/ThrottleInput/properties/scope", json!({ "enum": ["rule", "category"] })),
        ("/components/schemas/EscalateInput/properties/after", json!({ "minimum": 1, "maximum": 366 * 24 * 3600 })),
        (
            "/components/schemas/EscalationInput/oneOf/1",
            json!({ "minItems": 1, "maxItems": crate::planning::workflow::MAX_ESCALATION_STEPS }),
        ),
        ("/components/schemas/TriggerInput/properties/type", trigger_type),
        ("/components/schemas/TriggerInput/properties/occurred_at", date_time.clone()),
        (
            "/components/schemas/TriggerInput/properties/idempotency_key",
            json!({ "minLength": 1, "maxLength": 255, "pattern": NO_CONTROLS }),
        ),
        // A category, or `*` (which `NOT_BLANK` lets through).
        ("/components/schemas/SuppressionInput/properties/category", category.clone()),
        ("/components/schemas/SuppressionInput/properties/email", json!({ "pattern": HASHABLE_EMAIL })),
        // A number with its country code: `+` first, after white space the
        // handler trims. Whether it is a valid number is libphonenumber's
        // metadata, which no pattern states (a 422 .ci/schemathesis.toml
        // accepts).
        ("/components/schemas/SuppressionInput/properties/phone", json!({ "pattern": PHONE })),
        // Exactly one of `email` and `phone` (a null one is not given).
        (
            "/components/schemas/SuppressionInput",
            json!({ "oneOf": [
                { "required": ["email"], "properties": { "email": { "type": "string" } } },
                { "required": ["phone"], "properties": { "phone": { "type": "string" } } },
            ] }),
        ),
        // Blank (after trimming, as the handler trims) is none, as for `email`.
        ("/components/schemas/RecipientInput/properties/phone", json!({ "pattern": format!("{PHONE}|^\\s*$") })),
        (
            "/components/schemas/RecipientInput/properties/slack_user_id",
            json!({ "pattern": r"^\s*([UW][A-Z0-9]{2,31})?\s*$" }),
        ),
        ("/components/schemas/SuppressionInput/properties/detail", json!({ "maxLength": 1000, "pattern": NO_NUL })),
        ("/components/schemas/TopicInput/properties/name", json!({ "maxLength": 200, "pattern": NO_NUL })),
        ("/components/schemas/TopicInput/properties/description", json!({ "maxLength": 2000, "pattern": NO_NUL })),
        ("/components/schemas/DigestInput/properties/key", json!({ "pattern": NO_NUL })),
        ("/components/schemas/SuppressionInput/properties/expires_at", date_time),
        ("/components/schemas/RecipientInput/properties/name", json!({ "maxLength": 255, "pattern": NO_CONTROLS })),
        ("/components/schemas/RecipientInput/properties/locale", json!({ "pattern": "^[A-Za-z0-9_-]{1,35}$" })),
        // Not an `enum` of the tz database: openapi-python-client turns
        // GMT0, GMT-0 and GMT+0 into one Python name and refuses the document.
        ("/components/schemas/RecipientInput/properties/timezone", json!({ "pattern": zone_pattern() })),
        // What `recipient::mailable` takes is RFC 5322 as two parsers read
        // it, which no pattern states; `format: email` says the same to
        // clients, and a generator then offers real addresses.
        // Blank (after trimming, as the handler trims) is no address.
        (
            "/components/schemas/RecipientInput/properties/email",
            json!({ "anyOf": [
                { "format": "email", "maxLength": 320 },
                { "pattern": r"^[\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$" },
            ] }),
        ),
        // Category -> channel -> on (checked against what is offered, which
        // no schema can say).
        (
            "/components/schemas/PreferenceChange/properties/categories",
            json!({ "additionalProperties": { "type": "object", "additionalProperties": { "type": "boolean" } } }),
        ),
        ("/components/schemas/Preferences/properties/categories/propertyNames", category),
        (
            "/components/schemas/Preferences/properties/channels/propertyNames",
            json!({ "pattern": "^[A-Za-z0-9_-]{1,35}$" }),
        ),
        ("/components/schemas/QuietHoursInput/properties/from", hh_mm.clone()),
        ("/components/schemas/QuietHoursInput/properties/until", hh_mm),
        (
            "/paths/~1v1~1bounces~1mail/post/requestBody/content/application~1octet-stream/schema",
            // Not only ASCII white space (`u8::is_ascii_whitespace`), which
            // `bounce::parse` calls empty.
            json!({ "minLength": 1, "pattern": r"^[\s\S]*[^\t\n\f\r ][\s\S]*$" }),
        ),
    ];
    all.into_iter().map(|(pointer, constraint)| (pointer.to_owned(), constraint)).chain(rules).collect()
}

/// The example of `POST /v1/rules`'s body (see [`constraints`]).
fn rule_example() -> serde_json::Value {
    serde_json::json!({
        "name": "Export ready",
        "trigger_type": "export.ready",
        "category": "exports",
        "channel": "inbox",
        "enabled": true,
        "template": {
            "fallback_locale": "en",
            "locales": {
                "en": { "subject": "Your export is ready", "text": "Download it: {{ payload.url }}" },
            },
        },
    })
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
mod tests;
