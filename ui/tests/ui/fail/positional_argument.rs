use idem_runtime::idempotent;

#[idempotent("org")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
