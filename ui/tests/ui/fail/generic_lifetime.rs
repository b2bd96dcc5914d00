use idem_runtime::idempotent;

#[idempotent(scope = "org")]
async fn create<'a>(body: &'a str) -> &'a str {
    body
}

fn main() {}
