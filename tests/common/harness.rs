//! The test runner of the suites that need something outside the process (a
//! PostgreSQL or MariaDB server, the aiosmtpd SMTP sink, PostgreSQL and
//! MariaDB binaries), so a test that could not run says so.
//!
//! With the built-in harness a test can only pass or fail: one whose backend
//! was missing returned early and was counted as passed (`cargo test` once
//! claimed 378 passed with about 130 of them never run). libtest's
//! `#[ignore]` is decided at compile time, and cargo does not rebuild a test
//! when a server starts or an environment variable changes, so it cannot say
//! "not here, not now". These suites therefore run under `libtest-mimic`
//! (`harness = false` in `Cargo.toml`), which keeps libtest's command line
//! and output and lets a test end as *ignored, with a reason*, decided when
//! it runs: [`skip`] unwinds out of the test with that reason, and
//! [`test`] turns it into `ignored (reason)`. The summary line counts it
//! under `ignored`, never under `passed`.
//!
//! Each suite's `main` lists its tests (`named_tests!` names each after its
//! function; `backend_tests!` and `per_backend_tests!` list the per-backend
//! ones): a test function left out of the list is dead code, which
//! `cargo clippy -D warnings` refuses.
//!
//! An ignored test says what it needs and the command that runs it, so the
//! reader can act on the line alone: [`skip`]'s reason names what is
//! missing and how to provide it, and [`test`] adds the command
//! (`cargo test --test SUITE -- --exact NAME`). An opt-in test
//! ([`on_request`]) names itself the same way: libtest-mimic prints a test
//! flagged ignored as a bare `ignored` (its `with_ignored_flag` takes no
//! reason; only a test that ran and ignored itself can give one), so
//! without `--ignored` or `--include-ignored` an opt-in test is listed as
//! one that ends ignored at once, with that reason (an outside review found
//! nine bare `ignored` lines and thirteen `Ok(Ok(None))` reasons).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

pub use libtest_mimic::Trial;
use libtest_mimic::{Arguments, Completion};

/// The unwind payload of a test that could not run here.
struct Skip(String);

/// Set by [`main`]: under the built-in harness a skip is a failure, because
/// it could only be reported as passed there.
static RUNNER: AtomicBool = AtomicBool::new(false);

/// Ends the current test as ignored, with `reason` (what was missing and how
/// to provide it). Only for what the machine lacks; under `CI=true` the
/// callers fail instead.
pub fn skip(reason: impl Into<String>) -> ! {
    let reason = reason.into();
    if !RUNNER.load(Ordering::SeqCst) {
        panic!("this test cannot run here ({reason}), and its suite has no runner that reports it as ignored");
    }
    // resume_unwind, not panic!: no panic message, the runner reports it.
    resume_unwind(Box::new(Skip(reason)))
}

thread_local! {
    /// Whether this thread runs a test body (not a tokio worker of it).
    static TEST_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `trials` with libtest's command line (filters, `--ignored`,
/// `--include-ignored`, `--test-threads`, `--list`, `--exact`).
///
/// libtest-mimic cannot capture a passing test's output the way libtest
/// does, so panics that tests provoke on purpose (a channel that panics, in
/// a tokio worker thread the worker catches) would print whole backtraces
/// under `RUST_BACKTRACE=1`. Those print one line; a panic on a test's own
/// thread (a failing assertion) keeps the default report and backtrace.
pub fn main(trials: Vec<Trial>) -> ExitCode {
    RUNNER.store(true, Ordering::SeqCst);
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if TEST_THREAD.with(std::cell::Cell::get) {
            default_hook(info);
        } else {
            let thread = std::thread::current();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info.location().map(|l| l.to_string()).unwrap_or_default();
            eprintln!("thread '{}' panicked at {at}: {message}", thread.name().unwrap_or("<unnamed>"));
        }
    }));
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// Runs `f` marked as a test body (see [`main`]'s panic hook).
fn as_test_body<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    TEST_THREAD.with(|t| t.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    TEST_THREAD.with(|t| t.set(false));
    result
}

/// The suite this harness runs in: the test target's name, as
/// `cargo test --test` takes it.
const SUITE: &str = env!("CARGO_CRATE_NAME");

/// The command that runs one test of this suite.
fn command(name: &str, opt_in: bool) -> String {
    let ignored = if opt_in { " --ignored" } else { "" };
    format!("cargo test --test {SUITE} --{ignored} --exact {name}")
}

/// An async test on its own two-worker tokio runtime (what
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` gave).
pub fn test<F, Fut>(name: impl Into<String>, f: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let name = name.into();
    let run = command(&name, false);
    Trial::ignorable_test(name, move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the test");
        let outcome = as_test_body(|| runtime.block_on(f()));
        completion(outcome, &run)
    })
}

/// A synchronous test.
pub fn sync_test(name: impl Into<String>, f: impl FnOnce() + Send + 'static) -> Trial {
    let name = name.into();
    let run = command(&name, false);
    Trial::ignorable_test(name, move || completion(as_test_body(f), &run))
}

/// A test that runs only when asked (`--ignored`, `--include-ignored`), like
/// `#[ignore]`: the long chaos and fault runs. `why` says why it is opt-in
/// (`"a chaos run, tens of seconds"`); without the flag the test is
/// reported `ignored (opt-in, WHY: COMMAND)`.
pub fn on_request<F, Fut>(name: impl Into<String>, why: &str, f: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let name = name.into();
    if asked_for_ignored() {
        return test(name, f).with_ignored_flag(true);
    }
    let reason = format!("opt-in, {why}: {}", command(&name, true));
    Trial::ignorable_test(name, move || Ok(Completion::ignored_with(reason)))
}

/// Whether the command line asks for the opt-in tests, read as
/// libtest-mimic reads it.
fn asked_for_ignored() -> bool {
    static ASKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ASKED.get_or_init(|| {
        let args = Arguments::from_args();
        args.ignored || args.include_ignored
    })
}

fn completion(outcome: std::thread::Result<()>, run: &str) -> Result<Completion, libtest_mimic::Failed> {
    match outcome {
        Ok(()) => Ok(Completion::Completed),
        Err(payload) => match payload.downcast::<Skip>() {
            Ok(skip) => Ok(Completion::ignored_with(format!("{}; then: {run}", skip.0))),
            // A real failure: the runner reports it with its message.
            Err(other) => resume_unwind(other),
        },
    }
}
