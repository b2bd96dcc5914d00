//! `CreateTransfer` through the generated client, as an application calls it: one transfer per
//! `request_id`, replays marked `idempotent-replayed: true`, and the engine's statuses (reused,
//! in flight, invalid key) with their `google.rpc` details. Each runs on SQLite and PostgreSQL.

use tonic::Code;
use tonic_types::StatusExt;

use super::support::{
    Database, ENGINE_DOMAIN, Transfer, as_tenant, assert_error_info, client, create, get, replayed,
    request_id, retry_delay, spawn_create, transfer,
};

/// The `domain` of the ledger's own `google.rpc.ErrorInfo`.
const LEDGER_DOMAIN: &str = "ledger.idem.rs";

/// Runs each scenario on a fresh SQLite file (`sqlite::<name>`) and on a fresh PostgreSQL
/// database (`postgres::<name>`).
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::Database::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(&super::Database::postgres().await).await;
                }
            )*
        }
    };
}

on_both_databases!(
    a_transfer_is_made_once_and_its_retry_replayed,
    a_reused_request_id_is_failed_precondition,
    a_retry_while_the_first_runs_is_aborted_with_retry_info,
    insufficient_funds_is_stored_and_replayed,
    invalid_arguments_are_stored_and_replayed,
    tenants_have_request_ids_of_their_own,
    the_idempotency_key_metadata_is_a_key_too,
    without_a_key_every_call_makes_a_transfer,
);

async fn a_transfer_is_made_once_and_its_retry_replayed(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let new = transfer(&request_id(), "acct_b", 500);

    let first = create(&mut ledger, "acme", &new).await.unwrap();
    assert!(
        !replayed(first.metadata()),
        "the first answer is not a replay"
    );
    let made = first.into_inner();
    assert!(made.id.starts_with("tr_"), "{made:?}");
    let expected = Transfer {
        id: made.id.clone(),
        from_account: "acct_a".into(),
        to_account: "acct_b".into(),
        amount: 500,
        currency: "EUR".into(),
    };
    assert_eq!(made, expected);
    assert_eq!(get(&mut ledger, "acme", &made.id).await.unwrap(), made);

    for _ in 0..2 {
        let retry = create(&mut ledger, "acme", &new).await.unwrap();
        assert!(replayed(retry.metadata()), "idempotent-replayed: true");
        assert_eq!(retry.into_inner(), made, "the same transfer");
    }
    assert_eq!(db.transfers().await, 1, "one transfer for one request_id");

    let missing = get(&mut ledger, "acme", "tr_000000000000000000000000").await;
    assert_eq!(missing.unwrap_err().code(), Code::NotFound);
    let malformed = get(&mut ledger, "acme", "no such\0id").await;
    assert_eq!(malformed.unwrap_err().code(), Code::NotFound);
}

async fn a_reused_request_id_is_failed_precondition(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let id = request_id();
    let made = create(&mut ledger, "acme", &transfer(&id, "acct_b", 500)).await;
    let made = made.unwrap().into_inner();

    for other in [transfer(&id, "acct_b", 900), transfer(&id, "acct_c", 500)] {
        let status = create(&mut ledger, "acme", &other).await.unwrap_err();
        assert_error_info(
            &status,
            Code::FailedPrecondition,
            ENGINE_DOMAIN,
            "IDEMPOTENCY_KEY_REUSED",
        );
    }
    // The first transfer is untouched, and still replayed to its own request.
    let retry = create(&mut ledger, "acme", &transfer(&id, "acct_b", 500)).await;
    assert_eq!(retry.unwrap().into_inner(), made);
    assert_eq!(db.transfers().await, 1);
}

async fn a_retry_while_the_first_runs_is_aborted_with_retry_info(db: &Database) {
    let server = db.server().env("SLOW_MS", "2000").start();
    let new = transfer(&request_id(), "acct_slow", 700);
    let ledger = client(&server).await;
    // Two copies at once: one runs for SLOW_MS, the other is answered at once.
    let mut a = spawn_create(&ledger, "acme", &new);
    let mut b = spawn_create(&ledger, "acme", &new);
    let (answered, running) = tokio::select! {
        answered = &mut a => (answered, b),
        answered = &mut b => (answered, a),
    };
    let status = answered
        .unwrap()
        .expect_err("the duplicate is answered while the first runs");
    assert_error_info(
        &status,
        Code::Aborted,
        ENGINE_DOMAIN,
        "IDEMPOTENCY_KEY_IN_PROGRESS",
    );
    assert!(
        retry_delay(&status) > std::time::Duration::ZERO,
        "{status:?}"
    );

    let first = running.await.unwrap().expect("the first call completes");
    assert!(!replayed(first.metadata()));
    let made = first.into_inner();
    let retry = create(&mut ledger.clone(), "acme", &new).await.unwrap();
    assert!(replayed(retry.metadata()));
    assert_eq!(retry.into_inner(), made);
    assert_eq!(db.transfers().await, 1);
}

async fn insufficient_funds_is_stored_and_replayed(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let mut new = transfer(&request_id(), "acct_b", 500);
    new.from_account = "acct_empty".into();

    let first = create(&mut ledger, "acme", &new).await.unwrap_err();
    let info = assert_error_info(
        &first,
        Code::FailedPrecondition,
        LEDGER_DOMAIN,
        "INSUFFICIENT_FUNDS",
    );
    assert_eq!(info.metadata["account"], "acct_empty");
    assert!(!replayed(first.metadata()));

    let retry = create(&mut ledger, "acme", &new).await.unwrap_err();
    assert!(replayed(retry.metadata()), "idempotent-replayed: true");
    assert_eq!(retry.code(), first.code());
    assert_eq!(retry.message(), first.message());
    assert_eq!(
        retry.details(),
        first.details(),
        "the same details, byte for byte"
    );
    assert_eq!(db.transfers().await, 0);
}

async fn invalid_arguments_are_stored_and_replayed(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let id = request_id();

    let first = create(&mut ledger, "acme", &transfer(&id, "acct_b", 0)).await;
    let first = first.unwrap_err();
    assert_eq!(first.code(), Code::InvalidArgument, "{first:?}");
    let bad = first
        .get_details_bad_request()
        .expect("google.rpc.BadRequest");
    assert_eq!(bad.field_violations[0].field, "amount");

    let retry = create(&mut ledger, "acme", &transfer(&id, "acct_b", 0)).await;
    let retry = retry.unwrap_err();
    assert!(replayed(retry.metadata()));
    assert_eq!(
        (retry.code(), retry.details()),
        (first.code(), first.details())
    );
    // The answer is stored: a corrected request needs a request_id of its own.
    let corrected = create(&mut ledger, "acme", &transfer(&id, "acct_b", 100)).await;
    assert_error_info(
        &corrected.unwrap_err(),
        Code::FailedPrecondition,
        ENGINE_DOMAIN,
        "IDEMPOTENCY_KEY_REUSED",
    );
    let corrected = create(&mut ledger, "acme", &transfer(&request_id(), "acct_b", 100)).await;
    assert_eq!(corrected.unwrap().into_inner().amount, 100);
    assert_eq!(db.transfers().await, 1);
}

async fn tenants_have_request_ids_of_their_own(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let new = transfer(&request_id(), "acct_b", 500);

    let acme = create(&mut ledger, "acme", &new).await.unwrap();
    let globex = create(&mut ledger, "globex", &new).await.unwrap();
    assert!(
        !replayed(globex.metadata()),
        "another tenant's key is not this one's"
    );
    let (acme, globex) = (acme.into_inner(), globex.into_inner());
    assert_ne!(acme.id, globex.id, "two transfers");
    assert_eq!(db.transfers().await, 2);

    assert_eq!(get(&mut ledger, "acme", &acme.id).await.unwrap(), acme);
    assert_eq!(
        get(&mut ledger, "globex", &globex.id).await.unwrap(),
        globex
    );
    for (tenant, id) in [("acme", &globex.id), ("globex", &acme.id)] {
        let status = get(&mut ledger, tenant, id).await.unwrap_err();
        assert_eq!(status.code(), Code::NotFound, "{tenant} reads only its own");
    }
}

async fn the_idempotency_key_metadata_is_a_key_too(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let with_key = |key: &str, new| {
        let mut request = as_tenant("acme", new);
        request
            .metadata_mut()
            .insert("idempotency-key", key.parse().unwrap());
        request
    };

    // The key in metadata only.
    let key = request_id();
    let new = transfer("", "acct_b", 500);
    let first = ledger.create_transfer(with_key(&key, new.clone())).await;
    let made = first.unwrap().into_inner();
    let retry = ledger
        .create_transfer(with_key(&key, new.clone()))
        .await
        .unwrap();
    assert!(replayed(retry.metadata()));
    assert_eq!(retry.into_inner(), made);

    // Both, equal: one key.
    let key = request_id();
    let both = transfer(&key, "acct_b", 600);
    let first = ledger
        .create_transfer(with_key(&key, both.clone()))
        .await
        .unwrap();
    let retry = create(&mut ledger, "acme", &both).await.unwrap();
    assert!(
        replayed(retry.metadata()),
        "request_id alone finds the same record"
    );
    assert_eq!(retry.into_inner(), first.into_inner());

    // Both, different: refused before anything runs.
    let differ = transfer(&request_id(), "acct_b", 700);
    let status = ledger
        .create_transfer(with_key(&key, differ))
        .await
        .unwrap_err();
    assert_error_info(
        &status,
        Code::InvalidArgument,
        ENGINE_DOMAIN,
        "IDEMPOTENCY_KEY_INVALID",
    );
    assert_eq!(db.transfers().await, 2);
}

async fn without_a_key_every_call_makes_a_transfer(db: &Database) {
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let new = transfer("", "acct_b", 500);
    let first = create(&mut ledger, "acme", &new).await.unwrap();
    let second = create(&mut ledger, "acme", &new).await.unwrap();
    assert!(!replayed(first.metadata()) && !replayed(second.metadata()));
    assert_ne!(first.into_inner().id, second.into_inner().id);
    assert_eq!(
        db.transfers().await,
        2,
        "AIP-155: without request_id, no deduplication"
    );
}

/// A NUL in an account name, which PostgreSQL cannot store: `INVALID_ARGUMENT`, on every try
/// (a gRPC retry policy does not retry it), and nothing stored: no transfer, and the
/// `request_id` still free for the corrected request. (SQLite stores the name as sent.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_postgres_refuses_is_invalid_argument_and_nothing_is_stored() {
    let db = Database::postgres().await;
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let id = request_id();
    let nul = transfer(&id, "acct_\0b", 100);
    for _ in 0..2 {
        let refused = create(&mut ledger, "acme", &nul).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(!replayed(refused.metadata()), "not stored, so not replayed");
    }
    assert_eq!(db.transfers().await, 0);
    let corrected = create(&mut ledger, "acme", &transfer(&id, "acct_b", 100)).await;
    assert_eq!(corrected.unwrap().into_inner().to_account, "acct_b");
    assert_eq!(db.transfers().await, 1);
}

/// A long key in `idempotency-key` metadata is the engine's `INVALID_ARGUMENT` naming the entry,
/// even at 20 KB (over hyper's default 16 KiB of metadata: the ledger takes 64 KiB). Metadata
/// over the server's limit is refused by HTTP/2 before any service sees the call: the server
/// answers HTTP 431, which tonic's client reports as `UNKNOWN` (what docs/grpc.md says).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_key_in_metadata_is_invalid_argument_naming_the_entry() {
    let db = Database::sqlite();
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let with_key = |length: usize| {
        let mut request = as_tenant("acme", transfer("", "acct_b", 500));
        let key = "k".repeat(length).parse().unwrap();
        request.metadata_mut().insert("idempotency-key", key);
        request
    };
    for length in [256, 20_000] {
        let status = ledger.create_transfer(with_key(length)).await.unwrap_err();
        assert_error_info(
            &status,
            Code::InvalidArgument,
            ENGINE_DOMAIN,
            "IDEMPOTENCY_KEY_INVALID",
        );
        assert!(
            status
                .message()
                .contains("`idempotency-key` metadata entry"),
            "{length}: {status:?}"
        );
    }
    let status = ledger.create_transfer(with_key(100_000)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    assert!(status.message().contains("431"), "{status:?}");
    assert_eq!(db.transfers().await, 0);
}
