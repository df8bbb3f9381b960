use std::io::{IsTerminal, Write};

/// Where Kubernetes reads a container's termination message; `LINEA_TERMINATION_LOG`
/// overrides it (tests, other runtimes).
const TERMINATION_LOG: &str = "/dev/termination-log";

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let model = master_model(std::env::args());
    let cli = linea_worker::cli::parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match linea_worker::cli::run(cli) {
        Ok(()) => {
            // The master's final state for the operator: the epoch count, objective and
            // (CoCoA) relative duality gap in the header of the model it just wrote.
            if let Some(model) = model
                && let Ok(model) = linea_worker::eval::read_model(&model)
            {
                let t = &model.header.training;
                let mut summary = serde_json::json!({"epochs": t.epochs, "objective": t.objective});
                if let Some(gap) = t.duality_gap {
                    summary["dualityGap"] = gap.into();
                }
                write_termination_message(&summary.to_string());
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            write_termination_message(&format!("error: {e}"));
            std::process::exit(e.exit_code());
        }
    }
}

/// The `--model` of a `linea master` command line, if this is one.
fn master_model(args: impl Iterator<Item = String>) -> Option<String> {
    let args: Vec<String> = args.skip(1).collect();
    let command = args.iter().find(|a| !a.starts_with('-'))?;
    if command != "master" {
        return None;
    }
    args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--model") {
        Some("") => args.get(i + 1).cloned(),
        Some(rest) => rest.strip_prefix('=').map(str::to_string),
        None => None,
    })
}

/// Writes `message` (at most the 4 KiB Kubernetes keeps) where the kubelet reads it, when
/// that file can be written; elsewhere (a laptop) there is nothing to do.
fn write_termination_message(message: &str) {
    let (path, create) = match std::env::var("LINEA_TERMINATION_LOG") {
        Ok(path) => (path, true),
        Err(_) => (TERMINATION_LOG.to_string(), false),
    };
    let mut end = message.len().min(4096);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let file = std::fs::OpenOptions::new().write(true).truncate(true).create(create).open(&path);
    if let Ok(mut file) = file {
        let _ = file.write_all(&message.as_bytes()[..end]);
    }
}
