//! Compile-time behaviour of `#[idempotent]`: what compiles, and the errors users see when it
//! does not. Regenerate the `.stderr` files with `TRYBUILD=overwrite` and read the diff.
//!
//! ```sh
//! cargo test -p idem-ui                                    # every case
//! TRYBUILD=overwrite cargo test -p idem-ui -- --exact ui    # rewrite the attribute's .stderr
//! TRYBUILD=overwrite cargo test -p idem-ui -- --exact grpc  # rewrite the gRPC face's .stderr
//! ```

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}

/// The gRPC face: `#[idempotent]` on tonic methods under `#[idem_runtime::grpc::service]`.
#[test]
fn grpc() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/grpc/pass/*.rs");
    cases.compile_fail("tests/ui/grpc/fail/*.rs");
}
