use idem_runtime::idempotent;

#[idempotent(scope = "org", retries = "3")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
