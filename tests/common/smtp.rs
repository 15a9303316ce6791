//! `tests/smtp/server.py` (aiosmtpd) as a real SMTP server for tests: it
//! answers per recipient (250, 451, 421, a dropped connection, 550 5.1.1,
//! 554 5.7.1), writes each message it accepts to a file and logs each
//! connection, so tests count what arrived rather than what Herald says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use super::in_ci;

/// How long the sink may take to say READY.
const STARTUP: Duration = Duration::from_secs(20);

/// What to tell the reader when the sink did not say READY: aiosmtpd
/// missing is by far the usual reason, and says what to install; anything
/// else quotes the sink's own last words. (The reason used to be the
/// debug print of the read, `Ok(Ok(None))`, which says nothing a reader
/// can act on.)
fn why_the_sink_did_not_start(
    first: Result<std::io::Result<Option<String>>, tokio::time::error::Elapsed>,
    stderr: &str,
) -> String {
    if stderr.contains("No module named 'aiosmtpd'") {
        return "needs aiosmtpd (python3 cannot import it): pip install aiosmtpd".into();
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr").trim();
    match first {
        Err(_) => format!("the SMTP sink (tests/smtp/server.py) did not say READY within {STARTUP:?}: {last}"),
        Ok(Ok(Some(line))) => format!("the SMTP sink (tests/smtp/server.py) said {line:?} instead of READY: {last}"),
        Ok(_) => format!("the SMTP sink (tests/smtp/server.py) exited before it was ready: {last}"),
    }
}

/// `tests/smtp/server.py` on a free port; killed when dropped.
pub struct SmtpSink {
    pub port: u16,
    pub dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl SmtpSink {
    /// Starts the sink. Outside CI, a test without python3 or aiosmtpd ends
    /// ignored, saying which is missing and how to install it; under
    /// `CI=true` that is a failure.
    pub async fn start() -> SmtpSink {
        SmtpSink::start_with(&[]).await
    }

    /// A sink speaking TLS: `mode` is `starttls` or `implicit`, with the
    /// certificate chain and key (PEM files) it presents.
    pub async fn start_tls(mode: &str, cert: &Path, key: &Path) -> SmtpSink {
        SmtpSink::start_with(&[mode, cert.to_str().unwrap(), key.to_str().unwrap()]).await
    }

    async fn start_with(extra: &[&str]) -> SmtpSink {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/smtp/server.py");
        let dir = tempfile::tempdir().unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        // The sink's stderr goes to a file, read only when it fails to
        // start: a pipe nobody reads would fill and stall the sink.
        let stderr_path = dir.path().join("sink-stderr.log");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let spawned = tokio::process::Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(dir.path())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) if !in_ci() => super::harness::skip(format!(
                "needs python3 ({e}) with aiosmtpd: apt-get install python3 python3-pip, then pip install aiosmtpd"
            )),
            Err(e) => panic!("CI=true but python3 cannot be run: {e}"),
        };
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(STARTUP, lines.next_line()).await;
        if matches!(&first, Ok(Ok(Some(l))) if l.trim() == "READY") {
            return SmtpSink { port, dir, _child: child };
        }
        // Let it finish writing why it stopped (it has, if stdout closed).
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        let why = why_the_sink_did_not_start(first, &std::fs::read_to_string(&stderr_path).unwrap_or_default());
        if in_ci() {
            panic!("CI=true but the SMTP sink did not start: {why}");
        }
        super::harness::skip(why)
    }

    /// Connections the server accepted (it logs one line per connection).
    pub fn connections(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("connections.log")).map_or(0, |s| s.lines().count())
    }

    /// The received messages' files, in the order they arrived.
    pub fn messages(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "eml"))
            .collect();
        v.sort();
        v
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}?tls=none", self.port)
    }

    /// The environment of Herald instances (child processes) that mail this
    /// sink, with fixed secrets, their sender named after the `suite`
    /// (`"cluster"`: `Herald Cluster <cluster@herald.test>`).
    pub fn instance_env(&self, suite: &str) -> Vec<(String, String)> {
        let title = suite[..1].to_uppercase() + &suite[1..];
        [
            ("HERALD_EMAIL__TRANSPORT", self.url()),
            ("HERALD_EMAIL__FROM", format!("Herald {title} <{suite}@herald.test>")),
            ("HERALD_EMAIL__PUBLIC_URL", "https://herald.test".to_owned()),
            ("HERALD_EMAIL__ADDRESS_SECRET", format!("{suite} test secret, not for production")),
            ("HERALD_INBOX__TOKEN_SECRET", format!("{suite} test token secret, at least 32 chars")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Messages received per `X-Herald-Outbox-Id`.
    pub fn messages_per_outbox_id(&self) -> BTreeMap<String, u32> {
        let mut counts = BTreeMap::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "eml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let id = text
                .lines()
                .take_while(|l| !l.is_empty())
                .find_map(|l| l.strip_prefix("X-Herald-Outbox-Id: "))
                .unwrap_or_else(|| panic!("{} has no X-Herald-Outbox-Id header", path.display()))
                .trim()
                .to_owned();
            *counts.entry(id).or_insert(0) += 1;
        }
        counts
    }
}
