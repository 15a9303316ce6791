//! Feeds arbitrary bytes to the bounce parser. Any panic, overflow or
//! sanitizer report is a bug: `parse` must answer every input with a report
//! or an error. The checks live in `herald::tooling::fuzzing` so that
//! `tests/fuzz_regressions.rs` replays kept inputs through the same code.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| herald::tooling::fuzzing::bounce_parse(data));
