use idem_runtime::idempotent;

#[idempotent(scope = "org")]
struct CreateCharge {
    amount: u64,
}

fn main() {}
