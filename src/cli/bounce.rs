//! `herald bounce parse|import`: bounce messages read from files or a
//! maildir, parsed as the inbound webhook parses them.

use std::io::Write;
use std::path::PathBuf;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;

use super::ready_store;

/// `herald bounce parse`: exits non-zero if any file could not be read or
/// parsed, after printing what it could.
pub(super) fn bounce_parse(files: &[PathBuf], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut failures = 0;
    for file in files {
        let name = file.display().to_string();
        let parsed = std::fs::read(file)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|raw| crate::feedback::bounce::parse(&raw).map_err(|e| e.to_string()));
        let report = match parsed {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{name}: {e}");
                failures += 1;
                continue;
            }
        };
        if report.recipients.is_empty() {
            eprintln!("{name}: not a bounce, complaint or auto-reply (no recipient found)");
        }
        for r in &report.recipients {
            if json {
                let line = serde_json::json!({
                    "file": name, "recipient": r.recipient, "status": r.status, "reply_code": r.reply_code,
                    "kind": r.kind, "reason": r.reason, "original_message_id": r.original_message_id,
                });
                writeln!(out, "{line}")?;
            } else {
                writeln!(
                    out,
                    "{name}\t{}\t{}\t{}\t{}\t{}",
                    r.recipient,
                    r.status.as_deref().unwrap_or("-"),
                    r.reply_code.map_or("-".to_owned(), |c| c.to_string()),
                    serde_json::to_value(r.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                    r.reason
                )?;
            }
        }
    }
    if failures > 0 {
        anyhow::bail!("{failures} of {} file(s) could not be parsed", files.len());
    }
    Ok(())
}

/// Files under `paths`: files as given, directories' files, and a maildir's
/// `cur/` and `new/`.
fn message_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let dirs: Vec<PathBuf> = if p.join("cur").is_dir() || p.join("new").is_dir() {
                vec![p.join("cur"), p.join("new")]
            } else {
                vec![p.clone()]
            };
            for d in dirs.into_iter().filter(|d| d.is_dir()) {
                let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", d.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file())
                    .collect();
                files.sort();
                out.extend(files);
            }
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

pub(super) async fn bounce_import(config: &Config, paths: &[PathBuf]) -> anyhow::Result<()> {
    let store = ready_store(config).await?;
    let keys = crate::app::address_keys(config)?;
    let (mut recorded, mut duplicates, mut suppressed, mut failures) = (0, 0, 0, 0);
    let files = message_files(paths)?;
    for file in &files {
        let raw = match std::fs::read(file) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}: cannot read: {e}", file.display());
                failures += 1;
                continue;
            }
        };
        let policy = config.bounces.soft_bounce_policy();
        match crate::feedback::ingest::ingest_mail(&store, &keys, policy, &raw, "mail", SystemClock.now()).await {
            Ok(r) => {
                recorded += r.recorded;
                duplicates += r.duplicates;
                suppressed += r.suppressed;
                for item in &r.items {
                    println!("{}\t{}\t{}", file.display(), item.kind, item.action);
                }
            }
            Err(crate::feedback::ingest::IngestError::Parse(e)) => {
                eprintln!("{}: {e}", file.display());
                failures += 1;
            }
            Err(crate::feedback::ingest::IngestError::Store(e)) => return Err(e.into()),
        }
    }
    eprintln!(
        "{} file(s): {recorded} recorded, {duplicates} already recorded, {suppressed} address(es) suppressed, {failures} unreadable",
        files.len()
    );
    if failures > 0 {
        anyhow::bail!("{failures} of {} file(s) could not be read or parsed", files.len());
    }
    Ok(())
}
