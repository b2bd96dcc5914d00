use idem_runtime::{AnyTx, Tx, idempotent};

#[idempotent(scope = "global")]
async fn create(_orders: Tx<sqlx::Sqlite>, _ledger: AnyTx) -> &'static str {
    "created"
}

fn main() {}
