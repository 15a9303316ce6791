//! Operators, their sessions, and the checks in front of every `/ui` page.
//!
//! - Passwords: Argon2id with the crate's default parameters (19 MiB, two
//!   passes), stored as PHC strings. A login for an email with no operator
//!   still verifies against a fixed dummy hash, so the time an answer takes
//!   does not reveal which emails are operators.
//! - Sessions: a random 256-bit token in an HttpOnly, SameSite=Strict cookie
//!   (Secure with `ui.secure_cookies`); the database keeps its SHA-256 (see
//!   `store::operators` for why sessions live there). Lifetime `ui.session_ttl`
//!   from login, checked against the injectable clock.
//! - CSRF: every form carries a token derived from the session token
//!   (SHA-256 under a fixed label). Only a page served to the cookie's holder
//!   can know it, it needs no storage, and it is valid on every instance. Any
//!   non-GET request without it is refused with 403 before its handler runs.
//!   SameSite=Strict already keeps the cookie off cross-site posts in current
//!   browsers; the token does not depend on that. The login form, which has
//!   no session yet, uses the same idea with a short-lived pre-login cookie
//!   (double submit), so a third-party page cannot log a browser in.
//! - Rate limit: failures per email and per client address within
//!   `ui.login_window`, counted in the database so every instance sees them.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Page, UiError, error_page};
use crate::clock::Millis;
use crate::http::AppState;
use crate::store::{LoginAttempt, LoginFailures, LoginOutcome, OperatorRow, Store, StoreError, new_id};

pub const SESSION_COOKIE: &str = "herald_session";
/// The pre-login token behind the login form's CSRF field.
pub const LOGIN_COOKIE: &str = "herald_login";
/// A one-time message for the next page ("Rule X is on").
pub const FLASH_COOKIE: &str = "herald_flash";

/// Shortest password `herald operators add` accepts. Length is what makes a
/// password hard to guess; no composition rules.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// The logged-in operator, put in the request by [`require_operator`].
#[derive(Debug, Clone)]
pub struct Operator {
    pub email: String,
    /// The token every form of this session must send back.
    pub csrf: String,
    /// A message left by the previous action, shown once.
    pub flash: Option<String>,
    token_hash: String,
}

/// Why an operator account could not be created.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("--email: {0:?} is not an email address (expected local@domain)")]
    Email(String),
    #[error("password: must be {MIN_PASSWORD_CHARS} to 1024 characters (it was {0})")]
    PasswordLength(usize),
    #[error("an operator with email {0:?} exists already (remove it first with `herald operators remove`)")]
    Exists(String),
    #[error("could not hash the password: {0}")]
    Hash(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Trimmed and lowercased: the login name as stored and compared.
pub fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

pub fn hash_password(password: &str) -> Result<String, OperatorError> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| OperatorError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| OperatorError::Hash(e.to_string()))
}

/// The process's password checks: at most `ui.login_concurrency` at once
/// (a login finding every slot taken is answered 503 at once), each run on
/// one of that many dedicated threads.
///
/// Dedicated threads rather than tokio's blocking pool: Argon2 allocates
/// 19 MiB per check, and glibc keeps a freed block of that size in the
/// allocating thread's arena for reuse. On the blocking pool each check can
/// land on a different thread, so every thread that ever checked a password
/// keeps 19 MiB: a burst of 300 logins left the process at 0.9 GB minutes
/// later. On a fixed set of threads the retained memory is bounded by
/// `login_concurrency` × 19 MiB and is reused by the next check.
pub struct PasswordChecks {
    /// Taken (without waiting) for the length of one check.
    pub slots: Arc<tokio::sync::Semaphore>,
    jobs: std::sync::mpsc::Sender<PasswordJob>,
}

type PasswordJob = (String, String, tokio::sync::oneshot::Sender<bool>);

impl PasswordChecks {
    /// `threads` checking threads (and as many slots); they end when this
    /// is dropped.
    pub fn new(threads: usize) -> PasswordChecks {
        let threads = threads.max(1);
        let (jobs, queue) = std::sync::mpsc::channel::<PasswordJob>();
        let queue = Arc::new(std::sync::Mutex::new(queue));
        for i in 0..threads {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new().name(format!("herald-password-{i}")).spawn(move || {
                // This thread's Argon2 memory, allocated on the first
                // check and reused by every later one.
                let mut memory = Vec::new();
                loop {
                    let job = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).recv();
                    let Ok((stored, password, answer)) = job else { return };
                    let _ = answer.send(verify_password_in(&stored, &password, &mut memory));
                }
            });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "could not start a password-checking thread");
            }
        }
        PasswordChecks { slots: Arc::new(tokio::sync::Semaphore::new(threads)), jobs }
    }

    /// Whether `password` matches the stored hash; false if no checking
    /// thread is left to answer.
    pub async fn verify(&self, stored: String, password: String) -> bool {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.jobs.send((stored, password, tx)).is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }
}

/// Most Argon2 memory a stored hash may ask for (64 MiB; Herald's own use
/// 19 MiB): a hash with a larger `m` is refused rather than allocated for.
const MAX_ARGON2_KIB: u32 = 64 * 1024;

/// [`verify_password`] with the Argon2 working memory supplied by the
/// caller and kept between calls. The argon2 crate's own verify allocates
/// (and frees) 19 MiB per check, and glibc keeps blocks of that size around
/// instead of returning them: measured on a release build, 30 sequential
/// logins left the process at 225 MiB. With one buffer per checking thread
/// the memory is `ui.login_concurrency` × 19 MiB, allocated once.
pub fn verify_password_in(stored: &str, password: &str, memory: &mut Vec<argon2::Block>) -> bool {
    let Ok(hash) = PasswordHash::new(stored) else { return false };
    let Ok(algorithm) = argon2::Algorithm::try_from(hash.algorithm) else { return false };
    let Ok(params) = argon2::Params::try_from(&hash) else { return false };
    if params.m_cost() > MAX_ARGON2_KIB {
        return false;
    }
    let version = match hash.version.map(argon2::Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else { return false };
    let mut salt_buf = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_buf) else { return false };
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, argon2::Block::default());
    }
    let mut out = vec![0u8; expected.len()];
    let argon = Argon2::new(algorithm, version, params);
    argon.hash_password_into_with_memory(password.as_bytes(), salt, &mut out, &mut memory[..blocks]).is_ok()
        && bool::from(subtle::ConstantTimeEq::ct_eq(out.as_slice(), expected.as_bytes()))
}

/// Constant-time comparison happens inside the argon2 crate's verify.
pub fn verify_password(stored: &str, password: &str) -> bool {
    PasswordHash::new(stored).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
}

/// Verified against when the email is unknown, so that answer costs the
/// same hash as a wrong password.
static DUMMY_HASH: LazyLock<String> =
    LazyLock::new(|| hash_password("not a password anyone has").expect("hashing a fixed password works"));

/// Creates an operator account (`herald operators add`).
pub async fn add_operator(
    store: &dyn Store,
    email: &str,
    password: &str,
    now: Millis,
) -> Result<OperatorRow, OperatorError> {
    let email = normalize_email(email);
    if !email_address::EmailAddress::is_valid(&email) || email.len() > 254 {
        return Err(OperatorError::Email(email));
    }
    let chars = password.chars().count();
    if !(MIN_PASSWORD_CHARS..=1024).contains(&chars) {
        return Err(OperatorError::PasswordLength(chars));
    }
    let password = password.to_owned();
    let hash = tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| OperatorError::Hash(e.to_string()))??;
    let row = OperatorRow { id: new_id(), email: email.clone(), password_hash: hash, created_at: now };
    if !store.insert_operator(&row).await? {
        return Err(OperatorError::Exists(email));
    }
    Ok(row)
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn sha256_hex(label: &str, token: &str) -> String {
    let mut h = Sha256::new();
    h.update(label.as_bytes());
    h.update([0]);
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// What the database keeps of a session token.
pub fn session_hash(token: &str) -> String {
    sha256_hex("herald-ui-session", token)
}

/// The CSRF token of a session.
pub fn csrf_token(session_token: &str) -> String {
    sha256_hex("herald-ui-csrf", session_token)
}

fn login_csrf(login_token: &str) -> String {
    sha256_hex("herald-ui-login", login_token)
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
}

/// HttpOnly (no script reads it), SameSite=Strict (no other site's page
/// sends it), Path=/ui (the API never sees it), Secure when configured.
fn set_cookie(state: &AppState, name: &str, value: &str, max_age: std::time::Duration) -> HeaderValue {
    let c = cookie::Cookie::build((name, value))
        .path("/ui")
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .secure(state.ui.secure_cookies)
        .max_age(cookie::time::Duration::seconds(i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX)))
        .build();
    HeaderValue::from_str(&c.to_string()).expect("cookie names and values here are ASCII")
}

pub fn clear_cookie(name: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("{name}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict")).expect("an ASCII cookie")
}

pub fn flash_cookie(state: &AppState, message: &str) -> HeaderValue {
    let message: String = message.chars().take(500).collect();
    let value = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(message.as_bytes());
    set_cookie(state, FLASH_COOKIE, &value, std::time::Duration::from_secs(60))
}

fn read_flash(headers: &HeaderMap) -> Option<String> {
    let v = cookie_value(headers, FLASH_COOKIE)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(v).ok()?;
    String::from_utf8(bytes).ok().filter(|s| !s.is_empty())
}

/// Where a visitor without a (valid) session goes; `why` picks the message,
/// `next` is the page to return to after the login (a link to a row pasted
/// in a chat keeps working; SameSite=Strict withholds the cookie on such
/// cross-site navigations, so this matters more than it would otherwise).
fn to_login(why: Option<&str>, next: Option<&str>, clear_session: bool) -> Response {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if let Some(w) = why {
        query.append_pair("m", w);
    }
    if let Some(n) = next.filter(|n| safe_next(n).is_some()) {
        query.append_pair("next", n);
    }
    let query = query.finish();
    let to = if query.is_empty() { "/ui/login".to_owned() } else { format!("/ui/login?{query}") };
    let mut resp = Redirect::to(&to).into_response();
    if clear_session {
        resp.headers_mut().append(header::SET_COOKIE, clear_cookie(SESSION_COOKIE));
    }
    resp
}

/// In front of every `/ui` page but the login: a valid, unexpired session,
/// and for anything but GET/HEAD the session's CSRF token in the form.
pub async fn require_operator(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // The full URI: inside the nested router the path lacks its `/ui`.
    let uri = req.extensions().get::<axum::extract::OriginalUri>().map_or_else(|| req.uri().clone(), |u| u.0.clone());
    let path = uri.path().to_owned();
    // Only a page can be returned to; a form's target cannot be replayed.
    let back = (req.method() == Method::GET).then(|| uri.path_and_query().map_or(path.clone(), |p| p.to_string()));
    let back = back.as_deref();
    let Some(token) = cookie_value(req.headers(), SESSION_COOKIE) else {
        return to_login(None, back, false);
    };
    let token_hash = session_hash(&token);
    let session = match state.store.session(&token_hash).await {
        Ok(s) => s,
        Err(e) => return UiError::Store(e).into_response(),
    };
    let now = state.clock.now();
    let session = match session {
        None => {
            tracing::warn!(
                path,
                "operator screen: refused a session cookie that matches no session (forged, or ended by a logout)"
            );
            return to_login(Some("unknown"), back, true);
        }
        Some(s) if s.expires_at <= now => {
            if let Err(e) = state.store.delete_session(&token_hash).await {
                tracing::warn!(error = %e, "could not delete an expired session");
            }
            tracing::warn!(
                operator = %s.operator_email, expired_at = %s.expires_at, path,
                "operator screen: refused an expired session"
            );
            return to_login(Some("expired"), back, true);
        }
        Some(s) => s,
    };
    let op = Operator {
        email: session.operator_email,
        csrf: csrf_token(&token),
        flash: read_flash(req.headers()),
        token_hash,
    };
    let req = if req.method() == Method::GET || req.method() == Method::HEAD {
        req
    } else {
        match check_csrf(req, &op.csrf).await {
            Ok(req) => req,
            Err(sent) => {
                tracing::warn!(
                    operator = %op.email, path, token_sent = sent,
                    "operator screen: refused a form without its CSRF token (or with a wrong one)"
                );
                return error_page(
                    StatusCode::FORBIDDEN,
                    "This form was sent without its security (CSRF) token, or with a wrong one, so nothing was \
                     changed. Go back, reload the page and try again.",
                );
            }
        }
    };
    let mut req = req;
    req.extensions_mut().insert(op);
    next.run(req).await
}

/// Most bytes of a form body the CSRF check reads; larger bodies are refused
/// (the largest form, a rule with templates, stays far below).
const MAX_FORM_BYTES: usize = 4 * 1024 * 1024;

/// Reads the form, checks its `csrf` field, and gives the request back with
/// the same body. `Err(true)`: a token was sent but is wrong.
async fn check_csrf(req: Request, expected: &str) -> Result<Request, bool> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES).await.map_err(|_| false)?;
    let sent = url::form_urlencoded::parse(&bytes).find(|(k, _)| k == "csrf").map(|(_, v)| v.into_owned());
    match sent {
        Some(t) if same(&t, expected) => Ok(Request::from_parts(parts, axum::body::Body::from(bytes))),
        Some(_) => Err(true),
        None => Err(false),
    }
}

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    /// Why the visitor is here: `expired`, `unknown`, `out`.
    pub m: Option<String>,
    /// The page to go to after logging in.
    pub next: Option<String>,
}

/// `next` only ever leads to a page of this screen: a path under `/ui/`,
/// never another host (`//evil.example`, `/ui/..`, a backslash), so the
/// login cannot be used as an open redirect.
fn safe_next(next: &str) -> Option<&str> {
    let ok = next.starts_with("/ui/")
        && !next.contains("//")
        && !next.contains('\\')
        && !next.contains("..")
        && !next.chars().any(char::is_control)
        && next.len() <= 2000;
    ok.then_some(next)
}

fn login_page(
    state: &AppState,
    status: StatusCode,
    email: &str,
    next: Option<&str>,
    notice: Option<&str>,
    error: Option<&str>,
) -> Response {
    let next = next.and_then(safe_next).unwrap_or("");
    let token = random_token();
    let page = Page {
        title: "Log in".into(),
        active: "",
        template: "login.html",
        status,
        ctx: serde_json::json!({
            "login_csrf": login_csrf(&token), "email": email, "next": next, "notice": notice, "error": error,
        }),
        op: None,
    };
    let mut resp = page.into_response();
    resp.headers_mut().append(header::SET_COOKIE, set_cookie(state, LOGIN_COOKIE, &token, state.ui.login_window));
    resp
}

pub async fn login_form(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
) -> Response {
    let notice = match q.m.as_deref() {
        Some("expired") => Some("Your session expired, log in again."),
        Some("unknown") => Some("Your session was not recognised (it may have ended elsewhere), log in again."),
        Some("out") => Some("You are logged out."),
        _ => None,
    };
    login_page(&state, StatusCode::OK, "", q.next.as_deref(), notice, None)
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub next: String,
}

/// The message a refused login shows. Which of the two it was goes to the
/// log only: the page must not tell a guesser which emails exist.
const WRONG: &str = "Wrong email or password.";

/// The message when every password-checking slot is taken.
const BUSY: &str = "Too many logins are being checked right now. Try again in a moment.";

pub async fn login(State(state): State<AppState>, req: Request) -> Response {
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "unknown".into());
    let login_token = cookie_value(req.headers(), LOGIN_COOKIE);
    let form = match axum::Form::<LoginForm>::from_request(req, &()).await {
        Ok(axum::Form(f)) => f,
        Err(e) => return error_page(StatusCode::BAD_REQUEST, &format!("The login form could not be read: {e}")),
    };
    let email = normalize_email(&form.email);
    let now = state.clock.now();
    if !login_token.is_some_and(|t| same(&login_csrf(&t), &form.csrf)) {
        tracing::warn!(email, ip, "operator login refused: the form's CSRF token is missing or wrong");
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            &email,
            Some(&form.next),
            None,
            Some("This login form was not sent from this page, or it is too old. Try again."),
        );
    }
    match attempt_login(&state, &email, &form.password, &ip, now).await {
        Ok(Ok(token)) => {
            let mut resp = Redirect::to(safe_next(&form.next).unwrap_or("/ui/rules")).into_response();
            let h = resp.headers_mut();
            h.append(header::SET_COOKIE, set_cookie(&state, SESSION_COOKIE, &token, state.ui.session_ttl));
            h.append(header::SET_COOKIE, clear_cookie(LOGIN_COOKIE));
            resp
        }
        Ok(Err((status, message))) => {
            let mut page = login_page(&state, status, &email, Some(&form.next), None, Some(&message));
            if status == StatusCode::SERVICE_UNAVAILABLE {
                page.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            page
        }
        Err(e) => UiError::Store(e).into_response(),
    }
}

/// The login decision: a session token, or the status and message to show.
///
/// The order is what makes the limits hold under concurrency and across
/// instances: an attempt is recorded as `pending` *before* its password is
/// checked, and the counts are read again with it included, so sixty
/// simultaneous guesses cannot all pass a check that each made before any
/// of them was counted (an outside review got 59 Argon2 checks through a
/// limit of 5 that way). Each attempt sees at least every attempt recorded
/// before its own, so at most the limit's worth proceed; a burst may refuse
/// a little early, never late. The hashing itself is bounded per process
/// (`ui.login_concurrency`): beyond it a login is answered 503 at once,
/// because a queue of Argon2 checks (19 MiB each) is how a burst of 300
/// requests took the process from 16 MB to 1.6 GB.
async fn attempt_login(
    state: &AppState,
    email: &str,
    password: &str,
    ip: &str,
    now: Millis,
) -> Result<Result<String, (StatusCode, String)>, StoreError> {
    let ui = &state.ui;
    let record = |outcome: LoginOutcome| LoginAttempt {
        email: email.to_owned(),
        ip: ip.to_owned(),
        outcome: outcome.as_str().to_owned(),
        created_at: now,
    };
    let since = now.minus(ui.login_window);
    let known_since = now.minus(crate::store::LOGIN_ATTEMPT_RETENTION);
    // `slack` is 0 before this attempt is recorded and 1 after (its own
    // pending row is then among the counted).
    let limited_until = |f: &LoginFailures, slack: i64| {
        [
            (f.by_email_ip >= i64::from(ui.login_max_failures) + slack).then_some(f.email_ip_oldest).flatten(),
            // The ceiling for guesses spread over many addresses; an
            // address the operator logged in from before rides it out.
            (!f.known_address && f.by_email >= i64::from(ui.login_max_failures_per_email) + slack)
                .then_some(f.email_oldest)
                .flatten(),
            (f.by_ip >= i64::from(ui.login_max_failures_per_ip) + slack).then_some(f.ip_oldest).flatten(),
        ]
        .into_iter()
        .flatten()
        .map(|oldest| oldest.plus(ui.login_window))
        .max()
    };
    let too_many = |f: &LoginFailures, until: Millis| {
        let minutes = until.since(now).as_secs().div_ceil(60).max(1);
        tracing::warn!(
            email,
            ip,
            by_email = f.by_email,
            by_email_and_address = f.by_email_ip,
            by_ip = f.by_ip,
            "operator login refused: too many failed attempts"
        );
        (
            StatusCode::TOO_MANY_REQUESTS,
            format!("Too many attempts, try again in {minutes} minute{}.", if minutes == 1 { "" } else { "s" }),
        )
    };
    let failures = state.store.login_failures(email, ip, since, known_since).await?;
    if let Some(until) = limited_until(&failures, 0) {
        state.store.record_login_attempt(&record(LoginOutcome::RateLimited)).await?;
        return Ok(Err(too_many(&failures, until)));
    }
    let Ok(slot) = state.login_checks.slots.clone().try_acquire_owned() else {
        tracing::warn!(email, ip, "operator login refused: ui.login_concurrency password checks already running");
        return Ok(Err((StatusCode::SERVICE_UNAVAILABLE, BUSY.to_owned())));
    };
    let attempt = state.store.record_login_attempt(&record(LoginOutcome::Pending)).await?;
    let failures = state.store.login_failures(email, ip, since, known_since).await?;
    if let Some(until) = limited_until(&failures, 1) {
        state.store.finish_login_attempt(&attempt, LoginOutcome::RateLimited).await?;
        return Ok(Err(too_many(&failures, until)));
    }
    let operator = state.store.operator_by_email(email).await?;
    let exists = operator.is_some();
    let stored = operator.as_ref().map_or_else(|| DUMMY_HASH.clone(), |o| o.password_hash.clone());
    let password = password.to_owned();
    let matches = state.login_checks.verify(stored, password).await;
    drop(slot);
    let Some(op) = operator.filter(|_| matches) else {
        let outcome = if exists { LoginOutcome::WrongPassword } else { LoginOutcome::UnknownEmail };
        state.store.finish_login_attempt(&attempt, outcome).await?;
        tracing::warn!(email, ip, reason = outcome.as_str(), "operator login refused");
        return Ok(Err((StatusCode::UNAUTHORIZED, WRONG.to_owned())));
    };
    let token = random_token();
    state.store.create_session(&session_hash(&token), &op, now, now.plus(ui.session_ttl)).await?;
    state.store.finish_login_attempt(&attempt, LoginOutcome::Ok).await?;
    let entry = crate::store::AuditEntry {
        operator_email: op.email.clone(),
        action: "login".into(),
        target: op.email.clone(),
        detail: Some(format!("from {ip}")),
    };
    state.store.append_audit(&entry, now).await?;
    tracing::info!(operator = %op.email, ip, "operator logged in");
    Ok(Ok(token))
}

/// Ends the session in the database, so the cookie stops working on every
/// instance at once, even if a copy of it survives somewhere.
pub async fn logout(super::Ui { state, op }: super::Ui) -> Result<Response, UiError> {
    state.store.delete_session(&op.token_hash).await?;
    super::audit(&state, &op, "logout", &op.email, None).await;
    tracing::info!(operator = %op.email, "operator logged out");
    let mut resp = Redirect::to("/ui/login?m=out").into_response();
    resp.headers_mut().append(header::SET_COOKIE, clear_cookie(SESSION_COOKIE));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reusable_memory_verifier_agrees_with_the_crate() {
        let h = hash_password("correct horse battery").unwrap();
        let mut memory = Vec::new();
        for _ in 0..2 {
            assert!(verify_password_in(&h, "correct horse battery", &mut memory));
            assert!(!verify_password_in(&h, "correct horse battery!", &mut memory));
        }
        assert_eq!(memory.len(), argon2::Params::DEFAULT.block_count(), "allocated once, to the hash's size");
        assert!(!verify_password_in("not a hash", "x", &mut memory));
        assert!(!verify_password_in(&DUMMY_HASH, "", &mut memory) || DUMMY_HASH.is_empty());
    }

    #[test]
    fn passwords_verify_only_against_their_own_hash() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password(&h, "correct horse battery"));
        assert!(!verify_password(&h, "correct horse battery "));
        assert!(!verify_password("not a phc string", "x"));
        assert_ne!(h, hash_password("correct horse battery").unwrap(), "salted");
    }

    #[test]
    fn tokens_are_derived_under_distinct_labels() {
        let t = random_token();
        assert_eq!(t.len(), 43);
        assert_ne!(session_hash(&t), csrf_token(&t));
        assert_ne!(csrf_token(&t), login_csrf(&t));
        assert_eq!(csrf_token(&t), csrf_token(&t));
    }

    #[test]
    fn next_only_leads_to_pages_of_the_screen() {
        assert_eq!(safe_next("/ui/outbox/0193?x=1"), Some("/ui/outbox/0193?x=1"));
        for bad in [
            "//evil.example/ui/",
            "https://evil.example/ui/",
            "/ui//evil.example",
            "/ui/../v1/rules",
            "/ui\\x",
            "/v1/rules",
            "",
        ] {
            assert_eq!(safe_next(bad), None, "{bad}");
        }
    }

    #[test]
    fn cookies_are_read_by_name() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; herald_session=abc; b=2"));
        assert_eq!(cookie_value(&h, SESSION_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie_value(&h, "nope"), None);
    }
}
