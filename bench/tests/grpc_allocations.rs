//! A gRPC request message's fingerprint allocates nothing once its thread is warm (issue #51):
//! the message's encoding, its canonical encoding (a map's entries sorted) and its full name
//! are written in or kept by the thread, counted by a global allocator that counts the calls
//! made on the current thread.

use idem_bench::grpc;
use idem_runtime::__private::grpc::fingerprint_of_message;
use idem_runtime::Idempotency;
use idem_runtime::store::MemoryStore;

#[path = "../../idem-axum/tests/support/counting.rs"]
mod counting;

use counting::allocations;

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
        // Built again, the map has a hash order of its own: the same fingerprint.
        assert_eq!(
            fingerprint_of_message(&idem, &mut grpc::request(size)),
            Some(first)
        );
    }
}
