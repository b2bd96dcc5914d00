//! The buffers a canonical form is written with, kept by each thread for its next body: once
//! they have grown to the size of the bodies it sees, a fingerprint allocates nothing, and none
//! grows past [`KEEP`] for good.
//!
//! The JSON and form writers here use them, and so may a face that writes a canonical form of
//! its own (idem-tonic's protobuf messages): one rule for what a thread keeps.
//!
//! ```
//! use std::cell::RefCell;
//! use idem_core::fingerprint::buffers::{recycle, with_thread};
//!
//! thread_local! {
//!     static OUT: RefCell<Vec<u8>> = RefCell::new(Vec::new());
//! }
//!
//! fn shout(text: &str) -> usize {
//!     with_thread(&OUT, |out| {
//!         out.extend(text.bytes().map(|b| b.to_ascii_uppercase()));
//!         let len = out.len();
//!         recycle(out);
//!         len
//!     })
//! }
//! assert_eq!(shout("hi"), 2);
//! ```

use std::cell::RefCell;
use std::thread::LocalKey;

/// The largest buffer kept for the next body, in bytes: a larger one is freed, so that a thread
/// does not hold the memory of its largest body.
pub const KEEP: usize = 256 * 1024;

/// Calls `f` with the thread's buffers in `key`, or with fresh ones when they are in use (only
/// if a callback given a canonical form takes another fingerprint of the same kind).
pub fn with_thread<B: Default + 'static, R>(
    key: &'static LocalKey<RefCell<B>>,
    f: impl FnOnce(&mut B) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffers) => f(&mut buffers),
        Err(_) => f(&mut B::default()),
    })
}

/// Empties `buffer` for the next body, or frees it once it holds more than [`KEEP`] bytes.
pub fn recycle<T>(buffer: &mut Vec<T>) {
    buffer.clear();
    if buffer.capacity() * size_of::<T>() > KEEP {
        *buffer = Vec::new();
    }
}
