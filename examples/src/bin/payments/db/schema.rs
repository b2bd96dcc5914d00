//! The app's tables on each database, and what MySQL needs of its own: placeholders, and its
//! database created when missing.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

pub(super) const SQLITE_SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS charges (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        amount_refunded BIGINT NOT NULL DEFAULT 0,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        source TEXT NOT NULL,
        description TEXT,
        metadata TEXT,
        created BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS charges_org_seq ON charges (org, seq)",
    "CREATE TABLE IF NOT EXISTS refunds (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        charge_id TEXT NOT NULL REFERENCES charges (id),
        amount BIGINT NOT NULL,
        created BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS payouts (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        created BIGINT NOT NULL
    )",
];

pub(super) const POSTGRES_SCHEMA: &[&str] = &[
    // Concurrent `CREATE TABLE IF NOT EXISTS` can fail on PostgreSQL; serialise start-ups.
    "SELECT pg_advisory_xact_lock(7267331469312093)",
    "CREATE TABLE IF NOT EXISTS charges (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        amount_refunded BIGINT NOT NULL DEFAULT 0,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        source TEXT NOT NULL,
        description TEXT,
        metadata TEXT,
        created BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS charges_org_seq ON charges (org, seq)",
    "CREATE TABLE IF NOT EXISTS refunds (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        charge_id TEXT NOT NULL REFERENCES charges (id),
        amount BIGINT NOT NULL,
        created BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS payouts (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        org TEXT NOT NULL,
        amount BIGINT NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        created BIGINT NOT NULL
    )",
];

/// Databases made before charges had metadata gain the column (SQLite has no
/// `ADD COLUMN IF NOT EXISTS`: `Db::create_tables` asks first).
pub(super) const HAS_METADATA_SQLITE: &str =
    "SELECT count(*) FROM pragma_table_info('charges') WHERE name = 'metadata'";
pub(super) const ADD_METADATA_SQLITE: &str = "ALTER TABLE charges ADD COLUMN metadata TEXT";
pub(super) const ADD_METADATA_POSTGRES: &str =
    "ALTER TABLE charges ADD COLUMN IF NOT EXISTS metadata TEXT";

/// MySQL's tables: the same columns; `VARCHAR` where a column is unique or indexed, text
/// compared byte for byte (`utf8mb4_bin`) as on the other two. Created with the database's
/// first start (these databases never had a table without `metadata`).
pub(super) const MYSQL_SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS charges (
        seq BIGINT AUTO_INCREMENT PRIMARY KEY,
        id VARCHAR(64) NOT NULL UNIQUE,
        org VARCHAR(255) NOT NULL,
        amount BIGINT NOT NULL,
        amount_refunded BIGINT NOT NULL DEFAULT 0,
        currency VARCHAR(16) NOT NULL,
        status VARCHAR(32) NOT NULL,
        source TEXT NOT NULL,
        description TEXT,
        metadata TEXT,
        created BIGINT NOT NULL,
        KEY charges_org_seq (org, seq)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE TABLE IF NOT EXISTS refunds (
        seq BIGINT AUTO_INCREMENT PRIMARY KEY,
        id VARCHAR(64) NOT NULL UNIQUE,
        org VARCHAR(255) NOT NULL,
        charge_id VARCHAR(64) NOT NULL,
        amount BIGINT NOT NULL,
        created BIGINT NOT NULL,
        FOREIGN KEY (charge_id) REFERENCES charges (id)
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
    "CREATE TABLE IF NOT EXISTS payouts (
        seq BIGINT AUTO_INCREMENT PRIMARY KEY,
        id VARCHAR(64) NOT NULL UNIQUE,
        org VARCHAR(255) NOT NULL,
        amount BIGINT NOT NULL,
        currency VARCHAR(16) NOT NULL,
        status VARCHAR(32) NOT NULL,
        created BIGINT NOT NULL
    ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
];

/// What the app's MySQL sessions wait for a row or table lock, in whole seconds, before the
/// statement fails (PostgreSQL's `lock_timeout` of 5 s): the pool stays available.
pub(super) const MYSQL_SESSION: &str =
    "SET SESSION innodb_lock_wait_timeout = 5, SESSION lock_wait_timeout = 5";

/// `sql` as it is: SQLite and PostgreSQL read `$1`, `$2`, ….
pub(super) fn dollars(sql: &'static str) -> &'static str {
    sql
}

/// `sql` with MySQL's `?` for `$1`, `$2`, …, which every statement here uses once each, in
/// order. Rewritten once per statement.
pub(super) fn question_marks(sql: &'static str) -> &'static str {
    static REWRITTEN: LazyLock<Mutex<HashMap<&'static str, &'static str>>> =
        LazyLock::new(Mutex::default);
    let mut rewritten = REWRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    rewritten
        .entry(sql)
        .or_insert_with(|| Box::leak(rewrite(sql).into_boxed_str()))
}

fn rewrite(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let (mut chars, mut next) = (sql.chars().peekable(), 1);
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut number = String::new();
        while let Some(digit) = chars.next_if(char::is_ascii_digit) {
            number.push(digit);
        }
        assert_eq!(
            number,
            next.to_string(),
            "parameters in order, once each: {sql}"
        );
        next += 1;
        out.push('?');
    }
    out
}

/// ER_BAD_DB_ERROR: the URL's database does not exist.
const UNKNOWN_DATABASE: u16 = 1049;

/// Whether connecting failed because the URL's database does not exist.
pub(super) fn is_unknown_database(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|e| e.number() == UNKNOWN_DATABASE)
}

/// Creates the database `url` names on its server, as a SQLite file is created on first use.
pub(super) async fn create_mysql_database(url: &str) -> sqlx::Result<()> {
    let options: MySqlConnectOptions = url.parse()?;
    let Some(database) = options.get_database().map(str::to_owned) else {
        return Ok(());
    };
    let mut server = server_url(url)
        .parse::<MySqlConnectOptions>()?
        .connect()
        .await?;
    let create = format!(
        "CREATE DATABASE IF NOT EXISTS `{}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        database.replace('`', "``")
    );
    sqlx::raw_sql(AssertSqlSafe(create))
        .execute(&mut server)
        .await?;
    server.close().await
}

/// `url` without its database: `mysql://user@host:port/db?opts` is `mysql://user@host:port?opts`.
fn server_url(url: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let server = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split_once('/').map_or(rest, |(a, _)| a);
            format!("{scheme}://{authority}")
        }
        None => base.to_owned(),
    };
    match query {
        Some(query) => format!("{server}?{query}"),
        None => server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_question_marks_in_order() {
        assert_eq!(
            rewrite("INSERT INTO t (a, b) VALUES ($1, $2) LIMIT $3"),
            "INSERT INTO t (a, b) VALUES (?, ?) LIMIT ?"
        );
        assert_eq!(question_marks("SELECT 1"), "SELECT 1");
    }

    #[test]
    #[should_panic(expected = "in order")]
    fn a_repeated_placeholder_is_refused() {
        rewrite("SELECT $1, $1");
    }

    #[test]
    fn the_server_url_has_no_database() {
        assert_eq!(
            server_url("mysql://root@127.0.0.1:3306/pay"),
            "mysql://root@127.0.0.1:3306"
        );
        assert_eq!(
            server_url("mysql://u:p@db/pay?ssl-mode=required"),
            "mysql://u:p@db?ssl-mode=required"
        );
        assert_eq!(server_url("mysql://db"), "mysql://db");
    }
}
