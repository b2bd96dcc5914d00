//! App data on SQLite or PostgreSQL, in the idempotency store's database, through sqlx without
//! macros. Writes run in the transaction the idempotency layer hands the handler ([`AnyTx`]), so
//! they commit together with the stored response; reads run on the pool.

use std::str::FromStr;
use std::time::Duration;

use idem_runtime::AnyTx;
use serde::Serialize;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use utoipa::ToSchema;

/// `$body` once per backend of `$value` (an enum with `Sqlite` and `Postgres` variants), with
/// `$c` bound to the variant's payload. The SQL is shared; each expansion is typed by its driver.
macro_rules! each_backend {
    ($value:expr, $ty:ident, $c:ident => $body:expr) => {
        match $value {
            $ty::Sqlite($c) => $body,
            $ty::Postgres($c) => $body,
        }
    };
}

/// `$body` with `$c` bound to the connection of the handler's transaction (begun now).
macro_rules! in_tx {
    ($tx:expr, $c:ident => $body:expr) => {
        match $tx {
            AnyTx::Sqlite(tx) => {
                let $c = tx.conn().await?;
                $body
            }
            AnyTx::Postgres(tx) => {
                let $c = tx.conn().await?;
                $body
            }
            _ => Err(no_transaction()),
        }
    };
}

const SQLITE_SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS dwellers (
        id TEXT PRIMARY KEY,
        actions BIGINT NOT NULL DEFAULT 0,
        beats BIGINT NOT NULL DEFAULT 0
    )",
    "CREATE TABLE IF NOT EXISTS actions (
        id TEXT PRIMARY KEY,
        dweller TEXT NOT NULL,
        action TEXT NOT NULL,
        seq BIGINT NOT NULL,
        agent TEXT NOT NULL,
        UNIQUE (dweller, seq)
    )",
    "CREATE TABLE IF NOT EXISTS stories (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        author TEXT NOT NULL,
        title TEXT NOT NULL,
        body TEXT NOT NULL
    )",
];

const POSTGRES_SCHEMA: &[&str] = &[
    // Concurrent `CREATE TABLE IF NOT EXISTS` can fail on PostgreSQL; serialise start-ups.
    "SELECT pg_advisory_xact_lock(7267331469312094)",
    "CREATE TABLE IF NOT EXISTS dwellers (
        id TEXT PRIMARY KEY,
        actions BIGINT NOT NULL DEFAULT 0,
        beats BIGINT NOT NULL DEFAULT 0
    )",
    "CREATE TABLE IF NOT EXISTS actions (
        id TEXT PRIMARY KEY,
        dweller TEXT NOT NULL,
        action TEXT NOT NULL,
        seq BIGINT NOT NULL,
        agent TEXT NOT NULL,
        UNIQUE (dweller, seq)
    )",
    "CREATE TABLE IF NOT EXISTS stories (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        author TEXT NOT NULL,
        title TEXT NOT NULL,
        body TEXT NOT NULL
    )",
];

/// Counts the action and returns the dweller's count: the upsert locks the dweller's row until
/// the transaction ends, so concurrent actions get consecutive numbers.
const COUNT_ACTION: &str = "INSERT INTO dwellers (id, actions, beats) VALUES ($1, 1, 0) \
    ON CONFLICT (id) DO UPDATE SET actions = dwellers.actions + 1 RETURNING actions";
const INSERT_ACTION: &str =
    "INSERT INTO actions (id, dweller, action, seq, agent) VALUES ($1, $2, $3, $4, $5)";
const COUNT_BEAT: &str = "INSERT INTO dwellers (id, actions, beats) VALUES ($1, 0, 1) \
    ON CONFLICT (id) DO UPDATE SET beats = dwellers.beats + 1 RETURNING beats";
const GET_DWELLER: &str = "SELECT actions, beats FROM dwellers WHERE id = $1";
const INSERT_STORY: &str = "INSERT INTO stories (id, author, title, body) VALUES ($1, $2, $3, $4)";
const LIST_STORIES: &str = "SELECT id, title, body FROM stories ORDER BY seq DESC LIMIT $1";

/// The app's database. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// An action a dweller took.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Action {
    pub(crate) id: String,
    pub(crate) dweller: String,
    pub(crate) action: String,
    /// The dweller's action count, this one included.
    pub(crate) seq: i64,
}

/// A story, as listed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Story {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) body: String,
}

impl Db {
    /// Opens the database named by `url` (creating a SQLite file if missing) and its tables.
    pub(crate) async fn connect(url: &str) -> sqlx::Result<Self> {
        let db = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            Self::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(8)
                    .connect_with(options)
                    .await?,
            )
        } else {
            Self::Postgres(
                PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(5))
                    // A statement stuck on a lock fails instead of holding its connection:
                    // the pool stays available to every other request.
                    .connect_with(
                        url.parse::<sqlx::postgres::PgConnectOptions>()?
                            .options([("statement_timeout", "5s"), ("lock_timeout", "5s")]),
                    )
                    .await?,
            )
        };
        let schema = match &db {
            Self::Sqlite(_) => SQLITE_SCHEMA,
            Self::Postgres(_) => POSTGRES_SCHEMA,
        };
        each_backend!(&db, Db, pool => {
            let mut tx = pool.begin().await?;
            for statement in schema {
                sqlx::query(*statement).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(db)
    }

    /// `Ok` when the database answers.
    pub(crate) async fn ping(&self) -> sqlx::Result<()> {
        each_backend!(self, Db, pool => sqlx::query("SELECT 1").execute(pool).await.map(drop))
    }

    /// Closes every connection (SQLite checkpoints its WAL).
    pub(crate) async fn close(&self) {
        each_backend!(self, Db, pool => pool.close().await);
    }

    /// A dweller's action and heartbeat counts; 0s for a dweller never seen.
    pub(crate) async fn dweller(&self, id: &str) -> sqlx::Result<(i64, i64)> {
        let row: Option<(i64, i64)> = each_backend!(self, Db, pool => {
            sqlx::query_as(GET_DWELLER).bind(id).fetch_optional(pool).await?
        });
        Ok(row.unwrap_or((0, 0)))
    }

    /// Up to `limit` stories, newest first.
    pub(crate) async fn stories(&self, limit: i64) -> sqlx::Result<Vec<Story>> {
        let rows: Vec<(String, String, String)> = each_backend!(self, Db, pool => {
            sqlx::query_as(LIST_STORIES).bind(limit).fetch_all(pool).await?
        });
        let stories = rows
            .into_iter()
            .map(|(id, title, body)| Story { id, title, body });
        Ok(stories.collect())
    }
}

/// Records that `agent` made `dweller` do `action`, in the handler's transaction.
pub(crate) async fn record_action(
    tx: &mut AnyTx,
    agent: &str,
    dweller: &str,
    action: &str,
) -> sqlx::Result<Action> {
    let id = new_id("act");
    let seq: i64 = in_tx!(tx, c => {
        let seq: i64 = sqlx::query_scalar(COUNT_ACTION).bind(dweller).fetch_one(&mut *c).await?;
        sqlx::query(INSERT_ACTION)
            .bind(&id)
            .bind(dweller)
            .bind(action)
            .bind(seq)
            .bind(agent)
            .execute(&mut *c)
            .await
            .map(|_| seq)
    })?;
    Ok(Action {
        id,
        dweller: dweller.to_owned(),
        action: action.to_owned(),
        seq,
    })
}

/// Counts a heartbeat of `dweller` in the handler's transaction; returns the count.
pub(crate) async fn record_beat(tx: &mut AnyTx, dweller: &str) -> sqlx::Result<i64> {
    in_tx!(tx, c => sqlx::query_scalar(COUNT_BEAT).bind(dweller).fetch_one(&mut *c).await)
}

/// Records a story by `author` in the handler's transaction.
pub(crate) async fn insert_story(
    tx: &mut AnyTx,
    author: &str,
    title: &str,
    body: &str,
) -> sqlx::Result<Story> {
    let id = new_id("story");
    in_tx!(tx, c => {
        sqlx::query(INSERT_STORY)
            .bind(&id)
            .bind(author)
            .bind(title)
            .bind(body)
            .execute(&mut *c)
            .await
            .map(drop)
    })?;
    Ok(Story {
        id,
        title: title.to_owned(),
        body: body.to_owned(),
    })
}

/// The engine hands no transaction: only when its store is not the app's database, which
/// `main` never builds.
fn no_transaction() -> sqlx::Error {
    sqlx::Error::Configuration("the idempotency store lends no transactions".into())
}

/// `prefix_` and 24 random letters and digits.
fn new_id(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + 25);
    id.push_str(prefix);
    id.push('_');
    id.extend(std::iter::repeat_with(fastrand::alphanumeric).take(24));
    id
}
