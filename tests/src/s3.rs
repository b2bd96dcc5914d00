//! S3 for tests: the moto server of [`crate::moto`] (its URL in `JOBS_TEST_S3_ENDPOINT` when one
//! of one's own runs), a client for it, a fresh bucket on it.

/// The moto server's URL, started on first use ([`crate::moto::moto_endpoint`]).
///
/// # Panics
/// When moto cannot be installed or started, with the command that shows why.
pub fn s3_endpoint() -> String {
    crate::moto::moto_endpoint()
}

/// An S3 client for the moto server: path-style, plain HTTP, any credentials.
pub fn s3(endpoint: &str, bucket: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("testing")
        .with_secret_access_key("testing")
        .build()
        .expect("a client for the test S3 server")
}

/// The same settings as the `AWS_*` variables a process reads (`AmazonS3Builder::from_env`).
pub fn s3_env(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ]
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .to_vec()
}

/// Whether `bucket` exists on the server at `endpoint`.
pub async fn bucket_exists(endpoint: &str, bucket: &str) -> bool {
    let response = reqwest::Client::new()
        .head(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("the S3 server at {endpoint} is not answering: {e}"));
    response.status().is_success()
}

/// Creates `bucket` on the server at `endpoint`.
pub async fn create_bucket(endpoint: &str, bucket: &str) {
    let response = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("the S3 server at {endpoint} is not answering: {e}"));
    assert!(
        response.status().is_success(),
        "creating bucket {bucket}: {}",
        response.status()
    );
}
