//! The buffers a canonical form is written with, kept by each thread for its next body: once
//! they have grown to the size of the bodies it sees, a fingerprint allocates nothing, and none
//! grows past [`KEEP`] for good.

use std::cell::RefCell;
use std::thread::LocalKey;

/// The largest buffer kept for the next body, in bytes: a larger one is freed, so that a thread
/// does not hold the memory of its largest body.
const KEEP: usize = 256 * 1024;

/// Calls `f` with the thread's buffers in `key`, or with fresh ones when they are in use (only
/// if a callback given a canonical form takes another fingerprint of the same kind).
pub(super) fn with_thread<B: Default + 'static, R>(
    key: &'static LocalKey<RefCell<B>>,
    f: impl FnOnce(&mut B) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffers) => f(&mut buffers),
        Err(_) => f(&mut B::default()),
    })
}

/// Empties `buffer` for the next body, or frees it once it holds more than [`KEEP`] bytes.
pub(super) fn recycle<T>(buffer: &mut Vec<T>) {
    buffer.clear();
    if buffer.capacity() * size_of::<T>() > KEEP {
        *buffer = Vec::new();
    }
}
