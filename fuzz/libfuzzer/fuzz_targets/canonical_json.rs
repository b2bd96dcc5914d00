//! libFuzzer target: `idem_fuzz::canonical_json`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::canonical_json(data));
