//! Generates the `ledger` example's gRPC code from `proto/ledger/v1/ledger.proto`: the messages
//! (prost), the `Ledger` server and client (tonic, on idem-tonic's protobuf codec), and
//! `ledger_descriptor.bin`, the encoded `FileDescriptorSet` that the server hands to gRPC
//! reflection and to the idempotency engine, which fingerprints requests by their fields. All
//! of it goes to `OUT_DIR`.
//!
//! `protoc` is the one in the `protoc-bin-vendored` crate, so building needs no system protoc
//! and downloads nothing; set `PROTOC` to use another.

use std::path::PathBuf;

const PROTO: &str = "proto/ledger/v1/ledger.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-env-changed=PROTOC");
    let protoc = match std::env::var_os("PROTOC") {
        Some(protoc) => PathBuf::from(protoc),
        None => protoc_bin_vendored::protoc_bin_path()?,
    };
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);

    let mut config = prost_build::Config::new();
    // Handed over, not exported as PROTOC: `std::env::set_var` is `unsafe` in edition 2024.
    config.protoc_executable(protoc);
    // `prost::Name` on every message: the engine finds a request's type in the descriptors by it.
    config.enable_type_names();
    tonic_prost_build::configure()
        // tonic-prost's codec answers a request that does not decode `INTERNAL`; idem-tonic's
        // answers `INVALID_ARGUMENT`, as input that can never succeed.
        .codec_path("idem_runtime::grpc::ProstCodec")
        .build_server(true)
        .build_client(true)
        .file_descriptor_set_path(out_dir.join("ledger_descriptor.bin"))
        .compile_with_config(config, &[PROTO], &["proto"])?;
    Ok(())
}
