//! libFuzzer target: `idem_fuzz::key`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::key(data));
