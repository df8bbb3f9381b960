use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = linea_worker::cli::run(linea_worker::cli::Cli::parse()) {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code());
    }
}
