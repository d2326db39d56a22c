//! Generates the gRPC API's server and client code from
//! `proto/bakery/v1/bakery.proto` at build time (nothing generated is
//! checked in), with the protoc that `protoc-bin-vendored` ships.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The vendored protoc, not whatever the machine has (or lacks): every
    // build generates the same code.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let proto = root.join("bakery/v1/bakery.proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // Clients without tonic's transport: a caller brings its channel.
        .build_transport(false)
        // For the reflection service.
        .file_descriptor_set_path(out.join("bakery_descriptor.bin"))
        .compile_protos(&[proto], &[root])?;
    Ok(())
}
