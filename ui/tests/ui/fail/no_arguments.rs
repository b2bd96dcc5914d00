use idem_runtime::idempotent;

#[idempotent]
async fn create() -> &'static str {
    "created"
}

fn main() {}
