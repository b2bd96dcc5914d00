use idem_runtime::{Tx, idempotent};

type Orders = Tx<sqlx::Sqlite>;

#[idempotent(scope = "global")]
async fn create(_orders: Orders, _ledger: Tx<sqlx::Sqlite>) -> &'static str {
    "created"
}

fn main() {}
