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

/// `tests/smtp/server.py` on a free port; killed when dropped.
pub struct SmtpSink {
    pub port: u16,
    pub dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl SmtpSink {
    /// Starts the sink. Outside CI, a test without python3 or aiosmtpd ends
    /// ignored, saying which is missing; under `CI=true` that is a failure.
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
        let spawned = tokio::process::Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(dir.path())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) if !in_ci() => {
                super::harness::skip(format!("cannot run python3 ({e}); install python3 and aiosmtpd"))
            }
            Err(e) => panic!("CI=true but python3 cannot be run: {e}"),
        };
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        match tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await {
            Ok(Ok(Some(l))) if l.trim() == "READY" => SmtpSink { port, dir, _child: child },
            other if !in_ci() => {
                super::harness::skip(format!("the SMTP sink did not start ({other:?}); pip install aiosmtpd"))
            }
            other => panic!("CI=true but the SMTP sink did not start: {other:?} (is aiosmtpd installed?)"),
        }
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
