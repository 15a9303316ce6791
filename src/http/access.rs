//! Who may call each route: the security review's list, kept as data.
//!
//! The table is not what enforces access (the router's layers do: the API-key
//! layer on `/v1`, the user-token layer on `/v1/inbox`, each provider
//! handler's own check, the signed token of `/u/{token}`). It is what the
//! enforcement is checked against: `tests/security.rs` calls every route here
//! as every kind of caller that should be refused and asserts the refusal,
//! checks that the OpenAPI document and this table agree route for route, and
//! that the access table in docs/security.md lists each one. A route added to the router
//! but not here fails the OpenAPI cross-check (for `/v1`) or the review
//! itself; a route listed here with the wrong access fails the calls.
//!
//! The alternative, deriving the table from the router, is not possible:
//! axum does not expose its routes. Deriving it from the OpenAPI document
//! alone would miss the routes that are not part of the API (`/metrics`,
//! `/widget/inbox.js`).

/// A kind of caller, from the most to the least open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can reach the port. These routes reveal nothing about a
    /// user or a message: liveness, readiness, aggregate counts, the widget
    /// script, the API description.
    Public,
    /// A one-click unsubscribe link: the HMAC-signed token in the path is the
    /// credential, and it names one address and category.
    SignedLink,
    /// A provider's bounce webhook: refused until its credential is
    /// configured, then each request must carry the provider's signature (or
    /// Postmark's basic auth).
    ProviderSignature,
    /// An end user's inbox token (`POST /v1/users/{id}/token`): it reaches
    /// that one user's messages and nothing else. API keys are refused here.
    UserToken,
    /// An operator API key (`herald keys create`): the host application's
    /// backend. User tokens are refused here.
    ApiKey,
    /// A person at the operator screen: a live session cookie from
    /// `/ui/login`, and on every form its CSRF token. Anyone else is sent to
    /// the login page (a form without its token is `403`).
    OperatorSession,
}

impl Access {
    /// How docs/security.md names it.
    pub fn describe(self) -> &'static str {
        match self {
            Access::Public => "anyone",
            Access::SignedLink => "holder of a signed link (unsubscribe or preferences)",
            Access::ProviderSignature => "the provider, by signature or credentials",
            Access::UserToken => "end user with an inbox token (their own messages only)",
            Access::ApiKey => "API key",
            Access::OperatorSession => "operator with a session (forms also need its CSRF token)",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub method: &'static str,
    /// As the router spells it, with `{param}` placeholders.
    pub path: &'static str,
    pub access: Access,
}

const fn r(method: &'static str, path: &'static str, access: Access) -> Route {
    Route { method, path, access }
}

use Access::*;

/// Every route `herald serve` answers.
pub const ROUTES: &[Route] = &[
    r("GET", "/", Public),
    r("GET", "/healthz", Public),
    r("GET", "/readyz", Public),
    r("GET", "/metrics", Public),
    r("GET", "/widget/inbox.js", Public),
    r("GET", "/v1/openapi.json", Public),
    r("GET", "/v1/push/vapid-public-key", Public),
    r("GET", "/widget/push-sw.js", Public),
    r("GET", "/u/{token}", SignedLink),
    r("POST", "/u/{token}", SignedLink),
    r("GET", "/p/{token}", SignedLink),
    r("POST", "/p/{token}", SignedLink),
    r("POST", "/v1/bounces/ses", ProviderSignature),
    r("POST", "/v1/bounces/sendgrid", ProviderSignature),
    r("POST", "/v1/bounces/mailgun", ProviderSignature),
    r("POST", "/v1/bounces/postmark", ProviderSignature),
    r("POST", "/v1/sms/status/twilio", ProviderSignature),
    r("POST", "/v1/sms/inbound/twilio", ProviderSignature),
    // Kannel signs nothing: the token Herald put in the URL it gave Kannel.
    r("GET", "/v1/sms/status/kannel", SignedLink),
    r("GET", "/v1/sms/inbound/kannel", SignedLink),
    r("GET", "/v1/inbox", UserToken),
    r("GET", "/v1/inbox/count", UserToken),
    r("GET", "/v1/inbox/stream", UserToken),
    r("POST", "/v1/inbox/read-all", UserToken),
    r("POST", "/v1/inbox/{id}/seen", UserToken),
    r("POST", "/v1/inbox/{id}/read", UserToken),
    r("POST", "/v1/inbox/{id}/unread", UserToken),
    r("POST", "/v1/inbox/{id}/archive", UserToken),
    r("GET", "/v1/inbox/preferences", UserToken),
    r("PUT", "/v1/inbox/preferences", UserToken),
    r("POST", "/v1/inbox/push-subscriptions", UserToken),
    r("GET", "/v1/inbox/push-subscriptions", UserToken),
    r("DELETE", "/v1/inbox/push-subscriptions/{id}", UserToken),
    r("POST", "/v1/triggers", ApiKey),
    r("GET", "/v1/triggers/{id}", ApiKey),
    r("POST", "/v1/triggers/{id}/cancel", ApiKey),
    r("POST", "/v1/rules", ApiKey),
    r("GET", "/v1/rules", ApiKey),
    r("GET", "/v1/rules/{id}", ApiKey),
    r("PATCH", "/v1/rules/{id}", ApiKey),
    r("DELETE", "/v1/rules/{id}", ApiKey),
    r("GET", "/v1/rules/{id}/preview", ApiKey),
    r("GET", "/v1/users/{user_id}", ApiKey),
    r("PUT", "/v1/users/{user_id}", ApiKey),
    r("DELETE", "/v1/users/{user_id}", ApiKey),
    r("GET", "/v1/users/{user_id}/sends", ApiKey),
    r("POST", "/v1/users/{user_id}/token", ApiKey),
    r("POST", "/v1/users/{user_id}/push-subscriptions", ApiKey),
    r("GET", "/v1/users/{user_id}/push-subscriptions", ApiKey),
    r("DELETE", "/v1/users/{user_id}/push-subscriptions/{id}", ApiKey),
    r("GET", "/v1/users/{user_id}/topics", ApiKey),
    r("GET", "/v1/topics", ApiKey),
    r("GET", "/v1/topics/{key}", ApiKey),
    r("PUT", "/v1/topics/{key}", ApiKey),
    r("DELETE", "/v1/topics/{key}", ApiKey),
    r("GET", "/v1/topics/{key}/subscribers", ApiKey),
    r("POST", "/v1/topics/{key}/subscribers", ApiKey),
    r("DELETE", "/v1/topics/{key}/subscribers", ApiKey),
    r("GET", "/v1/events/stream", ApiKey),
    r("GET", "/v1/bounces", ApiKey),
    r("POST", "/v1/bounces/mail", ApiKey),
    r("GET", "/v1/outbox", ApiKey),
    r("POST", "/v1/outbox/{id}/retry", ApiKey),
    r("POST", "/v1/outbox/{id}/cancel", ApiKey),
    r("GET", "/v1/suppressions", ApiKey),
    r("POST", "/v1/suppressions", ApiKey),
    r("DELETE", "/v1/suppressions", ApiKey),
    // The operator screen. The login form has a CSRF token of its own, bound
    // to a pre-login cookie, so another site cannot log a browser in.
    r("GET", "/ui/login", Public),
    r("POST", "/ui/login", Public),
    r("GET", "/ui/static/herald.css", Public),
    r("GET", "/ui", OperatorSession),
    r("POST", "/ui/logout", OperatorSession),
    r("GET", "/ui/rules", OperatorSession),
    r("GET", "/ui/rules/new", OperatorSession),
    r("POST", "/ui/rules/new", OperatorSession),
    r("GET", "/ui/rules/{id}", OperatorSession),
    r("POST", "/ui/rules/{id}", OperatorSession),
    r("GET", "/ui/rules/{id}/enable", OperatorSession),
    r("POST", "/ui/rules/{id}/enable", OperatorSession),
    r("POST", "/ui/rules/{id}/disable", OperatorSession),
    r("GET", "/ui/rules/{id}/delete", OperatorSession),
    r("POST", "/ui/rules/{id}/delete", OperatorSession),
    r("GET", "/ui/outbox", OperatorSession),
    r("POST", "/ui/outbox/retry", OperatorSession),
    r("GET", "/ui/outbox/{id}", OperatorSession),
    r("POST", "/ui/outbox/{id}/retry", OperatorSession),
    r("POST", "/ui/outbox/{id}/cancel", OperatorSession),
    r("GET", "/ui/sends", OperatorSession),
    r("GET", "/ui/triggers/{id}", OperatorSession),
    r("GET", "/ui/triggers/{id}/cancel", OperatorSession),
    r("POST", "/ui/triggers/{id}/cancel", OperatorSession),
    r("GET", "/ui/suppressions", OperatorSession),
    r("POST", "/ui/suppressions", OperatorSession),
    r("POST", "/ui/suppressions/lift", OperatorSession),
    r("GET", "/ui/suppressions/{hash}", OperatorSession),
    r("GET", "/ui/audit", OperatorSession),
];
