use idem_runtime::idempotent;

#[idempotent(scope = "global", name = " charges.create")]
async fn create_charge() {}

#[idempotent(scope = "global", name = "")]
async fn create_refund() {}

fn main() {}
