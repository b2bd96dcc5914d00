use idem_runtime::idempotent;

#[idempotent(scope = "org", commits = "2")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
