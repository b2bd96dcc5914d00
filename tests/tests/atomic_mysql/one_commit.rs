//! What MySQL does to a claim made inside the handler's transaction, the one-commit design of
//! PostgreSQL (docs/atomic-mode.md says why MySQL commits twice): each test shows one of the
//! reasons, on plain InnoDB tables standing for the records table.

use std::time::{Duration, Instant};

use idem_tests::mysql::{drop_database, mysql_database, mysql_url_of};
use sqlx::{Connection, Executor, MySqlConnection};

/// MySQL's number for a failed statement.
fn number(error: &sqlx::Error) -> Option<u16> {
    let error = error.as_database_error()?;
    let error = error.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()?;
    Some(error.number())
}

async fn session(database: &str) -> MySqlConnection {
    MySqlConnection::connect(&mysql_url_of(database))
        .await
        .unwrap()
}

async fn count(conn: &mut MySqlConnection, sql: impl Into<String>) -> i64 {
    let sql = sqlx::AssertSqlSafe(sql.into());
    sqlx::query_scalar(sql).fetch_one(conn).await.unwrap()
}

/// Waits (at most 10 s) until `n` transactions of this database wait for a lock.
///
/// `INNODB_TRX` is a cache the server refreshes only when it has not been read for 100 ms: a
/// faster poll keeps reading the snapshot its first read took, so it polls every 250 ms.
async fn until_waiting(conn: &mut MySqlConnection, n: i64) {
    let waiting = "SELECT COUNT(*) FROM information_schema.INNODB_TRX t \
         JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
         WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()";
    for _ in 0..40 {
        if count(conn, waiting).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let seen: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT CONVERT(t.trx_state USING utf8mb4), CONVERT(t.trx_query USING utf8mb4) \
         FROM information_schema.INNODB_TRX t",
    )
    .fetch_all(conn)
    .await
    .unwrap();
    panic!("{n} transactions never waited: {seen:?}");
}

async fn fresh() -> (String, MySqlConnection) {
    let database = mysql_database().await;
    let mut setup = session(&database).await;
    for ddl in [
        "CREATE TABLE claims (k INT PRIMARY KEY)",
        "CREATE TABLE writes (id INT AUTO_INCREMENT PRIMARY KEY)",
        "CREATE TABLE locks (id INT PRIMARY KEY, n INT NOT NULL)",
        "INSERT INTO locks VALUES (1, 0), (2, 0)",
        "CREATE TABLE ballast (id INT PRIMARY KEY)",
    ] {
        setup.execute(ddl).await.unwrap();
    }
    (database, setup)
}

/// A duplicate's claim waits on the first's uncommitted row for whole seconds: the server
/// takes no fraction (a 50 ms wait cannot be asked of it), and on MariaDB 0 means no wait at
/// all. Its lock wait timeout (1205) fails that statement only: the duplicate's transaction
/// goes on, an earlier write in it still there. Once the first commits, the claim is a
/// duplicate key (1062).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_whole_seconds_and_its_timeout_fails_one_statement() {
    let (database, mut first) = fresh().await;
    first.execute("BEGIN").await.unwrap();
    first
        .execute("INSERT INTO claims VALUES (1)")
        .await
        .unwrap();

    let mut duplicate = session(&database).await;
    let fraction = duplicate
        .execute("SET SESSION innodb_lock_wait_timeout = 0.05")
        .await;
    assert_eq!(
        fraction.err().as_ref().and_then(number),
        Some(1232),
        "no fraction"
    );
    duplicate
        .execute("SET SESSION innodb_lock_wait_timeout = 0")
        .await
        .unwrap();
    let at_once = duplicate.execute("INSERT INTO claims VALUES (1)").await;
    assert_eq!(
        at_once.err().as_ref().and_then(number),
        Some(1205),
        "0: no wait"
    );

    duplicate
        .execute("SET SESSION innodb_lock_wait_timeout = 1")
        .await
        .unwrap();
    duplicate.execute("BEGIN").await.unwrap();
    duplicate
        .execute("INSERT INTO writes () VALUES ()")
        .await
        .unwrap();
    let started_waiting = Instant::now();
    let waited = duplicate.execute("INSERT INTO claims VALUES (1)").await;
    assert_eq!(waited.err().as_ref().and_then(number), Some(1205));
    assert!(
        started_waiting.elapsed() >= Duration::from_secs(1),
        "a whole second"
    );
    assert_eq!(
        count(&mut duplicate, "SELECT COUNT(*) FROM writes").await,
        1,
        "the transaction goes on, its earlier write in it"
    );
    duplicate.execute("ROLLBACK").await.unwrap();

    first.execute("COMMIT").await.unwrap();
    let stored = duplicate.execute("INSERT INTO claims VALUES (1)").await;
    assert_eq!(stored.err().as_ref().and_then(number), Some(1062));
    drop((first, duplicate));
    drop_database(&database).await;
}

/// The reason one commit is not offered: a claim held by a row of the handler's transaction
/// lasts only as long as InnoDB lets the transaction live. A handler statement that loses a
/// deadlock ends the whole transaction, claim included, while the handler runs on (its next
/// statements in autocommit): a duplicate then claims the key and runs beside it, two
/// owners. A named lock of the session (`GET_LOCK`) is not part of the transaction and
/// survives it, as PostgreSQL's one-commit lock survives a failed statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_under_the_handler_frees_a_claim_row_but_not_a_named_lock() {
    let (database, _setup) = fresh().await;
    let lock = format!("SELECT GET_LOCK('{database}.k1', 0)");
    let mut handler = session(&database).await;
    assert_eq!(count(&mut handler, lock.clone()).await, 1);
    handler.execute("BEGIN").await.unwrap();
    handler
        .execute("INSERT INTO claims VALUES (1)")
        .await
        .unwrap();
    handler
        .execute("UPDATE locks SET n = n + 1 WHERE id = 1")
        .await
        .unwrap();
    // A heavier transaction (InnoDB ends the lighter one) holding row 2.
    let mut other = session(&database).await;
    other.execute("BEGIN").await.unwrap();
    other
        .execute("INSERT INTO ballast (id) SELECT seq FROM seq_1_to_200")
        .await
        .unwrap();
    other
        .execute("UPDATE locks SET n = n + 1 WHERE id = 2")
        .await
        .unwrap();
    let waits = tokio::spawn(async move {
        let lost = handler
            .execute("UPDATE locks SET n = n + 1 WHERE id = 2")
            .await;
        (handler, lost.err().as_ref().and_then(number))
    });
    until_waiting(&mut other, 1).await;
    other
        .execute("UPDATE locks SET n = n + 1 WHERE id = 1")
        .await
        .unwrap();
    other.execute("COMMIT").await.unwrap();
    let (mut handler, lost) = waits.await.unwrap();
    assert_eq!(lost, Some(1213), "the handler's transaction is the victim");
    assert_eq!(
        count(&mut handler, "SELECT CAST(@@in_transaction AS SIGNED)").await,
        0,
        "the handler's session goes on in autocommit"
    );

    let mut duplicate = session(&database).await;
    duplicate
        .execute("SET SESSION innodb_lock_wait_timeout = 1")
        .await
        .unwrap();
    duplicate
        .execute("INSERT INTO claims VALUES (1)")
        .await
        .expect("the claim row went with the handler's transaction: a second owner");
    assert_eq!(
        count(&mut duplicate, lock).await,
        0,
        "the named lock is still the handler's session's"
    );
    drop((handler, duplicate, other));
    drop_database(&database).await;
}
