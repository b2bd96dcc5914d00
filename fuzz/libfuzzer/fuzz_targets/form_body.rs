//! libFuzzer target: `idem_fuzz::form_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::form_body(data));
