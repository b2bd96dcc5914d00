use idem_runtime::idempotent;

#[idempotent(scope "org")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
