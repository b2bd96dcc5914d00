//! The operators' statements (list, read, forget, purge, stats): idem-sqlx's text for
//! PostgreSQL, so both drivers select the same records. Every statement takes the filter as
//! `$1`..`$8`; nothing of a filter or a record is ever written into the text.

use idem_core::store::records::RecordState;

/// What an operator reads of a row, in the order of `decode::InfoRow`. `{key}` and the `{read_*}`
/// placeholders are the PostgreSQL's spelling.
const COLUMNS: &str = "{key}, {read_operation}, {read_scope}, {read_scope_value}, state, \
     {read_status}, created_at, completed_at, lease_until, expires_at";

/// Which records a `RecordFilter` selects, as `RecordFilter::matches` says: `$1` now, `$2`
/// operation, `$3` scope, `$4` scope value, `$5` state (as `RecordState::as_str` spells it),
/// `$6` created before, `$7`..`$8` the completion window. A NULL argument selects everything.
/// A condition on a NULL column is NULL, which selects nothing (a record that never completed
/// has no completion time in any window).
const FILTER: &str = "($2 IS NULL OR operation = $2)
    AND ($3 IS NULL OR scope = $3)
    AND ($4 IS NULL OR scope_value = $4)
    AND ($5 IS NULL OR {state} = $5)
    AND ($6 IS NULL OR created_at <= $6)
    AND ($7 IS NULL OR (state = 'completed' AND $7 <= completed_at AND completed_at < $8))";

pub(super) const LIST: &str = "SELECT {columns} FROM {records} WHERE {filter}
ORDER BY created_at, {key} LIMIT $9";

pub(super) const READ: &str = "SELECT {columns}, response FROM {records} WHERE {key} = $1";

/// Deletes unless an owner's lease is live (`Record::is_leased`): in flight, not
/// expired, lease not lapsed. Check and delete are one statement.
pub(super) const FORGET: &str = "DELETE FROM {records}
WHERE {key} = $1 AND ($3 OR NOT (state = 'in_flight' AND expires_at > $2 AND lease_until > $2))
RETURNING {columns}";

/// Oldest first. The selection is materialised before anything is deleted: a subquery under
/// `IN` may be scanned again for each row, and on PostgreSQL a scan after the first deletion
/// skips the row deleted and takes one more, past the limit. The conditions are repeated on the
/// `DELETE` itself. `{lock}` is PostgreSQL's `FOR UPDATE SKIP LOCKED`: the selected rows are
/// locked until the statement ends, so none changes between selection and deletion, and a row a
/// claimer is writing right now is skipped, not waited for. SQLite runs one writer at a time.
pub(super) const PURGE: &str = "WITH doomed AS MATERIALIZED (
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
pub(super) const STATS: &str =
    "SELECT {read_operation}, {state}, count(*), MIN(created_at) FROM {records}
WHERE {filter}
GROUP BY operation, 2";

/// Fills `template`'s placeholders for PostgreSQL and the table `records`.
pub(super) fn render(template: &str, records: &str) -> String {
    template
        .replace("{filter}", FILTER)
        .replace("{state}", &state_at_now())
        .replace("{columns}", COLUMNS)
        .replace("{key}", "key")
        .replace("{read_operation}", "operation")
        .replace("{read_scope}", "scope")
        .replace("{read_scope_value}", "scope_value")
        .replace("{read_status}", "CAST(status AS integer)")
        .replace("{lock}", "FOR UPDATE SKIP LOCKED")
        .replace("{records}", records)
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
