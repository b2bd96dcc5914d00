use idem_runtime::idempotent;

#[idempotent(scope = "org", ttl = "1.5h")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
