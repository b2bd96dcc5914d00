use idem_runtime::idempotent;

#[idempotent(scope = "global", state = "AppState")]
async fn create() {}

fn main() {}
