//! The `linea` command line.

use crate::error::{LineaError, Result};
use crate::input::{FeatureSpec, Format, NumericMode};
use crate::progress::Progress;
use crate::{eval, prepare, storage, train};
use clap::{Parser, Subcommand};
use linea_engine::Loss;

#[derive(Parser)]
#[command(name = "linea", version, about = "Train large sparse linear models with Scalable Coordinate Descent")]
pub struct Cli {
    /// No progress output.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LossArg {
    Logistic,
    Squared,
}

#[derive(Subcommand)]
enum Command {
    /// Turn raw data into the block x row-shard grid that training reads.
    Prepare {
        #[arg(long)]
        input: String,
        #[arg(long, value_enum)]
        format: Format,
        /// Output folder (local path or file://).
        #[arg(long)]
        output: String,
        /// Label column for csv/parquet: a name or a 0-based index (default: the first column).
        #[arg(long)]
        label: Option<String>,
        /// Label value that means the positive class (e.g. ">50K"); all others are 0.
        #[arg(long)]
        positive: Option<String>,
        /// Columns that are not features, comma-separated (ids).
        #[arg(long, value_delimiter = ',')]
        ignore: Vec<String>,
        /// Numeric columns: one dense feature, or one-hot log buckets (default: buckets
        /// for criteo, dense otherwise).
        #[arg(long, value_enum)]
        numeric: Option<NumericMode>,
        /// Examples per row shard; a shard is the unit of parallel work.
        #[arg(long, default_value_t = 16384)]
        rows_per_shard: usize,
    },
    /// Train a model on a prepared grid.
    Train {
        #[arg(long)]
        data: String,
        #[arg(long)]
        model: String,
        #[arg(long, value_enum, default_value = "logistic")]
        loss: LossArg,
        /// L2 strength: the objective is sum of losses + l2*|w|^2 + l1*|w|_1.
        #[arg(long, default_value_t = 1.0)]
        l2: f64,
        #[arg(long, default_value_t = 0.0)]
        l1: f64,
        #[arg(long, default_value_t = 100)]
        epochs: u32,
        /// Stop when 3 epochs together lower the objective by less than this fraction of it.
        #[arg(long, default_value_t = 1e-9)]
        tolerance: f64,
        /// Worker threads (default: all cores). The model does not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Seed of the block order.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write a convergence plot (SVG).
        #[arg(long)]
        plot: Option<String>,
        /// Write the objective after every epoch as CSV: epoch,seconds,objective.
        #[arg(long)]
        trace: Option<String>,
    },
    /// Print objective, AUC, log loss, accuracy (logistic) or RMSE (squared) of a model.
    Eval {
        #[arg(long)]
        model: String,
        /// A prepared grid folder, or a raw file read as the model's training input was.
        #[arg(long)]
        data: String,
        /// Format of a raw file, if not the training input's.
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write one score per input example: P(positive) for logistic, the value for squared.
    Predict {
        #[arg(long)]
        model: String,
        #[arg(long)]
        input: String,
        #[arg(long, value_enum)]
        format: Option<Format>,
        #[arg(long)]
        output: String,
    },
}

pub fn run(cli: Cli) -> Result<()> {
    let progress = Progress::new(cli.quiet);
    match cli.command {
        Command::Prepare { input, format, output, label, positive, ignore, numeric, rows_per_shard } => {
            let spec = FeatureSpec {
                format,
                label,
                positive,
                numeric: numeric.unwrap_or(FeatureSpec::default_numeric(format)),
                ignore,
            };
            let storage = storage::open(&output)?;
            let options = prepare::PrepareOptions { input, spec, rows_per_shard };
            let summary = prepare::prepare(&options, storage.as_ref(), &progress)?;
            let m = &summary.manifest;
            let impure: Vec<&str> = m.blocks.iter().filter(|b| !b.pure).map(|b| b.name.as_str()).collect();
            println!(
                "prepared {output}: {} rows, {} non-zeros, {} row shards, {} blocks ({} impure{}{})",
                m.rows,
                m.nnz,
                m.shards.len(),
                m.blocks.len(),
                impure.len(),
                if impure.is_empty() { "" } else { ": " },
                impure.iter().take(8).copied().collect::<Vec<_>>().join(", ")
            );
        }
        Command::Train { data, model, loss, l2, l1, epochs, tolerance, threads, seed, plot, trace } => {
            let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let loss = match loss {
                LossArg::Logistic => Loss::Logistic,
                LossArg::Squared => Loss::Squared,
            };
            let options =
                train::TrainOptions { data, model, loss, l2, l1, epochs, tolerance, threads, seed, plot, trace };
            let summary = train::train(&options, &progress)?;
            println!(
                "trained {}: objective {:.10} after {} epochs in {:.2}s ({:.1}M nnz/s per thread, {} threads)",
                options.model,
                summary.objective,
                summary.epochs,
                summary.seconds,
                summary.nnz_per_second_per_thread(threads) / 1e6,
                threads
            );
        }
        Command::Eval { model, data, format, json } => {
            let model = eval::read_model(&model)?;
            let result = eval::evaluate(&model, &data, format)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&result).expect("serializes"));
            } else {
                let m = &result.metrics;
                println!("examples   {}", m.examples);
                println!("objective  {:.10}", result.objective);
                let rows = [("auc", m.auc), ("log loss", m.log_loss), ("accuracy", m.accuracy), ("rmse", m.rmse)];
                for (name, value) in rows.iter().filter_map(|(n, v)| v.map(|v| (n, v))) {
                    println!("{name:<10} {value:.6}");
                }
            }
        }
        Command::Predict { model, input, format, output } => {
            let model = eval::read_model(&model)?;
            let n = eval::predict(&model, &input, format, &output)?;
            progress.always(&format!("wrote {n} scores to {output}"));
        }
    }
    Ok(())
}

impl From<clap::Error> for LineaError {
    fn from(e: clap::Error) -> Self {
        LineaError::Usage(e.to_string())
    }
}
