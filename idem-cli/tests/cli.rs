//! The `idem` command on every store, against records the real engine made: one completed, one
//! in flight under a running handler, one expired. What an operator does with them (list, filter,
//! count, show, forget, purge), the exit codes, and `forget --force` racing the running owner:
//! the owner's late completion neither brings the record back nor overwrites the retry's.
//!
//! ```text
//! cargo test -p idem-cli
//! ```
//! S3 and DynamoDB run on the moto server the test harness starts (`idem_tests::moto`).

#[path = "cli/scenario.rs"]
mod scenario;
#[path = "cli/support.rs"]
mod support;

use std::sync::Arc;

use idem_runtime::store::{BucketStore, RedisStore};
use idem_tests::db::{self, sqlite_url};
use idem_tests::dynamodb::{aws_env, delete_table, dynamodb_endpoint, dynamodb_store_builder};
use idem_tests::redis::{cluster_node, delete_prefix, redis_url, unique_prefix};
use idem_tests::s3;
use scenario::operators_see_explain_and_fix;
use support::Target;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let store = idem_tests::sqlite_store().await;
    let path = store.pool().connect_options().get_filename().to_owned();
    operators_see_explain_and_fix(store.clone(), Target::new(&sqlite_url(&path))).await;
    db::remove_sqlite_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let store = idem_tests::postgres_store().await;
    let target = Target::new(&idem_tests::postgres_url())
        .arg("--schema")
        .arg(store.schema())
        .arg("--table")
        .arg(store.table());
    operators_see_explain_and_fix(store.clone(), target).await;
    db::drop_postgres_store(&store).await;
}

/// A SQLite database without the records table (another application's, a wrong path) is
/// refused, and none is created in it.
#[tokio::test]
async fn a_sqlite_database_without_records_is_refused_and_not_changed() {
    let path = std::env::temp_dir().join(format!("idem-cli-other-{}.db", std::process::id()));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    let ran = Target::new(&sqlite_url(&path)).expect(2, &["ls"]).await;
    assert!(ran.stderr.contains("no table `idem_records`"), "{ran:?}");
    let (tables,): (i64,) = sqlx::query_as("SELECT count(*) FROM sqlite_master")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tables, 1, "only the application's own table");
    pool.close().await;
    let _ = std::fs::remove_file(&path);
}

/// A misspelt `--schema` or `--table` is refused, naming it, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_postgres_schema_or_table_is_refused_and_not_created() {
    let store = idem_tests::postgres_store().await;
    let typo = format!("{}_typo", store.table());
    let target = Target::new(&idem_tests::postgres_url())
        .arg("--schema")
        .arg(store.schema())
        .arg("--table")
        .arg(&typo);
    let ran = target.expect(2, &["ls"]).await;
    assert!(
        ran.stderr.contains(&format!("no table `{typo}`")),
        "{ran:?}"
    );
    let schema_typo = format!("{}_typo", store.schema());
    let target = Target::new(&idem_tests::postgres_url())
        .arg("--schema")
        .arg(&schema_typo)
        .arg("--table")
        .arg(store.table());
    let ran = target.expect(2, &["stats"]).await;
    assert!(
        ran.stderr.contains(&format!("no schema `{schema_typo}`")),
        "{ran:?}"
    );
    let (schemas, tables): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1), \
                (SELECT count(*) FROM pg_tables WHERE schemaname = $2 AND tablename = $3)",
    )
    .bind(&schema_typo)
    .bind(store.schema())
    .bind(&typo)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!((schemas, tables), (0, 0), "nothing was created");
    db::drop_postgres_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql() {
    let store = idem_tests::mysql_store().await;
    let database = store_database(&store).await;
    let target = Target::new(&idem_tests::mysql::mysql_url_of(&database))
        .arg("--table")
        .arg(store.table());
    operators_see_explain_and_fix(store.clone(), target).await;
    idem_tests::mysql::drop_mysql_store(&store).await;
}

/// The database a test store's pool is connected to.
async fn store_database(store: &idem_runtime::store::MySqlStore) -> String {
    sqlx::query_scalar("SELECT CONVERT(DATABASE() USING utf8mb4)")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// A misspelt database or `--table` is refused (exit 2), naming it, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_mysql_database_or_table_is_refused_and_not_created() {
    let store = idem_tests::mysql_store().await;
    let database = store_database(&store).await;
    let typo = format!("{}_typo", store.table());
    let ran = Target::new(&idem_tests::mysql::mysql_url_of(&database))
        .arg("--table")
        .arg(&typo)
        .expect(2, &["ls"])
        .await;
    assert!(
        ran.stderr.contains(&format!("no table `{typo}`")),
        "{ran:?}"
    );
    let database_typo = format!("{database}_typo");
    let ran = Target::new(&idem_tests::mysql::mysql_url_of(&database_typo))
        .expect(2, &["stats"])
        .await;
    assert!(
        ran.stderr
            .contains(&format!("no database `{database_typo}`")),
        "{ran:?}"
    );
    let (databases, tables): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?), \
                (SELECT COUNT(*) FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?)",
    )
    .bind(&database_typo)
    .bind(&database)
    .bind(&typo)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!((databases, tables), (0, 0), "nothing was created");
    idem_tests::mysql::drop_mysql_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let store = idem_tests::redis_store().await;
    let prefix = store.prefix().to_owned();
    let target = Target::new(&redis_url()).arg("--prefix").arg(&prefix);
    operators_see_explain_and_fix(store, target).await;
    delete_prefix(&redis_url(), &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_cluster() {
    let node = cluster_node();
    let prefix = unique_prefix();
    let store = RedisStore::cluster_builder([node.url()])
        .prefix(&prefix)
        .build()
        .await
        .expect("the test cluster answers");
    let target = Target::new(node.url())
        .arg("--cluster")
        .arg("--prefix")
        .arg(&prefix);
    operators_see_explain_and_fix(store, target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3() {
    let endpoint = s3::s3_endpoint();
    let bucket = format!("idem-cli-{:08x}", fastrand::u32(..));
    s3::create_bucket(&endpoint, &bucket).await;
    let store = BucketStore::with_prefix(Arc::new(s3::s3(&endpoint, &bucket)), "idem")
        .await
        .expect("moto supports conditional PUTs");
    let mut target = Target::new(&format!("s3://{bucket}/idem"));
    target.env = s3::s3_env(&endpoint);
    operators_see_explain_and_fix(store, target).await;

    // A bucket that does not exist is refused, named, and not created.
    let mut missing = Target::new("s3://no-such-bucket/idem");
    missing.env = s3::s3_env(&endpoint);
    let ran = missing.expect(2, &["ls"]).await;
    let named = "the bucket `no-such-bucket` does not exist";
    assert!(ran.stderr.contains(named), "{ran:?}");
    assert!(!s3::bucket_exists(&endpoint, "no-such-bucket").await);
    // A prefix holding nothing cannot be told from an empty store: said, not refused.
    let mut typo = Target::new(&format!("s3://{bucket}/idme"));
    typo.env = s3::s3_env(&endpoint);
    let ran = typo.expect(0, &["ls"]).await;
    let said = format!("nothing under `idme` in the bucket `{bucket}`");
    assert!(ran.stderr.contains(&said), "{ran:?}");
}

/// DynamoDB, its client configured by the standard AWS environment alone (`AWS_ENDPOINT_URL`,
/// `AWS_REGION`, the credentials) as on any machine with AWS access. A table that does not
/// exist is refused (exit 2, never created), and a region must be known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_dynamodb() {
    let endpoint = dynamodb_endpoint();
    let store = dynamodb_store_builder(&endpoint)
        .build()
        .await
        .expect("moto serves DynamoDB");
    let (client, table) = (store.client().clone(), store.table().to_owned());
    let mut target = Target::new(&format!("dynamodb://{table}"));
    target.env = aws_env(&endpoint);
    operators_see_explain_and_fix(store, target).await;

    let mut missing = Target::new("dynamodb://no-such-table");
    missing.env = aws_env(&endpoint);
    let ran = missing.expect(2, &["ls"]).await;
    assert!(
        ran.stderr.contains("`no-such-table` does not exist"),
        "{ran:?}"
    );
    let listed = client
        .list_tables()
        .send()
        .await
        .expect("moto lists tables");
    assert!(
        !listed.table_names().iter().any(|t| t == "no-such-table"),
        "the command never creates a table"
    );
    let mut no_region = Target::new(&format!("dynamodb://{table}"));
    no_region.env = aws_env(&endpoint)
        .into_iter()
        .filter(|(name, _)| name != "AWS_REGION")
        .collect();
    let ran = no_region.expect(2, &["ls"]).await;
    assert!(ran.stderr.contains("AWS_REGION"), "{ran:?}");
    let ran = Target::new("dynamodb://").expect(2, &["ls"]).await;
    assert!(ran.stderr.contains("dynamodb://TABLE"), "{ran:?}");
    delete_table(&client, &table).await;
}

/// Exit 1, and a sentence, when the store cannot be reached or stalls; a SQLite file that does
/// not exist is not created.
#[tokio::test]
async fn an_unreachable_or_stalled_store_exits_1() {
    let closed = Target::new("redis://127.0.0.1:1").expect(1, &["ls"]).await;
    assert!(closed.stderr.contains("unavailable"), "{closed:?}");
    each_cause_once(&closed.stderr);
    // A refused connection is reported as refused, with the reason, not as a pool that waited
    // out the whole --timeout.
    let postgres = Target::new("postgres://postgres@127.0.0.1:1/test")
        .expect(1, &["stats"])
        .await;
    assert!(postgres.stderr.contains("refused"), "{postgres:?}");
    assert!(!postgres.stderr.contains("pool timed out"), "{postgres:?}");
    let path = db::sqlite_path();
    let missing = Target::new(&sqlite_url(&path)).expect(1, &["ls"]).await;
    assert!(missing.stderr.contains("unable to open"), "{missing:?}");
    each_cause_once(&missing.stderr);
    assert!(!path.exists(), "a typo must not create a database");
    // A server that accepts connections and never answers: the command gives up at --timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let stalled = Target::new(&format!("redis://{addr}"))
        .arg("--timeout")
        .arg("1s")
        .expect(1, &["ls"])
        .await;
    assert!(
        stalled.stderr.contains("did not answer") || stalled.stderr.contains("timed out"),
        "{stalled:?}"
    );
    let stalled = Target::new(&format!("postgres://postgres@{addr}/test"))
        .arg("--timeout")
        .arg("1s")
        .expect(1, &["ls"])
        .await;
    assert!(
        stalled.stderr.contains("did not answer within 1s"),
        "{stalled:?}"
    );
    hold.abort();
}

/// One line, `idem: ` and the error, then each cause not already in the text before it.
fn each_cause_once(stderr: &str) {
    let line = stderr
        .strip_prefix("idem: ")
        .expect("the command's name first");
    assert_eq!(line.lines().count(), 1, "{stderr}");
    let parts: Vec<&str> = line.trim_end().split(": ").collect();
    for (i, part) in parts.iter().enumerate() {
        assert!(!parts[..i].contains(part), "{part:?} twice in {stderr:?}");
    }
}

/// Exit 2 and what is wrong, before any store is touched.
#[tokio::test]
async fn bad_arguments_exit_2() {
    let nowhere = Target::new("redis://127.0.0.1:1");
    for args in [
        &["ls", "--state", "stuck"][..],
        &["ls", "--older-than", "ten minutes"],
        &["purge"],
        &[
            "purge",
            "--operation",
            "x",
            "--completed-between",
            "yesterday",
            "today",
        ],
        &["show", "--operation", "x", "--scope", "org"],
        &["frobnicate"],
    ] {
        let ran = nowhere.expect(2, args).await;
        assert!(!ran.stderr.is_empty(), "{args:?} says why: {ran:?}");
    }
    // A timeout that could only ever time out is a bad argument on every store, refused before
    // any connection is tried.
    for url in [
        "redis://127.0.0.1:1",
        "sqlite://missing.db",
        "postgres://127.0.0.1:1/app",
        "mysql://127.0.0.1:1/app",
        "s3://bucket",
        "dynamodb://table",
    ] {
        for timeout in ["0s", "0ms", "-1s"] {
            let flag = format!("--timeout={timeout}");
            let ran = Target::new(url).expect(2, &["ls", &flag]).await;
            assert!(ran.stderr.contains("--timeout"), "{url} {timeout}: {ran:?}");
        }
    }
    // MySQL is a store now: a scheme no store answers to stands for the unknown.
    let unknown = Target::new("mongodb://db/app").expect(2, &["ls"]).await;
    assert!(
        unknown.stderr.starts_with("idem: unknown store URL"),
        "{unknown:?}"
    );
    // A table name has no `/` (checked before any AWS configuration is read).
    let nested = Target::new("dynamodb://orders/extra")
        .expect(2, &["ls"])
        .await;
    assert!(nested.stderr.contains("dynamodb://TABLE"), "{nested:?}");
    let sqlite = Target::new(&sqlite_url(&db::sqlite_path()));
    let key = [&["show"], &support::record("has space")[..]].concat();
    let bad_key = sqlite.expect(2, &key).await;
    assert!(bad_key.stderr.contains("--key"), "{bad_key:?}");
    let backwards = [
        "purge",
        "--operation",
        "x",
        "--completed-between",
        "2026-11-27T11:00:00Z",
        "2026-11-27T10:00:00Z",
    ];
    let ran = sqlite.expect(2, &backwards).await;
    assert!(ran.stderr.contains("T1 must be before T2"), "{ran:?}");
}
