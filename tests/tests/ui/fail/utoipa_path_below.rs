use idem_runtime::idempotent;

// Wrong order: `#[utoipa::path]` goes above `#[idempotent]`.
#[idempotent(scope = "global")]
#[utoipa::path(post, path = "/things")]
async fn create_thing(body: String) -> String {
    body
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_thing))]
struct ApiDoc;

fn main() {}
