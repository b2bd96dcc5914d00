use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl =)]
async fn create() -> &'static str {
    "created"
}

fn main() {}
