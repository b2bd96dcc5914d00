use idem_runtime::idempotent;

#[idempotent(scpoe = "org")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
