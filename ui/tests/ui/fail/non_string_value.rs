use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl = 24)]
async fn create() -> &'static str {
    "created"
}

fn main() {}
