//! What a database error says about the request that caused it, for the examples' handlers: the
//! database is out of reach or too busy right now ([`is_transient`]: the same request may
//! succeed later), or it refused a value of the request that it will refuse on every try
//! ([`is_bad_value`]: the request is invalid, and must be answered so, never as retryable).

use sqlx::postgres::PgDatabaseError;
use sqlx::sqlite::SqliteError;

/// Whether `error` says the database is out of reach or overloaded, not that the request or
/// the code is wrong.
pub fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
                // SQLSTATE: connection exception, insufficient resources, shutting down or not
                // yet accepting connections, serialization failure, deadlock, lock timeout,
                // statement timeout.
                let code = pg.code();
                code.starts_with("08")
                    || code.starts_with("53")
                    || matches!(
                        code,
                        "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "55P03" | "57014"
                    )
            } else if db.try_downcast_ref::<SqliteError>().is_some() {
                // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
                db.code()
                    .and_then(|code| code.parse::<u32>().ok())
                    .is_some_and(|code| matches!(code & 0xff, 5 | 6))
            } else {
                false
            }
        }
        _ => false,
    }
}

/// Whether `error` is the database refusing a value it can never store: on PostgreSQL a data
/// exception (SQLSTATE class 22: a NUL or an invalid byte in text, a number out of its column's
/// range, a string too long for its column) or a check constraint (23514); on SQLite a check
/// constraint (`SQLITE_CONSTRAINT_CHECK`, 275). Retrying the same request gets the same refusal.
pub fn is_bad_value(error: &sqlx::Error) -> bool {
    /// SQLite's extended result code for a failed `CHECK`.
    const SQLITE_CONSTRAINT_CHECK: &str = "275";
    let Some(db) = error.as_database_error() else {
        return false;
    };
    let code = db.code().unwrap_or_default();
    if db.try_downcast_ref::<PgDatabaseError>().is_some() {
        code.starts_with("22") || code == "23514"
    } else {
        db.try_downcast_ref::<SqliteError>().is_some() && code == SQLITE_CONSTRAINT_CHECK
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{ConnectOptions, Connection, Executor};

    use super::*;

    /// A failed statement on an in-memory SQLite database.
    async fn sqlite_error(table: &'static str, statement: &'static str) -> sqlx::Error {
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .in_memory(true)
            .connect()
            .await
            .unwrap();
        conn.execute(table).await.unwrap();
        let error = conn.execute(statement).await.unwrap_err();
        let _ = conn.close().await;
        error
    }

    #[tokio::test]
    async fn a_check_constraint_is_a_bad_value_and_a_missing_table_is_neither() {
        let check = sqlite_error(
            "CREATE TABLE t (q INTEGER NOT NULL CHECK (q > 0))",
            "INSERT INTO t VALUES (0)",
        )
        .await;
        assert!(is_bad_value(&check) && !is_transient(&check), "{check}");
        let missing = sqlite_error("CREATE TABLE t (q INTEGER)", "INSERT INTO u VALUES (1)").await;
        assert!(
            !is_bad_value(&missing) && !is_transient(&missing),
            "{missing}"
        );
    }

    #[test]
    fn an_unreachable_database_is_transient_and_no_bad_value() {
        for error in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()),
        ] {
            assert!(is_transient(&error) && !is_bad_value(&error), "{error}");
        }
    }
}
