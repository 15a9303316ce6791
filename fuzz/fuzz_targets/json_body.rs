//! Every request body the HTTP API parses (triggers, rules, rule patches,
//! users, suppressions, the four provider webhooks) and the two signed
//! tokens, deserialised and validated as the handlers do. The first byte
//! picks the body; see `herald::tooling::fuzzing::json_body`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| herald::tooling::fuzzing::json_body(data));
