//! libFuzzer target: `idem_fuzz::stored_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::stored_response(data));
