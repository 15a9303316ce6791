//! Runs the parser over the sisimai set-of-emails sample in
//! `tests/data/bounces/` (BSD-2, see the README and licence there) and
//! compares with `expected.csv`, one row per recipient.
//!
//! Figures printed (run with `cargo test --test corpus -- --nocapture`):
//! * recipient match: the expected recipient is among the parsed ones;
//! * hard/soft agreement over rows whose expected `hard_or_soft` is hard or
//!   soft. A `Delayed` result counts as agreeing with an expected *soft* (a
//!   delay is a transient failure, which is what "soft" means there) and as
//!   disagreeing with an expected *hard*;
//! * status agreement where the expected status is a real code (not one of
//!   sisimai's invented X.0.9xx codes);
//! * complaint / auto-reply / delivered rows, counted apart.
//!
//! Rows that mention `delivered` in the `action` column are successful
//! deliveries: the parser must not report them, so they are left out of the
//! recipient and status rates and checked on their own.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use herald::feedback::bounce::{BounceKind, BounceRecipient, BounceReport, parse};

struct Row {
    file: String,
    recipient: String,
    status: String,
    pseudo: bool,
    reply_code: String,
    hard_or_soft: String,
    sample_kind: String,
    reason: String,
    original_message_id: String,
    action: String,
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bounces")
}

fn load_rows() -> Vec<Row> {
    let csv = fs::read_to_string(data_dir().join("expected.csv")).expect("expected.csv is readable");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header line").split(',').collect();
    let col = |name: &str| {
        header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("expected.csv has no column {name}"))
    };
    let (file, recipient, reason, status, pseudo, reply, hos, kind, msgid, action) = (
        col("file"),
        col("recipient"),
        col("reason"),
        col("status"),
        col("status_is_sisimai_pseudo"),
        col("reply_code"),
        col("hard_or_soft"),
        col("sample_kind"),
        col("original_message_id"),
        col("action"),
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            // The file holds no quoted fields (checked: no '"' in it).
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), header.len(), "malformed row: {line}");
            Row {
                file: f[file].to_string(),
                recipient: f[recipient].to_ascii_lowercase(),
                status: f[status].to_string(),
                pseudo: f[pseudo] == "yes",
                reply_code: f[reply].to_string(),
                hard_or_soft: f[hos].to_string(),
                sample_kind: f[kind].to_string(),
                reason: f[reason].to_string(),
                original_message_id: f[msgid].to_string(),
                action: f[action].to_string(),
            }
        })
        .collect()
}

fn kind_name(kind: BounceKind) -> &'static str {
    match kind {
        BounceKind::Hard => "hard",
        BounceKind::Soft => "soft",
        BounceKind::Complaint => "complaint",
        BounceKind::AutoReply => "auto_reply",
        BounceKind::Delayed => "delayed",
    }
}

fn describe(r: Option<&BounceRecipient>) -> String {
    match r {
        None => "recipient not found".into(),
        Some(r) => format!(
            "{} {} status={} reply={} reason={:.120}",
            r.recipient,
            kind_name(r.kind),
            r.status.as_deref().unwrap_or("-"),
            r.reply_code.map_or("-".into(), |c| c.to_string()),
            r.reason
        ),
    }
}

struct Rate {
    name: &'static str,
    ok: usize,
    total: usize,
    wrong: Vec<String>,
}

impl Rate {
    fn new(name: &'static str) -> Self {
        Self { name, ok: 0, total: 0, wrong: Vec::new() }
    }
    fn record(&mut self, ok: bool, wrong: impl FnOnce() -> String) {
        self.total += 1;
        if ok {
            self.ok += 1;
        } else {
            self.wrong.push(wrong());
        }
    }
    fn pct(&self) -> f64 {
        if self.total == 0 { 100.0 } else { 100.0 * self.ok as f64 / self.total as f64 }
    }
    fn print(&self) {
        println!("{:<28} {:>3}/{:<3} = {:6.2}%", self.name, self.ok, self.total, self.pct());
    }
}

#[test]
fn corpus_rates() {
    let rows = load_rows();
    assert!(rows.len() >= 200, "expected.csv should hold the full sample");

    let mut reports: HashMap<String, BounceReport> = HashMap::new();
    for row in &rows {
        if !reports.contains_key(&row.file) {
            let raw = fs::read(data_dir().join(&row.file)).expect("eml file is readable");
            let report = parse(&raw).unwrap_or_else(|e| panic!("{}: {e}", row.file));
            reports.insert(row.file.clone(), report);
        }
    }

    let mut recipient = Rate::new("recipient match");
    let mut hard_soft = Rate::new("hard/soft agreement");
    let mut status = Rate::new("status agreement");
    let mut complaint = Rate::new("arf/feedback -> Complaint");
    let mut autoreply = Rate::new("rfc3834 -> AutoReply");
    let mut delivered = Rate::new("delivered -> not reported");
    let mut reply = Rate::new("reply code (info)");
    let mut message_id = Rate::new("original Message-ID (info)");
    let mut delayed_as_soft = 0;

    for row in &rows {
        let report = &reports[&row.file];
        let got = report.recipients.iter().find(|r| r.recipient == row.recipient);
        let expected = format!(
            "{} {} status={} reply={} ({})",
            row.recipient,
            row.hard_or_soft,
            if row.status.is_empty() { "-" } else { &row.status },
            if row.reply_code.is_empty() { "-" } else { &row.reply_code },
            row.reason
        );
        let line = |got: Option<&BounceRecipient>| {
            format!("{}\n      expected: {}\n      got:      {}", row.file, expected, describe(got))
        };

        if row.action == "delivered" {
            delivered.record(got.is_none(), || line(got));
            continue;
        }
        recipient.record(got.is_some(), || {
            let all: Vec<&str> = report.recipients.iter().map(|r| r.recipient.as_str()).collect();
            format!("{}  (parsed: {:?})", line(got), all)
        });

        match row.hard_or_soft.as_str() {
            "hard" => hard_soft.record(got.is_some_and(|g| g.kind == BounceKind::Hard), || line(got)),
            "soft" => {
                let ok = got.is_some_and(|g| matches!(g.kind, BounceKind::Soft | BounceKind::Delayed));
                if got.is_some_and(|g| g.kind == BounceKind::Delayed) {
                    delayed_as_soft += 1;
                }
                hard_soft.record(ok, || line(got));
            }
            _ => {}
        }
        if row.sample_kind == "arf" || row.reason == "feedback" {
            complaint.record(got.is_some_and(|g| g.kind == BounceKind::Complaint), || line(got));
        }
        if row.sample_kind == "rfc3834" {
            autoreply.record(got.is_some_and(|g| g.kind == BounceKind::AutoReply), || line(got));
        }
        if !row.status.is_empty() && !row.pseudo {
            status.record(got.is_some_and(|g| g.status.as_deref() == Some(row.status.as_str())), || line(got));
        }
        if !row.reply_code.is_empty() {
            reply.record(
                got.is_some_and(|g| g.reply_code.map(|c| c.to_string()) == Some(row.reply_code.clone())),
                || line(got),
            );
        }
        if !row.original_message_id.is_empty() {
            message_id.record(
                got.is_some_and(|g| g.original_message_id.as_deref() == Some(row.original_message_id.as_str())),
                || {
                    format!(
                        "{}\n      expected: {}\n      got:      {:?}",
                        row.file,
                        row.original_message_id,
                        got.and_then(|g| g.original_message_id.as_deref())
                    )
                },
            );
        }
    }

    println!();
    for rate in [&recipient, &hard_soft, &status, &complaint, &autoreply, &delivered, &reply, &message_id] {
        rate.print();
    }
    println!("  (of the hard/soft agreements, {delayed_as_soft} are Delayed results on expected-soft rows)");
    for rate in [&recipient, &hard_soft, &status, &complaint, &autoreply, &delivered] {
        if !rate.wrong.is_empty() {
            println!("\n--- {} wrong ({}):", rate.name, rate.wrong.len());
            for w in &rate.wrong {
                println!("  {w}");
            }
        }
    }
    if std::env::var_os("CORPUS_VERBOSE").is_some() {
        for rate in [&reply, &message_id] {
            println!("\n--- {} wrong ({}):", rate.name, rate.wrong.len());
            for w in &rate.wrong {
                println!("  {w}");
            }
        }
    }

    assert!(recipient.pct() >= 95.0, "recipient match below 95%");
    assert!(hard_soft.pct() >= 95.0, "hard/soft agreement below 95%");
    assert!(status.pct() >= 95.0, "status agreement below 95%");
    assert_eq!(complaint.ok, complaint.total, "every ARF row must be a Complaint");
    assert_eq!(autoreply.ok, autoreply.total, "every RFC 3834 row must be an AutoReply");
    assert_eq!(delivered.ok, delivered.total, "delivered rows must not be reported");
}
