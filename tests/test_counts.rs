//! The suite counts honestly: a test that cannot run on this machine (no
//! database server, no SMTP sink) is reported as `ignored (reason)`, never
//! as passed, and the backends are found, skipped or failed as the README
//! says. See `tests/common/harness.rs`.

mod common;

use common::harness::{self, sync_test};
use common::{Backend, ServerChoice, choose_server};

/// The inner suite this binary runs in a child process, as `cargo test`
/// would run any suite: one test that runs, one whose server is missing,
/// one whose SMTP sink cannot start, one opt-in.
const INNER: &str = "HERALD_TEST_COUNTS_INNER";

/// Runs the inner suite with `args`, as `cargo test` would; its output with
/// runs of spaces collapsed (names are padded to a common width).
fn inner(args: &[&str]) -> (bool, String) {
    // A Python package that fails to import exactly as a missing aiosmtpd
    // does, first on the path: the SMTP sink then fails to start here
    // whether or not aiosmtpd is installed.
    let fake = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake.path().join("aiosmtpd")).unwrap();
    std::fs::write(
        fake.path().join("aiosmtpd/__init__.py"),
        "raise ModuleNotFoundError(\"No module named 'aiosmtpd'\", name='aiosmtpd')\n",
    )
    .unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(INNER, "1")
        .env("PYTHONPATH", fake.path())
        // Under CI=true a missing sink fails instead; here it must skip.
        .env_remove("CI")
        .arg("--test-threads=1")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    (out.status.success(), stdout)
}

fn a_test_that_cannot_run_is_counted_as_ignored_with_its_reason() {
    let (ok, stdout) = inner(&[]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("test runs ... ok"), "{stdout}");
    assert!(stdout.contains("test result: ok. 1 passed; 0 failed; 3 ignored;"), "{stdout}");
}

/// Every ignored line names what is missing and the command that
/// runs the test; opt-in tests included (they printed a bare `ignored`),
/// and the SMTP sink's (it printed `Ok(Ok(None))`).
fn each_ignored_test_says_what_it_needs_and_how_to_run_it() {
    let (_, stdout) = inner(&[]);
    for line in [
        "test needs_a_server ... ignored (no server answers here; then: \
         cargo test --test test_counts -- --exact needs_a_server)",
        "test needs_the_smtp_sink ... ignored (needs aiosmtpd (python3 cannot import it): pip install aiosmtpd; \
         then: cargo test --test test_counts -- --exact needs_the_smtp_sink)",
        "test opt_in ... ignored (opt-in, a long run: cargo test --test test_counts -- --ignored --exact opt_in)",
    ] {
        assert!(stdout.contains(line), "expected {line:?} in:\n{stdout}");
    }
    let bare: Vec<&str> = stdout.lines().filter(|l| l.ends_with("... ignored")).collect();
    assert!(bare.is_empty(), "ignored without a reason: {bare:?}");

    // And that command runs it.
    let (ok, stdout) = inner(&["--ignored", "--exact", "opt_in"]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("test opt_in ... ok"), "{stdout}");
    assert!(stdout.contains("test result: ok. 1 passed; 0 failed; 0 ignored;"), "{stdout}");
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
    assert_eq!(
        reason,
        "needs a MariaDB or MySQL server: HERALD_TEST_MYSQL_URL is not set and nothing answers on 127.0.0.1:3306 \
         (start one there, or set HERALD_TEST_MYSQL_URL)"
    );
    assert!(matches!(choose_server(Backend::MySql, None, false, true), ServerChoice::Fail(_)), "CI must test it");
}

fn main() -> std::process::ExitCode {
    if std::env::var_os(INNER).is_some() {
        return harness::main(vec![
            harness::test("runs", || async {}),
            harness::test("needs_a_server", || async { harness::skip("no server answers here") }),
            harness::test("needs_the_smtp_sink", || async {
                common::smtp::SmtpSink::start().await;
            }),
            harness::on_request("opt_in", "a long run", || async {}),
        ]);
    }
    harness::main(vec![
        sync_test(
            "a_test_that_cannot_run_is_counted_as_ignored_with_its_reason",
            a_test_that_cannot_run_is_counted_as_ignored_with_its_reason,
        ),
        sync_test(
            "each_ignored_test_says_what_it_needs_and_how_to_run_it",
            each_ignored_test_says_what_it_needs_and_how_to_run_it,
        ),
        sync_test("backends_are_found_skipped_or_failed", backends_are_found_skipped_or_failed),
    ])
}
