use idem_runtime::idempotent;

struct Charge;

#[idempotent(scope = "global")]
async fn create() -> Charge {
    Charge
}

fn main() {}
