use idem_runtime::idempotent;

#[idempotent(ttl = "1h")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
