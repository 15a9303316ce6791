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
    ),
    components(schemas(crate::store::InboxFilter)),
    modifiers(&ApiKeyAuth),
    tags(
        (name = "triggers", description = "Something happened to a user"),
        (name = "rules", description = "What operators switched on"),
        (name = "users", description = "Recipients, and what reached them"),
        (name = "outbox", description = "Scheduled and finished messages"),
        (name = "inbox", description = "An end user's own inbox, with a per-user token"),
        (name = "events", description = "Outcome events for the host application to follow"),
        (name = "bounces", description = "Bounce and complaint messages, kept as evidence"),
        (name = "suppressions", description = "Addresses Herald will not mail (stored as hashes)"),
        (name = "unsubscribe", description = "One-click unsubscribe links (RFC 8058); no API key, the token is signed"),
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

pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
