use idem_runtime::idempotent;

#[idempotent(scope = "org")]
struct CreateCharge {
    amount: u64,
}

#[idempotent(scope = "org")]
unsafe extern "C" {}

fn main() {}
