//! The three backends the queue's tests run on, and a store wrapper that counts requests and
//! injects the crash between a record and its task.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures_core::stream::BoxStream;
use idem_examples::jobs::{Queue, Swap};
use idem_runtime::clock::ManualClock;
pub(crate) use idem_tests::s3::{create_bucket, s3, s3_endpoint};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Where a test's queue lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `object_store::memory::InMemory`: truly atomic conditional puts.
    Memory,
    /// A fresh folder through `LocalFileSystem` (generations).
    Folder,
    /// A fresh bucket on the moto S3 server the test harness starts (`idem_tests::moto`).
    S3,
}

fn unique(prefix: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}-{:06x}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..0xff_ffff)
    )
}

/// A queue on a fresh store of `backend`, behind a [`Recorder`], on a manual clock.
pub(crate) struct Harness {
    pub(crate) queue: Queue,
    pub(crate) recorder: Arc<Recorder>,
    pub(crate) clock: ManualClock,
    pub(crate) folder: Option<PathBuf>,
}

impl Harness {
    /// A queue on a fresh store of `backend`.
    pub(crate) async fn new(backend: Backend) -> Self {
        let (inner, swap, folder): (Arc<dyn ObjectStore>, _, _) = match backend {
            Backend::Memory => (
                Arc::new(object_store::memory::InMemory::new()),
                Swap::Conditional,
                None,
            ),
            Backend::Folder => {
                let folder = std::env::temp_dir().join(unique("idem-jobs"));
                std::fs::create_dir_all(&folder).unwrap();
                // As `jobs::open` makes it: a prune's deletes take emptied folders with them.
                let local = object_store::local::LocalFileSystem::new_with_prefix(&folder)
                    .unwrap()
                    .with_automatic_cleanup(true);
                (Arc::new(local), Swap::Generations, Some(folder))
            }
            Backend::S3 => {
                let endpoint = s3_endpoint();
                let bucket = unique("jobs");
                create_bucket(&endpoint, &bucket).await;
                (Arc::new(s3(&endpoint, &bucket)), Swap::Conditional, None)
            }
        };
        let recorder = Arc::new(Recorder::new(inner));
        let clock = ManualClock::new();
        let queue = Queue::with_swap(recorder.clone(), swap).clock(clock.clone());
        Self {
            queue,
            recorder,
            clock,
            folder,
        }
    }

    /// Another queue on the same store (another producer), sharing the clock.
    pub(crate) fn producer(&self) -> Queue {
        self.queue.clone()
    }

    /// Task objects in the store.
    pub(crate) async fn tasks(&self) -> usize {
        let listed = self
            .recorder
            .inner
            .list_with_delimiter(Some(&Path::from("tasks")))
            .await
            .unwrap();
        listed.objects.len()
    }

    /// Ends the test; the folder, if any, is removed (also when the test panics).
    pub(crate) fn finish(self) {}
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(folder) = &self.folder {
            let _ = std::fs::remove_dir_all(folder);
        }
    }
}

/// Forwards to a store, logging each request (`PUT create tasks`, `GET idempotency`, `HEAD
/// tasks`...) and failing the first task PUT when told to: a producer that died between its
/// record and its task.
pub(crate) struct Recorder {
    inner: Arc<dyn ObjectStore>,
    log: Mutex<Vec<String>>,
    crash_before_task: AtomicBool,
}

impl Recorder {
    fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            log: Mutex::default(),
            crash_before_task: AtomicBool::new(false),
        }
    }

    /// The requests made since the last call.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The next PUT of a task object fails as if the producer died first.
    pub(crate) fn crash_before_next_task(&self) {
        self.crash_before_task.store(true, Ordering::SeqCst);
    }

    fn note(&self, request: String) {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }
}

/// `tasks`, `idempotency`: what a request was about.
fn area(path: &Path) -> &str {
    path.as_ref().split('/').next().unwrap_or("")
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recorder({})", self.inner)
    }
}

impl fmt::Display for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recorder({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Recorder {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let mode = match opts.mode {
            PutMode::Overwrite => "overwrite",
            PutMode::Create => "create",
            PutMode::Update(_) => "update",
        };
        self.note(format!("PUT {mode} {}", area(location)));
        if area(location) == "tasks" && self.crash_before_task.swap(false, Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "Recorder",
                source: "fault injected: the producer died before creating its task".into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.note(format!("PUT multipart {}", area(location)));
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let verb = if options.head { "HEAD" } else { "GET" };
        self.note(format!("{verb} {}", area(location)));
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.note("DELETE".into());
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.note(format!("LIST {}", prefix.map_or("", area)));
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.note(format!("LIST {}", prefix.map_or("", area)));
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.note("COPY".into());
        self.inner.copy_opts(from, to, options).await
    }
}
