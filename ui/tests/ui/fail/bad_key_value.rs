use idem_runtime::idempotent;

#[idempotent(scope = "org", key = "yes")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
