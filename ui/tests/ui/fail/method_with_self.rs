use idem_runtime::idempotent;

struct Api;

impl Api {
    #[idempotent(scope = "org")]
    async fn create(&self) -> &'static str {
        "created"
    }
}

fn main() {}
