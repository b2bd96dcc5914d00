// `Builder::serves` takes what `#[idempotent]` expands to: a plain axum handler is not one.
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[idempotent(scope = "global")]
async fn create() {}

async fn list() {}

fn main() {
    let _ = Idempotency::builder()
        .store(MemoryStore::new())
        .serves((create, list))
        .build();
}
