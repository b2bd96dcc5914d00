//! The SQLite store's writer beyond the conformance suite every store passes: a write whose
//! connection was lost opens another, a failed connection is dropped and SQLite's refusals are
//! not, and a live record answers its claim from a read while another connection holds the
//! database's write lock; the checkpointer copies commits into the database file, opens its
//! connection at a write and again after a round that could not, and ends with its pool; the
//! writer keeps the log bounded while writes never pause and cuts back what a long reader let
//! grow.

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, Executor, SqliteConnection};

use super::*;
use idem_core::testing::{at, key, request};

const HOUR: i64 = 3_600_000;

/// A new database file's URL, in the system's temporary directory.
fn database_url() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "idem-sqlite-writer-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite://{}", dir.join("store.db").display())
}

/// The database file of `url`.
fn file_of(url: &str) -> &Path {
    Path::new(url.trim_start_matches("sqlite://"))
}

/// Deletes the directory [`database_url`] made for `url`, with everything in it.
fn remove_dir(url: &str) {
    std::fs::remove_dir_all(file_of(url).parent().unwrap()).unwrap();
}

/// Claims `key` at `now` for a minute's lease and an hour's life.
async fn claim(store: &SqliteStore, key: &RecordKey, token: i64, now: i64) -> Claim {
    store
        .claim(request(key, token, now, HOUR, ("global", "")))
        .await
        .unwrap()
}

async fn complete(store: &SqliteStore, key: &RecordKey, token: i64, now: i64) -> Fence {
    store
        .complete(
            key,
            LeaseToken::from_i64(token),
            Completion {
                payload: b"stored",
                status: Some(201),
                completed_at: at(now),
                expires_at: at(now + HOUR),
            },
        )
        .await
        .unwrap()
}

const ACQUIRED: Claim = Claim::Acquired { took_over: false };

#[tokio::test]
async fn a_file_store_writes_through_a_writer_of_its_own_and_an_in_memory_one_through_its_pool() {
    let url = database_url();
    let connected = SqliteStore::connect(&url).await.unwrap();
    assert!(connected.writer.is_some());
    let app_pool = SqlitePool::connect(&url).await.unwrap();
    let from_pool = SqliteStore::from_pool(app_pool).await.unwrap();
    assert!(from_pool.writer.is_some());
    let memory = SqliteStore::connect("sqlite::memory:").await.unwrap();
    assert!(memory.writer.is_none());
    let memory_pool = SqlitePool::connect("sqlite::memory:").await.unwrap();
    let memory_from_pool = SqliteStore::from_pool(memory_pool).await.unwrap();
    assert!(memory_from_pool.writer.is_none());
    // Each writes; the two on one file see each other's records.
    for (i, store) in [&connected, &memory, &memory_from_pool]
        .into_iter()
        .enumerate()
    {
        assert_eq!(claim(store, &key(1), 1, 0).await, ACQUIRED, "store {i}");
        assert_eq!(
            complete(store, &key(1), 1, 10).await,
            Fence::Held,
            "store {i}"
        );
    }
    assert!(matches!(
        claim(&from_pool, &key(1), 2, 20).await,
        Claim::Completed { .. }
    ));
}

#[tokio::test]
async fn a_write_after_the_writer_lost_its_connection_opens_another() {
    let store = SqliteStore::connect(&database_url()).await.unwrap();
    assert_eq!(claim(&store, &key(1), 1, 0).await, ACQUIRED);
    let writer = store.writer.as_ref().unwrap();
    writer.lose_connection().await;
    // The completion, the next claim and a release each find a connection.
    assert_eq!(complete(&store, &key(1), 1, 10).await, Fence::Held);
    writer.lose_connection().await;
    assert_eq!(claim(&store, &key(2), 2, 20).await, ACQUIRED);
    writer.lose_connection().await;
    let released = store.release(&key(2), LeaseToken::from_i64(2)).await;
    assert_eq!(released.unwrap(), Fence::Held);
    // What the first connection wrote is there: the completed record replays.
    assert!(matches!(
        claim(&store, &key(1), 3, 30).await,
        Claim::Completed { payload, .. } if payload.as_ref() == b"stored"
    ));
}

#[tokio::test]
async fn the_writer_drops_its_connection_on_a_failure_of_it_and_keeps_it_on_sqlites_refusals() {
    let store = SqliteStore::connect(&database_url()).await.unwrap();
    let writer = store.writer.as_ref().unwrap();
    // SQLite's answer to a statement: the connection is sound, and kept.
    let mut turn = writer.turn(false).await.unwrap();
    let refused = sqlx::query("SELECT * FROM no_such_table")
        .execute(turn.conn())
        .await;
    assert!(matches!(
        turn.checked(refused),
        Err(sqlx::Error::Database(_))
    ));
    assert!(writer.connected().await);
    // A failure of the connection itself: dropped, and the next write opens another.
    let turn = writer.turn(false).await.unwrap();
    let failed: Result<(), _> = turn.checked(Err(sqlx::Error::WorkerCrashed));
    assert!(matches!(failed, Err(sqlx::Error::WorkerCrashed)));
    assert!(!writer.connected().await);
    assert_eq!(claim(&store, &key(1), 1, 0).await, ACQUIRED);
    assert!(writer.connected().await);
}

#[tokio::test]
async fn a_live_record_answers_its_claim_while_another_connection_holds_the_write_lock() {
    let url = database_url();
    let store = SqliteStore::connect(&url).await.unwrap();
    assert_eq!(claim(&store, &key(1), 1, 0).await, ACQUIRED);
    assert_eq!(complete(&store, &key(1), 1, 10).await, Fence::Held);
    assert_eq!(claim(&store, &key(2), 2, 20).await, ACQUIRED);

    // Another process's transaction holds SQLite's one write lock: a claim that needed it would
    // wait out the store's busy timeout and fail as busy.
    let mut other = SqliteConnection::connect(&url).await.unwrap();
    other.execute("BEGIN IMMEDIATE").await.unwrap();

    // The completed record replays, and the one in flight answers in flight: both from a read.
    assert!(matches!(
        claim(&store, &key(1), 3, 30).await,
        Claim::Completed { payload, .. } if payload.as_ref() == b"stored"
    ));
    assert!(matches!(
        claim(&store, &key(2), 4, 40).await,
        Claim::InFlight { .. }
    ));
    other.execute("ROLLBACK").await.unwrap();
}

/// How many records the database file holds without its write-ahead log (what checkpoints
/// copied into it), read from a copy of the file alone; 0 when the copy caught a page
/// half-written.
async fn records_in_file(url: &str) -> i64 {
    let copy = format!("{}.copy", file_of(url).display());
    std::fs::copy(file_of(url), &copy).unwrap();
    let count = match SqliteConnection::connect(&format!("sqlite://{copy}")).await {
        Ok(mut conn) => {
            let count = sqlx::query_scalar("SELECT count(*) FROM idem_records")
                .fetch_one(&mut conn)
                .await
                .unwrap_or(0);
            let _ = conn.close().await;
            count
        }
        Err(_) => 0,
    };
    std::fs::remove_file(&copy).unwrap();
    count
}

#[tokio::test]
async fn the_checkpointer_copies_the_writers_commits_into_the_database_file() {
    let url = database_url();
    let store = SqliteStore::connect(&url).await.unwrap();
    // Far fewer pages than any automatic checkpoint waits for (SQLite's 1 000, the writer's
    // backstop): only the checkpointer copies them.
    for i in 0..50 {
        assert_eq!(claim(&store, &key(i), i.into(), 0).await, ACQUIRED);
        assert_eq!(complete(&store, &key(i), i.into(), 10).await, Fence::Held);
    }
    let mut copied = records_in_file(&url).await;
    for _ in 0..200 {
        if copied == 50 {
            break;
        }
        tokio::time::sleep(checkpoint::PERIOD).await;
        copied = records_in_file(&url).await;
    }
    assert_eq!(copied, 50, "the database file holds every committed record");
}

/// A checkpointer for the database at `url` (created at its first open), stopped by closing
/// `pool`, which nothing else uses.
fn checkpointer(pool: &SqlitePool, url: &str) -> checkpoint::Checkpointer {
    let options = SqliteConnectOptions::from_str(url)
        .unwrap()
        .create_if_missing(true);
    checkpoint::Checkpointer::spawn(pool.clone(), options)
}

/// Long enough for a round a write started to have run, many times the checkpointer's period.
const SETTLE: Duration = Duration::from_millis(500);

/// Whether the database file of `url` exists within 5 s (the checkpointer opened it).
async fn appears(url: &str) -> bool {
    for _ in 0..100 {
        if file_of(url).exists() {
            return true;
        }
        tokio::time::sleep(checkpoint::PERIOD).await;
    }
    false
}

#[tokio::test]
async fn the_checkpointer_opens_at_a_write_and_again_after_a_round_that_could_not() {
    let pool = SqlitePool::connect_lazy("sqlite::memory:").unwrap();
    let url = database_url();
    let (file, dir) = (file_of(&url), file_of(&url).parent().unwrap());
    let checkpointer = checkpointer(&pool, &url);
    tokio::time::sleep(SETTLE).await;
    assert!(!file.exists(), "no write, no connection");

    // The directory goes: the next write's round cannot open the database.
    std::fs::remove_dir(dir).unwrap();
    checkpointer.wrote();
    tokio::time::sleep(SETTLE).await;
    // It is back, but rounds follow writes: none is tried until the next one.
    std::fs::create_dir(dir).unwrap();
    tokio::time::sleep(SETTLE).await;
    assert!(
        !file.exists(),
        "a failed round is not retried before a write"
    );
    checkpointer.wrote();
    assert!(appears(&url).await, "the round after a failed one opens it");
    drop(checkpointer);
    remove_dir(&url);
}

#[tokio::test]
async fn the_checkpointer_ends_at_the_first_write_after_its_pool_closed() {
    let pool = SqlitePool::connect_lazy("sqlite::memory:").unwrap();
    let url = database_url();
    let mut checkpointer = checkpointer(&pool, &url);
    checkpointer.wrote();
    assert!(appears(&url).await);
    pool.close().await;
    checkpointer.wrote();
    let ended = tokio::time::timeout(Duration::from_secs(5), checkpointer.task()).await;
    assert!(
        matches!(ended, Ok(Ok(()))),
        "the task ended by itself, not aborted"
    );
    remove_dir(&url);
}

/// The write-ahead log of the database at `url`.
fn log_of(url: &str) -> String {
    format!("{}-wal", file_of(url).display())
}

/// Claims and completes `keys`, each with 64 KiB of response (about 17 pages of log); returns
/// the largest the log at `wal` grew meanwhile.
async fn fill(store: &SqliteStore, keys: std::ops::Range<u32>, wal: &str) -> u64 {
    let payload = vec![b'x'; 64 * 1024];
    let mut largest = 0;
    for i in keys {
        assert_eq!(claim(store, &key(i), i.into(), 0).await, ACQUIRED);
        let done = store
            .complete(
                &key(i),
                LeaseToken::from_i64(i.into()),
                Completion {
                    payload: &payload,
                    status: Some(201),
                    completed_at: at(10),
                    expires_at: at(HOUR),
                },
            )
            .await;
        assert_eq!(done.unwrap(), Fence::Held);
        largest = largest.max(std::fs::metadata(wal).unwrap().len());
    }
    largest
}

/// Closes `store` and deletes its directory: the tests that write 100 MiB clean up after
/// themselves.
async fn remove(store: SqliteStore, url: &str) {
    store.pool().close().await;
    drop(store);
    remove_dir(url);
}

#[tokio::test]
async fn the_writers_log_stays_bounded_while_writes_never_pause() {
    let url = database_url();
    let store = SqliteStore::connect(&url).await.unwrap();
    // 1 600 completions: about 26 000 pages of log, three times the writer's backstop, with no
    // pause in which the checkpointer's copy could complete. Without the backstop the log
    // would hold them all, 100 MiB.
    let largest = fill(&store, 0..1_600, &log_of(&url)).await;
    // The writer checkpoints past its backstop, but not while the checkpointer's own copy holds
    // the checkpoint lock: its next commit does, so the log overshoots by the commits made
    // meanwhile (up to 4 MB seen on a loaded machine). Twice the backstop leaves room for that
    // and none for a log that keeps growing.
    let backstop = u64::from(checkpoint::BACKSTOP_PAGES) * 4096;
    assert!(
        largest <= 2 * backstop,
        "the log grew to {largest} bytes; the writer's backstop is {backstop}"
    );
    remove(store, &url).await;
}

#[tokio::test]
async fn a_log_a_long_reader_let_grow_is_cut_back_once_the_reader_ends() {
    let url = database_url();
    let store = SqliteStore::connect(&url).await.unwrap();
    let wal = log_of(&url);
    // An operator's slow listing: a read transaction keeps its snapshot, so no checkpoint
    // completes and the log cannot start over while it lasts.
    let mut reader = SqliteConnection::connect(&url).await.unwrap();
    reader.execute("BEGIN").await.unwrap();
    sqlx::query("SELECT count(*) FROM idem_records")
        .execute(&mut reader)
        .await
        .unwrap();
    let held = fill(&store, 0..1_300, &wal).await;
    assert!(
        held > checkpoint::LOG_LIMIT_BYTES,
        "the reader held the log at {held} bytes"
    );
    reader.execute("COMMIT").await.unwrap();
    // Past the backstop again: the writer's checkpoint completes, the log starts over, and the
    // commit after that cuts its file back.
    fill(&store, 1_300..2_000, &wal).await;
    let after = std::fs::metadata(&wal).unwrap().len();
    assert!(
        after <= checkpoint::LOG_LIMIT_BYTES,
        "the log's file stayed at {after} bytes after the reader ended"
    );
    remove(store, &url).await;
}
