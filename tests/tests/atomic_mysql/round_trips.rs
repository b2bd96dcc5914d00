//! Round trips per fresh request in atomic mode on MySQL, counted by a loopback proxy: a flight
//! is what the client sends after the server has spoken (or first), one wait of a network's
//! round-trip time. One pooled connection, so every statement is prepared by the warm-up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_runtime::store::MySqlStore;
use idem_runtime::{Idempotency, Tx, idempotent};
use idem_tests::mysql::{drop_database, mysql_database};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{Executor, MySqlPool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

/// A proxy to `target` counting the client's flights.
async fn counting_proxy(target: SocketAddr) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let flights = Arc::new(AtomicU64::new(0));
    let counted = flights.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(target).await.unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            // The server speaks first (its greeting).
            let spoke = Arc::new(AtomicBool::new(false));
            let (heard, flights) = (spoke.clone(), counted.clone());
            tokio::spawn(async move {
                let mut buf = vec![0; 64 << 10];
                while let Ok(n @ 1..) = client_read.read(&mut buf).await {
                    if heard.swap(false, Ordering::SeqCst) {
                        flights.fetch_add(1, Ordering::SeqCst);
                    }
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0; 64 << 10];
                while let Ok(n @ 1..) = server_read.read(&mut buf).await {
                    // Before the client can see it, so its answer is a new flight.
                    spoke.store(true, Ordering::SeqCst);
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, flights)
}

#[derive(Clone, FromRef)]
struct App {
    idem: Idempotency,
    items: Items,
}

/// The application's table, qualified with the store's database.
#[derive(Clone)]
struct Items(Arc<str>);

#[idempotent(scope = "global", commits = "two")]
async fn create_item(State(items): State<Items>, mut tx: Tx<sqlx::MySql>) -> StatusCode {
    let insert = format!("INSERT INTO {} (name) VALUES (?)", items.0);
    sqlx::query(sqlx::AssertSqlSafe(insert))
        .bind("item")
        .execute(tx.conn().await.expect("begin"))
        .await
        .expect("insert");
    StatusCode::CREATED
}

/// The flights counted once the pool's one connection is back.
async fn idle(pool: &MySqlPool, flights: &AtomicU64) -> u64 {
    let conn = pool.acquire().await.unwrap();
    let counted = flights.load(Ordering::SeqCst);
    drop(conn);
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_request_with_two_commits() {
    let database = mysql_database().await;
    let (server, template) = idem_tests::proxy::mysql_target();
    let (proxy, flights) = counting_proxy(server).await;
    let url = template.replace("{proxy}", &proxy.to_string());
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        // As `MySqlStore::connect` does: no ping before every acquire.
        .test_before_acquire(false)
        .connect(&url)
        .await
        .unwrap();
    let items = format!("`{database}`.items");
    pool.execute(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {items} (id BIGINT AUTO_INCREMENT PRIMARY KEY, name TEXT NOT NULL)"
    )))
    .await
    .unwrap();
    let store = MySqlStore::builder(pool.clone())
        .database(database.clone())
        .build()
        .await
        .unwrap();
    let idem = Idempotency::builder().store(store).build().unwrap();
    let app = App {
        idem,
        items: Items(items.into()),
    };
    let router = Router::new()
        .route("/items", post(create_item))
        .with_state(app);
    let send = |key: String| {
        let request = Request::post("/items")
            .header("idempotency-key", key)
            .body(Body::empty())
            .unwrap();
        let call = router.clone().oneshot(request);
        async move {
            let response = tokio::time::timeout(Duration::from_secs(30), call).await;
            response.expect("answered").unwrap().status()
        }
    };
    assert_eq!(send("warm".into()).await, StatusCode::CREATED);
    const N: u64 = 5;
    let before = idle(&pool, &flights).await;
    for i in 0..N {
        assert_eq!(send(format!("k{i}")).await, StatusCode::CREATED);
    }
    // The interval also holds the ping the pool sends as `idle` hands its connection back.
    let spent = idle(&pool, &flights).await - before - 1;
    eprintln!(
        "flights per fresh request: {} (remainder {})",
        spent / N,
        spent % N
    );
    // The claim's INSERT, and the pool's ping as its connection goes back; the BEGIN (with
    // the session's timeouts kept and bounded, and the savepoint); the handler's INSERT; the
    // savepoint's check; the completion's UPDATE; the session's timeouts put back with the
    // COMMIT; and, as the connection goes back, the ROLLBACK of the empty transaction after
    // the COMMIT, then the pool's ping.
    assert_eq!((spent / N, spent % N), (9, 0));
    pool.close().await;
    drop_database(&database).await;
}
