use idem_runtime::idempotent;

#[idempotent(scope = "org")]
async fn create<T: Default>() -> &'static str {
    "created"
}

fn main() {}
