//! What the SQL stores share beyond idem-sql's statements and decoding (re-exported here):
//! fenced writes, and binding an operator statement's filter with sqlx.
// The MySQL store alone uses the shared statements' parts, not the whole of them.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, unused_imports, unused_macros)
)]

use idem_core::error::StoreError;
use idem_core::store::Fence;

/// What the MySQL store renders in its own dialect.
#[cfg(feature = "mysql")]
pub(crate) use idem_sql::records::{Dialect, LIST, READ, STATS};
pub(crate) use idem_sql::records::{
    FORGET_ATTEMPTS, FilterArgs, InfoRow, ReadRow, RecordStatements, StatsRow, held_by,
    kept_changing, not_forgotten, read_row, record_info, record_stats,
};

/// A fenced write held when it changed the owner's row; zero rows means another owner or none.
pub(crate) fn fence(rows_affected: Result<u64, sqlx::Error>) -> Result<Fence, StoreError> {
    match rows_affected.map_err(StoreError::unavailable)? {
        0 => Ok(Fence::Lost),
        _ => Ok(Fence::Held),
    }
}

/// Binds [`FilterArgs`] as `$1`..`$8` of a query, on either database.
macro_rules! bind_filter {
    ($query:expr, $args:expr) => {{
        let args = &$args;
        $query
            .bind(args.now)
            .bind(args.operation)
            .bind(args.scope)
            .bind(args.scope_value)
            .bind(args.state)
            .bind(args.created_before)
            .bind(args.completed_from)
            .bind(args.completed_to)
    }};
}
pub(crate) use bind_filter;
