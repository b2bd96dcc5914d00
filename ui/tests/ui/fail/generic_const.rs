use idem_runtime::idempotent;

#[idempotent(scope = "org")]
async fn create<const N: usize>() -> &'static str {
    "created"
}

fn main() {}
