use idem_runtime::idempotent;

#[idempotent(scope = "org")]
fn create() -> &'static str {
    "created"
}

fn main() {}
