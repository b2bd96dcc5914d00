use idem_runtime::idempotent;

#[idempotent(scope = "my org")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
