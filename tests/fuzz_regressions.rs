//! Replays the fuzz targets' kept inputs through the same entry points the
//! fuzzers call (`herald::tooling::fuzzing`), without a sanitizer build, so `cargo
//! test` keeps every crash a fuzzer found fixed and exercises each target.
//!
//! `tests/data/fuzz/<target>/` holds `crash-*` files (inputs that once
//! crashed or hung; see the README there for what each was) and `seed-*`
//! files (the hand-written seed corpus a fuzzing run starts from).
//!
//! Each input runs on its own thread under a deadline, because one of the
//! failures being guarded against is a template that never finishes: a
//! regression must fail this test, not hang CI.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Far above what any input takes in a debug build (the slowest, the fuel
/// and output-limit cases, take well under a second); only a hang or a
/// near-hang reaches it.
const DEADLINE: Duration = Duration::from_secs(60);

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("crash-") || n.starts_with("seed-"))
        })
        .collect();
    files.sort();
    files
}

/// Runs every kept input of `target` through `entry`; fails naming the file
/// that panicked or did not finish in time.
fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let files = inputs(target);
    assert!(!files.is_empty(), "no inputs kept for {target}");
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::spawn(move || {
            entry(&data);
            let _ = tx.send(());
        });
        match rx.recv_timeout(DEADLINE) {
            Ok(()) => worker.join().expect("finished"),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The sender was dropped without sending: the entry panicked.
                let _ = worker.join();
                panic!("{target}: {} panicked (the message is above)", path.display());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{target}: {} did not finish within {DEADLINE:?}", path.display())
            }
        }
    }
    files.len()
}

#[test]
fn bounce_parse_inputs_replay() {
    let n = replay("bounce_parse", herald::tooling::fuzzing::bounce_parse);
    println!("bounce_parse: {n} inputs");
}

#[test]
fn template_render_inputs_replay() {
    let n = replay("template_render", herald::tooling::fuzzing::template_render);
    println!("template_render: {n} inputs");
}

#[test]
fn json_body_inputs_replay() {
    let n = replay("json_body", herald::tooling::fuzzing::json_body);
    println!("json_body: {n} inputs");
}

/// The seed corpus reaches every body kind, so a change that breaks one
/// kind's parsing is caught here and not only by a fuzzing run.
#[test]
fn json_body_seeds_cover_every_body_kind() {
    let mut kinds: Vec<u8> = inputs("json_body")
        .iter()
        .filter_map(|p| std::fs::read(p).ok()?.first().copied())
        .filter(u8::is_ascii_digit)
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds, b"0123456789".to_vec());
}
