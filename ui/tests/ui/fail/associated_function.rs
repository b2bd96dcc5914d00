use idem_runtime::idempotent;

struct Api;

impl Api {
    #[idempotent(scope = "global")]
    async fn create() -> &'static str {
        "created"
    }
}

fn main() {}
