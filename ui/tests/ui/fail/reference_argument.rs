use idem_runtime::idempotent;

#[idempotent(scope = "global")]
async fn create(body: &str) -> String {
    body.to_owned()
}

fn main() {}
