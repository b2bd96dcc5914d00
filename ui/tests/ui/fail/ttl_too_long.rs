use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl = "31d")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
