//! What the store reads back: the record that stopped a claim, and the rows operators read,
//! decoded exactly as idem-sqlx decodes the same columns. A value this build cannot read is
//! [`StoreError::Corrupt`], never a panic.

use bytes::Bytes;
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::fingerprint::Fingerprint;
use idem_core::key::RecordKey;
use idem_core::store::Claim;
use idem_core::store::records::{Record, RecordState, RecordStats, RecordTimes};

/// Column `index` of `row`, or [`StoreError::Corrupt`] when it is not of the type expected.
pub(crate) fn column<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index)
        .map_err(|error| StoreError::Corrupt(format!("column {index}: {error}").into()))
}

/// A live record that a claim may not take, as the claim reports it. `completed_at` is NULL
/// for records completed before the store kept completion times.
pub(crate) fn held_by(
    fingerprint: Vec<u8>,
    state: &str,
    lease_until: i64,
    response: Option<Vec<u8>>,
    completed_at: Option<i64>,
) -> Result<Claim, StoreError> {
    let fingerprint = <[u8; 32]>::try_from(fingerprint.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| StoreError::Corrupt("fingerprint is not 32 bytes".into()))?;
    match (state, response) {
        ("completed", Some(payload)) => Ok(Claim::Completed {
            fingerprint,
            payload: Bytes::from(payload),
            completed_at: completed_at.map(Timestamp::from_millis),
        }),
        ("completed", None) => Err(StoreError::Corrupt(
            "completed record without a payload".into(),
        )),
        ("in_flight", _) => Ok(Claim::InFlight {
            fingerprint,
            lease_until: Timestamp::from_millis(lease_until),
        }),
        _ => Err(StoreError::Corrupt(
            format!("record in unknown state {state:?}").into(),
        )),
    }
}

/// What an operator reads of a row: key, operation, scope, scope_value, state, status,
/// created_at, completed_at, lease_until, expires_at (the operators' `{columns}`).
pub(crate) fn record_info(row: &Row) -> Result<Record, StoreError> {
    let key: Vec<u8> = column(row, 0)?;
    let key = <[u8; 32]>::try_from(key.as_slice())
        .map(RecordKey::from_bytes)
        .map_err(|_| StoreError::Corrupt("record key is not 32 bytes".into()))?;
    let state: String = column(row, 4)?;
    let completed = match state.as_str() {
        "completed" => true,
        "in_flight" => false,
        _ => {
            return Err(StoreError::Corrupt(
                format!("record in unknown state {state:?}").into(),
            ));
        }
    };
    let status = column::<Option<i32>>(row, 5)?
        .map(u16::try_from)
        .transpose()
        .map_err(|_| StoreError::Corrupt("status code out of range".into()))?;
    let completed_at: Option<i64> = column(row, 7)?;
    Ok(Record::new(
        key,
        column::<String>(row, 1)?,
        column::<String>(row, 2)?,
        column::<String>(row, 3)?,
        completed,
        status,
        RecordTimes {
            created_at: Timestamp::from_millis(column(row, 6)?),
            completed_at: completed_at.map(Timestamp::from_millis),
            lease_until: Timestamp::from_millis(column(row, 8)?),
            expires_at: Timestamp::from_millis(column(row, 9)?),
        },
    ))
}

/// A record with its payload (column 10), as `Admin::read_record` returns it.
pub(crate) fn read_row(row: &Row) -> Result<Record, StoreError> {
    let info = record_info(row)?;
    let response: Option<Vec<u8>> = column(row, 10)?;
    let payload = match (info.completed, response) {
        (true, Some(payload)) => Some(Bytes::from(payload)),
        (true, None) => {
            return Err(StoreError::Corrupt(
                "completed record without a payload".into(),
            ));
        }
        (false, _) => None,
    };
    Ok(info.with_payload(payload))
}

/// The counts of the stats statement: per row, operation, state at `now`, count, oldest
/// creation time.
pub(crate) fn record_stats(rows: &[Row]) -> Result<RecordStats, StoreError> {
    let mut stats = RecordStats::new();
    for row in rows {
        let operation: String = column(row, 0)?;
        let state: Option<String> = column(row, 1)?;
        let state: RecordState = state
            .as_deref()
            .ok_or("no state")
            .and_then(|s| s.parse().map_err(|_| "unknown state"))
            .map_err(|_| StoreError::Corrupt("record in unknown state".into()))?;
        let count = u64::try_from(column::<i64>(row, 2)?)
            .map_err(|_| StoreError::Corrupt("negative count of records".into()))?;
        stats.add_count(&operation, state, count);
        if let (RecordState::InFlight, Some(oldest)) = (state, column::<Option<i64>>(row, 3)?) {
            stats.saw_in_flight(Timestamp::from_millis(oldest));
        }
    }
    Ok(stats)
}
