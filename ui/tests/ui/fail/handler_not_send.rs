use std::rc::Rc;

use idem_runtime::idempotent;

#[idempotent(scope = "global")]
async fn create() -> String {
    let name = Rc::new(String::from("charge"));
    tokio::task::yield_now().await;
    name.to_string()
}

fn main() {}
