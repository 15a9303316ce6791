//! The operator screen over HTTP, on every backend: the login and its
//! refusals, sessions (expired with a manual clock, forged, logged out),
//! CSRF, the login rate limit, and the audit rows operator actions write.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{T0, TestDb, row};
use herald::clock::{Clock, ManualClock, SystemClock};
use herald::config::Config;
use herald::http::ui::session::{add_operator, csrf_token, session_hash};
use herald::store::{
    EventStore, OperatorStore, PushDeviceStore, RecipientStore, RuleRow, RuleStore, Store, SuppressionReason,
    SuppressionRow, SuppressionStore, TriggerStore, new_id,
};
use tokio_util::sync::CancellationToken;

const PASSWORD: &str = "a long operator password";

/// Everything the server logs, for the tests that check a refusal was logged.
/// One buffer for the whole binary: each test looks for its own operator's
/// (unique) email in it.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("warn,herald=info")
            .with_ansi(false)
            .with_writer(|| Capture)
            .try_init();
    });
}

/// Log lines mentioning `needle`.
fn logged(needle: &str) -> Vec<String> {
    String::from_utf8_lossy(&LOG.lock().unwrap()).lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
}

struct Ui {
    base: String,
    http: reqwest::Client,
    clock: ManualClock,
    store: herald::store::SqlStore,
    email: String,
    api_key: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// A logged-in browser: its cookie and the session's CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

struct Resp {
    status: u16,
    location: Option<String>,
    set_cookies: Vec<String>,
    body: String,
}

impl Ui {
    async fn start(db: &TestDb) -> Ui {
        Ui::start_with(db, |_| {}).await
    }

    async fn start_with(db: &TestDb, configure: impl FnOnce(&mut Config)) -> Ui {
        capture_logs();
        let email = format!("ops-{}@example.com", new_id());
        add_operator(&db.store, &email, PASSWORD, T0).await.unwrap();
        let (api_key, key_row) = herald::http::auth::generate("tests", SystemClock.now());
        db.store.insert_api_key(&key_row).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut config = common::app::quiet_config(db);
        configure(&mut config);
        let clock = ManualClock::at(T0);
        let shutdown = CancellationToken::new();
        // Its own pool: stopping the server closes it, and a test may start
        // a second server on the same database.
        let store = db.another_instance().await;
        let task = tokio::spawn(herald::app::serve_with_clock(
            config,
            store.clone(),
            listener,
            shutdown.clone(),
            Arc::new(clock.clone()),
        ));
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Ui { base, http, clock, store, email, api_key, shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let location = resp.headers().get("location").map(|v| v.to_str().unwrap().to_owned());
        let set_cookies = resp.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        Resp { status, location, set_cookies, body: resp.text().await.unwrap() }
    }

    /// A `/v1` request with the API key (and `body` as JSON).
    fn api(&self, method: reqwest::Method, path: &str, body: Option<serde_json::Value>) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.api_key);
        match body {
            Some(b) => req.json(&b),
            None => req,
        }
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> Resp {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        self.send(req).await
    }

    async fn post(&self, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Resp {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        self.send(req).await
    }

    /// Fetches the login form: its pre-login cookie and CSRF field.
    async fn login_form(&self) -> (String, String) {
        let page = self.get("/ui/login", None).await;
        let cookie = cookie_pair(&page.set_cookies, "herald_login").expect("the login page sets its cookie");
        (cookie, csrf_field(&page.body))
    }

    async fn login(&self, email: &str, password: &str) -> Resp {
        let (cookie, csrf) = self.login_form().await;
        self.post("/ui/login", Some(&cookie), &[("email", email), ("password", password), ("csrf", &csrf)]).await
    }

    async fn session(&self) -> Session {
        let resp = self.login(&self.email, PASSWORD).await;
        assert_eq!((resp.status, resp.location.as_deref()), (303, Some("/ui/rules")), "{}", resp.body);
        let cookie = cookie_pair(&resp.set_cookies, "herald_session").unwrap();
        let page = self.get("/ui/rules", Some(&cookie)).await;
        assert_eq!(page.status, 200);
        Session { csrf: csrf_field(&page.body), cookie }
    }

    async fn action(&self, s: &Session, path: &str, form: &[(&str, &str)]) -> Resp {
        let mut fields = form.to_vec();
        fields.push(("csrf", &s.csrf));
        self.post(path, Some(&s.cookie), &fields).await
    }

    async fn audit_actions(&self) -> Vec<String> {
        let mut rows = self.store.audit_log(None, 100).await.unwrap();
        rows.reverse();
        rows.into_iter().map(|r| r.action).collect()
    }
}

/// `name=value` of the cookie `name` among Set-Cookie headers.
fn cookie_pair(set_cookies: &[String], name: &str) -> Option<String> {
    set_cookies.iter().find(|c| c.starts_with(&format!("{name}="))).map(|c| c.split(';').next().unwrap().to_owned())
}

fn csrf_field(html: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = html.find(marker).expect("a form with a csrf field") + marker.len();
    html[start..start + 64].to_owned()
}

fn disabled_rule(trigger_type: &str) -> RuleRow {
    let input: herald::planning::rule::RuleInput = serde_json::from_value(serde_json::json!({
        "name": "Export ready", "trigger_type": trigger_type, "channel": "inbox", "category": "exports",
        "template": { "fallback_locale": "en", "locales": { "en": { "subject": "Ready", "text": "Hi" } } },
    }))
    .unwrap();
    input.into_row(T0, &Default::default()).unwrap()
}

backend_tests!(
    pages_without_a_session_redirect_to_the_login,
    the_right_password_opens_a_session_kept_only_as_a_hash,
    a_wrong_password_and_an_unknown_email_are_refused_alike_and_logged,
    an_expired_session_is_refused_with_a_message_and_logged,
    a_forged_cookie_is_refused_with_a_message_and_logged,
    forms_without_their_csrf_token_are_refused_and_change_nothing,
    failed_logins_are_rate_limited_until_the_window_passes,
    logout_ends_the_session_on_the_server,
    every_operator_action_writes_an_audit_row,
    a_lift_keeps_its_reason_and_who_lifted,
    the_rule_editor_shows_template_errors_with_line_and_column,
    changes_through_the_api_are_audited_with_the_keys_name,
    failed_rows_are_retried_in_bulk_with_the_filter_and_a_rule_is_deleted,
    the_send_log_page_shows_a_users_preference_changes_and_who_made_them,
    the_rule_editor_edits_every_workflow_field_with_the_apis_checks,
    the_dry_run_says_what_the_window_digest_and_cap_would_do,
    an_operator_changes_a_users_preferences_and_the_audit_names_them,
    the_send_log_search_finds_a_phone_and_the_users_page_shows_it,
    the_rule_editor_writes_a_push_rule_with_its_options_and_payload_size,
    the_rule_editor_keeps_each_channels_fields,
    the_rule_editor_keeps_a_chains_later_steps_on_save,
    the_users_page_lists_their_push_devices_and_why_one_was_removed,
    the_send_log_page_shows_delivery_reports_in_their_colours,
    a_triggers_page_and_herald_trigger_show_report_its_audience_and_the_page_cancels_it,
    herald_trigger_cancel_cancels_a_single_users_trigger_naming_the_operator,
);

/// `herald trigger ARGS` on the test's database, as an operator runs it.
fn herald_trigger(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.arg("trigger").args(args).env("HERALD_DATABASE_URL", &db.url).env("HERALD_LOG", "warn");
    cmd.env_remove("HERALD_CONFIG").current_dir(std::env::temp_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run herald trigger")
}

/// `herald trigger show ID --json`, which must succeed.
fn trigger_json(db: &TestDb, id: &str) -> serde_json::Value {
    let out = herald_trigger(db, &["show", id, "--json"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("herald trigger show --json prints JSON")
}

/// A trigger to three users, expanded one chunk of two: the command line
/// and the trigger's page say "expanding 2 of 3" with the same counts, the
/// send log links to the page, and the page's cancel (asked first) cancels
/// the two scheduled messages and stops the expansion, the page then saying
/// who cancelled it.
async fn a_triggers_page_and_herald_trigger_show_report_its_audience_and_the_page_cancels_it(db: &TestDb) {
    use herald::planning::fan_out::Expander;
    use herald::planning::planner::RuleBook;
    use herald::store::{Audience, FanOutStore, NewFanOut};
    let ui = Ui::start(db).await;
    common::add_rule(db, T0, "announce", serde_json::json!({"delay": 3600})).await;
    let id = new_id();
    let audience = Audience::Users(["u1", "u2", "u3"].map(common::user).to_vec());
    let fan_out = NewFanOut {
        id: id.clone(),
        trigger_type: "announce".into(),
        audience,
        actor_id: None,
        payload: serde_json::json!({"title": "Spring release"}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: T0,
        send_at: None,
    };
    db.store.record_fan_out(&fan_out, T0).await.unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ui.clock.clone());
    let expander = |chunks| {
        Expander::new(db.arc(), clock.clone(), Arc::new(RuleBook::new(db.arc())), Duration::from_secs(1))
            .with_chunk(2)
            .stopping_after(chunks)
    };
    assert_eq!(expander(1).tick().await.unwrap(), 1);

    // The command line: text and JSON, the report's counts.
    let out = herald_trigger(db, &["show", &id], &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with(&format!("trigger {id}  announce  to a list of users\n")), "{text}");
    assert!(text.contains("audience: expanding 2 of 3\n"), "{text}");
    assert!(text.contains("messages by status (2):\n  scheduled           2\n"), "{text}");
    assert!(text.contains("by channel:\n  inbox       scheduled 2\n"), "{text}");
    let json = trigger_json(db, &id);
    assert_eq!(
        (&json["state"], &json["audience_size"], &json["expanded"], &json["counts"], &json["by_channel"]),
        (
            &serde_json::json!("expanding"),
            &serde_json::json!(3),
            &serde_json::json!(2),
            &serde_json::json!({"scheduled": 2}),
            &serde_json::json!({"inbox": {"scheduled": 2}})
        ),
        "{json}"
    );
    let out = herald_trigger(db, &["show", "no-such-trigger"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trigger has the id \"no-such-trigger\""));

    // The page, and the send log's link to it.
    let s = ui.session().await;
    let page = ui.get(&format!("/ui/triggers/{id}"), Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<span class=\"st st-expanding\">expanding</span> expanding 2 of 3"), "{}", page.body);
    assert!(page.body.contains("<span class=\"n\">2</span> scheduled"), "{}", page.body);
    assert!(page.body.contains("<tr><td>inbox</td><td>2</td></tr>"), "{}", page.body);
    assert!(page.body.contains("Nothing of it was held back, cancelled or failed."), "{}", page.body);
    let link = format!("href=\"/ui/triggers/{id}\"");
    let sends = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert!(sends.body.contains(&link), "{}", sends.body);
    assert_eq!(ui.get("/ui/triggers/no-such-trigger", Some(&s.cookie)).await.status, 404);

    // The cancel asks first, then cancels with the session's CSRF token.
    let confirm = ui.get(&format!("/ui/triggers/{id}/cancel"), Some(&s.cookie)).await;
    assert!(confirm.body.contains("Its <strong>2</strong> message(s) scheduled"), "{}", confirm.body);
    assert!(confirm.body.contains(&format!("action=\"/ui/triggers/{id}/cancel\"")), "{}", confirm.body);
    assert_eq!(db.store.outbox_for_trigger(&id).await.unwrap().len(), 2, "asking cancels nothing");
    assert!(db.store.outbox_for_trigger(&id).await.unwrap().iter().all(|r| r.status.as_str() == "scheduled"));
    let forged = ui.post(&format!("/ui/triggers/{id}/cancel"), Some(&s.cookie), &[("csrf", "forged")]).await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    let done = ui.action(&s, &format!("/ui/triggers/{id}/cancel"), &[]).await;
    assert_eq!((done.status, done.location.as_deref()), (303, Some(format!("/ui/triggers/{id}").as_str())));
    let rows = db.store.outbox_for_trigger(&id).await.unwrap();
    assert!(rows.len() == 2 && rows.iter().all(|r| r.status.as_str() == "cancelled"), "{rows:?}");
    ui.clock.advance(Duration::from_secs(3600)); // past the first expander's lease
    assert_eq!(expander(10).tick().await.unwrap(), 0, "the rest of the audience is not planned");
    assert_eq!(db.store.outbox_for_trigger(&id).await.unwrap().len(), 2);
    let by = format!("the operator screen ({})", ui.email);
    let page = ui.get(&format!("/ui/triggers/{id}"), Some(&s.cookie)).await;
    assert!(page.body.contains("<span class=\"st st-cancelled\">cancelled</span> cancelled "), "{}", page.body);
    assert!(page.body.contains(&format!("through {by}, after 2 of 3 recipient(s) were planned")), "{}", page.body);
    assert!(page.body.contains("<span class=\"st st-cancelled\">cancelled</span></td><td>2</td>"), "{}", page.body);
    assert!(!page.body.contains("Cancel trigger…"), "{}", page.body);
    let json = trigger_json(db, &id);
    assert_eq!((&json["state"], &json["cancelled_by"]), (&serde_json::json!("cancelled"), &serde_json::json!(by)));
    assert_eq!(json["why_not"], serde_json::json!({"cancelled": 2}));
    let audit = ui.store.audit_for_target(&id, 10).await.unwrap();
    let seen: Vec<_> =
        audit.iter().map(|a| (a.operator_email.as_str(), a.action.as_str(), a.detail.as_deref())).collect();
    assert_eq!(seen, vec![(ui.email.as_str(), "trigger.cancel", Some("2 message(s) cancelled"))]);
    ui.stop().await;
}

/// `herald trigger cancel` on a trigger to one user: its scheduled message
/// is cancelled, the report names the command line and the operator, and
/// the audit log too; a second cancel cancels nothing more.
async fn herald_trigger_cancel_cancels_a_single_users_trigger_naming_the_operator(db: &TestDb) {
    let ui = Ui::start(db).await;
    common::add_rule(db, T0, "later", serde_json::json!({"delay": 3600})).await;
    let trigger = serde_json::json!({"type": "later", "user_id": "u1"});
    let accepted = ui.send(ui.api(reqwest::Method::POST, "/v1/triggers", Some(trigger))).await;
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    let accepted: serde_json::Value = serde_json::from_str(&accepted.body).unwrap();
    let id = accepted["trigger_id"].as_str().unwrap().to_owned();
    let text = String::from_utf8_lossy(&herald_trigger(db, &["show", &id], &[]).stdout).into_owned();
    assert!(text.contains(&format!("trigger {id}  later  to user u1\n")), "{text}");
    assert!(text.contains("audience: planned for 1 of 1 recipient(s)\n"), "{text}");

    let as_alice = [("USER", "alice"), ("LOGNAME", "alice")];
    let out = herald_trigger(db, &["cancel", &id], &as_alice);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("1 message(s) cancelled (recorded in the audit log)\n"), "{text}");
    assert!(text.contains("through the command line (operator alice), after 1 of 1"), "{text}");
    assert!(text.contains("why not:\n  cancelled           1\n"), "{text}");
    let out = herald_trigger(db, &["cancel", &id, "--operator", "bob", "--json"], &[]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cancelled"], 0, "{json}");
    assert_eq!(json["trigger"]["cancelled_by"], "the command line (operator alice)", "the first cancel is kept");
    let rows = db.store.outbox_for_trigger(&id).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.status.as_str()).collect::<Vec<_>>(), ["cancelled"]);
    let audit = ui.store.audit_for_target(&id, 10).await.unwrap();
    let seen: Vec<_> = audit.iter().map(|a| (a.operator_email.as_str(), a.detail.as_deref())).collect();
    assert_eq!(
        seen,
        vec![
            ("operator bob (command line)", Some("0 message(s) cancelled")),
            ("os user alice (command line)", Some("1 message(s) cancelled")),
        ]
    );
    let out = herald_trigger(db, &["cancel", "no-such-trigger"], &as_alice);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trigger has the id \"no-such-trigger\""));
    ui.stop().await;
}

/// A text's delivery reports on the user's send-log page: the message
/// `sent`, its history `delivered` and `undelivered` with their words, each
/// badge in the stylesheet with the colour of its meaning (delivered as sent,
/// undelivered as failed).
async fn the_send_log_page_shows_delivery_reports_in_their_colours(db: &TestDb) {
    use herald::store::{BounceStore, Finish};
    let ui = Ui::start(db).await;
    let r = row("u1", "sms", T0);
    db.store.enqueue(std::slice::from_ref(&r), T0).await.unwrap();
    let claimed = db.store.claim_channel("sms", T0, 1, "t").await.unwrap().remove(0);
    assert!(db.store.finish(&claimed, "t", &Finish::sent("sms: Twilio"), T0).await.unwrap());
    for (i, (status, detail)) in
        [("delivered", "Twilio: delivered"), ("undelivered", "Twilio: undelivered (30003 unreachable handset)")]
            .into_iter()
            .enumerate()
    {
        let report = common::twilio::delivery_report(&r.id, &i.to_string(), status, detail, None);
        let at = T0.plus(Duration::from_secs(1 + i as u64));
        assert!(db.store.record_bounce(&report, at).await.unwrap());
    }
    let s = ui.session().await;
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<span class=\"st st-sent\">sent</span>\n    <strong>sms</strong>"), "{}", page.body);
    assert!(page.body.contains("<span class=\"st st-delivered\">delivered</span>"), "{}", page.body);
    assert!(page.body.contains("<span class=\"st st-undelivered\">undelivered</span>"), "{}", page.body);
    assert!(page.body.contains("Twilio: undelivered (30003 unreachable handset)"), "{}", page.body);
    let css = ui.get("/ui/static/herald.css", Some(&s.cookie)).await.body;
    // The colour of the first rule naming `class` ("" when none does).
    let colour = |class: &str| {
        let r = css.split('}').find(|r| r.contains(class)).unwrap_or_default();
        r.split("color:").last().unwrap_or_default().trim().to_owned()
    };
    assert_eq!(colour(".st-sent"), "var(--ok);", "{css}");
    assert_eq!(colour(".st-delivered"), colour(".st-sent"));
    assert_eq!(colour(".st-undelivered"), colour(".st-failed"));
    ui.stop().await;
}

/// A phone number typed into the send log's search is hashed and finds the
/// user who has it, with what still waits for them; the user's page shows
/// their phone and Slack id; the suppression form takes a number, the list
/// says its kind, and the user's page lists it.
async fn the_send_log_search_finds_a_phone_and_the_users_page_shows_it(db: &TestDb) {
    let ui = Ui::start(db).await;
    let api = |method, path: &str, body| ui.api(method, path, body);
    let rule = serde_json::json!({
        "name": "Later", "trigger_type": "later", "channel": "inbox", "category": "news", "delay": 3600,
        "enabled": true, "template": { "fallback_locale": "en", "locales": { "en": { "subject": "s", "text": "t" } } },
    });
    assert_eq!(ui.send(api(reqwest::Method::POST, "/v1/rules", Some(rule))).await.status, 201);
    let user = serde_json::json!({"phone": "+1 (415) 555-0101", "slack_user_id": "U024BE7LH"});
    assert_eq!(ui.send(api(reqwest::Method::PUT, "/v1/users/u1", Some(user))).await.status, 201);
    let trigger = serde_json::json!({"type": "later", "user_id": "u1"});
    assert_eq!(ui.send(api(reqwest::Method::POST, "/v1/triggers", Some(trigger))).await.status, 202);
    let s = ui.session().await;

    let page = ui.get("/ui/sends?q=%2B1%20415%20555%200101", Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Phone number hash"), "{}", page.body);
    assert!(page.body.contains("by=user\">u1</a>, still waiting (1):"), "{}", page.body);
    let page = ui.get("/ui/sends?q=%2B1234", Some(&s.cookie)).await;
    assert!(page.body.contains("is not a phone number"), "{}", page.body);
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert!(page.body.contains("Phone <code>+14155550101</code>, Slack <code>U024BE7LH</code>"), "{}", page.body);

    let resp = ui.action(&s, "/ui/suppressions", &[("email", "+14155550101"), ("category", "*"), ("reason", "")]).await;
    assert_eq!(resp.status, 303, "{}", resp.body);
    let list = ui.get("/ui/suppressions", Some(&s.cookie)).await;
    assert!(list.body.contains("<td>phone</td>"), "{}", list.body);
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert!(page.body.contains("phone: manual (category *)"), "{}", page.body);
    ui.stop().await;
}

/// A host's preference sync and the user's own choice are in the
/// audit trail, and the user's send-log page shows both with who made them.
async fn the_send_log_page_shows_a_users_preference_changes_and_who_made_them(db: &TestDb) {
    let ui = Ui::start(db).await;
    let api = |method, path: &str, body| ui.api(method, path, body);
    let rule = serde_json::json!({
        "name": "News", "trigger_type": "news", "channel": "inbox", "category": "news", "enabled": true,
        "template": { "fallback_locale": "en", "locales": { "en": { "subject": "s", "text": "t" } } },
        "send_window": {"days": ["mon", "fri"], "from": "09:00", "until": "18:00"},
        "throttle": {"limit": 3, "per": 86400}, "display_name": "Product news",
    });
    let created = ui.send(api(reqwest::Method::POST, "/v1/rules", Some(rule))).await;
    assert_eq!(created.status, 201);
    let rule_id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"].as_str().unwrap().to_owned();
    let prefs = serde_json::json!({"preferences": {"channels": {"email": false}}});
    assert_eq!(ui.send(api(reqwest::Method::PUT, "/v1/users/u1", Some(prefs))).await.status, 201);
    let token = ui.send(api(reqwest::Method::POST, "/v1/users/u1/token", Some(serde_json::json!({})))).await;
    let token = serde_json::from_str::<serde_json::Value>(&token.body).unwrap()["token"].as_str().unwrap().to_owned();
    let change = serde_json::json!({"categories": {"news": {"inbox": false}}});
    let put = ui.send(ui.http.put(format!("{}/v1/inbox/preferences", ui.base)).bearer_auth(&token).json(&change)).await;
    assert_eq!(put.status, 200, "{}", put.body);
    let s = ui.session().await;
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Preference changes (2)"), "{}", page.body);
    assert!(page.body.contains("by user u1 (inbox API): news by inbox: off"), "{}", page.body);
    assert!(page.body.contains("by api key &quot;tests&quot;: host preferences set to"), "{}", page.body);
    assert!(page.body.contains("news by inbox: off</span>"), "the user's current choices: {}", page.body);
    // A digest's triggers are on the page too.
    let digest = serde_json::json!({
        "name": "Comments", "trigger_type": "comment", "channel": "inbox", "category": "comments", "enabled": true,
        "template": { "fallback_locale": "en", "locales": { "en": { "subject": "{{ digest.count }} comments", "text": "t" } } },
        "digest": {"window": 3600},
    });
    assert_eq!(ui.send(api(reqwest::Method::POST, "/v1/rules", Some(digest))).await.status, 201);
    for _ in 0..2 {
        let t = serde_json::json!({"type": "comment", "user_id": "u1"});
        assert_eq!(ui.send(api(reqwest::Method::POST, "/v1/triggers", Some(t))).await.status, 202);
    }
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert!(page.body.contains("Digest of 2 trigger(s):"), "{}", page.body);
    // An escalating message says what cancels its follow-up as its rule
    // does (`unless: read` was once shown as "unless seen or read").
    let mut escalating = disabled_rule("invoice");
    escalating.enabled = true;
    escalating.workflow = Some(serde_json::json!({"escalate": {"after": 60, "unless": "read", "channel": "email",
        "template": { "fallback_locale": "en", "locales": { "en": { "subject": "Unread", "text": "t" } } }}}));
    ui.store.insert_rule(&escalating).await.unwrap();
    let trigger = herald::store::NewTrigger {
        id: new_id(),
        trigger_type: "invoice".into(),
        user_id: common::user("u1"),
        payload: serde_json::json!({}),
        idempotency_key: None,
        request_hash: None,
        occurred_at: ui.clock.now(),
        send_at: None,
        actor_id: None,
    };
    ui.store.insert_trigger(&trigger, ui.clock.now()).await.unwrap();
    let (store, clock): (Arc<dyn Store>, Arc<dyn Clock>) = (Arc::new(ui.store.clone()), Arc::new(ui.clock.clone()));
    herald::planning::planner::Planner::new(store.clone(), clock.clone(), Duration::from_secs(1), 10)
        .tick()
        .await
        .unwrap();
    let worker = common::worker(store, herald::app::registry(), &ui.clock, Default::default());
    assert_eq!(worker.tick().await.unwrap().sent, 1, "the inbox message");
    ui.clock.advance(Duration::from_secs(60));
    worker.tick().await.unwrap();
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert!(page.body.contains("</a> unless read in time"), "{}", page.body);
    // The rule's editor shows its workflows (set through the API) in its fields.
    let page = ui.get(&format!("/ui/rules/{rule_id}"), Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for field in [
        "name=\"sw_day_mon\" value=\"1\" checked",
        "name=\"sw_day_fri\" value=\"1\" checked",
        "name=\"sw_from\" value=\"09:00\"",
        "name=\"throttle_limit\" value=\"3\"",
        "name=\"throttle_per\" value=\"86400\"",
        "name=\"display_name\" value=\"Product news\"",
    ] {
        assert!(page.body.contains(field), "{field}: {}", page.body);
    }
    assert!(!page.body.contains("name=\"sw_day_tue\" value=\"1\" checked"), "{}", page.body);
    ui.stop().await;
}

/// The editor's fields for a rule with every workflow field but digest
/// (which escalation excludes), as the form posts them.
fn workflow_form() -> Vec<(&'static str, &'static str)> {
    vec![
        ("name", "Invoices"),
        ("trigger_type", "invoice.due"),
        ("channel", "inbox"),
        ("category", "billing"),
        ("delay", "0"),
        ("fallback_locale", "en"),
        ("loc0_tag", "en"),
        ("loc0_subject", "Invoice due"),
        ("loc0_text", "Pay it"),
        ("sw_day_tue", "1"),
        ("sw_day_thu", "1"),
        ("sw_from", "08:00"),
        ("sw_until", "17:30"),
        ("throttle_limit", "5"),
        ("throttle_per", "3600"),
        ("throttle_scope", "category"),
        ("esc_after", "600"),
        ("esc_unless", "seen"),
        ("esc_channel", "email"),
        ("esc_fallback_locale", "en"),
        ("esc0_tag", "en"),
        ("esc0_subject", "Unread invoice"),
        ("esc0_text", "See the app"),
        ("display_name", "Billing"),
        ("description", "Invoices and receipts"),
        ("action", "save"),
    ]
}

fn with(
    form: &[(&'static str, &'static str)],
    changes: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<_> = form.iter().filter(|(k, _)| !changes.iter().any(|(c, _)| c == k)).cloned().collect();
    out.extend(changes.iter().filter(|(_, v)| !v.is_empty()));
    out
}

/// The editor edits every workflow field, refuses a bad value
/// with the API's check naming the field (and saves nothing), and a save
/// replaces the fields (an emptied group removes its field).
async fn the_rule_editor_edits_every_workflow_field_with_the_apis_checks(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    // A blank editor has every workflow group, escalation's template too.
    let blank = ui.get("/ui/rules/new", Some(&s.cookie)).await;
    for field in [
        "name=\"sw_from\"",
        "name=\"digest_window\"",
        "name=\"throttle_limit\"",
        "name=\"esc_after\"",
        "name=\"esc0_tag\" value=\"en\"",
        "name=\"esc0_subject\"",
        "name=\"display_name\"",
    ] {
        assert!(blank.body.contains(field), "{field}: {}", blank.body);
    }
    let saved = ui.action(&s, "/ui/rules/new", &workflow_form()).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let rules = ui.store.list_rules().await.unwrap();
    assert_eq!(rules.len(), 1);
    let view = herald::planning::rule::RuleView::from(&rules[0]);
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["send_window"], serde_json::json!({"days": ["tue", "thu"], "from": "08:00", "until": "17:30"}));
    assert_eq!(json["throttle"], serde_json::json!({"limit": 5, "per": 3600, "scope": "category"}));
    assert_eq!(json["escalate"]["after"], 600);
    assert_eq!(json["escalate"]["unless"], "seen");
    assert_eq!(json["escalate"]["template"]["locales"]["en"]["subject"], "Unread invoice");
    assert_eq!(
        (json["display_name"].as_str(), json["description"].as_str()),
        (Some("Billing"), Some("Invoices and receipts"))
    );
    let id = view.id.clone();
    let path = format!("/ui/rules/{id}");

    // Each bad value: the form again (422) naming the field, nothing saved.
    for (changes, field, says) in [
        (vec![("sw_from", "9am")], "send_window.from", "is not a time of day"),
        (vec![("sw_until", "08:00")], "send_window.until", "must differ"),
        (vec![("throttle_limit", "0")], "throttle.limit", "must be 1 to 1000"),
        (vec![("throttle_per", "a day")], "throttle.per", "is not a whole number of seconds"),
        (vec![("throttle_scope", "user")], "throttle.scope", "expected rule or category"),
        (vec![("esc_after", "0")], "escalate.after", "must be 1 to"),
        (vec![("esc_channel", "pigeon")], "escalate.channel", "pigeon"),
        (vec![("esc_channel", "webhook")], "escalate.channel", "no webhook URL"),
        (vec![("trigger_type", "invoice due")], "trigger_type", "letters, digits and . _ - :"),
        (vec![("esc0_subject", "{{ oops")], "escalate.template.locales.en.subject", "line 1"),
        (vec![("digest_window", "0")], "digest.window", "must be 1 to"),
        (vec![("digest_window", "60"), ("digest_key", "payload.(")], "digest.key", ""),
    ] {
        let page = ui.action(&s, &path, &with(&workflow_form(), &changes)).await;
        assert_eq!(page.status, 422, "{changes:?}: {}", page.body);
        assert!(page.body.contains(&format!("<code>{field}</code>")), "{changes:?} names {field}: {}", page.body);
        assert!(page.body.contains(says), "{changes:?} says {says:?}: {}", page.body);
        assert_eq!(ui.store.list_rules().await.unwrap()[0].workflow, rules[0].workflow, "{changes:?}: nothing saved");
    }
    // Digest and escalation together: refused by the API's rule.
    let page = ui.action(&s, &path, &with(&workflow_form(), &[("digest_window", "60")])).await;
    assert_eq!(page.status, 422);
    assert!(page.body.contains("cannot be combined with digest"), "{}", page.body);
    // A preview shows the same refusal before any save.
    let preview = with(&workflow_form(), &[("sw_from", "25:00"), ("action", "preview")]);
    let page = ui.action(&s, &path, &preview).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<code>send_window.from</code>"), "{}", page.body);

    // A save replaces: no day ticked is every day, an emptied group goes,
    // escalation swapped for a digest.
    let changed = with(
        &workflow_form(),
        &[
            ("sw_day_tue", ""),
            ("sw_day_thu", ""),
            ("throttle_limit", ""),
            ("throttle_per", ""),
            ("esc_after", ""),
            ("esc0_tag", ""),
            ("esc0_subject", ""),
            ("esc0_text", ""),
            ("digest_window", "900"),
            ("digest_key", "payload.thread"),
            ("digest_max_items", "20"),
            ("loc0_subject", "{{ digest.count }} invoices"),
            ("description", ""),
        ],
    );
    let saved = ui.action(&s, &path, &changed).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let json =
        serde_json::to_value(herald::planning::rule::RuleView::from(&ui.store.get_rule(&id).await.unwrap().unwrap()))
            .unwrap();
    assert_eq!(json["send_window"]["days"].as_array().unwrap().len(), 7, "{json}");
    assert!(
        json.get("throttle").is_none() && json.get("escalate").is_none() && json.get("description").is_none(),
        "{json}"
    );
    assert_eq!(json["digest"], serde_json::json!({"window": 900, "key": "payload.thread", "max_items": 20}));
    assert_eq!(json["display_name"], "Billing");
    // The editor shows what was saved: every day shown as no day ticked.
    let page = ui.get(&path, Some(&s.cookie)).await;
    assert!(page.body.contains("name=\"digest_key\" value=\"payload.thread\""), "{}", page.body);
    assert!(!page.body.contains("value=\"1\" checked"), "{}", page.body);
    assert_eq!(ui.audit_actions().await, ["login", "rule.create", "rule.update"]);
    ui.stop().await;
}

/// The dry run says, per recent trigger, what the send window
/// (until when, in which zone), the digest (opens or joins, due when) and
/// the cap (N of limit, or capped) would do; on the screen and in the API.
async fn the_dry_run_says_what_the_window_digest_and_cap_would_do(db: &TestDb) {
    use herald::store::{NewTrigger, TriggerStore};
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let at = |t: &str| herald::clock::Millis(chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis());
    let mut windowed = disabled_rule("report");
    windowed.workflow = Some(serde_json::json!({
        "send_window": {"days": ["mon","tue","wed","thu","fri"], "from": "09:00", "until": "18:00"},
        "throttle": {"limit": 1, "per": 86400, "scope": "rule"},
    }));
    ui.store.insert_rule(&windowed).await.unwrap();
    let mut digest = disabled_rule("comment");
    digest.workflow = Some(serde_json::json!({"digest": {"window": 3600}}));
    ui.store.insert_rule(&digest).await.unwrap();
    let berlin: herald::planning::recipient::RecipientInput =
        serde_json::from_value(serde_json::json!({"timezone": "Europe/Berlin"})).unwrap();
    ui.store.put_recipient(&berlin.into_row(&common::user("u1"), T0).unwrap()).await.unwrap();
    for (kind, t) in [
        ("report", "2026-03-04T20:00:00Z"),
        ("report", "2026-03-05T08:30:00Z"),
        ("comment", "2026-03-04T10:00:00Z"),
        ("comment", "2026-03-04T10:20:00Z"),
    ] {
        let trigger = NewTrigger {
            id: new_id(),
            trigger_type: kind.into(),
            user_id: common::user("u1"),
            payload: serde_json::json!({}),
            idempotency_key: None,
            request_hash: None,
            occurred_at: at(t),
            send_at: None,
            actor_id: None,
        };
        ui.store.insert_trigger(&trigger, at(t)).await.unwrap();
    }
    let mut page = ui.get(&format!("/ui/rules/{}/enable", windowed.id), Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    page.body = page.body.replace("&#x2f;", "/").replace("&#x27;", "'");
    assert!(page.body.contains("held by the rule's send window (mon,tue,wed,thu,fri 09:00–18:00, Europe/Berlin) until 2026-03-05T08:00:00.000Z"), "{}", page.body);
    assert!(page.body.contains("Thu 2026-03-05 09:00 in Europe/Berlin"), "{}", page.body);
    assert!(page.body.contains("1 of 1 used (cap 1 per day)"), "{}", page.body);
    assert!(page.body.contains("would be capped: 1 already sent to u1"), "{}", page.body);
    let page = ui.get(&format!("/ui/rules/{}/enable", digest.id), Some(&s.cookie)).await;
    assert!(page.body.contains("would open a new digest, due 2026-03-04T11:00:00.000Z"), "{}", page.body);
    assert!(page.body.contains("would join the digest opened by trigger"), "{}", page.body);
    // The API's preview says the same.
    let resp =
        ui.send(ui.http.get(format!("{}/v1/rules/{}/preview", ui.base, windowed.id)).bearer_auth(&ui.api_key)).await;
    let preview: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
    let results = preview["results"].as_array().unwrap();
    assert!(
        results.iter().any(|r| r["window"].as_str().is_some_and(|w| w.contains("until 2026-03-05T08:00:00.000Z"))),
        "{preview}"
    );
    assert!(results.iter().any(|r| r["cap"].as_str().is_some_and(|c| c.starts_with("would be capped"))), "{preview}");
    // The editor shows it for the rule as typed.
    let page = ui.get(&format!("/ui/rules/{}", windowed.id), Some(&s.cookie)).await;
    assert!(page.body.contains("What the workflows would do"), "{}", page.body);
    assert!(page.body.contains("would be capped"), "{}", page.body);
    ui.stop().await;
}

/// An operator changes a user's preferences from the send-log
/// page; it is the user's choice from then on, and the audit trail (on the
/// same page) names the operator.
async fn an_operator_changes_a_users_preferences_and_the_audit_names_them(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let mut news = disabled_rule("news");
    news.category = "news".into();
    news.enabled = true;
    ui.store.insert_rule(&news).await.unwrap();
    // A box is named ["news","inbox"] (http::preference_form), HTML-escaped.
    let news_inbox = r#"["news","inbox"]"#;
    let shown = "[&quot;news&quot;,&quot;inbox&quot;]";
    let page = ui.get("/ui/sends?q=u1", Some(&s.cookie)).await;
    assert!(page.body.contains("Change their preferences"), "{}", page.body);
    assert!(page.body.contains(&format!("value=\"{shown}\" checked")), "{}", page.body);
    // Drawn ticked (`was`), sent unticked: turned off.
    let resp =
        ui.action(&s, "/ui/sends/preferences", &[("user", "u1"), ("shown", news_inbox), ("was", news_inbox)]).await;
    assert_eq!((resp.status, resp.location.as_deref()), (303, Some("/ui/sends?q=u1")), "{}", resp.body);
    let recipient = ui.store.get_recipient(&common::user("u1")).await.unwrap().unwrap();
    assert_eq!(recipient.user_choices.get("news").and_then(|c| c.get("inbox")), Some(&false));
    let flash = cookie_pair(&resp.set_cookies, "herald_flash").unwrap_or_default();
    let page = ui.get("/ui/sends?q=u1", Some(&format!("{}; {flash}", s.cookie))).await;
    assert!(page.body.contains(&format!("value=\"{shown}\">")), "now off: {}", page.body);
    assert!(page.body.contains("decided by user"), "{}", page.body);
    let who = format!("by operator {} (operator screen): news by inbox: off", ui.email);
    assert!(page.body.contains(&who), "{who}: {}", page.body);
    // The same again changes nothing and writes no second audit row.
    ui.action(&s, "/ui/sends/preferences", &[("user", "u1"), ("shown", news_inbox), ("was", news_inbox)]).await;
    assert_eq!(ui.store.audit_for_target("user:u1", 10).await.unwrap().len(), 1);
    // What the user cannot choose is refused and changes nothing.
    let bad = ui
        .action(
            &s,
            "/ui/sends/preferences",
            &[("user", "u1"), ("shown", r#"["gossip","inbox"]"#), ("was", r#"["gossip","inbox"]"#)],
        )
        .await;
    assert_eq!(bad.status, 303);
    assert_eq!(ui.store.audit_for_target("user:u1", 10).await.unwrap().len(), 1);
    // Without the CSRF token: refused.
    let forged = ui
        .post("/ui/sends/preferences", Some(&s.cookie), &[("user", "u1"), ("shown", news_inbox), ("on", news_inbox)])
        .await;
    assert_eq!(forged.status, 403);
    let recipient = ui.store.get_recipient(&common::user("u1")).await.unwrap().unwrap();
    assert_eq!(recipient.user_choices.get("news").and_then(|c| c.get("inbox")), Some(&false));
    ui.stop().await;
}

/// Rules made and switched, rows retried and cancelled and
/// suppressions added and lifted through `/v1` are in the audit log, with
/// the key's name as who; the server's root leads to the screen.
async fn changes_through_the_api_are_audited_with_the_keys_name(db: &TestDb) {
    let ui = Ui::start(db).await;
    let api = |method, path: &str, body| ui.api(method, path, body);
    let root = ui.send(api(reqwest::Method::GET, "/", None)).await;
    assert_eq!((root.status, root.location.as_deref()), (303, Some("/ui")));
    let rule = serde_json::json!({
        "name": "By the API", "trigger_type": "api.thing", "channel": "inbox", "category": "c",
        "template": { "fallback_locale": "en", "locales": { "en": { "subject": "s", "text": "t" } } },
    });
    let created = ui.send(api(reqwest::Method::POST, "/v1/rules", Some(rule))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"].as_str().unwrap().to_owned();
    let on = serde_json::json!({"enabled": true});
    assert_eq!(ui.send(api(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(on))).await.status, 200);
    let rename = serde_json::json!({"name": "Renamed"});
    assert_eq!(ui.send(api(reqwest::Method::PATCH, &format!("/v1/rules/{id}"), Some(rename))).await.status, 200);
    let add = serde_json::json!({"email": "bob@example.com"});
    assert_eq!(ui.send(api(reqwest::Method::POST, "/v1/suppressions", Some(add))).await.status, 201);
    let lift = ui.send(api(reqwest::Method::DELETE, "/v1/suppressions?email=bob@example.com&reason=asked", None)).await;
    assert_eq!(lift.status, 200, "{}", lift.body);
    let rows = [row("u1", "inbox", T0)];
    ui.store.enqueue(&rows, T0).await.unwrap();
    let path = format!("/v1/outbox/{}/cancel", rows[0].id);
    assert_eq!(ui.send(api(reqwest::Method::POST, &path, None)).await.status, 200);
    let path = format!("/v1/outbox/{}/retry", rows[0].id);
    assert_eq!(ui.send(api(reqwest::Method::POST, &path, None)).await.status, 200);
    assert_eq!(ui.send(api(reqwest::Method::DELETE, &format!("/v1/rules/{id}"), None)).await.status, 200);
    let audit: Vec<(String, String)> = {
        let mut rows = ui.store.audit_log(None, 100).await.unwrap();
        rows.reverse();
        rows.into_iter().map(|r| (r.operator_email, r.action)).collect()
    };
    let who = "api key \"tests\"".to_owned();
    let expected: Vec<(String, String)> = [
        "rule.create",
        "rule.enable",
        "rule.update",
        "suppression.add",
        "suppression.lift",
        "outbox.cancel",
        "outbox.retry",
        "rule.delete",
    ]
    .iter()
    .map(|a| (who.clone(), (*a).to_owned()))
    .collect();
    assert_eq!(audit, expected);
    ui.stop().await;
}

/// "retry all matching" schedules every failed row the filter
/// shows again in one statement (and only those), and a rule is deleted from
/// the screen after a confirmation that says what it cancels.
async fn failed_rows_are_retried_in_bulk_with_the_filter_and_a_rule_is_deleted(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    // Three failed rows for u1, one for u2, one sent.
    let rows: Vec<_> = ["u1", "u1", "u1", "u2", "u3"].iter().map(|u| row(u, "inbox", T0)).collect();
    ui.store.enqueue(&rows, T0).await.unwrap();
    let claimed = ui.store.claim_channel("inbox", T0, 10, "tok").await.unwrap();
    for c in &claimed {
        let status =
            if c.user_id == "u3" { herald::domain::SendStatus::Sent } else { herald::domain::SendStatus::Failed };
        let finish = herald::store::Finish {
            status,
            detail: Some("relay said no".into()),
            transport: None,
            address_hash: None,
            provider_id: None,
        };
        ui.store.finish(c, "tok", &finish, T0).await.unwrap();
    }
    let page = ui.get("/ui/outbox?status=failed&user=u1", Some(&s.cookie)).await;
    assert!(page.body.contains("Retry all failed rows matching this filter"), "{}", page.body);
    let r = ui.action(&s, "/ui/outbox/retry", &[("status", "failed"), ("rule", ""), ("user", "u1")]).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/outbox?status=failed&rule=&user=u1")));
    let status_of = |id: String| {
        let store = ui.store.clone();
        async move { store.get_outbox(&id).await.unwrap().unwrap().status.as_str().to_owned() }
    };
    for (i, expected) in ["scheduled", "scheduled", "scheduled", "failed", "sent"].iter().enumerate() {
        assert_eq!(status_of(rows[i].id.clone()).await, *expected, "row {i}");
    }
    // A sent row is never retried in bulk, whatever the form says.
    let r = ui.action(&s, "/ui/outbox/retry", &[("status", "sent"), ("rule", ""), ("user", "")]).await;
    assert_eq!(r.status, 303);
    assert_eq!(status_of(rows[4].id.clone()).await, "sent");

    // Deleting a rule: the confirmation counts what it cancels, then it goes.
    let rule = disabled_rule("export.ready");
    ui.store.insert_rule(&rule).await.unwrap();
    let mut planned = row("u9", "inbox", T0.plus(std::time::Duration::from_secs(3600)));
    planned.rule_id = Some(rule.id.clone());
    ui.store.enqueue(std::slice::from_ref(&planned), T0).await.unwrap();
    let confirm = ui.get(&format!("/ui/rules/{}/delete", rule.id), Some(&s.cookie)).await;
    assert!(confirm.body.contains("<strong>1</strong> message(s) scheduled"), "{}", confirm.body);
    let r = ui.action(&s, &format!("/ui/rules/{}/delete", rule.id), &[]).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/rules")));
    assert!(ui.store.get_rule(&rule.id).await.unwrap().is_none());
    assert_eq!(status_of(planned.id.clone()).await, "cancelled");
    let actions = ui.audit_actions().await;
    assert_eq!(actions, ["login", "outbox.retry_many", "rule.delete"], "a refused bulk retry is not audited");
    ui.stop().await;
}

async fn pages_without_a_session_redirect_to_the_login(db: &TestDb) {
    let ui = Ui::start(db).await;
    // `/ui/` goes to the rules page, which is behind the login like every other.
    assert_eq!(ui.get("/ui/", None).await.location.as_deref(), Some("/ui/rules"));
    for path in ["/ui/rules", "/ui/outbox", "/ui/sends?q=u1", "/ui/suppressions", "/ui/audit"] {
        let r = ui.get(path, None).await;
        // ... and comes back to the page after the login.
        let back = format!(
            "/ui/login?{}",
            url::form_urlencoded::Serializer::new(String::new()).append_pair("next", path).finish()
        );
        assert_eq!((r.status, r.location.as_deref()), (303, Some(back.as_str())), "{path}");
    }
    let r = ui.get("/ui", None).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/login")), "/ui itself has nowhere to come back to");
    let r = ui.post("/ui/rules/x/disable", None, &[]).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/login")));
    let resp = ui.http.get(format!("{}/ui/login", ui.base)).send().await.unwrap();
    let h = resp.headers();
    assert!(h["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));
    assert!(h["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "same-origin");
    assert_eq!(h["cache-control"], "no-store");
    ui.stop().await;
}

async fn the_right_password_opens_a_session_kept_only_as_a_hash(db: &TestDb) {
    let ui = Ui::start(db).await;
    // The email is matched case-insensitively.
    let resp = ui.login(&ui.email.to_uppercase(), PASSWORD).await;
    assert_eq!((resp.status, resp.location.as_deref()), (303, Some("/ui/rules")));
    let set = resp.set_cookies.iter().find(|c| c.starts_with("herald_session=")).unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age=43200"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Secure"), "not Secure unless ui.secure_cookies: {set}");
    let cookie = cookie_pair(&resp.set_cookies, "herald_session").unwrap();
    let token = cookie.trim_start_matches("herald_session=");
    assert!(ui.store.session(token).await.unwrap().is_none(), "the token itself is not stored");
    let s = ui.store.session(&session_hash(token)).await.unwrap().expect("its hash is");
    assert_eq!((s.operator_email.as_str(), s.expires_at), (ui.email.as_str(), T0.plus(Duration::from_secs(43200))));
    let page = ui.get("/ui/rules", Some(&cookie)).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&ui.email));
    assert_eq!(csrf_field(&page.body), csrf_token(token));
    assert_eq!(ui.audit_actions().await, ["login"]);
    // A login that started from a page goes back to it; never to another site.
    for (next, to) in [("/ui/outbox?status=failed", "/ui/outbox?status=failed"), ("//evil.example/", "/ui/rules")] {
        let (cookie, csrf) = ui.login_form().await;
        let form = [("email", ui.email.as_str()), ("password", PASSWORD), ("csrf", &csrf), ("next", next)];
        let r = ui.post("/ui/login", Some(&cookie), &form).await;
        assert_eq!((r.status, r.location.as_deref()), (303, Some(to)));
    }
    ui.stop().await;

    // Behind https: Secure.
    let ui = Ui::start_with(db, |c| c.ui.secure_cookies = true).await;
    let resp = ui.login(&ui.email, PASSWORD).await;
    assert!(resp.set_cookies.iter().any(|c| c.starts_with("herald_session=") && c.contains("Secure")));
    ui.stop().await;
}

async fn a_wrong_password_and_an_unknown_email_are_refused_alike_and_logged(db: &TestDb) {
    let ui = Ui::start(db).await;
    let unknown = format!("nobody-{}@example.com", new_id());
    for (email, password) in [(ui.email.as_str(), "not the password"), (unknown.as_str(), PASSWORD)] {
        let r = ui.login(email, password).await;
        assert_eq!(r.status, 401);
        assert!(r.body.contains("Wrong email or password."), "{}", r.body);
        assert!(cookie_pair(&r.set_cookies, "herald_session").is_none());
    }
    // Which problem it was is in the log and the attempts table, not on the page.
    let lines = logged(&ui.email);
    assert!(lines.iter().any(|l| l.contains("operator login refused") && l.contains("wrong_password")), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains("not the password")), "the password is never logged");
    let lines = logged(&unknown);
    assert!(lines.iter().any(|l| l.contains("operator login refused") && l.contains("unknown_email")), "{lines:?}");
    let outcomes: Vec<String> =
        ui.store.recent_login_attempts(10).await.unwrap().into_iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["unknown_email", "wrong_password"]);
    // A login form sent without its CSRF field (or from another page) is refused too.
    let r = ui.post("/ui/login", None, &[("email", &ui.email), ("password", PASSWORD)]).await;
    assert_eq!(r.status, 403);
    assert!(cookie_pair(&r.set_cookies, "herald_session").is_none());
    ui.stop().await;
}

async fn an_expired_session_is_refused_with_a_message_and_logged(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    ui.clock.advance(Duration::from_secs(12 * 3600 - 1));
    assert_eq!(ui.get("/ui/outbox", Some(&s.cookie)).await.status, 200, "still valid a second before");
    ui.clock.advance(Duration::from_secs(1));
    let r = ui.get("/ui/outbox", Some(&s.cookie)).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/login?m=expired&next=%2Fui%2Foutbox")));
    assert!(r.set_cookies.iter().any(|c| c.starts_with("herald_session=;") && c.contains("Max-Age=0")));
    let page = ui.get("/ui/login?m=expired", None).await;
    assert!(page.body.contains("Your session expired, log in again."), "{}", page.body);
    assert!(logged(&ui.email).iter().any(|l| l.contains("refused an expired session")));
    let token = s.cookie.trim_start_matches("herald_session=");
    assert!(ui.store.session(&session_hash(token)).await.unwrap().is_none(), "deleted once seen expired");
    ui.stop().await;
}

async fn a_forged_cookie_is_refused_with_a_message_and_logged(db: &TestDb) {
    let ui = Ui::start(db).await;
    let forged = format!("herald_session=forged-{}", new_id());
    let r = ui.get("/ui/rules", Some(&forged)).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/login?m=unknown&next=%2Fui%2Frules")));
    let page = ui.get("/ui/login?m=unknown", None).await;
    assert!(page.body.contains("Your session was not recognised"), "{}", page.body);
    assert!(!logged("matches no session").is_empty());
    ui.stop().await;
}

async fn forms_without_their_csrf_token_are_refused_and_change_nothing(db: &TestDb) {
    let ui = Ui::start(db).await;
    let rule = disabled_rule("export.ready");
    ui.store.insert_rule(&rule).await.unwrap();
    let s = ui.session().await;
    let path = format!("/ui/rules/{}/enable", rule.id);
    let missing = ui.post(&path, Some(&s.cookie), &[]).await;
    let wrong = ui.post(&path, Some(&s.cookie), &[("csrf", &"0".repeat(64))]).await;
    // Another session's token is no good either.
    let other = ui.session().await;
    let borrowed = ui.post(&path, Some(&s.cookie), &[("csrf", &other.csrf)]).await;
    for r in [&missing, &wrong, &borrowed] {
        assert_eq!(r.status, 403);
        assert!(r.body.contains("security (CSRF) token"), "{}", r.body);
    }
    assert!(!ui.store.get_rule(&rule.id).await.unwrap().unwrap().enabled, "nothing changed");
    assert!(!ui.audit_actions().await.contains(&"rule.enable".to_owned()));
    assert!(logged(&ui.email).iter().any(|l| l.contains("refused a form without its CSRF token")));
    let ok = ui.action(&s, &path, &[]).await;
    assert_eq!((ok.status, ok.location.as_deref()), (303, Some("/ui/rules")));
    assert!(ui.store.get_rule(&rule.id).await.unwrap().unwrap().enabled);
    ui.stop().await;
}

async fn failed_logins_are_rate_limited_until_the_window_passes(db: &TestDb) {
    let ui = Ui::start(db).await;
    for _ in 0..5 {
        assert_eq!(ui.login(&ui.email, "wrong guess").await.status, 401);
        ui.clock.advance(Duration::from_secs(60));
    }
    // The right password no longer helps, until 15 minutes after the first failure.
    let r = ui.login(&ui.email, PASSWORD).await;
    assert_eq!(r.status, 429);
    assert!(r.body.contains("Too many attempts, try again in 10 minutes."), "{}", r.body);
    assert!(logged(&ui.email).iter().any(|l| l.contains("too many failed attempts")));
    let outcomes: Vec<String> =
        ui.store.recent_login_attempts(1).await.unwrap().into_iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["rate_limited"]);
    ui.clock.advance(Duration::from_secs(10 * 60));
    assert_eq!(ui.login(&ui.email, PASSWORD).await.status, 303);
    ui.stop().await;

    // Per client address too: many emails from one address.
    let ui = Ui::start_with(db, |c| c.ui.login_max_failures_per_ip = 3).await;
    ui.clock.advance(Duration::from_secs(3600)); // past the first part's failures
    for i in 0..3 {
        assert_eq!(ui.login(&format!("guess{i}@example.com"), "x").await.status, 401);
    }
    assert_eq!(ui.login(&ui.email, PASSWORD).await.status, 429);
    ui.stop().await;
}

async fn logout_ends_the_session_on_the_server(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let r = ui.action(&s, "/ui/logout", &[]).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/login?m=out")));
    let token = s.cookie.trim_start_matches("herald_session=");
    assert!(ui.store.session(&session_hash(token)).await.unwrap().is_none());
    // A copy of the cookie kept elsewhere opens nothing.
    let r = ui.get("/ui/rules", Some(&s.cookie)).await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/ui/login?m=unknown&next=%2Fui%2Frules")));
    assert_eq!(ui.audit_actions().await, ["login", "logout"]);
    ui.stop().await;
}

async fn every_operator_action_writes_an_audit_row(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let r = ui
        .action(
            &s,
            "/ui/rules/new",
            &[
                ("action", "save"),
                ("name", "Export ready"),
                ("trigger_type", "export.ready"),
                ("channel", "inbox"),
                ("category", "exports"),
                ("delay", "0"),
                ("fallback_locale", "en"),
                ("loc0_tag", "en"),
                ("loc0_subject", "Export {{ payload.name }} ready"),
                ("loc0_text", "Hi"),
                ("loc0_html", ""),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rules = ui.store.list_rules().await.unwrap();
    assert_eq!(rules.len(), 1);
    assert!(!rules[0].enabled, "created off");
    let id = rules[0].id.clone();
    assert_eq!(ui.action(&s, &format!("/ui/rules/{id}/enable"), &[]).await.status, 303);
    assert_eq!(ui.action(&s, &format!("/ui/rules/{id}/disable"), &[]).await.status, 303);
    let r = ui.action(&s, "/ui/suppressions", &[("email", "ada@example.com"), ("category", "*")]).await;
    assert_eq!(r.status, 303);
    let hash = r.location.unwrap().trim_start_matches("/ui/suppressions/").to_owned();
    let lift = [("address_hash", hash.as_str()), ("category", "*"), ("reason", "asked by support")];
    assert_eq!(ui.action(&s, "/ui/suppressions/lift", &lift).await.status, 303);
    let rows = [row("u1", "inbox", T0), row("u1", "inbox", T0)];
    ui.store.enqueue(&rows, T0).await.unwrap();
    assert_eq!(ui.action(&s, &format!("/ui/outbox/{}/cancel", rows[0].id), &[]).await.status, 303);
    assert_eq!(ui.action(&s, &format!("/ui/outbox/{}/retry", rows[0].id), &[]).await.status, 303);
    assert_eq!(ui.store.get_outbox(&rows[0].id).await.unwrap().unwrap().status.as_str(), "scheduled");
    // The cancellation names the operator in the send log.
    let log = ui.store.sends_for_outbox(&rows[0].id).await.unwrap();
    assert_eq!(log[0].detail.as_deref(), Some(format!("cancelled from the operator screen by {}", ui.email).as_str()));
    // A refused action says why and is not audited.
    let sent = row("u2", "inbox", T0);
    ui.store.enqueue(std::slice::from_ref(&sent), T0).await.unwrap();
    let claimed = ui.store.claim_channel("inbox", T0, 10, "tok").await.unwrap();
    let done = herald::store::Finish {
        status: herald::domain::SendStatus::Sent,
        detail: None,
        transport: None,
        address_hash: None,
        provider_id: None,
    };
    for c in &claimed {
        ui.store.finish(c, "tok", &done, T0).await.unwrap();
    }
    let r = ui.action(&s, &format!("/ui/outbox/{}/retry", sent.id), &[]).await;
    let flash = cookie_pair(&r.set_cookies, "herald_flash").unwrap();
    let flash = base64::Engine::decode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        flash.trim_start_matches("herald_flash="),
    )
    .unwrap();
    let flash = String::from_utf8(flash).unwrap();
    assert!(flash.starts_with("Not retried: ") && flash.contains("would deliver it twice"), "{flash}");
    ui.action(&s, "/ui/logout", &[]).await;
    assert_eq!(
        ui.audit_actions().await,
        [
            "login",
            "rule.create",
            "rule.enable",
            "rule.disable",
            "suppression.add",
            "suppression.lift",
            "outbox.cancel",
            "outbox.retry",
            "logout"
        ]
    );
    let audit = ui.store.audit_log(None, 100).await.unwrap();
    assert!(audit.iter().all(|a| a.operator_email == ui.email));
    assert!(audit.iter().any(|a| a.action == "rule.enable" && a.target == id));
    // The audit page shows them, newest first.
    let s2 = ui.session().await;
    let page = ui.get("/ui/audit", Some(&s2.cookie)).await;
    let (newest, oldest) =
        (page.body.find("<code>logout</code>").unwrap(), page.body.find("<code>rule.create</code>").unwrap());
    assert!(newest < oldest, "newest first");
    ui.stop().await;
}

async fn a_lift_keeps_its_reason_and_who_lifted(db: &TestDb) {
    let ui = Ui::start(db).await;
    let keys = herald::address::AddressKeys::from_secret(b"a test secret of sufficient length");
    let hash = keys.hash("bounced@example.com").unwrap();
    let suppression = |category: &str| SuppressionRow {
        address_hash: hash.clone(),
        address_kind: herald::address::AddressKind::Email,
        category: category.into(),
        reason: SuppressionReason::HardBounce,
        detail: Some("550 5.1.1".into()),
        created_at: T0,
        expires_at: None,
    };
    ui.store.suppress(&suppression("*")).await.unwrap();
    ui.store.suppress(&suppression("news")).await.unwrap();
    let s = ui.session().await;
    // The screen insists on a reason.
    let r =
        ui.action(&s, "/ui/suppressions/lift", &[("address_hash", &hash), ("category", "*"), ("reason", " ")]).await;
    assert_eq!(r.status, 303);
    assert_eq!(ui.store.list_suppressions(Some(&hash), 10).await.unwrap().len(), 2, "not lifted without a reason");
    let form = [("address_hash", hash.as_str()), ("category", "*"), ("reason", "mailbox fixed, confirmed by phone")];
    ui.action(&s, "/ui/suppressions/lift", &form).await;
    let lifts = ui.store.suppression_lifts(Some(&hash), 10).await.unwrap();
    assert_eq!(lifts.len(), 1);
    assert_eq!(lifts[0].reason.as_deref(), Some("mailbox fixed, confirmed by phone"));
    assert_eq!((lifts[0].lifted_by.as_str(), lifts[0].category.as_str()), (ui.email.as_str(), "*"));
    let audit = ui.store.audit_log(None, 10).await.unwrap();
    assert!(audit[0].detail.as_deref().unwrap().contains("mailbox fixed"), "{:?}", audit[0]);
    // The evidence page shows it.
    let page = ui.get(&format!("/ui/suppressions/{hash}"), Some(&s.cookie)).await;
    assert!(page.body.contains("mailbox fixed, confirmed by phone"));
    // The v1 API takes an optional reason, and records the key's name.
    let resp = ui
        .http
        .delete(format!("{}/v1/suppressions?email=bounced@example.com&category=news&reason=ticket%2042", ui.base))
        .bearer_auth(&ui.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let lifts = ui.store.suppression_lifts(Some(&hash), 10).await.unwrap();
    assert_eq!((lifts[0].reason.as_deref(), lifts[0].lifted_by.as_str()), (Some("ticket 42"), "api key \"tests\""));
    let events = ui.store.events_after(0, 100).await.unwrap();
    let lifted: Vec<_> = events.iter().filter(|e| e.kind == "suppression_lifted").collect();
    assert_eq!(lifted.len(), 2);
    assert_eq!(lifted[1].data["reason"], "ticket 42");
    ui.stop().await;
}

async fn the_rule_editor_shows_template_errors_with_line_and_column(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let mut form = vec![
        ("name", "Broken"),
        ("trigger_type", "export.ready"),
        ("channel", "inbox"),
        ("category", "exports"),
        ("fallback_locale", "en"),
        ("loc0_tag", "en"),
        ("loc0_subject", "Hello {{ user.id }}"),
        ("loc0_text", "line one\nline {{ two"),
        ("sample_payload", "{\"name\": \"q4\"}"),
    ];
    form.push(("action", "preview"));
    let page = ui.action(&s, "/ui/rules/new", &form).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("template.locales.en.text"), "{}", page.body);
    assert!(page.body.contains("line 2, column"), "{}", page.body);
    form.pop();
    form.push(("action", "save"));
    let page = ui.action(&s, "/ui/rules/new", &form).await;
    assert_eq!(page.status, 422);
    assert!(page.body.contains("line 2, column"));
    assert!(ui.store.list_rules().await.unwrap().is_empty(), "nothing saved");
    // Fixed, the preview renders the sample.
    form[7] = ("loc0_text", "Export {{ payload.name }} is ready");
    form.pop();
    form.push(("action", "preview"));
    let page = ui.action(&s, "/ui/rules/new", &form).await;
    assert!(page.body.contains("Export q4 is ready"), "{}", page.body);
    // Markup in a payload is escaped on the page, never interpreted.
    form[8] = ("sample_payload", "{\"name\": \"<script>alert(1)</script>\"}");
    let page = ui.action(&s, "/ui/rules/new", &form).await;
    assert!(!page.body.contains("<script>alert(1)"), "{}", page.body);
    assert!(page.body.contains("&lt;script&gt;"));
    // A field the sample lacks is a preview note, not a reason to refuse the save.
    form[8] = ("sample_payload", "{}");
    form.pop();
    form.push(("action", "save"));
    let saved = ui.action(&s, "/ui/rules/new", &form).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let page = ui.get(saved.location.as_deref().unwrap(), Some(&s.cookie)).await;
    assert!(!page.body.contains("cannot be saved"), "{}", page.body);
    assert!(page.body.contains("does not render with this sample"), "{}", page.body);
    assert!(page.body.contains("`payload.name` is undefined"), "{}", page.body);
    ui.stop().await;
}

/// The editor's fields of a push rule, as its page posts them.
/// The editor shows each channel's own fields (a text message's text only,
/// Slack's text and blocks) and a save keeps them: a Slack rule saved from
/// the screen keeps its blocks and its channel, and a push follow-up typed
/// without its delay is refused naming the delay.
async fn the_rule_editor_keeps_each_channels_fields(db: &TestDb) {
    let ui = Ui::start_with(db, |c| c.slack.bot_token = Some("xoxb-1-2".into())).await;
    let s = ui.session().await;
    let blocks = r#"[{"type": "section", "text": {"type": "mrkdwn", "text": "{{ payload.name }}"}}]"#;
    let rule = serde_json::json!({
        "name": "Deploys", "trigger_type": "deploy.done", "channel": "slack", "category": "ops",
        "slack": {"channel": "C024BE91L"},
        "template": {"fallback_locale": "en", "locales": {"en": {
            "text": "Deploy {{ payload.name }}", "blocks": serde_json::from_str::<serde_json::Value>(blocks).unwrap()
        }}}
    });
    let created = ui.send(ui.api(reqwest::Method::POST, "/v1/rules", Some(rule))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"].as_str().unwrap().to_owned();
    let page = ui.get(&format!("/ui/rules/{id}"), Some(&s.cookie)).await;
    assert!(page.body.contains("name=\"loc0_text\"") && page.body.contains("name=\"loc0_blocks\""), "{}", page.body);
    assert!(!page.body.contains("name=\"loc0_subject\""), "no subject on a Slack rule: {}", page.body);

    let form = [
        ("name", "Deploys"),
        ("trigger_type", "deploy.done"),
        ("channel", "slack"),
        ("category", "ops"),
        ("delay", "0"),
        ("fallback_locale", "en"),
        ("loc0_tag", "en"),
        ("loc0_text", "Deploy {{ payload.name }} done"),
        ("loc0_blocks", blocks),
        ("action", "save"),
    ];
    let saved = ui.action(&s, &format!("/ui/rules/{id}"), &form).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let stored = ui.store.list_rules().await.unwrap().pop().unwrap();
    assert_eq!(
        stored.template["locales"]["en"],
        serde_json::json!({"text": "Deploy {{ payload.name }} done",
            "blocks": serde_json::from_str::<serde_json::Value>(blocks).unwrap()})
    );
    assert_eq!(stored.workflow.as_ref().unwrap()["slack"], serde_json::json!({"channel": "C024BE91L"}));

    // A text message's block has its text only.
    let sms = ui.action(&s, "/ui/rules/new", &with(&form, &[("channel", "sms"), ("action", "preview")])).await;
    assert!(sms.body.contains("name=\"loc0_text\""), "{}", sms.body);
    for other in ["loc0_subject", "loc0_html", "loc0_blocks"] {
        assert!(!sms.body.contains(&format!("name=\"{other}\"")), "{other}: {}", sms.body);
    }
    // Measured with the sample, and said so.
    let long = "{{ payload.name }} ".repeat(3) + &"a".repeat(480);
    let long: &'static str = Box::leak(long.into_boxed_str());
    let sample =
        [("channel", "sms"), ("action", "preview"), ("loc0_text", long), ("sample_payload", "{\"name\": \"x\"}")];
    let over = ui.action(&s, "/ui/rules/new", &with(&form, &sample)).await;
    assert!(over.body.contains("set by sms.max_segments; with the sample"), "{}", over.body);

    // A follow-up typed by push, without its delay.
    let inbox = [
        INVOICE_RULE.as_slice(),
        &[
            ("esc_channel", "push"),
            ("esc_unless", "read"),
            ("esc_fallback_locale", "en"),
            ("esc0_tag", "en"),
            ("esc0_title", "You have an unread invoice"),
            ("action", "save"),
        ],
    ]
    .concat();
    let refused = ui.action(&s, "/ui/rules/new", &inbox).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("required for escalation (seconds)"), "{}", refused.body);
}

/// The rule editor's fields for an inbox rule "Invoice" on `invoice.due`,
/// before its escalation fields.
const INVOICE_RULE: [(&str, &str); 9] = [
    ("name", "Invoice"),
    ("trigger_type", "invoice.due"),
    ("channel", "inbox"),
    ("category", "billing"),
    ("delay", "0"),
    ("fallback_locale", "en"),
    ("loc0_tag", "en"),
    ("loc0_subject", "Invoice due"),
    ("loc0_text", "t"),
];

/// A hidden field's value on `html`, unescaped as a browser reads it.
fn hidden_value(html: &str, name: &str) -> String {
    let start = format!("name=\"{name}\" value=\"");
    let from = html.find(&start).unwrap_or_else(|| panic!("no {name} field: {html}")) + start.len();
    let raw = &html[from..from + html[from..].find('"').unwrap()];
    [("&quot;", "\""), ("&#x27;", "'"), ("&#x2f;", "/"), ("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&")]
        .iter()
        .fold(raw.to_owned(), |v, (escaped, plain)| v.replace(escaped, plain))
}

/// A chain's steps after the first are shown read-only and kept on save:
/// the first step edited from the screen, the second read back through the
/// API exactly as it was (a Slack rule once lost its blocks on a save).
async fn the_rule_editor_keeps_a_chains_later_steps_on_save(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let push_step = serde_json::json!({"after": 3600, "channel": "push", "template": {"fallback_locale": "en",
        "locales": {"en": {"title": "Still unread: \"{{ payload.name }}\"", "body": "<b>It's</b> waiting"}}}});
    let rule = serde_json::json!({
        "name": "Invoice", "trigger_type": "invoice.due", "channel": "inbox", "category": "billing",
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Invoice due", "text": "t"}}},
        "escalate": [
            {"after": 600, "unless": "read", "channel": "email", "template": {"fallback_locale": "en",
                "locales": {"en": {"subject": "Unread invoice", "text": "See the app"}}}},
            push_step,
        ]
    });
    let created = ui.send(ui.api(reqwest::Method::POST, "/v1/rules", Some(rule))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["id"].as_str().unwrap().to_owned();
    let path = format!("/ui/rules/{id}");
    let page = ui.get(&path, Some(&s.cookie)).await;
    assert!(page.body.contains("Follow-up step 2 (read-only here"), "{}", page.body);
    assert!(page.body.contains("push after 3600 seconds"), "{}", page.body);
    assert!(page.body.contains("name=\"esc_after\" value=\"600\""), "the first step is edited: {}", page.body);
    let more = hidden_value(&page.body, "esc_more");
    let more: &'static str = Box::leak(more.into_boxed_str());

    let form = [
        INVOICE_RULE.as_slice(),
        &[
            ("esc_after", "900"),
            ("esc_unless", "read"),
            ("esc_channel", "email"),
            ("esc_fallback_locale", "en"),
            ("esc0_tag", "en"),
            ("esc0_subject", "Your invoice is unread"),
            ("esc0_text", "See the app"),
            ("esc_more", more),
            ("action", "save"),
        ],
    ]
    .concat();
    // A first step not before the second is refused naming the step.
    let refused = ui.action(&s, &path, &with(&form, &[("esc_after", "3600")])).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("<code>escalate[1].after</code>"), "{}", refused.body);
    assert!(refused.body.contains("greater than escalate[0].after (3600)"), "{}", refused.body);
    // The first step's delay left out while later steps remain.
    let refused = ui.action(&s, &path, &with(&form, &[("esc_after", "")])).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("has later steps"), "{}", refused.body);

    let saved = ui.action(&s, &path, &form).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let got = ui.send(ui.api(reqwest::Method::GET, &format!("/v1/rules/{id}"), None)).await;
    let got: serde_json::Value = serde_json::from_str(&got.body).unwrap();
    let steps = got["escalate"].as_array().unwrap_or_else(|| panic!("still a chain: {got}"));
    assert_eq!(steps.len(), 2, "{got}");
    assert_eq!((&steps[0]["after"], &steps[0]["channel"]), (&serde_json::json!(900), &serde_json::json!("email")));
    assert_eq!(steps[0]["template"]["locales"]["en"]["subject"], "Your invoice is unread");
    assert_eq!(steps[1], push_step, "the second step as it was");
    ui.stop().await;
}

fn push_form() -> Vec<(&'static str, &'static str)> {
    vec![
        ("name", "Export ready"),
        ("trigger_type", "export.ready"),
        ("channel", "push"),
        ("category", "exports"),
        ("delay", "0"),
        ("fallback_locale", "en"),
        ("loc0_tag", "en"),
        ("loc0_title", "Export {{ payload.name }} is ready"),
        ("loc0_body", "{{ payload.rows }} rows"),
        ("loc0_url", "https://app.example.com/exports/{{ payload.name }}"),
        ("push_ttl", "3600"),
        ("push_urgency", "high"),
        ("sample_payload", "{\"name\": \"q4\", \"rows\": 3}"),
        ("action", "preview"),
    ]
}

/// A push rule on the screen (and an escalation by push): the channel is
/// offered, each locale has a title, body and url, the preview renders them and gives the payload's
/// size against the 4,096-byte limit, a sample over it stops the save, TTL
/// and urgency are stored as the rule's `push` options, and options set
/// through the API survive a save from the screen (which once sent
/// `push: null` and erased them).
async fn the_rule_editor_writes_a_push_rule_with_its_options_and_payload_size(db: &TestDb) {
    let (vapid_key, _) = herald::delivery::channel::push::vapid::generate_key_pair();
    let ui = Ui::start_with(db, |c| {
        c.push.vapid_private_key = Some(vapid_key);
        c.push.vapid_subject = Some("mailto:ops@example.com".into());
    })
    .await;
    let s = ui.session().await;
    let blank = ui.get("/ui/rules/new", Some(&s.cookie)).await;
    assert!(blank.body.contains("<option value=\"push\">push</option>"), "{}", blank.body);
    assert!(blank.body.contains("name=\"loc0_subject\""), "an inbox rule's fields: {}", blank.body);
    assert!(!blank.body.contains("name=\"push_ttl\""), "push options on a push rule only: {}", blank.body);

    let page = ui.action(&s, "/ui/rules/new", &push_form()).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in [
        "<option value=\"push\" selected>push</option>",
        "name=\"loc0_title\" value=\"Export {{ payload.name }} is ready\"",
        "name=\"loc0_body\"",
        "name=\"loc0_url\"",
        "name=\"push_ttl\" value=\"3600\"",
        "<option value=\"high\" selected>high</option>",
        "<p class=\"subject\">Export q4 is ready</p>",
        "<pre class=\"body\">3 rows</pre>",
        // Escaped like every value (minijinja escapes `/` too).
        "Opens <code>https:&#x2f;&#x2f;app.example.com&#x2f;exports&#x2f;q4</code>",
    ] {
        assert!(page.body.contains(shown), "{shown}: {}", page.body);
    }
    assert!(!page.body.contains("name=\"loc0_subject\""), "{}", page.body);
    // The size is the JSON the channel sends: an outbox id, the rendered
    // fields and the sample as data.
    let payload = serde_json::json!({"id": new_id(), "title": "Export q4 is ready", "body": "3 rows",
        "url": "https://app.example.com/exports/q4", "data": {"name": "q4", "rows": 3}});
    let size = serde_json::to_vec(&payload).unwrap().len();
    assert!(page.body.contains(&format!("Payload: {size} of 4096 bytes")), "{size}: {}", page.body);

    let saved = ui.action(&s, "/ui/rules/new", &with(&push_form(), &[("action", "save")])).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let rule = ui.store.list_rules().await.unwrap().pop().unwrap();
    assert_eq!(rule.channel, "push");
    assert_eq!(
        rule.template["locales"]["en"],
        serde_json::json!({"title": "Export {{ payload.name }} is ready", "body": "{{ payload.rows }} rows",
            "url": "https://app.example.com/exports/{{ payload.name }}"})
    );
    assert_eq!(rule.workflow.as_ref().unwrap()["push"], serde_json::json!({"ttl": 3600, "urgency": "high"}));
    // A message it planned shows, on its row's page, what a tap opens.
    let on = serde_json::json!({"enabled": true});
    let path = format!("/v1/rules/{}", rule.id);
    assert_eq!(ui.send(ui.api(reqwest::Method::PATCH, &path, Some(on))).await.status, 200);
    let trigger = serde_json::json!({"type": "export.ready", "user_id": "u1", "payload": {"name": "q4", "rows": 3}});
    let planned = ui.send(ui.api(reqwest::Method::POST, "/v1/triggers", Some(trigger))).await;
    let planned: serde_json::Value = serde_json::from_str(&planned.body).unwrap();
    let row = ui.get(&format!("/ui/outbox/{}", planned["planned"][0]["id"].as_str().unwrap()), Some(&s.cookie)).await;
    assert!(row.body.contains("<p class=\"subject\">Export q4 is ready</p>"), "{}", row.body);
    assert!(row.body.contains("Opens <code>https:&#x2f;&#x2f;app.example.com&#x2f;exports&#x2f;q4</code>"));

    // Options set through the API are shown, and a save from the screen
    // keeps them.
    let patch = serde_json::json!({"push": {"ttl": 60, "urgency": "very-low"}});
    assert_eq!(ui.send(ui.api(reqwest::Method::PATCH, &path, Some(patch))).await.status, 200);
    let page = ui.get(&format!("/ui/rules/{}", rule.id), Some(&s.cookie)).await;
    assert!(page.body.contains("name=\"push_ttl\" value=\"60\""), "{}", page.body);
    assert!(page.body.contains("<option value=\"very-low\" selected>"), "{}", page.body);
    let as_shown = with(&push_form(), &[("name", "Export done"), ("push_ttl", "60"), ("push_urgency", "very-low")]);
    let resaved = ui.action(&s, &format!("/ui/rules/{}", rule.id), &with(&as_shown, &[("action", "save")])).await;
    assert_eq!(resaved.status, 303, "{}", resaved.body);
    let stored = ui.store.get_rule(&rule.id).await.unwrap().unwrap();
    assert_eq!(stored.name, "Export done");
    assert_eq!(stored.workflow.as_ref().unwrap()["push"], serde_json::json!({"ttl": 60, "urgency": "very-low"}));
    // Both fields emptied: the defaults, no options stored.
    let defaults = with(&as_shown, &[("push_ttl", ""), ("push_urgency", ""), ("action", "save")]);
    assert_eq!(ui.action(&s, &format!("/ui/rules/{}", rule.id), &defaults).await.status, 303);
    let stored = ui.store.get_rule(&rule.id).await.unwrap().unwrap();
    assert!(stored.workflow.as_ref().is_none_or(|w| w.get("push").is_none()), "{:?}", stored.workflow);

    // A sample that renders over the limit: shown in the preview, and the
    // save is refused, naming the locale; nothing changes.
    let big = format!("{{\"name\": \"q4\", \"rows\": 3, \"blob\": \"{}\"}}", "x".repeat(4100));
    let over = with(&as_shown, &[("name", "Too big"), ("sample_payload", big.leak()), ("action", "save")]);
    let refused = ui.action(&s, &format!("/ui/rules/{}", rule.id), &over).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("cannot be saved"), "{}", refused.body);
    assert!(refused.body.contains("<code>template.locales.en</code> with this sample the push payload is"));
    assert!(refused.body.contains("bytes, over the 4096-byte limit"), "{}", refused.body);
    assert_eq!(ui.store.get_rule(&rule.id).await.unwrap().unwrap().name, "Export done");

    // Options that are not options, each named.
    let bad = with(&as_shown, &[("push_ttl", "soon"), ("push_urgency", "urgent"), ("action", "save")]);
    let refused = ui.action(&s, &format!("/ui/rules/{}", rule.id), &bad).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("&quot;soon&quot; is not a whole number of seconds"), "{}", refused.body);
    assert!(refused.body.contains("&quot;urgent&quot; is not an urgency"), "{}", refused.body);
    let too_long = with(&as_shown, &[("push_ttl", "9999999"), ("action", "save")]);
    let refused = ui.action(&s, &format!("/ui/rules/{}", rule.id), &too_long).await;
    assert_eq!(refused.status, 422, "the API's check: {}", refused.body);
    assert!(refused.body.contains("<code>push.ttl</code> must be 0 to 2419200 seconds"), "{}", refused.body);

    // An inbox rule switched to push: what was typed as subject and text
    // comes back as title and body, in the push shape.
    let switched = [
        ("name", "Switched"),
        ("trigger_type", "export.ready"),
        ("channel", "push"),
        ("category", "exports"),
        ("fallback_locale", "en"),
        ("loc0_tag", "en"),
        ("loc0_subject", "Hello"),
        ("loc0_text", "World"),
        ("loc0_html", "<p>World</p>"),
        ("action", "preview"),
    ];
    let page = ui.action(&s, "/ui/rules/new", &switched).await;
    assert!(page.body.contains("name=\"loc0_title\" value=\"Hello\""), "{}", page.body);
    assert!(page.body.contains(">World</textarea>"), "{}", page.body);
    assert!(!page.body.contains("cannot be saved"), "{}", page.body);

    // An inbox rule's follow-up by push has a push notification's fields.
    let by_push = with(
        &workflow_form(),
        &[("esc_channel", "push"), ("esc0_subject", ""), ("esc0_text", ""), ("esc0_title", "Unread invoice")],
    );
    let saved = ui.action(&s, "/ui/rules/new", &by_push).await;
    assert_eq!(saved.status, 303, "{}", saved.body);
    let rule = ui.store.list_rules().await.unwrap().into_iter().find(|r| r.name == "Invoices").unwrap();
    let escalate = &rule.workflow.as_ref().unwrap()["escalate"];
    assert_eq!(escalate["channel"], "push");
    assert_eq!(escalate["template"]["locales"]["en"], serde_json::json!({"title": "Unread invoice"}));
    let page = ui.get(saved.location.as_deref().unwrap(), Some(&s.cookie)).await;
    assert!(page.body.contains("name=\"esc0_title\" value=\"Unread invoice\""), "{}", page.body);
    assert!(page.body.contains("<option value=\"push\" selected>push</option>"), "{}", page.body);
    ui.stop().await;
}

/// A user's send-log page lists their push devices: kind, label, when
/// registered, the last success, and a removed one with when, by whom and
/// why; never an endpoint or a token.
async fn the_users_page_lists_their_push_devices_and_why_one_was_removed(db: &TestDb) {
    let ui = Ui::start(db).await;
    let s = ui.session().await;
    let page = ui.get("/ui/sends?q=u1&by=user", Some(&s.cookie)).await;
    assert!(page.body.contains("Push devices (0)"), "{}", page.body);
    assert!(page.body.contains("no push subscription for this user"), "{}", page.body);

    let device = |kind: &str, address: &str, label: Option<&str>| herald::store::NewPushDevice {
        kind: kind.into(),
        address: address.into(),
        p256dh: None,
        auth: None,
        label: label.map(str::to_owned),
    };
    let id = |r: herald::store::Registered| match r {
        herald::store::Registered::Created(d) => d.id,
        other => panic!("{other:?}"),
    };
    let store = &ui.store;
    let pixel = id(store
        .register_push_device("u1", &device("fcm", "fcm-secret-token", Some("Ada's Pixel")), T0)
        .await
        .unwrap());
    let phone = id(store.register_push_device("u1", &device("apns", "5f1c0ffee0", None), T0).await.unwrap());
    let later = T0.plus(Duration::from_secs(3600));
    store.mark_push_success(&[pixel], later).await.unwrap();
    let why = "APNs answered 410: Unregistered";
    assert!(store.remove_push_device("u1", &phone, "provider", why, later).await.unwrap());

    let page = ui.get("/ui/sends?q=u1&by=user", Some(&s.cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let body = &page.body;
    assert!(body.contains("Push devices (2)"), "{body}");
    let when = |t: herald::clock::Millis| {
        chrono::DateTime::from_timestamp_millis(t.0).unwrap().format("%Y-%m-%d %H:%M:%S UTC").to_string()
    };
    let pixel_row = format!(
        "<td data-label=\"Kind\">fcm</td><td data-label=\"Label\">Ada&#x27;s Pixel</td>\n    \
         <td data-label=\"Registered\">{}</td>\n    <td data-label=\"Last success\">{}</td>",
        when(T0),
        when(later)
    );
    assert!(body.contains(&pixel_row), "{pixel_row}: {body}");
    assert!(body.contains("<span class=\"st st-on\">active</span>"), "{body}");
    let removed = format!("<span class=\"st st-bounced\">removed</span> {} by provider: {why}", when(later));
    assert!(body.contains(&removed), "{removed}: {body}");
    assert!(body.contains("<td data-label=\"Last success\">never</td>"), "{body}");
    for secret in ["fcm-secret-token", "5f1c0ffee0"] {
        assert!(!body.contains(secret), "a device's token is its credential: {body}");
    }
    ui.stop().await;
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
