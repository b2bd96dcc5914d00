use idem_runtime::idempotent;

#[idempotent(scope = "global", name = charges)]
async fn create_charge() {}

fn main() {}
