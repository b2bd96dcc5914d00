#![deny(warnings)]

// Atomic mode is chosen by a parameter's type, never by its name: an alias of `Tx` is a
// transaction, and a type of another crate that happens to be called `Tx` is an extractor like
// any other.
use idem_runtime::{BuildError, Idempotency, store::MemoryStore};

mod alias {
    use axum::Json;
    use idem_runtime::{Tx, idempotent};

    type Db = Tx<sqlx::Sqlite>;

    #[idempotent(scope = "global")]
    pub async fn create(tx: Db, Json(_item): Json<String>) -> String {
        tx.downstream_key("processor")
    }
}

mod lookalike {
    use axum::extract::FromRequestParts;
    use axum::http::request::Parts;
    use idem_runtime::idempotent;

    /// Another crate's `Tx`: an ordinary extractor.
    pub struct Tx<T>(std::marker::PhantomData<T>);

    impl<S: Send + Sync, T> FromRequestParts<S> for Tx<T> {
        type Rejection = std::convert::Infallible;

        async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
            Ok(Tx(std::marker::PhantomData))
        }
    }

    #[idempotent(scope = "global")]
    pub async fn create(_tx: Tx<sqlx::Sqlite>, _body: String) {}
}

fn main() {
    // The look-alike needs nothing from the store: a store without transactions serves it.
    let lookalike = Idempotency::builder()
        .store(MemoryStore::new())
        .serves(lookalike::create)
        .build()
        .unwrap();
    let _app: axum::Router = axum::Router::new()
        .route("/lookalike", axum::routing::post(lookalike::create))
        .with_state(lookalike);
    // The alias is a transaction: the same store is refused at start-up.
    let alias = Idempotency::builder()
        .store(MemoryStore::new())
        .serves(alias::create)
        .build();
    match alias {
        Err(BuildError::AtomicUnsupported { endpoint, database, .. }) => {
            assert!(endpoint.ends_with("::alias::create"), "{endpoint}");
            assert_eq!(database, "SQLite");
        }
        other => panic!("expected AtomicUnsupported, got {:?}", other.map(|_| ())),
    }
}
