//! The operators' statements over a records table (list, read, forget, purge, stats), the same
//! text on every SQL database up to a [`Dialect`], and how what they and a refused claim read
//! decodes: a value this build cannot read is [`StoreError::Corrupt`], never a panic.
//!
//! The rows are plain tuples ([`InfoRow`], [`ReadRow`], [`StatsRow`]): each driver reads its
//! columns into them, so every driver decodes a row alike.

use std::sync::Arc;

use bytes::Bytes;

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::fingerprint::Fingerprint;
use idem_core::key::RecordKey;
use idem_core::store::Claim;
use idem_core::store::records::{
    Forgotten, Record, RecordFilter, RecordState, RecordStats, RecordTimes,
};

/// A live record that a claim may not take, as the claim reports it. `completed_at` is NULL
/// for records completed before the store kept completion times.
pub fn held_by(
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

/// The operators' statements over one records table, the same text on SQLite and PostgreSQL
/// (sqlx binds SQLite's `$n` parameters by number, as PostgreSQL's).
///
/// Every statement takes the [`FilterArgs`] as `$1`..`$8` and selects with the filter, the SQL
/// form of [`RecordFilter::matches`]: nothing of a filter or a record is ever written into the
/// text. None of them has an index to use: they read the whole table.
#[derive(Debug)]
pub struct RecordStatements {
    /// `$9` limit.
    pub list: Arc<str>,
    /// `$1` key; the columns of [`InfoRow`], then `response`.
    pub read: Arc<str>,
    /// `$1` key, `$2` now, `$3` force; returns the deleted row's [`InfoRow`].
    pub forget: Arc<str>,
    /// `$9` limit.
    pub purge: Arc<str>,
    /// Rows of [`StatsRow`].
    pub stats: Arc<str>,
}

/// What an operator reads of a row, in the order of [`InfoRow`]. `{key}` and the `{read_*}`
/// placeholders are the [`Dialect`]'s.
const COLUMNS: &str = "{key}, {read_operation}, {read_scope}, {read_scope_value}, state, \
     {read_status}, created_at, completed_at, lease_until, expires_at";

/// How one database spells what the operators' statements share: the key column (a reserved
/// word on MySQL), and how a text column and the status are read back as the types of
/// [`InfoRow`].
#[derive(Debug)]
pub struct Dialect {
    /// The key column, quoted if the database needs it.
    pub key: &'static str,
    /// The expression that reads text column `{}` as text.
    pub read_text: &'static str,
    /// The expression that reads the status as a 32-bit integer.
    pub read_status: &'static str,
}

impl Dialect {
    /// SQLite's and PostgreSQL's: text columns read as they are.
    pub const STANDARD: Self = Self {
        key: "key",
        read_text: "{}",
        read_status: "CAST(status AS integer)",
    };

    /// Fills `template`'s `{filter}`, `{state}`, `{columns}`, `{key}` and `{records}`.
    pub fn render(&self, template: &str, records: &str) -> String {
        let text = |column: &str| self.read_text.replace("{}", column);
        template
            .replace("{filter}", FILTER)
            .replace("{state}", &state_at_now())
            .replace("{columns}", COLUMNS)
            .replace("{key}", self.key)
            .replace("{read_operation}", &text("operation"))
            .replace("{read_scope}", &text("scope"))
            .replace("{read_scope_value}", &text("scope_value"))
            .replace("{read_status}", self.read_status)
            .replace("{records}", records)
    }
}

/// A record's state at `$1`, as `Record::state` says; NULL for a state this build does not
/// know (decoded as corrupt).
fn state_at_now() -> String {
    format!(
        "(CASE WHEN state NOT IN ('in_flight', 'completed') THEN NULL \
         WHEN expires_at <= $1 THEN '{expired}' \
         WHEN state = 'completed' THEN '{completed}' ELSE '{in_flight}' END)",
        expired = RecordState::Expired.as_str(),
        completed = RecordState::Completed.as_str(),
        in_flight = RecordState::InFlight.as_str(),
    )
}

/// Which records a [`RecordFilter`] selects, as [`RecordFilter::matches`] says: `$1` now, `$2`
/// operation, `$3` scope, `$4` scope value, `$5` state (as [`RecordState::as_str`] spells it),
/// `$6` created before, `$7`..`$8` the completion window. A NULL argument selects everything.
/// A condition on a NULL column is NULL, which selects nothing (a record that never completed
/// has no completion time in any window).
const FILTER: &str = "($2 IS NULL OR operation = $2)
    AND ($3 IS NULL OR scope = $3)
    AND ($4 IS NULL OR scope_value = $4)
    AND ($5 IS NULL OR {state} = $5)
    AND ($6 IS NULL OR created_at <= $6)
    AND ($7 IS NULL OR (state = 'completed' AND $7 <= completed_at AND completed_at < $8))";

/// Lists records, oldest first: `$9` limit; rows of [`InfoRow`].
pub const LIST: &str = "SELECT {columns} FROM {records} WHERE {filter}
ORDER BY created_at, {key} LIMIT $9";

/// Reads one record: `$1` key; the columns of [`InfoRow`], then `response` ([`ReadRow`]).
pub const READ: &str = "SELECT {columns}, response FROM {records} WHERE {key} = $1";

/// Deletes unless an owner's lease is live ([`Record::is_leased`]): in flight, not
/// expired, lease not lapsed. Check and delete are one statement.
const FORGET: &str = "DELETE FROM {records}
WHERE {key} = $1 AND ($3 OR NOT (state = 'in_flight' AND expires_at > $2 AND lease_until > $2))
RETURNING {columns}";

/// Oldest first. The selection is materialised before anything is deleted: a subquery under
/// `IN` may be scanned again for each row, and on PostgreSQL a scan after the first deletion
/// skips the row deleted and takes one more, past the limit. The conditions are repeated on the
/// `DELETE` itself. `{lock}` is PostgreSQL's `FOR UPDATE SKIP LOCKED`: the selected rows are
/// locked until the statement ends, so none changes between selection and deletion, and a row a
/// claimer is writing right now is skipped, not waited for. SQLite runs one writer at a time.
const PURGE: &str = "WITH doomed AS MATERIALIZED (
    SELECT {key} FROM {records}
    WHERE state = 'completed' AND expires_at > $1 AND {filter}
    ORDER BY created_at, {key} LIMIT $9
    {lock}
)
DELETE FROM {records}
WHERE {key} IN (SELECT {key} FROM doomed)
  AND state = 'completed' AND expires_at > $1 AND {filter}";

/// Per operation and state: the count, and the oldest creation time (read for in-flight ones).
/// Grouped by the column itself, not by how it is read back (on MySQL, as text in a collation
/// that may fold case).
pub const STATS: &str = "SELECT {read_operation}, {state}, count(*), MIN(created_at) FROM {records}
WHERE {filter}
GROUP BY operation, 2";

impl RecordStatements {
    /// The statements over `records` (a table name as SQL text, quoted where needed), with
    /// `lock` after the purge's selection.
    pub fn new(records: &str, lock: &str) -> Self {
        let render = |template: &str| {
            let template = template.replace("{lock}", lock);
            Arc::from(Dialect::STANDARD.render(&template, records))
        };
        Self {
            list: render(LIST),
            read: render(READ),
            forget: render(FORGET),
            purge: render(PURGE),
            stats: render(STATS),
        }
    }
}

/// A filter's arguments, `$1`..`$8` of every operator statement, in order.
#[derive(Debug, Clone, Copy)]
pub struct FilterArgs<'a> {
    /// `$1`: the time a record's state is read at, in milliseconds.
    pub now: i64,
    /// `$2`: the operation, or NULL for any.
    pub operation: Option<&'a str>,
    /// `$3`: the scope, or NULL for any.
    pub scope: Option<&'a str>,
    /// `$4`: the scope's value, or NULL for any.
    pub scope_value: Option<&'a str>,
    /// `$5`: the state at `now`, as [`RecordState::as_str`] spells it, or NULL for any.
    pub state: Option<&'static str>,
    /// `$6`: created at or before, in milliseconds.
    pub created_before: Option<i64>,
    /// `$7`: completed at or after, in milliseconds (with `$8`).
    pub completed_from: Option<i64>,
    /// `$8`: completed before, in milliseconds (with `$7`).
    pub completed_to: Option<i64>,
}

impl<'a> FilterArgs<'a> {
    /// The arguments of `filter`, its states read at `now`.
    pub fn new(filter: &'a RecordFilter, now: Timestamp) -> Self {
        let (from, to) = filter
            .completed_between
            .map(|(from, to)| (from.as_millis(), to.as_millis()))
            .unzip();
        Self {
            now: now.as_millis(),
            operation: filter.operation.as_deref(),
            scope: filter.scope.as_deref(),
            scope_value: filter.scope_value.as_deref(),
            state: filter.state.map(RecordState::as_str),
            created_before: filter.created_before.map(Timestamp::as_millis),
            completed_from: from,
            completed_to: to,
        }
    }
}

/// A row of the operators' columns: key, operation, scope, scope_value, state, status, created_at,
/// completed_at, lease_until, expires_at.
pub type InfoRow = (
    Vec<u8>,
    String,
    String,
    String,
    String,
    Option<i32>,
    i64,
    Option<i64>,
    i64,
    i64,
);

/// A row of the operators' columns and the response.
pub type ReadRow = (
    Vec<u8>,
    String,
    String,
    String,
    String,
    Option<i32>,
    i64,
    Option<i64>,
    i64,
    i64,
    Option<Vec<u8>>,
);

/// A row of the stats: operation, state at `now`, count, oldest creation time.
pub type StatsRow = (String, Option<String>, i64, Option<i64>);

/// What an operator reads of a row. A key that is not 32 bytes, a state or a status this build
/// does not know are [`StoreError::Corrupt`].
pub fn record_info(row: InfoRow) -> Result<Record, StoreError> {
    let (key, operation, scope, scope_value, state, status, created, completed, lease, expires) =
        row;
    let key = <[u8; 32]>::try_from(key.as_slice())
        .map(RecordKey::from_bytes)
        .map_err(|_| StoreError::Corrupt("record key is not 32 bytes".into()))?;
    let completed_flag = match state.as_str() {
        "completed" => true,
        "in_flight" => false,
        _ => {
            return Err(StoreError::Corrupt(
                format!("record in unknown state {state:?}").into(),
            ));
        }
    };
    let status = status
        .map(u16::try_from)
        .transpose()
        .map_err(|_| StoreError::Corrupt("status code out of range".into()))?;
    Ok(Record::new(
        key,
        operation,
        scope,
        scope_value,
        completed_flag,
        status,
        RecordTimes {
            created_at: Timestamp::from_millis(created),
            completed_at: completed.map(Timestamp::from_millis),
            lease_until: Timestamp::from_millis(lease),
            expires_at: Timestamp::from_millis(expires),
        },
    ))
}

/// A record with its payload, as [`Admin::read_record`](idem_core::store::Admin::read_record) returns it.
pub fn read_row(row: ReadRow) -> Result<Record, StoreError> {
    let (a, b, c, d, e, f, g, h, i, j, response) = row;
    let info = record_info((a, b, c, d, e, f, g, h, i, j))?;
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

/// How many times a forget runs again when the record it found live has changed before it
/// could report it (each time another write must land in between).
pub const FORGET_ATTEMPTS: usize = 16;

/// What a forget that deleted nothing reports, from the row read after it: `Absent`, or
/// `Leased` while an owner's lease is live; `None` when the record is no longer leased (it
/// completed, or its lease lapsed, in between), so the forget must run again.
pub fn not_forgotten(
    row: Option<ReadRow>,
    now: Timestamp,
) -> Result<Option<Forgotten>, StoreError> {
    let Some(row) = row else {
        return Ok(Some(Forgotten::Absent));
    };
    let record = read_row(row)?;
    Ok(record.is_leased(now).then_some(Forgotten::Leased(record)))
}

/// The forget that kept finding its record changed.
pub fn kept_changing() -> StoreError {
    StoreError::unavailable(std::io::Error::other(
        "the record kept changing under the forget",
    ))
}

/// The counts of [`RecordStatements::stats`].
pub fn record_stats(rows: Vec<StatsRow>) -> Result<RecordStats, StoreError> {
    let mut stats = RecordStats::new();
    for (operation, state, count, oldest) in rows {
        let state: RecordState = state
            .as_deref()
            .ok_or("no state")
            .and_then(|s| s.parse().map_err(|_| "unknown state"))
            .map_err(|_| StoreError::Corrupt("record in unknown state".into()))?;
        let count = u64::try_from(count)
            .map_err(|_| StoreError::Corrupt("negative count of records".into()))?;
        stats.add_count(&operation, state, count);
        if let (RecordState::InFlight, Some(oldest)) = (state, oldest) {
            stats.saw_in_flight(Timestamp::from_millis(oldest));
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_the_table_and_leave_no_placeholder() {
        let sql = RecordStatements::new(r#""s"."t""#, "FOR UPDATE");
        for statement in [&sql.list, &sql.read, &sql.forget, &sql.purge, &sql.stats] {
            let statement: &str = statement;
            assert!(statement.contains(r#""s"."t""#), "{statement}");
            assert!(!statement.contains('{'), "{statement}");
        }
        assert!(sql.purge.contains("FOR UPDATE"));
        for state in [
            RecordState::InFlight,
            RecordState::Completed,
            RecordState::Expired,
        ] {
            assert!(sql.stats.contains(&format!("'{state}'")), "{}", sql.stats);
        }
    }

    fn row(key: Vec<u8>, state: &str, status: Option<i32>) -> InfoRow {
        let s = String::new;
        (key, s(), s(), s(), state.into(), status, 0, None, 0, 0)
    }

    #[test]
    fn corrupt_rows_are_reported_not_panicked_on() {
        for bad in [
            row(vec![1; 31], "in_flight", None),
            row(vec![1; 32], "paused", None),
            row(vec![1; 32], "completed", Some(70_000)),
            row(vec![1; 32], "completed", Some(-1)),
        ] {
            assert!(
                matches!(record_info(bad), Err(StoreError::Corrupt(_))),
                "a corrupt row must be an error"
            );
        }
        let (a, b, c, d, e, f, g, h, i, j) = row(vec![1; 32], "completed", Some(201));
        let no_payload = read_row((a, b, c, d, e, f, g, h, i, j, None));
        assert!(matches!(no_payload, Err(StoreError::Corrupt(_))));
        let unknown = record_stats(vec![("op".into(), None, 1, None)]);
        assert!(matches!(unknown, Err(StoreError::Corrupt(_))));
    }
}
