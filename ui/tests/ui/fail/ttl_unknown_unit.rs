use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl = "2w")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
