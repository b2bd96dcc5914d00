//! What the store reads back, read out of tokio-postgres's rows into idem-sql's tuples and
//! decoded there, exactly as idem-sqlx decodes the same columns. A value this build cannot
//! read is [`StoreError::Corrupt`], never a panic.

use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use idem_core::error::StoreError;
use idem_core::store::records::{Record, RecordStats};
use idem_sql::records::{self, InfoRow, ReadRow};

pub(crate) use idem_sql::records::held_by;

/// Column `index` of `row`, or [`StoreError::Corrupt`] when it is not of the type expected.
pub(crate) fn column<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index)
        .map_err(|error| StoreError::Corrupt(format!("column {index}: {error}").into()))
}

/// The operators' columns of `row` (its first ten), as [`InfoRow`].
fn info_row(row: &Row) -> Result<InfoRow, StoreError> {
    Ok((
        column(row, 0)?,
        column(row, 1)?,
        column(row, 2)?,
        column(row, 3)?,
        column(row, 4)?,
        column(row, 5)?,
        column(row, 6)?,
        column(row, 7)?,
        column(row, 8)?,
        column(row, 9)?,
    ))
}

/// What an operator reads of a row (the operators' `{columns}`).
pub(crate) fn record_info(row: &Row) -> Result<Record, StoreError> {
    records::record_info(info_row(row)?)
}

/// The columns of `row` as [`ReadRow`]: the operators' ten, then the response.
pub(crate) fn read_tuple(row: &Row) -> Result<ReadRow, StoreError> {
    let (a, b, c, d, e, f, g, h, i, j) = info_row(row)?;
    Ok((a, b, c, d, e, f, g, h, i, j, column(row, 10)?))
}

/// The counts of the stats statement: per row, operation, state at `now`, count, oldest
/// creation time.
pub(crate) fn record_stats(rows: &[Row]) -> Result<RecordStats, StoreError> {
    let rows = rows
        .iter()
        .map(|row| {
            Ok((
                column(row, 0)?,
                column(row, 1)?,
                column(row, 2)?,
                column(row, 3)?,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    records::record_stats(rows)
}
