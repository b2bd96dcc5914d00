use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl = "1h", ttl = "2h")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
