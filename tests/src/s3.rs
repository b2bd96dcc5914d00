//! The moto S3 server `.ci/run` starts on loopback (its URL in `JOBS_TEST_S3_ENDPOINT`): finding
//! it, a client for it, a fresh bucket on it.
//!
//! Start it as `.ci/run` does, through `.ci/moto_server.py` (same arguments as `moto_server`):
//! moto's own server checks a conditional write's precondition and then writes without a lock,
//! so two racing writers can both win, where S3 and DynamoDB let one. The launcher handles one
//! request at a time, and the race tests on moto then prove what they claim.

/// The moto server's URL, or `None` (the test is skipped, and says so) outside CI when none is
/// running. Under CI (`CI=true`) a missing server fails the test.
pub fn s3_endpoint() -> Option<String> {
    moto_endpoint("S3")
}

/// The URL of the moto server (`JOBS_TEST_S3_ENDPOINT`), which serves `service` (S3, DynamoDB)
/// for the test; `None`, after saying the test is skipped, outside CI when none runs. Under CI
/// (`CI=true`) a missing server fails the test.
pub(crate) fn moto_endpoint(service: &str) -> Option<String> {
    match std::env::var("JOBS_TEST_S3_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("CI=true but JOBS_TEST_S3_ENDPOINT is not set: .ci/run starts moto and sets it")
        }
        _ => {
            eprintln!(
                "skipped: no {service} (moto) server (set JOBS_TEST_S3_ENDPOINT, as .ci/run does)"
            );
            None
        }
    }
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
