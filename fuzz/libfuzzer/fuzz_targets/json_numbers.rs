//! libFuzzer target: `idem_fuzz::json_numbers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::json_numbers(data));
