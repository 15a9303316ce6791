//! The `herald` binary as a user runs it, on the embedded SQLite default.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn herald(dir: &Path, args: &[&str]) -> Output {
    herald_env(dir, args, &[])
}

fn herald_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.current_dir(dir).args(args).env_remove("HERALD_DATABASE_URL").env("HERALD_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run herald")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `out` failed and that its error output says `says`.
#[track_caller]
fn assert_refused(out: &Output, says: &str) {
    assert!(!out.status.success());
    assert!(stderr(out).contains(says), "{}", stderr(out));
}

fn status_json(dir: &Path) -> serde_json::Value {
    let out = herald(dir, &["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn count(status: &serde_json::Value, name: &str) -> i64 {
    status["counts"].as_array().unwrap().iter().find(|c| c["status"] == name).unwrap()["count"].as_i64().unwrap()
}

#[test]
fn every_verb_has_help() {
    let dir = tempfile::tempdir().unwrap();
    for verb in [
        &[][..],
        &["serve"],
        &["migrate"],
        &["enqueue"],
        &["status"],
        &["sends"],
        &["preferences"],
        &["bench"],
        &["demo"],
        &["keys"],
        &["keys", "create"],
        &["operators"],
        &["operators", "add"],
        &["rules"],
        &["rules", "list"],
        &["rules", "show"],
        &["rules", "enable"],
        &["rules", "disable"],
        &["users"],
        &["users", "show"],
        &["users", "set"],
        &["push"],
        &["push", "vapid-keys"],
        &["push", "devices"],
        &["trigger"],
        &["trigger", "show"],
        &["trigger", "cancel"],
    ] {
        let mut args: Vec<&str> = verb.to_vec();
        args.push("--help");
        let out = herald(dir.path(), &args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).contains("Usage:"), "{args:?}");
    }
}

#[test]
fn enqueue_then_status_on_a_fresh_directory_creates_the_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let out =
        herald(dir.path(), &["enqueue", "--channel", "inbox", "--user-id", "u-1", "--count", "3", "--due-in", "3600"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("enqueued 3 inbox message(s) for u-1 due "), "{}", stdout(&out));
    assert!(dir.path().join("herald.db").exists(), "sqlite://herald.db in the working directory");
    let status = status_json(dir.path());
    assert_eq!(count(&status, "scheduled"), 3);
    assert!(status["oldest_due"].is_null(), "due in an hour: nothing overdue");

    let text = herald(dir.path(), &["status"]);
    assert!(stdout(&text).contains("scheduled"), "{}", stdout(&text));
    assert!(stdout(&text).contains("instances: none holds a lease"), "{}", stdout(&text));
}

/// A user who runs a verb and then copies `herald.db` (a backup, a move to
/// another machine) must get the whole database, not a file whose latest
/// writes are still in the `-wal` beside it. Each copy is read on its own,
/// in another directory, where no write-ahead log can be picked up. Before
/// the fix about one run in four left the log behind (a race in sqlx's
/// pool close), so the verbs run several times.
#[test]
fn after_each_verb_the_database_file_alone_holds_everything() {
    let dir = tempfile::tempdir().unwrap();
    let copy_and_read = || {
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::copy(dir.path().join("herald.db"), elsewhere.path().join("herald.db")).unwrap();
        status_json(elsewhere.path())
    };
    let out = herald(dir.path(), &["migrate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = copy_and_read();
    assert!(status["counts"].as_array().unwrap().iter().all(|c| c["count"] == 0), "{status}");

    for round in 1..=6 {
        let out = herald(
            dir.path(),
            &["enqueue", "--channel", "inbox", "--user-id", "u-1", "--count", "2", "--due-in", "3600"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(count(&copy_and_read(), "scheduled"), 2 * round, "after enqueue number {round}");
    }
}

#[test]
fn bad_values_are_refused_naming_the_key_and_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald_env(dir.path(), &["status"], &[("HERALD_WORKER__BATCH", "0")]);
    assert_refused(&out, "configuration key `worker.batch`: 0 is not accepted; expected 1 to 10000");

    let out = herald(dir.path(), &["enqueue", "--channel", "E mail", "--user-id", "u"]);
    assert_refused(&out, "--channel: unknown channel \"E mail\"");

    // A typo is refused, naming the channels there are, and so is a channel
    // this configuration cannot deliver on, naming the setting.
    let out = herald(dir.path(), &["enqueue", "--channel", "emial", "--user-id", "u"]);
    assert_refused(
        &out,
        "--channel: unknown channel \"emial\"; Herald's channels are email, inbox, push, slack, sms, webhook",
    );
    let out = herald(dir.path(), &["enqueue", "--channel", "webhook", "--user-id", "u"]);
    assert_refused(&out, "set webhook.signing_secret");
    assert!(!dir.path().join("herald.db").exists() || count(&status_json(dir.path()), "scheduled") == 0);

    let out = herald(dir.path(), &["--database-url", "redis://x", "status"]);
    assert_refused(&out, "database_url");
}

#[test]
fn a_database_that_cannot_be_opened_is_named_once_with_the_cause_and_fast() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/x.db");
    let out = herald(dir.path(), &["--database-url", &format!("sqlite://{}", missing.display()), "status"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&format!("cannot open the SQLite database {}", missing.display())), "{err}");
    assert!(err.contains(&format!("the directory {} does not exist", missing.parent().unwrap().display())), "{err}");
    assert_eq!(err.lines().count(), 1, "said once: {err}");

    // A server that refuses the connection: at once, naming host and port,
    // not "pool timed out" after database.acquire_timeout.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for (scheme, name) in [("postgres", "PostgreSQL"), ("mysql", "MariaDB/MySQL")] {
        let started = Instant::now();
        let url = format!("{scheme}://u@127.0.0.1:{port}/x");
        let out = herald(dir.path(), &["--database-url", &url, "migrate"]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains(&format!("cannot open {name} at 127.0.0.1:{port}: connection refused")), "{err}");
        assert!(!err.contains("pool timed out"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }

    // `serve --port` says what it meant.
    let out = herald(dir.path(), &["serve", "--port", "9000"]);
    assert_refused(&out, "--listen 127.0.0.1:9000");
}

#[test]
fn serve_delivers_then_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["enqueue", "--channel", "inbox", "--user-id", "u-7", "--count", "5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Enqueued while email was configured; `serve` then starts without it.
    let mail = dir.path().join("mail");
    let file_transport = format!("file://{}", mail.display());
    let with_email = [("HERALD_EMAIL__TRANSPORT", file_transport.as_str()), ("HERALD_EMAIL__FROM", "a@b.c")];
    let out = herald_env(dir.path(), &["enqueue", "--channel", "email", "--user-id", "u-7"], &with_email);
    assert!(out.status.success(), "{}", stderr(&out));

    let mut serve = Command::new(env!("CARGO_BIN_EXE_herald"))
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HERALD_LOG", "warn,herald::app=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = status_json(dir.path());
        if count(&s, "sent") == 5 && count(&s, "failed") == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "serve did not drain the outbox: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let kill = Command::new("kill").args(["-TERM", &serve.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(code) = serve.try_wait().unwrap() {
            break code;
        }
        assert!(Instant::now() < deadline, "serve did not stop within 15s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "exit status {code}");
    // Stopped cleanly, it closed every connection: herald.db alone is the
    // whole database (see the README, "Copying the SQLite file").
    assert!(!dir.path().join("herald.db-wal").exists(), "serve left its write-ahead log beside herald.db");
    assert_eq!(count(&status_json(dir.path()), "sending"), 0);
    // At start, serve said which channels deliver and which setting the others need.
    let mut log = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut log).unwrap();
    assert!(log.contains("channel live: writes to the in-app inbox"), "{log}");
    assert!(log.contains("channel off: no email transport is configured (set email.transport to turn it on)"), "{log}");
    assert!(log.contains("set webhook.signing_secret to turn it on"), "{log}");

    let out = herald(dir.path(), &["sends", "--user-id", "u-7", "--json"]);
    let log: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let sends = log["sends"].as_array().unwrap();
    assert_eq!(sends.len(), 6);
    let failed: Vec<_> = sends.iter().filter(|s| s["status"] == "failed").collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]["detail"].as_str().unwrap().contains("channel \"email\" is not configured on this instance"),
        "{failed:?}"
    );

    let text = stdout(&herald(dir.path(), &["sends", "--user-id", "u-7"]));
    assert!(text.contains("send log for user u-7, newest first (6):"), "{text}");
    let nobody = stdout(&herald(dir.path(), &["sends", "--user-id", "nobody"]));
    assert!(nobody.contains("nothing was ever scheduled for user nobody"), "{nobody}");
}

#[test]
fn keys_are_printed_once_and_listed_without_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["keys", "create", "--name", "billing"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let key = stdout(&out).trim().to_owned();
    assert!(key.starts_with("hrld_"), "{key}");
    assert!(stderr(&out).contains("shown only this once"));
    let list = stdout(&herald(dir.path(), &["keys", "list"]));
    assert!(list.contains("billing") && list.contains(&key[..12]), "{list}");
    assert!(!list.contains(&key), "the key itself is never shown again");
    let id = list.split_whitespace().next().unwrap();
    assert!(herald(dir.path(), &["keys", "revoke", id]).status.success());
    assert!(stdout(&herald(dir.path(), &["keys", "list"])).contains("revoked"));
}

#[test]
fn demo_walks_a_trigger_to_the_send_log() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("worker sweep: claimed 1, sent 1"), "{text}");
    assert!(text.contains("condition `payload.rows > 0` is false"), "{text}");
    assert!(text.contains("no enabled rule matches trigger type \"demo.unconfigured\""), "{text}");
    assert!(text.contains("\"Dein Export invoices-2026 ist fertig\""), "{text}");

    // `herald sends` answers like the API: each message with its subject,
    // and the triggers that planned nothing, with why.
    let text = stdout(&herald(dir.path(), &["sends", "--user-id", "demo-user"]));
    assert!(text.contains("sent        inbox    \"Dein Export invoices-2026 ist fertig\" outbox "), "{text}");
    assert!(text.contains("triggers that planned nothing, newest first (2):"), "{text}");
    assert!(text.contains("demo.unconfigured"), "{text}");
    assert!(text.contains("condition `payload.rows > 0` is false"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["sends", "--user-id", "demo-user", "--json"]))).unwrap();
    assert_eq!(json["sends"][0]["subject"], "Dein Export invoices-2026 ist fertig", "{json}");
    assert_eq!(json["triggers_without_messages"].as_array().unwrap().len(), 2, "{json}");
}

/// An operator changes a user's preferences from the command
/// line; the change is the user's choice from then on, and the audit trail
/// names the operator.
#[test]
fn an_operator_changes_a_users_preferences_and_the_audit_names_them() {
    let dir = tempfile::tempdir().unwrap();
    assert!(herald(dir.path(), &["demo"]).status.success(), "an enabled inbox rule in category exports");
    let out = herald_stdin(
        dir.path(),
        &["operators", "add", "--email", "ops@example.com", "--password-stdin"],
        "a long operator password\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&herald(dir.path(), &["preferences", "--user-id", "demo-user"]));
    assert!(text.contains("Exports (exports)  inbox: on (decided by default)"), "{text}");

    // A change needs an operator, and an existing one.
    let out = herald(dir.path(), &["preferences", "--user-id", "demo-user", "--set", "exports:inbox=off"]);
    assert_refused(&out, "--operator: required with --set or --topic");
    let set = ["preferences", "--user-id", "demo-user", "--set", "exports:inbox=off", "--operator"];
    let out = herald(dir.path(), &[&set[..], &["nobody@example.com"]].concat());
    assert!(stderr(&out).contains("is not an operator account"), "{}", stderr(&out));
    // What the user cannot choose is refused, naming it; nothing changes.
    let out = herald(
        dir.path(),
        &["preferences", "--user-id", "demo-user", "--set", "gossip:inbox=off", "--operator", "ops@example.com"],
    );
    assert_refused(&out, "nothing changed: categories.gossip");
    let out = herald(
        dir.path(),
        &["preferences", "--user-id", "demo-user", "--set", "exports:inbox=maybe", "--operator", "ops@example.com"],
    );
    assert!(stderr(&out).contains("is not CATEGORY:CHANNEL=on|off"), "{}", stderr(&out));

    let out = herald(dir.path(), &[&set[..], &["ops@example.com"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("changed for user demo-user: exports by inbox: off (recorded in the audit log)"), "{text}");
    assert!(text.contains("Exports (exports)  inbox: off (decided by user)"), "{text}");
    let again = stdout(&herald(dir.path(), &[&set[..], &["ops@example.com"]].concat()));
    assert!(again.contains("nothing changed for user demo-user"), "{again}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["preferences", "--user-id", "demo-user", "--json"])))
            .unwrap();
    assert_eq!(json["center"]["categories"][0]["channels"][0]["enabled"], false, "{json}");

    // The audit trail (what the send-log page lists): one change, by the operator.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let audit = || {
        rt.block_on(async {
            use herald::store::OperatorStore;
            sqlx::any::install_default_drivers();
            let url = format!("sqlite://{}", dir.path().join("herald.db").display());
            let store = herald::store::SqlStore::connect(&url, &Default::default()).await.unwrap();
            store.audit_for_target("user:demo-user", 10).await.unwrap()
        })
    };
    let rows = audit();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].operator_email, "operator ops@example.com (command line)");
    assert_eq!(rows[0].detail.as_deref(), Some("exports by inbox: off"));

    // A topic muted for the user, as they could from the preference
    // center; a key that is not a topic key, or a word other than
    // muted/on, is refused and changes nothing.
    let topic = |t: &str| {
        herald(dir.path(), &["preferences", "--user-id", "demo-user", "--topic", t, "--operator", "ops@example.com"])
    };
    assert_refused(&topic("doc 42=muted"), "nothing changed: topics.doc 42");
    assert_refused(&topic("doc:42=off"), "is not KEY=muted|on");
    let out = topic("doc:42=muted");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("changed for user demo-user: topic doc:42: muted"), "{}", stdout(&out));
    assert!(stdout(&topic("doc:42=muted")).contains("nothing changed for user demo-user"));
    assert!(stdout(&topic("doc:42=on")).contains("changed for user demo-user: topic doc:42: on"));
    let details: Vec<Option<String>> = audit().into_iter().map(|r| r.detail).collect();
    assert_eq!(
        details[..2],
        [Some("topic doc:42: on".to_owned()), Some("topic doc:42: muted".to_owned())],
        "newest first: {details:?}"
    );
}

#[test]
fn bounce_parse_prints_one_json_object_per_recipient() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bounces/eml");
    let two = data.join("lhost-postfix-02.eml");
    let arf = data.join("arf-01.eml");
    let out = herald(dir.path(), &["bounce", "parse", "--json", two.to_str().unwrap(), arf.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["recipient"], "userunknown@example.co.jp");
    assert_eq!((lines[1]["status"].as_str(), lines[1]["reply_code"].as_u64()), (Some("5.1.1"), Some(550)));
    assert_eq!(lines[1]["kind"], "hard");
    assert_eq!(lines[2]["kind"], "complaint");

    let empty = dir.path().join("empty.eml");
    std::fs::write(&empty, "").unwrap();
    let out = herald(dir.path(), &["bounce", "parse", empty.to_str().unwrap()]);
    assert_refused(&out, "the input is empty");
}

#[test]
fn sends_by_address_uses_the_generated_secret_and_keeps_it_private() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["sends", "--address", "Someone@Example.org"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("nothing in the send log for that address"), "{}", stdout(&out));
    let secret = dir.path().join("herald-secret");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // The same address hashes the same way on the next run (the file is reused).
    let json = |o: &Output| serde_json::from_str::<serde_json::Value>(&stdout(o)).unwrap();
    let a = json(&herald(dir.path(), &["sends", "--address", "someone@example.org", "--json"]));
    let b = json(&herald(dir.path(), &["sends", "--address", "SOMEONE@example.org ", "--json"]));
    assert_eq!(a["address_hash"], b["address_hash"]);
    assert_eq!(a["address_hash"].as_str().unwrap().len(), 64);

    let out = herald(dir.path(), &["sends", "--address", "nobody"]);
    assert_refused(&out, "--address");
    let out = herald(dir.path(), &["sends"]);
    assert!(!out.status.success(), "one of --user-id and --address is required");
}

#[test]
fn bounce_import_reads_a_maildir_once() {
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("Bounces");
    std::fs::create_dir_all(maildir.join("new")).unwrap();
    std::fs::create_dir_all(maildir.join("cur")).unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bounces/eml");
    std::fs::copy(data.join("lhost-postfix-02.eml"), maildir.join("new/1.eml")).unwrap();
    std::fs::copy(data.join("lhost-exim-01.eml"), maildir.join("cur/2.eml")).unwrap();
    let env = [("HERALD_EMAIL__ADDRESS_SECRET", "a cli test secret of some length")];
    let out = herald_env(dir.path(), &["bounce", "import", maildir.to_str().unwrap()], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("2 file(s):"), "{}", stderr(&out));
    assert!(stdout(&out).contains("address suppressed"), "{}", stdout(&out));
    let again = herald_env(dir.path(), &["bounce", "import", maildir.to_str().unwrap()], &env);
    assert!(stderr(&again).contains(" 0 recorded"), "{}", stderr(&again));
    assert!(stdout(&again).contains("already recorded"), "{}", stdout(&again));
}

fn herald_stdin(dir: &Path, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .current_dir(dir)
        .args(args)
        .env_remove("HERALD_DATABASE_URL")
        .env("HERALD_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run herald");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn operators_are_added_from_stdin_listed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let add = ["operators", "add", "--email", "Ops@Example.com", "--password-stdin"];
    let out = herald_stdin(dir.path(), &add, "a long operator password\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("created operator ops@example.com"), "{}", stdout(&out));
    // Neither the password nor its hash is printed anywhere.
    assert!(!stdout(&out).contains("password") && !stderr(&out).contains("argon2"), "{}", stdout(&out));

    let again = herald_stdin(dir.path(), &add, "another long password\n");
    assert!(!again.status.success());
    assert!(stderr(&again).contains("exists already"), "{}", stderr(&again));
    let short = herald_stdin(dir.path(), &["operators", "add", "--email", "b@example.com"], "short\n");
    assert!(!short.status.success());
    assert!(stderr(&short).contains("must be 12 to 1024 characters"), "{}", stderr(&short));
    let bad = herald_stdin(dir.path(), &["operators", "add", "--email", "nobody"], "a long operator password\n");
    assert!(stderr(&bad).contains("not an email address"), "{}", stderr(&bad));

    let list = herald(dir.path(), &["operators", "list"]);
    assert!(stdout(&list).contains("ops@example.com") && !stdout(&list).contains("b@example.com"));
    assert!(herald(dir.path(), &["operators", "remove", "--email", "OPS@example.com"]).status.success());
    assert!(stdout(&herald(dir.path(), &["operators", "list"])).contains("no operators"));
    let gone = herald(dir.path(), &["operators", "remove", "--email", "ops@example.com"]);
    assert!(!gone.status.success() && stderr(&gone).contains("no operator with email"));
}

/// The audit rows for `target`, newest first, read from the SQLite file.
fn audit_rows(dir: &Path, target: &str) -> Vec<herald::store::AuditRow> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use herald::store::OperatorStore;
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}", dir.join("herald.db").display());
        let store = herald::store::SqlStore::connect(&url, &Default::default()).await.unwrap();
        let rows = store.audit_for_target(target, 10).await.unwrap();
        store.close().await;
        rows
    })
}

#[test]
fn rules_are_listed_shown_and_switched_and_the_audit_names_the_os_user() {
    let dir = tempfile::tempdir().unwrap();
    assert!(herald(dir.path(), &["demo"]).status.success(), "the demo leaves one enabled inbox rule");
    let list: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["rules", "list", "--json"]))).unwrap();
    let rule = &list["rules"][0];
    let (id, name) = (rule["id"].as_str().unwrap().to_owned(), rule["name"].as_str().unwrap().to_owned());
    assert_eq!(rule["enabled"], true, "{list}");
    let text = stdout(&herald(dir.path(), &["rules", "list"]));
    assert!(text.contains(&id) && text.contains(&name) && text.contains(" on "), "{text}");
    let shown = stdout(&herald(dir.path(), &["rules", "show", &name]));
    assert!(shown.contains(&id) && shown.contains("trigger:   demo.export_ready"), "{shown}");
    let shown: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["rules", "show", &id, "--json"]))).unwrap();
    assert_eq!(shown["id"], id.as_str());

    // An unknown rule is named, with where to find the right one.
    let out = herald(dir.path(), &["rules", "disable", "no-such-rule"]);
    assert_refused(&out, "no rule has the id or name \"no-such-rule\"");
    assert!(stderr(&out).contains("herald rules list"), "{}", stderr(&out));

    let as_alice = [("USER", "alice"), ("LOGNAME", "alice")];
    let out = herald_env(dir.path(), &["rules", "disable", &id], &as_alice);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("is off; 0 scheduled message(s) cancelled (recorded in the audit log)"));
    let out = herald_env(dir.path(), &["rules", "disable", &id], &as_alice);
    assert!(stdout(&out).contains("is already off; nothing changed"), "{}", stdout(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["rules", "show", &id, "--json"]))).unwrap();
    assert_eq!(json["enabled"], false);
    let out = herald_env(dir.path(), &["rules", "enable", &name, "--json"], &[("USER", "bob"), ("LOGNAME", "bob")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["rule"]["enabled"], true, "{json}");

    // The screen's entries, one per real switch (the repeated disable wrote none), naming who.
    let rows = audit_rows(dir.path(), &id);
    let seen: Vec<(&str, &str, Option<&str>)> =
        rows.iter().map(|r| (r.operator_email.as_str(), r.action.as_str(), r.detail.as_deref())).collect();
    let off = format!("\"{name}\" turned off; 0 scheduled message(s) cancelled");
    let on = format!("\"{name}\" turned on");
    assert_eq!(
        seen,
        vec![
            ("os user bob (command line)", "rule.enable", Some(on.as_str())),
            ("os user alice (command line)", "rule.disable", Some(off.as_str())),
        ]
    );
}

#[test]
fn users_are_shown_and_set_field_by_field_with_refusals_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["users", "show", "--user-id", "u-1"]);
    assert_refused(&out, "no user \"u-1\"; create one with `herald users set --user-id u-1");

    let out = herald(dir.path(), &["users", "set", "--user-id", "u-1", "--email", "ann@example.com", "--locale", "de"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("user u-1 created"), "{}", stdout(&out));

    // Refusals name each field and what it accepts; nothing is stored.
    let out =
        herald(dir.path(), &["users", "set", "--user-id", "u-1", "--timezone", "Mars/Olympus", "--email", "nope"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("user u-1 was not changed"), "{err}");
    assert!(err.contains("timezone: \"Mars/Olympus\" is not a time zone of the tz database"), "{err}");
    assert!(err.contains("email: \"nope\" is not an email address"), "{err}");
    let out = herald(dir.path(), &["users", "set", "--user-id", "u-1", "--category", "news=maybe"]);
    assert!(stderr(&out).contains("--category: \"news=maybe\" is not CATEGORY=on|off"), "{}", stderr(&out));
    let out = herald(dir.path(), &["users", "set", "--user-id", "u-1", "--quiet-hours", "late"]);
    assert!(stderr(&out).contains("--quiet-hours: \"late\" is not FROM-UNTIL"), "{}", stderr(&out));

    // Only the fields given change; the host's opt-out is audited with the OS user.
    let out = herald_env(
        dir.path(),
        &["users", "set", "--user-id", "u-1", "--timezone", "Europe/Berlin", "--quiet-hours", "22:00-07:00"],
        &[("USER", "carol"), ("LOGNAME", "carol")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = herald_env(
        dir.path(),
        &["users", "set", "--user-id", "u-1", "--category", "marketing=off", "--channel", "email=off"],
        &[("USER", "carol"), ("LOGNAME", "carol")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["users", "show", "--user-id", "u-1", "--json"]))).unwrap();
    assert_eq!(json["email"], "ann@example.com", "{json}");
    assert_eq!(json["locale"], "de", "{json}");
    assert_eq!(json["timezone"], "Europe/Berlin", "{json}");
    assert_eq!(json["quiet_hours"]["from"], "22:00", "{json}");
    assert_eq!(json["preferences"]["categories"]["marketing"], false, "{json}");
    assert_eq!(json["preferences"]["channels"]["email"], false, "{json}");
    let text = stdout(&herald(dir.path(), &["users", "show", "--user-id", "u-1"]));
    assert!(text.contains("quiet hours: 22:00-07:00") && text.contains("categories:  marketing=off"), "{text}");

    let rows = audit_rows(dir.path(), "user:u-1");
    assert_eq!(rows.len(), 1, "only the preference change is audited: {rows:?}");
    assert_eq!(rows[0].operator_email, "os user carol (command line)");
    assert_eq!(rows[0].action, "preferences.change");
}

#[test]
fn push_vapid_keys_prints_a_pair_that_matches_without_reading_the_configuration() {
    use herald::delivery::channel::push::vapid::VapidKey;
    let dir = tempfile::tempdir().unwrap();
    // A broken configuration does not stop it: making keys comes first.
    std::fs::write(dir.path().join("herald.toml"), "[push]\nvapid_subject = \"nobody\"\n").unwrap();
    let pair = |dir: &Path| {
        let out = herald(dir, &["push", "vapid-keys", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        (v["private_key"].as_str().unwrap().to_owned(), v["public_key"].as_str().unwrap().to_owned())
    };
    let (private, public) = pair(dir.path());
    let key = VapidKey::new(&private, "mailto:ops@example.com").unwrap();
    assert_eq!(key.public_key(), public, "the public key is the private key's");
    assert_eq!(public.len(), 87, "65 bytes in base64url: {public}");
    assert_ne!(pair(dir.path()).0, private, "a new pair each time");

    let out = herald(dir.path(), &["push", "vapid-keys"]);
    let text = stdout(&out);
    assert!(text.contains("applicationServerKey") && text.contains("push.vapid_private_key"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let private = lines[lines.iter().position(|l| l.starts_with("Private key")).unwrap() + 1];
    assert!(VapidKey::new(private, "mailto:ops@example.com").is_ok(), "{text}");
}

#[test]
fn push_devices_lists_a_users_devices_removed_ones_with_who_and_why() {
    use herald::store::{NewPushDevice, PushDeviceStore, Registered};
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["push", "devices", "ada"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "user \"ada\" has no push device");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (phone, laptop) = rt.block_on(async {
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}", dir.path().join("herald.db").display());
        let store = herald::store::SqlStore::connect(&url, &Default::default()).await.unwrap();
        let device = |kind: &str, address: &str, label: Option<&str>| NewPushDevice {
            kind: kind.into(),
            address: address.into(),
            p256dh: None,
            auth: None,
            label: label.map(str::to_owned),
        };
        let t = herald::clock::Millis(1_800_000_000_000);
        let Registered::Created(phone) =
            store.register_push_device("ada", &device("fcm", "secret-fcm-token", Some("Pixel")), t).await.unwrap()
        else {
            panic!("created")
        };
        let Registered::Created(laptop) =
            store.register_push_device("ada", &device("apns", "abcdef", None), t).await.unwrap()
        else {
            panic!("created")
        };
        store.mark_push_success(std::slice::from_ref(&phone.id), t).await.unwrap();
        store.remove_push_device("ada", &laptop.id, "provider", "APNs said Unregistered", t).await.unwrap();
        store.close().await;
        (phone.id, laptop.id)
    });
    let text = stdout(&herald(dir.path(), &["push", "devices", "ada"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with(&format!("{phone} fcm \"Pixel\"")), "{text}");
    assert!(lines[0].contains("last success 2027-01-15T08:00:00") && !lines[0].contains("REMOVED"), "{text}");
    assert!(lines[1].starts_with(&format!("{laptop} apns")), "{text}");
    assert!(lines[1].contains("last success never"), "{text}");
    assert!(
        lines[1].contains("REMOVED 2027-01-15T08:00:00") && lines[1].contains("by provider: APNs said Unregistered"),
        "{text}"
    );
    assert!(!text.contains("secret-fcm-token"), "a token is a credential: {text}");

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&herald(dir.path(), &["push", "devices", "ada", "--json"]))).unwrap();
    assert_eq!(json[1]["removed_by"], "provider", "{json}");
    assert_eq!(json[0]["label"], "Pixel", "{json}");
    assert!(json[0].get("address").is_none(), "{json}");
}

/// A phone set from the command line is stored in E.164 with its hash under
/// the deployment's secret (the one `data_dir` keeps), so `herald sends
/// --phone` finds the user however the number is written; `herald suppress
/// --phone` suppresses it by the same hash.
#[test]
fn a_phone_set_from_the_command_line_is_found_and_suppressed_by_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let set = ["users", "set", "--user-id", "u-2", "--phone", "+1 (415) 555-0101", "--slack-user-id", "U024BE7LH"];
    let out = herald(dir.path(), &set);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = |o: &Output| serde_json::from_str::<serde_json::Value>(&stdout(o)).unwrap();
    let shown = json(&herald(dir.path(), &["users", "show", "--user-id", "u-2", "--json"]));
    assert_eq!((shown["phone"].as_str(), shown["slack_user_id"].as_str()), (Some("+14155550101"), Some("U024BE7LH")));
    let text = stdout(&herald(dir.path(), &["users", "show", "--user-id", "u-2"]));
    assert!(text.contains("phone:       +14155550101") && text.contains("slack:       U024BE7LH"), "{text}");
    let found = json(&herald(dir.path(), &["sends", "--phone", "+14155550101", "--json"]));
    assert_eq!(found["users"][0]["user_id"], "u-2", "{found}");

    let out = herald(dir.path(), &["users", "set", "--user-id", "u-2", "--phone", "12345"]);
    assert_refused(&out, "user u-2 was not changed: phone: \"12345\" is not accepted: it has no country code");
    let out = herald(dir.path(), &["users", "set", "--user-id", "u-2", "--slack-user-id", "C024BE91L"]);
    assert_refused(&out, "slack_user_id: \"C024BE91L\" is not a Slack user id");

    let out = herald(dir.path(), &["suppress", "--phone", "+1 415 555 0101", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let row = json(&out);
    assert_eq!((row["address_kind"].as_str(), &row["address_hash"]), (Some("phone"), &found["address_hash"]), "{row}");
    let found = json(&herald(dir.path(), &["sends", "--phone", "+1 415 555 0101", "--json"]));
    assert_eq!(found["suppressions"][0]["reason"], "manual", "{found}");
    let out = herald(dir.path(), &["suppress", "--phone", "4155550101"]);
    assert_refused(&out, "--phone: \"4155550101\" is not accepted");
    let out = herald(dir.path(), &["suppress", "--phone", "+14155550101", "--email", "a@example.com"]);
    assert!(!out.status.success(), "one of --email and --phone");
    assert_eq!(audit_rows(dir.path(), row["address_hash"].as_str().unwrap()).len(), 1);

    // "" removes the phone: no user has the number any more.
    let out = herald(dir.path(), &["users", "set", "--user-id", "u-2", "--phone", ""]);
    assert!(out.status.success(), "{}", stderr(&out));
    let found = json(&herald(dir.path(), &["sends", "--phone", "+14155550101", "--json"]));
    assert_eq!(found["users"], serde_json::json!([]), "{found}");
}

/// `herald bench --channel push` runs end to end, over HTTP/2 and HTTP/1.1:
/// every notification verified and decrypted by the local push service, and
/// the costs it reports present.
#[test]
fn bench_push_delivers_every_notification_to_a_verifying_push_service() {
    let dir = tempfile::tempdir().unwrap();
    for extra in [&[][..], &["--http1"][..]] {
        let mut args = vec!["bench", "--channel", "push", "--rows", "200", "--json"];
        args.extend_from_slice(extra);
        let out = herald(dir.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!((report["sent"].as_u64(), report["push"]["received"].as_u64()), (Some(200), Some(200)), "{report}");
        assert_eq!(report["push"]["refused"], 0, "{report}");
        assert!(report["push"]["encrypt_and_sign_us"].as_f64().unwrap() > 0.0, "{report}");
        let http = if extra.is_empty() { "HTTP/2" } else { "HTTP/1.1" };
        assert!(report["transport"].as_str().unwrap().contains(http), "{report}");
    }
}

/// `herald bench --fanout` on SQLite, small: every subscriber gets exactly
/// one message (the bench checks the inbox itself and fails otherwise), and
/// the report names the `--chunk` it ran with (the setting it gave the
/// planner; how the planner cuts chunks is `tests/fan_out.rs`'s); a chunk
/// outside `planner.fan_out_chunk`'s range is refused with the range.
#[test]
fn bench_fanout_delivers_to_every_subscriber_and_reports_its_chunk_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = herald(dir.path(), &["bench", "--fanout", "--subscribers", "250", "--chunk", "100", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!((report["subscribers"].as_u64(), report["delivered"].as_u64()), (Some(250), Some(250)), "{report}");
    assert_eq!(report["chunk"], 100, "{report}");
    let out = herald(dir.path(), &["bench", "--fanout", "--chunk", "50"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--chunk") && stderr(&out).contains("100..=100000"), "{}", stderr(&out));
}
