//! Feeds arbitrary bytes to the bounce parser. Any panic, overflow or
//! sanitizer report is a bug: `parse` must answer every input with a report
//! or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = herald::bounce::parse(data) {
        // Cheap invariants that hold for every report.
        for r in &report.recipients {
            assert!(r.reason.chars().count() <= herald::bounce::MAX_REASON_CHARS);
            assert_eq!(r.recipient, r.recipient.to_lowercase());
        }
    }
});
