//! libFuzzer target: `idem_fuzz::ttl`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::ttl(data));
