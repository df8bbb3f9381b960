//! The master's gRPC client, from the worker's proto (the one API between them).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../worker/proto/linea.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["../worker/proto"])?;
    tonic_prost_build::configure().build_server(false).compile_fds(descriptors)?;
    Ok(())
}
