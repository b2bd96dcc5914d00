//! Opening a queue from a location string (the CLI's `JOBS_STORE`).

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;

use super::{Queue, QueueError, Swap};

/// Opens the queue at `location`:
///
/// - `s3://bucket` or `s3://bucket/prefix`: S3, configured from the usual `AWS_*` variables
///   (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`; `AWS_ENDPOINT_URL` and
///   `AWS_ALLOW_HTTP=true` for a local S3 server). Records are swapped with `If-Match`.
/// - anything else: a local folder (created if missing; `file://` may prefix it), with records
///   swapped by immutable generations ([`Swap::Generations`]).
pub fn open(location: &str) -> Result<Queue, QueueError> {
    let fail = |reason: String| QueueError::Open {
        location: location.to_owned(),
        reason,
    };
    if let Some(rest) = location.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(fail("no bucket: use s3://bucket/prefix".into()));
        }
        let s3 = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let prefix = prefix.trim_matches('/');
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(PrefixStore::new(s3, prefix))
        };
        return Ok(Queue::new(store));
    }
    let folder = location.strip_prefix("file://").unwrap_or(location);
    if folder.is_empty() {
        return Err(fail("empty path".into()));
    }
    std::fs::create_dir_all(folder).map_err(|e| fail(e.to_string()))?;
    // Deletes happen only in a prune; emptied record folders go with their last generation.
    let local = LocalFileSystem::new_with_prefix(folder)
        .map_err(|e| fail(e.to_string()))?
        .with_automatic_cleanup(true);
    Ok(Queue::with_swap(Arc::new(local), Swap::Generations))
}
