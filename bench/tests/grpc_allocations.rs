//! A gRPC request message's fingerprint allocates nothing once its thread is warm (issue #51):
//! the message's encoding, its canonical encoding (a map's entries sorted) and its full name
//! are written in or kept by the thread, counted by a global allocator that counts the calls
//! made on the current thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use idem_bench::grpc;
use idem_runtime::__private::grpc::fingerprint_of_message;
use idem_runtime::Idempotency;
use idem_runtime::store::MemoryStore;

/// The system allocator, counting the allocations (and reallocations) of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; counting touches only a
// thread-local `Cell` initialised without allocating.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn a_message_fingerprint_allocates_nothing_once_warm() {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .protobuf_descriptors(&grpc::descriptors())
        .build()
        .expect("the bench's descriptors");
    for size in [100, 1024, 10 * 1024] {
        // Line items and a three-entry map, which prost encodes in its `HashMap`'s order.
        let mut message = grpc::request(size);
        // The first on a thread grows its buffers and keeps the type's name.
        let first = fingerprint_of_message(&idem, &mut message).expect("a known message");
        let mut again = None;
        let n = allocations(|| again = fingerprint_of_message(&idem, &mut message));
        assert_eq!(n, 0, "{size} bytes");
        assert_eq!(again, Some(first));
        // Built again, the map iterates in another order: the same fingerprint.
        assert_eq!(
            fingerprint_of_message(&idem, &mut grpc::request(size)),
            Some(first)
        );
    }
}
