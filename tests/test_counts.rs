//! The suite counts honestly: a test that cannot run on this machine (no
//! database server, no SMTP sink) is reported as `ignored (reason)`, never
//! as passed, and the backends are found, skipped or failed as the README
//! says. See `tests/common/harness.rs`.

mod common;

use common::harness::{self, sync_test};
use common::{Backend, ServerChoice, choose_server};

/// The inner suite this binary runs in a child process, as `cargo test`
/// would run any suite: one test that runs, one whose server is missing.
const INNER: &str = "HERALD_TEST_COUNTS_INNER";

fn a_test_that_cannot_run_is_counted_as_ignored_with_its_reason() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(INNER, "1")
        .arg("--test-threads=1")
        .output()
        .unwrap();
    // Names are padded to a common width; compare words.
    let stdout: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("test runs ... ok"), "{stdout}");
    assert!(stdout.contains("test needs_a_server ... ignored (no server answers here)"), "{stdout}");
    assert!(stdout.contains("test result: ok. 1 passed; 0 failed; 1 ignored;"), "{stdout}");
}

fn backends_are_found_skipped_or_failed() {
    let local = "postgres://postgres@127.0.0.1:5432/test".to_owned();
    let given = "postgres://u@db.example:5433/x";
    assert_eq!(
        choose_server(Backend::Postgres, Some(given), false, false),
        ServerChoice::Use { url: given.into(), given: true },
        "a URL that is set is used, reachable or not"
    );
    assert_eq!(
        choose_server(Backend::Postgres, None, true, false),
        ServerChoice::Use { url: local.clone(), given: false },
        "the usual local server is found when the variable is unset"
    );
    assert_eq!(choose_server(Backend::Postgres, Some(""), true, true), ServerChoice::Use { url: local, given: false });
    let ServerChoice::Skip(reason) = choose_server(Backend::MySql, None, false, false) else { panic!() };
    assert_eq!(reason, "MySql: HERALD_TEST_MYSQL_URL is not set and nothing answers on 127.0.0.1:3306");
    assert!(matches!(choose_server(Backend::MySql, None, false, true), ServerChoice::Fail(_)), "CI must test it");
}

fn main() -> std::process::ExitCode {
    if std::env::var_os(INNER).is_some() {
        return harness::main(vec![
            harness::test("runs", || async {}),
            harness::test("needs_a_server", || async { harness::skip("no server answers here") }),
        ]);
    }
    harness::main(vec![
        sync_test(
            "a_test_that_cannot_run_is_counted_as_ignored_with_its_reason",
            a_test_that_cannot_run_is_counted_as_ignored_with_its_reason,
        ),
        sync_test("backends_are_found_skipped_or_failed", backends_are_found_skipped_or_failed),
    ])
}
