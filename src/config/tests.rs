use super::*;

#[test]
fn an_unknown_database_scheme_is_refused_without_its_password() {
    for url in ["postgresx://bob:hunter2@db.example/x", "foo://bob:hunter2@db/x", "bob:hunter2@db"] {
        let c = Config { database_url: url.into(), ..Config::default() };
        let e = c.validate().expect_err("refused").to_string();
        assert!(e.contains("database_url"), "{e}");
        assert!(!e.contains("hunter2"), "the password is shown: {e}");
    }
    assert_eq!(redact_url_password("postgres://bob:pw@h/db"), "postgres://bob:***@h/db");
    assert_eq!(redact_url_password("sqlite://herald.db"), "sqlite://herald.db");
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn defaults_are_the_seeds() {
    let c = Config::load(None, env(&[]), &FlagOverrides::default()).unwrap();
    assert_eq!(c.database_url, "sqlite://herald.db");
    assert_eq!(c.worker.poll, Duration::from_secs(30));
    assert_eq!(c.worker.batch, 100);
    assert_eq!(c.worker.max_attempts, 5);
    assert_eq!(c.worker.retry, Duration::from_secs(300));
    assert_eq!(c.worker.stale, Duration::from_secs(900));
}

#[test]
fn file_then_environment_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.toml");
    std::fs::write(&path, "database_url = \"sqlite://file.db\"\n[worker]\nbatch = 7\npoll = \"2s\"\n").unwrap();
    let c = Config::load(Some(&path), env(&[("HERALD_WORKER__BATCH", "9")]), &FlagOverrides::default()).unwrap();
    assert_eq!(
        (c.worker.batch, c.worker.poll, c.database_url.as_str()),
        (9, Duration::from_secs(2), "sqlite://file.db")
    );
    let flags = FlagOverrides { database_url: Some("postgres://x/y".into()), ..Default::default() };
    let c = Config::load(Some(&path), env(&[("HERALD_DATABASE_URL", "mysql://a/b")]), &flags).unwrap();
    assert_eq!(c.database_url, "postgres://x/y");
}

#[test]
fn a_bad_value_names_the_key_the_value_and_what_is_accepted() {
    let err = Config::load(None, env(&[("HERALD_WORKER__BATCH", "0")]), &FlagOverrides::default()).unwrap_err();
    assert_eq!(err.to_string(), "configuration key `worker.batch`: 0 is not accepted; expected 1 to 10000");

    let err = Config::load(None, env(&[("HERALD_WORKER__BATCH", "lots")]), &FlagOverrides::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("worker.batch") && text.contains("lots") && text.contains("HERALD_"), "{text}");

    let err = Config::load(None, env(&[("HERALD_WORKER__POLL", "soon")]), &FlagOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("worker.poll"), "{err}");

    let err = Config::load(None, env(&[("HERALD_DATABASE_URL", "redis://x")]), &FlagOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("database_url") && err.to_string().contains("postgres://"), "{err}");

    let err = Config::load(None, env(&[("HERALD_WORKER__STALE", "30s")]), &FlagOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("deliver_timeout"), "{err}");
}

#[test]
fn a_bad_webhook_secret_is_refused_without_echoing_it() {
    let err = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", "hunter2")]), &FlagOverrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("webhook.signing_secret") && err.contains("whsec_"), "{err}");
    assert!(!err.contains("hunter2"), "secrets are never printed: {err}");
}

#[test]
fn the_webhook_secret_takes_one_secret_or_a_list_for_a_rotation() {
    use crate::delivery::channel::signing::SecretList;
    let (new, old) = ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGhlIG9sZCBzZWNyZXQsIDMyIGJ5dGVzIGxvbmch");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.toml");
    std::fs::write(&path, format!("[webhook]\nsigning_secret = [\"{new}\", \"{old}\"]\n")).unwrap();
    let c = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).unwrap();
    assert_eq!(c.webhook.signing_secret, Some(SecretList::Many(vec![new.into(), old.into()])));
    let list = format!("[\"{new}\", \"{old}\"]");
    let c = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", &list)]), &FlagOverrides::default()).unwrap();
    assert_eq!(c.webhook.signing_secret.unwrap().texts(), [new, old], "the same list from the environment");
    let c = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", new)]), &FlagOverrides::default()).unwrap();
    assert_eq!(c.webhook.signing_secret, Some(SecretList::One(new.into())), "a single secret as before");

    let bad = format!("[\"{new}\", \"hunter2\"]");
    let err = Config::load(None, env(&[("HERALD_WEBHOOK__SIGNING_SECRET", &bad)]), &FlagOverrides::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("webhook.signing_secret") && err.contains("item [1]") && err.contains("whsec_"), "{err}");
    assert!(!err.contains("hunter2") && !err.contains(new), "secrets are never printed: {err}");
}

#[test]
fn retention_periods_are_kept_for_ever_at_zero_and_refused_below_an_hour() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    let c = load(&[("HERALD_RETENTION__SENDS", "0s"), ("HERALD_RETENTION__OUTBOX", "30days")]).unwrap();
    assert_eq!(c.retention.period(crate::store::Prunable::Sends), None, "0s keeps for ever");
    assert_eq!(c.retention.period(crate::store::Prunable::Outbox), Some(Duration::from_secs(30 * 86_400)));
    assert_eq!(c.retention.period(crate::store::Prunable::Events), Some(Duration::from_secs(90 * 86_400)));
    let err = load(&[("HERALD_RETENTION__EVENTS", "10m")]).unwrap_err().to_string();
    assert!(err.contains("retention.events") && err.contains("at least 1h"), "{err}");
    let err = load(&[("HERALD_RETENTION__BATCH", "5")]).unwrap_err().to_string();
    assert!(err.contains("retention.batch") && err.contains("10 to 100000"), "{err}");
}

/// A bounce retention shorter than the soft-bounce window
/// pruned the evidence the policy counts, so it never suppressed.
#[test]
fn a_bounce_retention_shorter_than_the_soft_bounce_window_is_refused_naming_both() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    let short = [("HERALD_RETENTION__BOUNCES", "2days"), ("HERALD_BOUNCES__SOFT_BOUNCE_WINDOW", "3days")];
    let err = load(&short).unwrap_err().to_string();
    assert!(err.contains("retention.bounces") && err.contains("bounces.soft_bounce_window (3days)"), "{err}");
    assert!(load(&[("HERALD_RETENTION__BOUNCES", "3days"), short[1]]).is_ok(), "as long as the window");
    assert!(load(&[("HERALD_RETENTION__BOUNCES", "0s"), short[1]]).is_ok(), "kept for ever");
    assert!(load(&[short[0], short[1], ("HERALD_BOUNCES__SOFT_BOUNCE_LIMIT", "0")]).is_ok(), "no policy");
    assert!(load(&[short[0], short[1], ("HERALD_RETENTION__ENABLED", "false")]).is_ok(), "nothing pruned");
}

#[test]
fn unknown_keys_are_refused_not_ignored() {
    let err = Config::load(None, env(&[("HERALD_WORKER__BACTH", "5")]), &FlagOverrides::default()).unwrap_err();
    assert!(err.to_string().contains("bacth"), "{err}");
}

#[test]
fn email_settings_are_validated() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    assert!(load(&[]).unwrap().email.transport.is_none());
    let ok = load(&[
        ("HERALD_EMAIL__TRANSPORT", "smtps://u:p@mail.example.com"),
        ("HERALD_EMAIL__FROM", "Herald <news@example.com>"),
        ("HERALD_EMAIL__PUBLIC_URL", "https://herald.example.com"),
    ])
    .unwrap();
    assert_eq!(ok.email.concurrency, 8);

    let err = load(&[("HERALD_EMAIL__TRANSPORT", "smtp://u:secret@h?tls=maybe")]).unwrap_err().to_string();
    assert!(err.contains("email.transport") && err.contains("maybe") && !err.contains("secret"), "{err}");
    let err = load(&[("HERALD_EMAIL__TRANSPORT", "file:///tmp/x")]).unwrap_err().to_string();
    assert!(err.contains("email.from"), "{err}");
    let err = load(&[("HERALD_EMAIL__TRANSPORT", "smtp://h"), ("HERALD_EMAIL__FROM", "a@b.c")]).unwrap_err();
    assert!(err.to_string().contains("email.public_url"), "{err}");
    assert!(load(&[("HERALD_EMAIL__TRANSPORT", "file:///tmp/x"), ("HERALD_EMAIL__FROM", "a@b.c")]).is_ok());
    let err = load(&[("HERALD_EMAIL__ADDRESS_SECRET", "short")]).unwrap_err().to_string();
    assert!(err.contains("email.address_secret") && !err.contains("short"), "{err}");
    let err = load(&[("HERALD_EMAIL__TIMEOUT", "2m")]).unwrap_err().to_string();
    assert!(err.contains("email.timeout"), "{err}");
    let err = load(&[("HERALD_EMAIL__BOUNCE_DOMAIN", "a@b")]).unwrap_err().to_string();
    assert!(err.contains("email.bounce_domain"), "{err}");
}

#[test]
fn ui_settings_have_defaults_and_bounds() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    let c = load(&[]).unwrap();
    assert_eq!((c.ui.session_ttl, c.ui.login_max_failures), (Duration::from_secs(12 * 3600), 5));
    assert!(!c.ui.secure_cookies);
    let c = load(&[("HERALD_UI__SECURE_COOKIES", "true"), ("HERALD_UI__SESSION_TTL", "8h")]).unwrap();
    assert_eq!((c.ui.secure_cookies, c.ui.session_ttl), (true, Duration::from_secs(8 * 3600)));
    let err = load(&[("HERALD_UI__SESSION_TTL", "1s")]).unwrap_err().to_string();
    assert!(err.contains("ui.session_ttl") && err.contains("5m to 30days"), "{err}");
    let err = load(&[("HERALD_UI__LOGIN_MAX_FAILURES", "0")]).unwrap_err().to_string();
    assert!(err.contains("ui.login_max_failures"), "{err}");
}

/// `herald.example.toml` is checked against this module, so it cannot
/// drift: it loads, its active lines are exactly the defaults, and every
/// key of [`Config`] appears in it once, either active (with its
/// default) or commented out (`# key = example`, for settings that are
/// off by default), under its section and after a comment saying what
/// it does; each commented-out example is a value the key accepts.
#[test]
fn the_example_configuration_has_every_key_and_default() {
    use std::collections::BTreeSet;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("herald.example.toml");
    let text = std::fs::read_to_string(&path).expect("herald.example.toml is in the repository");
    let loaded = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).expect("the example loads");
    let defaults = serde_json::to_value(Config::default()).unwrap();
    assert_eq!(serde_json::to_value(&loaded).unwrap(), defaults, "active lines must hold the defaults");

    // A table is a section when the file has a header for it (`[push]`,
    // `[push.apns]`); any other table (worker.concurrency, a map) is a leaf.
    let headers: BTreeSet<&str> =
        text.lines().filter_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']'))).collect();
    fn leaves(path: &str, value: &serde_json::Value, headers: &BTreeSet<&str>, out: &mut BTreeSet<String>) {
        match value.as_object() {
            Some(table) if path.is_empty() || headers.contains(path) => {
                for (k, v) in table {
                    let full = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    leaves(&full, v, headers, out);
                }
            }
            _ => {
                out.insert(path.to_owned());
            }
        }
    }
    let mut expected = BTreeSet::new();
    leaves("", &defaults, &headers, &mut expected);

    let key_line = |line: &str| -> Option<(bool, String, String)> {
        let (active, rest) = match line.strip_prefix("# ") {
            Some(r) => (false, r),
            None => (true, line),
        };
        let (k, v) = rest.split_once(" = ")?;
        let k = k.trim();
        (!k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .then(|| (active, k.to_owned(), v.to_owned()))
    };
    let mut found = BTreeSet::new();
    let mut section = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let Some((active, key, value)) = key_line(line) else { continue };
        let full = if section.is_empty() { key.clone() } else { format!("{section}.{key}") };
        assert!(expected.contains(&full), "herald.example.toml names `{full}`, which is not a configuration key");
        // Documented: the nearest line above that is not a key line is a comment.
        let doc = lines[..i].iter().rev().find(|l| key_line(l).is_none()).copied().unwrap_or("");
        assert!(doc.starts_with('#'), "`{full}` in herald.example.toml has no comment above it");
        if !active {
            // Every commented-out example is a value of the right type.
            let doc =
                if section.is_empty() { format!("{key} = {value}") } else { format!("[{section}]\n{key} = {value}") };
            let parsed: Result<Config, _> =
                Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(&doc)).extract();
            assert!(parsed.is_ok(), "the example for `{full}` is not accepted: {parsed:?}");
        }
        found.insert(full);
    }
    let missing: Vec<_> = expected.difference(&found).collect();
    assert!(missing.is_empty(), "herald.example.toml lacks {missing:?}");
}

#[test]
fn test_suite_variables_are_not_configuration() {
    assert!(Config::load(None, env(&[("HERALD_TEST_POSTGRES_URL", "x")]), &FlagOverrides::default()).is_ok());
}

/// A `[push]` section in a file beside its key files, loaded, and the
/// transports built from it while the files are there.
fn load_push(toml: &str, files: &[(&str, &str)]) -> Result<(Config, Transports), String> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let path = dir.path().join("herald.toml");
    std::fs::write(&path, toml.replace("DIR", &dir.path().display().to_string())).unwrap();
    let config = Config::load(Some(&path), env(&[]), &FlagOverrides::default()).map_err(|e| e.to_string())?;
    let transports = config.push.transports().map_err(|e| e.to_string())?;
    Ok((config, transports))
}

use crate::delivery::channel::push::Transports;

#[test]
fn web_push_takes_a_generated_key_from_the_file_or_the_environment_and_never_echoes_a_bad_one() {
    let (private, public) = crate::delivery::channel::push::vapid::generate_key_pair();
    let (c, transports) = load_push(
        &format!("[push]\nvapid_private_key = \"{private}\"\nvapid_subject = \"mailto:ops@example.com\"\n"),
        &[],
    )
    .unwrap();
    assert!(c.push.is_configured());
    assert_eq!(transports.web.unwrap().vapid().public_key(), public);
    assert!(transports.fcm.is_none() && transports.apns.is_none());

    let from_env =
        env(&[("HERALD_PUSH__VAPID_PRIVATE_KEY", &private), ("HERALD_PUSH__VAPID_SUBJECT", "https://example.com/ops")]);
    let c = Config::load(None, from_env, &FlagOverrides::default()).unwrap();
    assert_eq!(c.push.vapid_key().unwrap().unwrap().public_key(), public);

    let err = load_push(
        "[push]\nvapid_private_key = \"c2VjcmV0LXRoYXQtaXMtc2hvcnQ\"\nvapid_subject = \"mailto:a@b.c\"\n",
        &[],
    )
    .err()
    .expect("refused");
    assert!(
        err.contains("push.vapid_private_key") && err.contains("32-byte") && err.contains("herald push vapid-keys"),
        "{err}"
    );
    assert!(!err.contains("c2VjcmV0"), "the key is a secret: {err}");
    let err =
        load_push(&format!("[push]\nvapid_private_key = \"{private}\"\nvapid_subject = \"ops@example.com\"\n"), &[])
            .err()
            .expect("refused");
    assert!(
        err.contains("push.vapid_subject") && err.contains("\"ops@example.com\"") && err.contains("mailto:"),
        "{err}"
    );
    let err = load_push(&format!("[push]\nvapid_private_key = \"{private}\"\n"), &[]).err().expect("refused");
    assert!(err.contains("push.vapid_subject") && err.contains("required with push.vapid_private_key"), "{err}");
    let err = load_push("[push]\nvapid_subject = \"mailto:a@b.c\"\n", &[]).err().expect("refused");
    assert!(err.contains("push.vapid_private_key") && err.contains("(unset)"), "{err}");
    // push.timeout binds only a configured provider: without one, a short
    // worker.deliver_timeout must not be refused for a channel that is off.
    assert!(load_push("[push]\ntimeout = \"2m\"\n", &[]).is_ok(), "push is off: its timeout is not checked");
    let on = format!("[push]\nvapid_private_key = \"{private}\"\nvapid_subject = \"mailto:a@b.c\"\ntimeout = \"2m\"\n");
    let err = load_push(&on, &[]).err().expect("refused");
    assert!(err.contains("push.timeout") && err.contains("worker.deliver_timeout"), "{err}");
    assert!(!Config::default().push.is_configured());
}

#[test]
fn fcm_needs_a_readable_service_account_file() {
    let key = include_str!("../../tests/push/fcm-test-key.pem");
    let account = serde_json::json!({
        "type": "service_account", "project_id": "herald-test", "private_key_id": "k1", "private_key": key,
        "client_email": "herald@herald-test.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token",
    })
    .to_string();
    let (c, transports) =
        load_push("[push.fcm]\nservice_account_file = \"DIR/sa.json\"\n", &[("sa.json", &account)]).unwrap();
    assert_eq!(c.push.fcm.endpoint, "https://fcm.googleapis.com");
    assert_eq!(transports.fcm.unwrap().project_id(), "herald-test");

    let err = load_push("[push.fcm]\nservice_account_file = \"DIR/missing.json\"\n", &[]).err().expect("refused");
    assert!(
        err.contains("push.fcm.service_account_file") && err.contains("missing.json") && err.contains("readable"),
        "{err}"
    );
    let err = load_push("[push.fcm]\nservice_account_file = \"DIR/sa.json\"\n", &[("sa.json", "{\"project_id\": 1}")])
        .err()
        .expect("refused");
    assert!(err.contains("push.fcm.service_account_file") && err.contains("service-account JSON"), "{err}");
    let err = load_push("[push.fcm]\nendpoint = \"fcm.googleapis.com\"\n", &[]).err().expect("refused");
    assert!(err.contains("push.fcm.endpoint") && err.contains("https://"), "{err}");
}

#[test]
fn apns_needs_all_four_credentials_an_ec_key_and_ten_character_ids() {
    use p256::pkcs8::EncodePrivateKey;
    let ec = p256::SecretKey::from_slice(&[7u8; 32]).unwrap().to_pkcs8_pem(Default::default()).unwrap().to_string();
    let rsa = include_str!("../../tests/push/fcm-test-key.pem");
    let section = |key_id: &str, team_id: &str| {
        format!(
            "[push.apns]\nkey_file = \"DIR/AuthKey.p8\"\nkey_id = \"{key_id}\"\nteam_id = \"{team_id}\"\ntopic = \"com.example.app\"\n"
        )
    };
    let (c, transports) = load_push(&section("ABC123DEFG", "TEAM123456"), &[("AuthKey.p8", &ec)]).unwrap();
    assert_eq!(c.push.apns.endpoint, "https://api.push.apple.com");
    assert!(transports.apns.is_some() && transports.web.is_none());

    let err = load_push(&section("ABC123", "TEAM123456"), &[("AuthKey.p8", &ec)]).err().expect("refused");
    assert!(err.contains("push.apns.key_id") && err.contains("\"ABC123\"") && err.contains("10-character"), "{err}");
    let err = load_push(&section("ABC123DEFG", "TEAM 12345"), &[("AuthKey.p8", &ec)]).err().expect("refused");
    assert!(err.contains("push.apns.team_id") && err.contains("10-character"), "{err}");
    let err = load_push(&section("ABC123DEFG", "TEAM123456"), &[("AuthKey.p8", rsa)]).err().expect("refused");
    assert!(err.contains("push.apns.key_file") && err.contains("EC P-256"), "{err}");
    let err = load_push(&section("ABC123DEFG", "TEAM123456"), &[]).err().expect("refused");
    assert!(err.contains("push.apns.key_file") && err.contains("readable .p8"), "{err}");
    let err =
        load_push("[push.apns]\nkey_file = \"DIR/AuthKey.p8\"\nkey_id = \"ABC123DEFG\"\n", &[("AuthKey.p8", &ec)])
            .err()
            .expect("refused");
    assert!(
        err.contains("push.apns.team_id")
            && err.contains("(unset)")
            && err.contains("key_file, key_id, team_id and topic"),
        "{err}"
    );
}

/// The key a refused configuration names, and the whole message.
fn refused_key(pairs: &[(&str, &str)]) -> (&'static str, String) {
    match Config::load(None, env(pairs), &FlagOverrides::default()).expect_err("refused") {
        e @ ConfigError::Invalid { key, .. } => (key, e.to_string()),
        other => panic!("not an invalid value: {other}"),
    }
}

const TWILIO: &str = "twilio://AC0123456789abcdef0123456789abcdef:sekrit@api.twilio.com";

#[test]
fn sms_settings_are_checked_with_the_transports_parsers() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    let c = load(&[]).unwrap();
    assert!(!c.sms.is_configured());
    assert_eq!((c.sms.max_segments, c.sms.rate), (3, None));
    let c = load(&[("HERALD_SMS__TRANSPORT", TWILIO), ("HERALD_SMS__FROM", "+1 415 555 0100")]).unwrap();
    assert!(c.sms.is_configured());
    let sms = c.sms.check().unwrap().unwrap();
    assert_eq!(sms.from.as_str(), "+14155550100");
    let kannel = load(&[("HERALD_SMS__TRANSPORT", "kannel://u:p@127.0.0.1"), ("HERALD_SMS__FROM", "Herald")]);
    assert!(kannel.unwrap().sms.check().unwrap().is_some());
    let twilio_service = [
        ("HERALD_SMS__TRANSPORT", TWILIO),
        ("HERALD_SMS__FROM", "messaging_service_sid=MG0123456789abcdef0123456789abcdef"),
    ];
    assert!(load(&twilio_service).is_ok());

    // A transport that is not one: named, its token never shown.
    let (key, said) = refused_key(&[("HERALD_SMS__TRANSPORT", "smpp://u:sekrit@h"), ("HERALD_SMS__FROM", "Herald")]);
    assert_eq!(key, "sms.transport");
    assert!(said.contains("kannel://") && !said.contains("sekrit"), "{said}");
    let (key, said) = refused_key(&[("HERALD_SMS__TRANSPORT", TWILIO)]);
    assert_eq!(key, "sms.from", "{said}");
    assert!(said.contains("required with sms.transport"), "{said}");
    for from in ["Herald Notify X", "+1 212 000 0000", "messaging_service_sid=MGxyz"] {
        let (key, said) = refused_key(&[("HERALD_SMS__TRANSPORT", TWILIO), ("HERALD_SMS__FROM", from)]);
        assert_eq!(key, "sms.from", "{from}: {said}");
    }
    // A Messaging Service is Twilio's.
    let (key, said) = refused_key(&[
        ("HERALD_SMS__TRANSPORT", "kannel://u:p@127.0.0.1"),
        ("HERALD_SMS__FROM", "messaging_service_sid=MG0123456789abcdef0123456789abcdef"),
    ]);
    assert_eq!(key, "sms.from", "{said}");
    assert!(said.contains("Twilio"), "{said}");
    for n in ["0", "11"] {
        let (key, said) = refused_key(&[("HERALD_SMS__MAX_SEGMENTS", n)]);
        assert_eq!(key, "sms.max_segments", "{said}");
        assert!(said.contains("1 to 10"), "{said}");
    }
    for rate in ["0", "-1"] {
        let (key, said) = refused_key(&[("HERALD_SMS__RATE", rate)]);
        assert_eq!(key, "sms.rate", "{said}");
    }
    assert_eq!(load(&[("HERALD_SMS__RATE", "0.5")]).unwrap().sms.rate, Some(0.5));
    // HELP's answer must fit the segment limit.
    let (key, said) = refused_key(&[("HERALD_SMS__MAX_SEGMENTS", "1"), ("HERALD_SMS__HELP_TEXT", &"x".repeat(161))]);
    assert_eq!(key, "sms.help_text", "{said}");
    assert!(said.contains("segments"), "{said}");
    let (key, _) = refused_key(&[("HERALD_SMS__HELP_TEXT", "  ")]);
    assert_eq!(key, "sms.help_text");
    assert!(load(&[("HERALD_SMS__HELP_TEXT", "Reply STOP to stop.")]).is_ok());
}

#[test]
fn slack_needs_a_bot_token_and_an_http_api_url() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    let c = load(&[]).unwrap();
    assert!(!c.slack.is_configured());
    assert_eq!(c.slack.api_url, "https://slack.com/api");
    let c = load(&[("HERALD_SLACK__BOT_TOKEN", "xoxb-1-2-abc"), ("HERALD_SLACK__API_URL", "http://127.0.0.1:9/api")])
        .unwrap();
    assert!(c.slack.is_configured());
    assert_eq!(c.slack.check().unwrap().unwrap().api_url.as_str(), "http://127.0.0.1:9/api");
    let (key, said) = refused_key(&[("HERALD_SLACK__BOT_TOKEN", "xoxp-user-token")]);
    assert_eq!(key, "slack.bot_token");
    assert!(said.contains("xoxb-") && !said.contains("user-token"), "{said}");
    let (key, said) = refused_key(&[("HERALD_SLACK__API_URL", "slack.com/api")]);
    assert_eq!(key, "slack.api_url", "{said}");
}

#[test]
fn http_public_url_is_the_base_and_email_public_url_its_older_name() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default());
    assert_eq!(load(&[]).unwrap().public_url().unwrap(), None);
    let c = load(&[("HERALD_HTTP__PUBLIC_URL", "https://h.example/")]).unwrap();
    assert_eq!(c.public_url().unwrap(), Some("https://h.example"));
    let c = load(&[("HERALD_EMAIL__PUBLIC_URL", "https://old.example")]).unwrap();
    assert_eq!(c.public_url().unwrap(), Some("https://old.example"), "the alias still works");
    let same = [("HERALD_HTTP__PUBLIC_URL", "https://h.example"), ("HERALD_EMAIL__PUBLIC_URL", "https://h.example/")];
    assert_eq!(load(&same).unwrap().public_url().unwrap(), Some("https://h.example"));
    // An SMTP transport is satisfied by either name.
    let smtp = [
        ("HERALD_EMAIL__TRANSPORT", "smtps://u:p@mail.example.com"),
        ("HERALD_EMAIL__FROM", "a@b.c"),
        ("HERALD_HTTP__PUBLIC_URL", "https://h.example"),
    ];
    assert!(load(&smtp).is_ok());

    let (key, said) = refused_key(&[
        ("HERALD_HTTP__PUBLIC_URL", "https://a.example"),
        ("HERALD_EMAIL__PUBLIC_URL", "https://b.example"),
    ]);
    assert_eq!(key, "http.public_url");
    assert!(said.contains("email.public_url") && said.contains("b.example"), "{said}");
    let (key, _) = refused_key(&[("HERALD_HTTP__PUBLIC_URL", "h.example")]);
    assert_eq!(key, "http.public_url");
    let (key, _) = refused_key(&[("HERALD_EMAIL__PUBLIC_URL", "h.example")]);
    assert_eq!(key, "email.public_url");
}

/// A number with its `+`, a short code and a count, each as an operator
/// would set them in the environment.
#[test]
fn environment_values_keep_their_text_where_a_setting_wants_text() {
    let load = |pairs: &[(&str, &str)]| Config::load(None, env(pairs), &FlagOverrides::default()).unwrap();
    let c = load(&[("HERALD_SMS__FROM", "+14155550100"), ("HERALD_SMS__RATE", "50"), ("HERALD_WORKER__BATCH", "250")]);
    assert_eq!(c.sms.from.as_deref(), Some("+14155550100"));
    assert_eq!((c.sms.rate, c.worker.batch), (Some(50.0), 250));
    assert_eq!(load(&[("HERALD_SMS__FROM", "12345")]).sms.from.as_deref(), Some("12345"));
    assert_eq!(load(&[("HERALD_SMS__RATE", "0.5")]).sms.rate, Some(0.5));
    assert_eq!(load(&[("HERALD_SMS__FROM", "Herald")]).sms.from.as_deref(), Some("Herald"));
}
