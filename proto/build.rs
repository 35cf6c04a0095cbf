//! Generates the colo.v1 code. The .proto files are compiled by protox (a
//! protobuf compiler written in Rust) so that building colo needs no system
//! protoc; the encoded descriptor set is kept for gRPC server reflection.

use std::path::PathBuf;

const PROTOS: [&str; 4] = [
    "proto/colo/v1/node.proto",
    "proto/colo/v1/coordinator.proto",
    "proto/colo/v1/client.proto",
    "proto/colo/v1/purchases.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("colo_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
