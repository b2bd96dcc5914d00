//! What people read: times, states, scopes and previews, on records made here.

use idem_runtime::IdempotencyKey;
use idem_runtime::store::records::RecordTimes;

use super::*;

/// 2025-11-24T16:00:00Z.
const NOW: Timestamp = Timestamp::from_millis(1_764_000_000_000);

fn at(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(NOW.as_millis() + offset_ms)
}

/// A record of `charges.create` for `org=acme`, created a minute ago.
fn info(completed: bool, lease_until: Timestamp, expires_at: Timestamp) -> Record {
    let key = IdempotencyKey::parse(b"k-1").unwrap();
    let key = RecordKey::derive("org", "acme", "charges.create", &key);
    let times = RecordTimes {
        created_at: at(-60_000),
        completed_at: Some(at(-30_000)),
        lease_until,
        expires_at,
    };
    Record::new(
        key,
        "charges.create",
        "org",
        "acme",
        completed,
        completed.then_some(201),
        times,
    )
}

const DAY: i64 = 86_400_000;

#[test]
fn times_are_utc_to_the_second_and_an_unknown_one_is_a_dash() {
    assert_eq!(time(Some(at(999))), "2025-11-24T16:00:00Z");
    assert_eq!(time(Some(at(1_000))), "2025-11-24T16:00:01Z");
    assert_eq!(time(None), "-");
    // 0 (or less): a time the store did not keep when the record was written.
    assert_eq!(time(Some(Timestamp::from_millis(0))), "-");
    assert_eq!(time(Some(Timestamp::from_millis(-5))), "-");
    assert_eq!(
        time(Some(Timestamp::from_millis(1))),
        "1970-01-01T00:00:00Z"
    );
}

#[test]
fn relative_times_are_whole_seconds_ahead_or_ago() {
    assert_eq!(relative(at(12_900), NOW), "in 12s");
    assert_eq!(relative(at(-180_000), NOW), "3m ago");
    assert_eq!(relative(NOW, NOW), "0s ago");
    assert_eq!(relative(at(1), NOW), "in 0s");
}

#[test]
fn a_records_state_is_explained_by_its_lease_and_its_expiry() {
    let running = explain_state(&info(false, at(1), at(DAY)), NOW);
    assert_eq!(
        running,
        "in-flight: its owner is running (or died less than a lease ago)"
    );
    for lapsed in [NOW, at(-1)] {
        let text = explain_state(&info(false, lapsed, at(DAY)), NOW);
        assert!(text.starts_with("in-flight, lease lapsed:"), "{text}");
    }
    let completed = explain_state(&info(true, NOW, at(DAY)), NOW);
    assert_eq!(completed, "completed: every retry replays it");
    let expired = explain_state(&info(true, NOW, NOW), NOW);
    assert!(
        expired.starts_with("expired: a request with its key runs again"),
        "{expired}"
    );
}

#[test]
fn the_list_shows_scope_state_and_times_in_aligned_columns() {
    let records = [info(true, NOW, at(DAY)), info(false, at(30_000), at(DAY))];
    let text = list(&records, NOW, false);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let short = records[0].key.short();
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "charges.create",
            "org=acme",
            short.as_str(),
            "completed",
            "201",
            "2025-11-24T15:59:00Z",
            "2025-11-24T15:59:30Z",
            "-",
            "2025-11-25T16:00:00Z",
        ]
    );
    assert_eq!(
        lines[2].split_whitespace().nth(7),
        Some("2025-11-24T16:00:30Z"),
        "the in-flight record's lease: {text}"
    );
    let column = |line: &str| line.find("org=acme");
    assert_eq!(column(lines[1]), column(lines[2]));
    assert_eq!(lines[3], "2 record(s)");
}

#[test]
fn a_purge_names_its_window() {
    let window = Some((at(-DAY), NOW));
    assert_eq!(
        purge_plan("charges.create", window, 3, true),
        "would purge 3 completed record(s) of charges.create completed between \
         2025-11-23T16:00:00Z and 2025-11-24T16:00:00Z\n"
    );
    assert_eq!(
        purge_plan("charges.create", None, 3, false),
        "purging 3 completed record(s) of charges.create\n"
    );
}

#[test]
fn a_preview_is_text_cut_at_a_whole_character_or_else_hex() {
    assert_eq!(preview(b"{\"id\":1}", 4), "{\"id");
    assert_eq!(preview(b"{\"id\":1}", 100), "{\"id\":1}");
    // "é" is two bytes: cut in its middle, it is dropped rather than shown broken.
    assert_eq!(preview("hé!".as_bytes(), 2), "h");
    assert_eq!(preview("hé!".as_bytes(), 3), "hé");
    // Not UTF-8 within the limit: hex.
    assert_eq!(preview(&[0xff, 0x00, 0x41], 2), "hex:ff00");
}
