//! The `linea` command line: what each subcommand accepts ([`commands`], with the training
//! flags `train` and `master` share in [`train_args`]), how values are checked against their
//! ranges before anything runs ([`ranges`]), and what each command does ([`run()`]).

mod commands;
mod ranges;
mod run;
mod train_args;

use crate::error::LineaError;
use clap::Parser;
use commands::Command;
use linea_engine::Loss;

pub use ranges::{command, parse};
pub use run::run;

#[derive(Parser)]
#[command(name = "linea", version, about = "Train large sparse linear models with Scalable Coordinate Descent")]
pub struct Cli {
    /// No progress output.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Whether this process runs under a memory bound, where freed big buffers must go back
    /// to the kernel at once (worker/src/main.rs): a worker (its cell cache is bounded, and in
    /// a pod so is the container), a master (a pod), `prepare`, and `train --cache-mb`. Not
    /// `linea train` without `--cache-mb`: one process that asked for no bound, and whose
    /// epochs the mapping slows by about a quarter on criteo-1m.
    pub fn bounds_memory(&self) -> bool {
        !matches!(self.command, Command::Train { cache_mb: None, .. })
    }

    /// The log filter when `RUST_LOG` is not set. A master or worker is a service whose log
    /// is how an operator follows a job (workers joining and lost, stragglers, drains,
    /// retries, a start that did not wait for every worker), so linea's own info lines are
    /// on; a command run at a terminal shows its progress and only warnings besides. (The
    /// libraries stay at warn: at info and below they log connections, never secrets, which
    /// worker/tests/secrets.rs checks at debug.)
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Master { .. } | Command::Worker { .. } => "warn,linea_worker=info,linea_engine=info",
            _ => "warn",
        }
    }
}

/// A loss by the name the model file and the wire use.
pub fn parse_loss(name: &str) -> Option<Loss> {
    match name {
        "squared" => Some(Loss::Squared),
        "logistic" => Some(Loss::Logistic),
        "hinge" => Some(Loss::Hinge),
        _ => None,
    }
}

impl From<clap::Error> for LineaError {
    fn from(e: clap::Error) -> Self {
        LineaError::Usage(e.to_string())
    }
}
