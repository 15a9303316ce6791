//! Python reference libraries as test oracles (Twilio's `twilio` package,
//! Slack's `slack_sdk`): a script run with `python3`, its stdout returned.
//!
//! Without python3 or the package a test ends ignored, saying what to
//! install, except under `CI=true`, where it fails (`.ci/run` installs
//! them).

use std::io::Write;
use std::process::{Command, Stdio};

use super::in_ci;

/// Runs `script` with `input` on stdin, after checking that `module`
/// imports; `pip` is the package to name when it does not.
pub fn run(module: &str, pip: &str, script: &str, input: &str) -> String {
    let probe = Command::new("python3").args(["-c", &format!("import {module}")]).output();
    let missing = match probe {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "python3 cannot import {module} ({})",
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no error printed").trim()
        )),
        Err(e) => Some(format!("python3 cannot be run ({e})")),
    };
    if let Some(why) = missing {
        if in_ci() {
            panic!("CI=true but {why}");
        }
        super::harness::skip(format!("{why}: pip install {pip}"));
    }
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the {module} script failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
