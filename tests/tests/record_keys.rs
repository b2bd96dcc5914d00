//! What operators see of a record key: logs and spans carry its first 8 bytes in hex, enough
//! to correlate lines and useless to recover the client's key.

use idem_runtime::IdempotencyKey;
use idem_runtime::store::RecordKey;

#[test]
fn logs_carry_the_first_eight_bytes_of_the_record_key() {
    let key = IdempotencyKey::parse(b"8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap();
    let record = RecordKey::derive("org", "acme", "billing::create_charge", &key);
    let short = record.short();
    assert_eq!(short.len(), 16);
    assert_eq!(short, record.to_hex()[..16]);
    let first: String = record.as_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(short, first);
    assert!(!short.contains("8e03978e"));
    assert_eq!(format!("{record:?}"), format!("RecordKey({short})"));
}
