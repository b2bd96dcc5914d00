use idem_runtime::idempotent;

// Both mistakes are reported at once.
#[idempotent(ttl = "1h")]
fn create() -> &'static str {
    "created"
}

fn main() {}
