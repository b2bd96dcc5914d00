//! Allocations made by the JSON fingerprint, counted by a global allocator that counts the
//! calls made on the current thread: none for a 1 KB body once the thread's buffers have grown
//! to it (issue #51's target: none in the fingerprint). The test fails if one appears.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use http::{HeaderValue, Method, Uri};
use idem_core::fingerprint::Fingerprint;

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

/// How many allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// A JSON order of about 1 KB shaped like the benchmarks' (bench/src/body.rs): members out of
/// key order, nested objects, decimals that are rewritten, and whitespace; its memo is `memo`
/// (JSON text, quoted).
fn order(memo: &str) -> Vec<u8> {
    let items: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"sku": "sku_{i:05}", "qty": {}, "unit_amount": {}, "tax": {{"rate": 0.2, "included": false}}}}"#,
                i % 7 + 1,
                199 + i * 13
            )
        })
        .collect();
    format!(
        r#"{{"amount":4200,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","items":[{}],"memo":{memo}}}"#,
        items.join(",")
    )
    .into_bytes()
}

#[test]
fn a_json_fingerprint_allocates_nothing_once_warm() {
    let body = order("\"caf\u{e9} x\"");
    assert!((900..1500).contains(&body.len()), "{}", body.len());
    // The first fingerprint on a thread grows its buffers.
    let first = Fingerprint::of_json(&body);
    let mut again = None;
    assert_eq!(allocations(|| again = Some(Fingerprint::of_json(&body))), 0);
    assert_eq!(again, Some(first));
    // The HTTP face's fingerprint of the same request body: none either.
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static("/v1/orders");
    let request =
        || idem_runtime::__private::fingerprint_of_request(&Method::POST, &uri, Some(&json), &body);
    request();
    assert_eq!(allocations(|| _ = request()), 0);
}

#[test]
fn a_string_with_escapes_costs_its_decoding() {
    for (memo, escaped) in [(r#""x\"y""#, 1), (r#"["\u00e9", "\n", "\/"]"#, 3)] {
        let body = order(memo);
        Fingerprint::of_json(&body);
        // serde_json decodes each such string into a `String` of its own, through a buffer
        // of its own: two allocations.
        let n = allocations(|| _ = Fingerprint::of_json(&body));
        assert!(n <= 2 * escaped, "{memo}: {n} allocations");
    }
}

#[test]
fn the_counter_counts() {
    assert_eq!(allocations(|| drop(Vec::<u8>::with_capacity(10))), 1);
}
