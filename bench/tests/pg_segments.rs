//! `bench/pg_segments.py` charges each gap between two chunks of a delay proxy's trace to the
//! side the docs say (the proxy's hold, the database or the application), per request: the
//! numbers `docs/atomic-mode.md` and `bench/HISTORY.md` quote come from it.

use std::process::Command;

/// Two requests through a proxy holding each chunk 500 µs: each sends its statements, the
/// database answers in two writes (a pipelined pair), the application waits for the answer and
/// sends again in two writes, then the last answer comes.
const TRACE: &str = "\
0 up 0 114 QBES
600 down 0 17 CZ
650 down 0 36 2DCZ
1350 up 0 80 BES
1370 up 0 9 S
1950 down 0 46 2DCZ
2650 up 0 114 QBES
3250 down 0 17 CZ
3300 down 0 36 2DCZ
4000 up 0 80 BES
4020 up 0 9 S
4600 down 0 46 2DCZ
";

#[test]
fn each_gap_is_charged_to_the_proxy_the_database_or_the_application() {
    let path = std::env::temp_dir().join(format!("idem-pg-segments-{}", std::process::id()));
    std::fs::write(&path, TRACE).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/pg_segments.py");
    let out = Command::new("python3")
        .args([script, "500", "2"])
        .arg(&path)
        .output()
        .expect("python3 runs the script");
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let row: Vec<&str> = text
        .lines()
        .last()
        .expect("a row")
        .split('|')
        .map(str::trim)
        .collect();
    // Per request: the waits (an answer, then the application's next chunk; the trace's first
    // chunk follows no answer), the proxy's holds (two chunks up and, but for the last, two
    // answers down), the database (100 and 50 for the pair, 80 for the answer after the chunk
    // sent in two writes) and the application (200 before its next chunk, and 20 between the
    // two writes, less the first request's 200 before the trace began).
    assert_eq!(row[2..7], ["1.50", "1750", "230", "320", "2300"], "{text}");
}
