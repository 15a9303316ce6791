//! Operator-authored templates and rule conditions, rendered against
//! arbitrary JSON. Any panic (even one Herald's `catch_unwind` would turn
//! into an error: libFuzzer aborts first), any run past `-timeout`, any
//! broken invariant is a bug. Input format: see `herald::tooling::fuzzing::template_render`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| herald::tooling::fuzzing::template_render(data));
