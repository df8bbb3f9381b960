//! Generates the gRPC code of linea.proto, once, for every crate that speaks it. protox
//! parses the file in pure Rust, so building needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "linea.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["."])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
