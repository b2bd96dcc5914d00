//! Compile-time behaviour of `#[idempotent]`: what compiles, and the errors users see when it
//! does not. Regenerate the `.stderr` files with `TRYBUILD=overwrite` and read the diff.

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
