use idem_runtime::idempotent;

#[idempotent(scope = "org", in_flight = "Wait")]
async fn create() -> &'static str {
    "created"
}

fn main() {}
