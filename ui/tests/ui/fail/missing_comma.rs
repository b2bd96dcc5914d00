use idem_runtime::idempotent;

#[idempotent(scope = "org" ttl = "1h")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
