use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl = "0s")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
