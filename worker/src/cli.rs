//! The `linea` command line.

use crate::driver::{AlgorithmName, TrainSummary};
use crate::error::{LineaError, Result};
use crate::input::{FeatureSpec, Format, NumericMode};
use crate::progress::Progress;
use crate::runtime::auth::JobSecret;
use crate::runtime::scheduler::StartGate;
use crate::runtime::speculation::Speculation;
use crate::runtime::{client, master, worker};
use crate::{eval, prepare, storage, train};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use linea_engine::Loss;
use linea_engine::cocoa::{AccelerateConfig, Clock, ElasticConfig};
use linea_engine::hybrid::{BatchSolver, Mixing, Precondition};
use linea_proto::tls::{JobCertificates, PrivateDir, Role, Transport};
use std::time::Duration;

#[derive(Parser)]
#[command(name = "linea", version, about = "Train large sparse linear models with Scalable Coordinate Descent")]
pub struct Cli {
    /// No progress output.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum AlgorithmArg {
    /// `linea train`'s default: the algorithm that reached the optimum first on problems like
    /// this one, chosen from the data and the parameters only (never the machine), so the
    /// same grid and flags give the same model on every machine (docs/algorithms.md, "When to
    /// pick which"). Not for `linea master`, whose default is scd.
    Auto,
    /// Scalable Coordinate Descent: the same model bytes for any worker count.
    Scd,
    /// CoCoA+ with an SDCA local solver: a duality-gap certificate; the model depends on
    /// the slot count K (--slots), not on how many processes serve the slots.
    Cocoa,
    /// L-BFGS on exact batch gradients ("distributed gradient"): the same model bytes for
    /// any worker count, like SCD.
    Lbfgs,
    /// One AdaGrad pass per slot, averaged per feature, then L-BFGS (Agarwal et al.): the
    /// model depends on --slots, not on the processes serving them.
    Hybrid,
    /// Iterative parameter mixtures (Hall et al.): every epoch each slot runs an online
    /// pass from the mixed model (SGD; the averaged perceptron for hinge), then they are
    /// averaged. Fast early accuracy; does not converge to the regularized optimum in
    /// general. Depends on --slots.
    Ipm,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PreconditionArg {
    /// The scalar s.y / y.y of the newest pair.
    None,
    /// The inverse of the objective's Hessian diagonal.
    Diagonal,
    /// The diagonal scaled by s.y / y'Dy of the newest pair.
    Scaled,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BatchSolverArg {
    /// L-BFGS with a strong-Wolfe line search.
    Lbfgs,
    /// Truncated Newton: preconditioned CG on the exact Hessian (one batch pass per CG
    /// step), a backtracking line search (LIBLINEAR's newton.cpp).
    Newton,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum MixingArg {
    /// Every slot's model counts the same.
    Uniform,
    /// A slot's model counts by its share of the examples.
    Examples,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ClockArg {
    /// Seconds, as Chicle measures: decisions depend on how fast epochs ran.
    Wall,
    /// Epochs: the same data and parameters give the same decisions and model bytes.
    Epochs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LossArg {
    Logistic,
    Squared,
    /// Linear SVM (CoCoA only).
    Hinge,
}

/// What to train: shared by `train` and `master`.
#[derive(clap::Args)]
struct TrainArgs {
    /// The prepared grid: a folder or s3://bucket/prefix.
    #[arg(long)]
    data: String,
    /// Where to write the model: a file or an s3:// object.
    #[arg(long)]
    model: String,
    /// [default: auto for `linea train`, scd for `linea master`]
    #[arg(long, value_enum)]
    algorithm: Option<AlgorithmArg>,
    /// Logistic takes labels 0/1 or -1/+1; squared takes any finite label; hinge (CoCoA
    /// only) takes labels 0/1 or -1/+1.
    #[arg(long, value_enum, default_value = "logistic")]
    loss: LossArg,
    /// L2 strength: the objective is sum of losses + l2*|w|^2 + l1*|w|_1.
    #[arg(long, default_value_t = 1.0)]
    l2: f64,
    /// L1 strength (sparse models).
    #[arg(long, default_value_t = 0.0)]
    l1: f64,
    /// Most epochs (passes over every block) [default: 100; with --algorithm auto, the chosen
    /// algorithm's: 100 for scd, 1000 for cocoa and lbfgs].
    #[arg(long)]
    epochs: Option<u32>,
    /// Stop when 3 epochs together lower the objective by less than this fraction of it.
    #[arg(long, default_value_t = 1e-9)]
    tolerance: f64,
    /// Seed of the block order (SCD) or of the coordinate orders (CoCoA).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// CoCoA: the number of local problems K the rows are split into (default: --workers,
    /// or 1 in one process). The model depends on K, not on the processes serving them.
    #[arg(long)]
    slots: Option<usize>,
    /// CoCoA: SDCA passes over a slot's rows per epoch (H).
    #[arg(long, default_value_t = 1)]
    local_passes: u32,
    /// CoCoA: stop once the duality gap relative to the primal objective is at most this.
    #[arg(long, default_value_t = 1e-6)]
    gap_tolerance: f64,
    /// CoCoA: compute the duality gap (a full data pass) after every epoch, for the whole
    /// gap curve. By default it is computed only when a statistic of the local solves
    /// predicts the tolerance met, and at the last epoch (docs/algorithms.md); the model
    /// after a given epoch is the same either way.
    #[arg(long)]
    gap_every_epoch: bool,
    /// CoCoA: scale in from K slots to K/m as the duality gap's convergence slows (Chicle's
    /// policy); an elastic run wants one worker per slot and releases the others.
    #[arg(long)]
    elastic: bool,
    /// Elastic: never fewer slots than this.
    #[arg(long, default_value_t = 1, requires = "elastic")]
    elastic_min_slots: u32,
    /// Elastic: scale in by this factor m (K -> K/m).
    #[arg(long, default_value_t = 4, requires = "elastic")]
    elastic_factor: u32,
    /// Elastic: the short-term rate is taken over this many epochs (N).
    #[arg(long, default_value_t = 2, requires = "elastic")]
    elastic_window: u32,
    /// Elastic: scale in when the short-term rate times this (d) is below the rate since the
    /// last scale-in.
    #[arg(long, default_value_t = 1.25, requires = "elastic")]
    elastic_threshold: f64,
    /// Elastic: measure the rates over wall time (as Chicle does) or over epochs
    /// (reproducible decisions).
    #[arg(long, value_enum, default_value = "wall", requires = "elastic")]
    elastic_clock: ClockArg,
    /// CoCoA: run inside Catalyst's accelerated outer loop (proximal subproblems with an
    /// extrapolated centre): far fewer epochs when K > 1 slots are slow to certify the gap;
    /// the reported gap stays that of the problem asked for. Not with --elastic.
    #[arg(long)]
    accelerate: bool,
    /// Accelerate: the proximal weight kappa of Catalyst's subproblems, in the objective's
    /// scaling (where l2 weighs |w|^2) [default: chosen from the row count and the loss].
    #[arg(long, requires = "accelerate")]
    kappa: Option<f64>,
    /// L-BFGS (lbfgs, hybrid): curvature pairs kept (m) [default: 15].
    #[arg(long)]
    memory: Option<u32>,
    /// L-BFGS (lbfgs, hybrid): the initial inverse Hessian of the two-loop recursion: the
    /// Jacobi preconditioner (the inverse Hessian diagonal, as Agarwal et al. and VW's
    /// --bfgs use), that diagonal scaled by s.y / y'Dy of the newest pair, or the scalar
    /// s.y / y.y of the newest pair [default: diagonal].
    #[arg(long, value_enum)]
    lbfgs_precondition: Option<PreconditionArg>,
    /// lbfgs and hybrid: the batch solver, L-BFGS or truncated Newton (which reaches tight
    /// tolerances in fewer passes on ill-conditioned data such as criteo's one-hot fields;
    /// logistic and squared loss) [default: lbfgs].
    #[arg(long, value_enum)]
    batch_solver: Option<BatchSolverArg>,
    /// L-BFGS with the diagonal preconditioner: recompute it every N iterations (in the
    /// line search's passes); 0: only once, at the starting point [default: 15].
    #[arg(long)]
    lbfgs_precondition_refresh: Option<u32>,
    /// L-BFGS (lbfgs, hybrid): stop once the gradient's norm is at most this fraction of
    /// its norm at w = 0 [default: 1e-10].
    #[arg(long)]
    gradient_tolerance: Option<f64>,
    /// Hybrid and IPM: learning rate of the online passes (AdaGrad's step; IPM's normalized
    /// SGD step, shrinking as 1/epoch) [default: 0.5].
    #[arg(long)]
    sgd_rate: Option<f64>,
    /// IPM: how the slots' models are mixed [default: uniform].
    #[arg(long, value_enum)]
    mixing: Option<MixingArg>,
    /// Write a convergence plot (SVG).
    #[arg(long)]
    plot: Option<String>,
    /// Write the objective (and duality gap, CoCoA) after every epoch as CSV:
    /// epoch,seconds,objective,gap,relative_gap,workers,algorithm (workers: the count an
    /// elastic run wanted after the epoch; algorithm: the one that ran, as `auto` chose it).
    #[arg(long)]
    trace: Option<String>,
    /// Serve the master's Prometheus metrics (epoch, objective, gap, rows/s, workers,
    /// checkpoint age) on http://ADDRESS/metrics, e.g. 0.0.0.0:9090 (port 0: any free port).
    /// Plain HTTP without the job secret: it shows progress only. `train` needs --workers.
    #[arg(long, value_name = "ADDRESS")]
    metrics_listen: Option<String>,
}

impl TrainArgs {
    /// The options of a run; `default` is the algorithm when `--algorithm` is not given.
    fn options(self, threads: usize, workers: usize, default: AlgorithmArg) -> Result<train::TrainOptions> {
        let loss = match self.loss {
            LossArg::Logistic => Loss::Logistic,
            LossArg::Squared => Loss::Squared,
            LossArg::Hinge => Loss::Hinge,
        };
        let algorithm = match self.algorithm.unwrap_or(default) {
            AlgorithmArg::Auto => AlgorithmName::Auto,
            AlgorithmArg::Scd => AlgorithmName::Scd,
            AlgorithmArg::Cocoa => AlgorithmName::Cocoa,
            AlgorithmArg::Lbfgs => AlgorithmName::Lbfgs,
            AlgorithmArg::Hybrid => AlgorithmName::Hybrid,
            AlgorithmArg::Ipm => AlgorithmName::Ipm,
        };
        let name = algorithm.name();
        let refuse = |flag: &str, who: &str| {
            Err(LineaError::Usage(format!("{flag} applies to {who}, not to --algorithm {name}")))
        };
        if algorithm == AlgorithmName::Auto {
            let named = [
                ("--slots", self.slots.is_some()),
                ("--elastic", self.elastic),
                ("--accelerate", self.accelerate),
                ("--gap-every-epoch", self.gap_every_epoch),
            ];
            if let Some((flag, _)) = named.iter().find(|(_, given)| *given) {
                return Err(LineaError::Usage(format!(
                    "{flag} belongs to a named algorithm: pass --algorithm (auto chooses one from the data)"
                )));
            }
        }
        let lbfgs = matches!(algorithm, AlgorithmName::Lbfgs | AlgorithmName::Hybrid);
        let online = matches!(algorithm, AlgorithmName::Hybrid | AlgorithmName::Ipm);
        if !lbfgs && self.memory.is_some() {
            return refuse("--memory", "the L-BFGS algorithms (lbfgs, hybrid)");
        }
        if !lbfgs && self.lbfgs_precondition.is_some() {
            return refuse("--lbfgs-precondition", "the L-BFGS algorithms (lbfgs, hybrid)");
        }
        if !lbfgs && self.batch_solver.is_some() {
            return refuse("--batch-solver", "the batch algorithms (lbfgs, hybrid)");
        }
        let solver = match self.batch_solver {
            Some(BatchSolverArg::Newton) => BatchSolver::Newton,
            Some(BatchSolverArg::Lbfgs) | None => BatchSolver::Lbfgs,
        };
        if solver == BatchSolver::Newton {
            let named = [
                ("--memory", self.memory.is_some()),
                ("--lbfgs-precondition", self.lbfgs_precondition.is_some()),
                ("--lbfgs-precondition-refresh", self.lbfgs_precondition_refresh.is_some()),
            ];
            if let Some((flag, _)) = named.iter().find(|(_, given)| *given) {
                return Err(LineaError::Usage(format!(
                    "{flag} is L-BFGS's; --batch-solver newton has no pairs and is preconditioned by the Hessian diagonal at every iteration"
                )));
            }
        }
        if !lbfgs && self.lbfgs_precondition_refresh.is_some() {
            return refuse("--lbfgs-precondition-refresh", "the L-BFGS algorithms (lbfgs, hybrid)");
        }
        if self.lbfgs_precondition == Some(PreconditionArg::None) && self.lbfgs_precondition_refresh.is_some() {
            return Err(LineaError::Usage(
                "--lbfgs-precondition-refresh applies to --lbfgs-precondition diagonal or scaled, not none".into(),
            ));
        }
        let precondition = match (self.lbfgs_precondition, self.lbfgs_precondition_refresh) {
            (Some(PreconditionArg::None), _) => Precondition::None,
            (Some(PreconditionArg::Scaled), refresh) => Precondition::Scaled { refresh: refresh.unwrap_or(15) },
            (Some(PreconditionArg::Diagonal) | None, Some(refresh)) => Precondition::Diagonal { refresh },
            (Some(PreconditionArg::Diagonal) | None, None) => Precondition::DEFAULT,
        };
        if !lbfgs && self.gradient_tolerance.is_some() {
            return refuse("--gradient-tolerance", "the L-BFGS algorithms (lbfgs, hybrid)");
        }
        if !online && self.sgd_rate.is_some() {
            return refuse("--sgd-rate", "the online passes of hybrid and ipm");
        }
        if algorithm != AlgorithmName::Ipm && self.mixing.is_some() {
            return refuse("--mixing", "ipm");
        }
        if algorithm == AlgorithmName::Lbfgs && self.slots.is_some() {
            return refuse(
                "--slots",
                "cocoa, hybrid and ipm (L-BFGS gives the same model for any split; it has no slots)",
            );
        }
        let mixing = match self.mixing {
            Some(MixingArg::Examples) => Mixing::Examples,
            _ => Mixing::Uniform,
        };
        let (memory, gradient_tolerance, rate) =
            (self.memory.unwrap_or(15), self.gradient_tolerance.unwrap_or(1e-10), self.sgd_rate.unwrap_or(0.5));
        let slots = self.slots.unwrap_or(workers.max(1));
        let clock = match self.elastic_clock {
            ClockArg::Wall => Clock::Wall,
            ClockArg::Epochs => Clock::Epochs,
        };
        let elastic = self
            .elastic
            .then(|| {
                ElasticConfig::new(
                    self.elastic_min_slots,
                    self.elastic_factor,
                    self.elastic_window,
                    self.elastic_threshold,
                    clock,
                )
            })
            .transpose()?;
        if self.accelerate && algorithm != AlgorithmName::Cocoa {
            return refuse("--accelerate", "cocoa");
        }
        let accelerate = self.accelerate.then(|| AccelerateConfig::new(self.kappa)).transpose()?;
        let TrainArgs {
            data,
            model,
            l2,
            l1,
            epochs,
            tolerance,
            seed,
            plot,
            trace,
            local_passes,
            gap_tolerance,
            gap_every_epoch,
            metrics_listen,
            ..
        } = self;
        Ok(train::TrainOptions {
            data,
            model,
            algorithm,
            chosen_by: None,
            epochs_given: epochs.is_some(),
            loss,
            slots,
            local_passes,
            gap_tolerance,
            gap_every_epoch,
            elastic,
            accelerate,
            memory,
            precondition,
            solver,
            rate,
            gradient_tolerance,
            mixing,
            l2,
            l1,
            epochs: epochs.unwrap_or(train::DEFAULT_EPOCHS),
            tolerance,
            threads,
            seed,
            plot,
            trace,
            workers,
            worker_cache_mb: None,
            metrics_listen,
        })
    }
}

/// The default thread count: every core, within the range `--threads` allows.
fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(256)
}

/// Speculative execution on the master (docs/algorithms.md): an item that runs far longer
/// than the others of its phase is started on an idle worker too; the first result counts.
#[derive(clap::Args)]
struct SpeculationArgs {
    /// An item is a straggler once it has run this many times the median of the items of
    /// its phase already done (judged once half of them are). A worker holds up to two items
    /// per thread, so a queued item's normal time is about twice the median: keep it well
    /// above 2.
    #[arg(long, default_value_t = 4.0)]
    speculate_factor: f64,
    /// The least time an item runs before it can be a straggler (seconds), so that
    /// millisecond items on a busy machine are not copied for a pause.
    #[arg(long, default_value_t = 1.0)]
    speculate_floor: f64,
    /// Never copy items (a stalled worker is then waited for until its connection fails).
    #[arg(long)]
    no_speculation: bool,
}

impl SpeculationArgs {
    fn speculation(&self) -> Speculation {
        match self.no_speculation {
            true => Speculation::OFF,
            false => Speculation {
                factor: Some(self.speculate_factor),
                floor: Duration::from_secs_f64(self.speculate_floor),
            },
        }
    }
}

/// How a process of a distributed job reaches the others: shared by `master`, `worker`,
/// `status` and `drain`.
#[derive(clap::Args)]
struct TlsArgs {
    /// Folder of the job's certificates (ca.crt, and master.crt/master.key for the master,
    /// client.crt/client.key for workers and clients): its mounted Secret, `linea certs`'s
    /// output, or the folder a master without one printed. Default: $LINEA_TLS_DIR.
    #[arg(long)]
    tls_dir: Option<String>,
    /// Plain text instead of TLS, for local debugging only: anyone on the network can read
    /// the traffic and the job secret in it. The operator never runs jobs this way.
    #[arg(long)]
    insecure: bool,
}

impl TlsArgs {
    fn transport(&self, role: Role) -> Result<Transport> {
        Ok(Transport::require(self.tls_dir.as_deref(), self.insecure, role)?)
    }
}

/// Names a master without `--tls-dir` is reached by: this machine's and the listen address.
fn local_master_names(listen: &str) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        names.push(host.trim().to_string());
    }
    if let Some((host, _)) = listen.rsplit_once(':')
        && !["", "0.0.0.0", "[::]"].contains(&host)
    {
        names.push(host.trim_matches(['[', ']']).to_string());
    }
    names.retain(|n| !n.is_empty());
    names.dedup();
    names
}

/// `host:port` or a URL, as a URL.
fn master_url(master: &str) -> String {
    if master.contains("://") { master.to_string() } else { format!("http://{master}") }
}

#[derive(Subcommand)]
enum Command {
    /// Turn raw data into the block x row-shard grid that training reads.
    Prepare {
        /// The raw input: a file, or an s3://bucket/key object (fetched through the S3
        /// storage, with its retries and checksums).
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
        /// Keep the grid already at --output if it was prepared from this same s3:// input
        /// (same URI, size and ETag), format, options and rows per shard; else prepare.
        #[arg(long)]
        reuse: bool,
        /// Threads parsing text input (default: all cores, at most 256); Parquet is read by
        /// one. The grid is the same bytes whatever the count.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// Train a model on a prepared grid.
    Train {
        #[command(flatten)]
        args: TrainArgs,
        /// Worker threads (default: all cores, at most 256). The model does not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Train on the distributed runtime: a master and this many worker processes on this
        /// machine, the threads split between them. The model is the same bytes.
        #[arg(long, default_value_t = 0)]
        workers: usize,
        /// With --workers: each worker's memory for cached cells, MiB (default: `linea
        /// worker`'s). A grid larger than it is read from disk again as cells are wanted.
        #[arg(long)]
        cache_mb: Option<usize>,
    },
    /// The master of a distributed job: runs the algorithm, hands out work items to
    /// workers, checkpoints, writes the model. Needs the job secret (LINEA_JOB_SECRET).
    Master {
        #[command(flatten)]
        args: TrainArgs,
        /// Address to listen on for workers and status.
        #[arg(long, default_value = "0.0.0.0:7070")]
        listen: String,
        /// Where to checkpoint (folder or s3://); a restarted master resumes from it.
        #[arg(long)]
        checkpoint: Option<String>,
        /// File holding the job secret (a mounted Secret); default: $LINEA_JOB_SECRET.
        #[arg(long)]
        secret_file: Option<String>,
        /// How phases that ask for an allreduce (L-BFGS's, the hybrid's and IPM's gradients
        /// and losses) are summed: up and down a binary tree of the workers, or by the
        /// master-centred range aggregation (the default, faster where measured). The model
        /// is the same bits either way.
        #[arg(long, value_enum, default_value_t = master::AllReduceMode::Ranges)]
        allreduce: master::AllReduceMode,
        #[command(flatten)]
        speculation: SpeculationArgs,
        /// A fresh run starts its first epoch once this many workers joined (at most the
        /// workers it wants; a restarted master does not wait). The operator passes an
        /// elastic job's worker count, so its scale-ins release workers that are there.
        #[arg(long, default_value_t = 0)]
        wait_for_workers: usize,
        /// Seconds to wait for --wait-for-workers at most: then the run starts with the
        /// workers that joined (a worker whose pod never runs delays it no longer).
        #[arg(long, default_value_t = 300)]
        wait_for_workers_timeout: u64,
        /// Seconds a finished run goes on serving to release workers that come back late
        /// (after it resumed from a checkpoint or lost a worker: some may be reconnecting),
        /// so they exit 0 instead of retrying for --reconnect-for; SIGTERM ends it sooner.
        #[arg(long, default_value_t = 10)]
        late_workers_for: u64,
        /// Without --tls-dir (and $LINEA_TLS_DIR) the master makes a per-run CA and prints
        /// the private folder its workers and clients pass as --tls-dir.
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Create a job's certificates for TLS: a CA (whose key is not kept), the master's
    /// certificate for --master-name, and the member certificate of workers and clients.
    Certs {
        /// Folder to write ca.crt, master.crt, master.key, client.crt, client.key into
        /// (created, readable by this user only).
        #[arg(long)]
        output: String,
        /// A DNS name or IP address the master is reached by (repeatable).
        #[arg(long = "master-name", required = true)]
        master_names: Vec<String>,
    },
    /// A worker of a distributed job: runs work items for the master until released.
    Worker {
        /// The master's address (host:port or http://host:port).
        #[arg(long)]
        master: String,
        /// Address of this worker's service for its peers.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Address peers use to reach this worker (default: the listen address, or $POD_IP).
        #[arg(long)]
        advertise: Option<String>,
        /// Threads running work items (default: all cores, at most 256).
        #[arg(long)]
        threads: Option<usize>,
        /// Memory for cached cells, MiB.
        #[arg(long, default_value_t = 4096)]
        cache_mb: usize,
        /// Seconds to keep trying to reach an absent master.
        #[arg(long, default_value_t = 600)]
        reconnect_for: u64,
        /// Longest wait, in seconds, for the master to release a draining worker.
        #[arg(long, default_value_t = 25)]
        drain_timeout: u64,
        /// Name the master's certificate carries, when --master is not one of them (an IP, or
        /// a `kubectl port-forward` on localhost): one of the master Service's names, e.g.
        /// `<job>-master.<namespace>.svc`. Default: the host of --master.
        #[arg(long)]
        master_name: Option<String>,
        /// File holding the job secret; default: $LINEA_JOB_SECRET.
        #[arg(long)]
        secret_file: Option<String>,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Print a distributed job's status (JSON) from its master.
    Status {
        /// The master's address (host:port or http://host:port).
        #[arg(long)]
        master: String,
        /// Name the master's certificate carries, when --master is not one of them (an IP, or
        /// a `kubectl port-forward` on localhost): one of the master Service's names, e.g.
        /// `<job>-master.<namespace>.svc`. Default: the host of --master.
        #[arg(long)]
        master_name: Option<String>,
        /// File holding the job secret; default: $LINEA_JOB_SECRET.
        #[arg(long)]
        secret_file: Option<String>,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Ask the master to drain one worker (by id or address): it hands its shards over and exits 0.
    Drain {
        /// The master's address (host:port or http://host:port).
        #[arg(long)]
        master: String,
        /// The worker's id or address, as `linea status` lists it.
        #[arg(long)]
        worker: String,
        /// Name the master's certificate carries, when --master is not one of them (an IP, or
        /// a `kubectl port-forward` on localhost): one of the master Service's names, e.g.
        /// `<job>-master.<namespace>.svc`. Default: the host of --master.
        #[arg(long)]
        master_name: Option<String>,
        /// File holding the job secret; default: $LINEA_JOB_SECRET.
        #[arg(long)]
        secret_file: Option<String>,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Print objective, AUC, log loss, accuracy (logistic) or RMSE (squared) of a model.
    Eval {
        /// The model file (or s3:// object).
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
        /// The model file (or s3:// object).
        #[arg(long)]
        model: String,
        /// A raw file, featurized as the model's training input was.
        #[arg(long)]
        input: String,
        /// Format of the raw file, if not the training input's.
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Where to write the scores, one per line.
        #[arg(long)]
        output: String,
    },
}

/// Runs a command. On success, returns what a Kubernetes pod running it says in its
/// termination message (JSON), for the commands the operator runs and reads: `prepare`
/// (the grid's size, and whether it was kept) and `master` (the model's epochs, objective and
/// duality gap).
pub fn run(cli: Cli) -> Result<Option<String>> {
    let progress = Progress::new(cli.quiet);
    match cli.command {
        Command::Prepare {
            input,
            format,
            output,
            label,
            positive,
            ignore,
            numeric,
            rows_per_shard,
            reuse,
            threads,
        } => {
            let spec = FeatureSpec {
                format,
                label,
                positive,
                numeric: numeric.unwrap_or(FeatureSpec::default_numeric(format)),
                ignore,
            };
            let storage = storage::open(&output)?;
            let threads = threads.unwrap_or_else(all_cores);
            let range_bytes = crate::input::ranges::RANGE_BYTES;
            let options = prepare::PrepareOptions { input, spec, rows_per_shard, reuse, threads, range_bytes };
            let summary = prepare::prepare(&options, storage.as_ref(), &progress)?;
            let m = &summary.manifest;
            let impure: Vec<&str> = m.blocks.iter().filter(|b| !b.pure).map(|b| b.name.as_str()).collect();
            println!(
                "{} {output}: {} rows, {} non-zeros, {} row shards, {} blocks ({} impure{}{})",
                if summary.reused { "kept" } else { "prepared" },
                m.rows,
                m.nnz,
                m.shards.len(),
                m.blocks.len(),
                impure.len(),
                if impure.is_empty() { "" } else { ": " },
                impure.iter().take(8).copied().collect::<Vec<_>>().join(", ")
            );
            let message = serde_json::json!({
                "reused": summary.reused,
                "rows": m.rows,
                "nnz": m.nnz,
                "shards": m.shards.len(),
                "blocks": m.blocks.len(),
            });
            return Ok(Some(message.to_string()));
        }
        Command::Train { args, threads, workers, cache_mb } => {
            if workers == 0 && args.metrics_listen.is_some() {
                return Err(LineaError::Usage(
                    "--metrics-listen serves a master's metrics: train needs --workers N for one".into(),
                ));
            }
            if workers == 0 && cache_mb.is_some() {
                return Err(LineaError::Usage(
                    "--cache-mb bounds the workers' cell caches: train needs --workers N (one process loads the whole grid)".into(),
                ));
            }
            let threads = threads.unwrap_or_else(all_cores);
            let options = train::TrainOptions {
                worker_cache_mb: cache_mb,
                ..args.options(threads, workers, AlgorithmArg::Auto)?
            };
            let summary = train::train(&options, &progress)?;
            report_trained(&options, &summary);
        }
        Command::Master {
            args,
            listen,
            checkpoint,
            secret_file,
            tls,
            allreduce,
            speculation,
            wait_for_workers,
            wait_for_workers_timeout,
            late_workers_for,
        } => {
            if args.algorithm == Some(AlgorithmArg::Auto) {
                return Err(LineaError::Usage(
                    "--algorithm auto is `linea train`'s: a master runs a named algorithm (default scd, whose model \
                     is the same for any worker count)"
                        .into(),
                ));
            }
            let secret = JobSecret::load(secret_file.as_deref())?;
            // Kept until the master exits: its workers read their certificate from it.
            let mut own_folder = None;
            let transport = match Transport::load(tls.tls_dir.as_deref(), tls.insecure, Role::Master)? {
                Some(transport) => transport,
                None => {
                    let certificates = JobCertificates::generate("local", &local_master_names(&listen))?;
                    let folder = PrivateDir::new()?;
                    certificates.write(folder.path())?;
                    // Even with --quiet: without it nobody can join this master.
                    eprintln!("TLS with a per-run CA: workers and clients pass --tls-dir {}", folder.path().display());
                    own_folder = Some(folder);
                    Transport::Tls(certificates.tls(Role::Master)?)
                }
            };
            let train = args.options(0, 0, AlgorithmArg::Scd)?;
            let options = master::MasterOptions {
                train,
                listen,
                checkpoint,
                secret,
                transport,
                allreduce,
                speculation: speculation.speculation(),
                wait_for_workers: StartGate {
                    workers: wait_for_workers,
                    patience: Duration::from_secs(wait_for_workers_timeout),
                },
                stop_on_signals: true,
                late_workers: Duration::from_secs(late_workers_for),
            };
            let summary = master::run(&options, &progress, |address, _| {
                progress.always(&format!("master listening on {address}"));
            })?;
            report_trained(&options.train, &summary);
            drop(own_folder);
            // The operator's final status: the epoch count, objective and (CoCoA) relative
            // duality gap in the header of the model just written (none if it cannot be read
            // back; the run still succeeded).
            let model = eval::read_model(&options.train.model).ok();
            return Ok(model.map(|m| {
                let t = &m.header.training;
                let mut summary = serde_json::json!({"epochs": t.epochs, "objective": t.objective});
                if let Some(gap) = t.duality_gap {
                    summary["dualityGap"] = gap.into();
                }
                summary.to_string()
            }));
        }
        Command::Certs { output, master_names } => {
            use std::os::unix::fs::DirBuilderExt;
            let folder = std::path::Path::new(&output);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(folder)
                .map_err(LineaError::io(folder.to_path_buf()))?;
            JobCertificates::generate(&output, &master_names)?.write(folder)?;
            progress.always(&format!(
                "wrote the job's certificates to {output} (master names: {})",
                master_names.join(", ")
            ));
        }
        Command::Worker {
            master,
            listen,
            advertise,
            threads,
            cache_mb,
            reconnect_for,
            drain_timeout,
            master_name,
            secret_file,
            tls,
        } => {
            // What `kubectl logs` of a worker pod shows: whom it serves, and how it ended.
            progress.always(&format!("worker of master {master}, listening on {listen}"));
            worker::run(worker::WorkerOptions {
                master: master_url(&master),
                listen,
                advertise,
                threads: threads.unwrap_or_else(all_cores),
                cache_bytes: cache_mb << 20,
                reconnect_for: Duration::from_secs(reconnect_for),
                drain_timeout: Duration::from_secs(drain_timeout),
                secret: JobSecret::load(secret_file.as_deref())?,
                transport: tls.transport(Role::Member)?,
                master_name,
            })?;
            progress.always("worker done: released by the master");
        }
        Command::Status { master, master_name, secret_file, tls } => {
            let secret = JobSecret::load(secret_file.as_deref())?;
            let status =
                client::status(&master_url(&master), master_name.as_deref(), &secret, &tls.transport(Role::Member)?)?;
            println!("{}", serde_json::to_string_pretty(&client::status_json(&status)).expect("serializes"));
        }
        Command::Drain { master, worker, master_name, secret_file, tls } => {
            let secret = JobSecret::load(secret_file.as_deref())?;
            let found = client::drain(
                &master_url(&master),
                master_name.as_deref(),
                &secret,
                &tls.transport(Role::Member)?,
                &worker,
            )?;
            if !found {
                return Err(LineaError::Usage(format!("the master knows no worker {worker:?}")));
            }
            progress.always(&format!("draining {worker}"));
        }
        Command::Eval { model, data, format, json } => {
            let model = eval::read_model(&model)?;
            let result = eval::evaluate(&model, &data, format)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&result).expect("serializes"));
            } else {
                let m = &result.metrics;
                println!("examples   {}", m.examples);
                println!("objective  {}", objective_text(result.objective));
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
    Ok(None)
}

fn report_trained(options: &train::TrainOptions, summary: &TrainSummary) {
    let per_thread = match options.threads {
        0 => String::new(),
        threads => {
            format!(" ({:.1}M nnz/s per thread, {threads} threads)", summary.nnz_per_second_per_thread(threads) / 1e6)
        }
    };
    let gap = summary.gap.map_or(String::new(), |g| format!(", relative duality gap {:.3e}", g.relative));
    println!(
        "trained {} with {}: objective {} after {} epochs in {:.2}s{per_thread}{gap}",
        options.model,
        summary.algorithm,
        objective_text(summary.objective),
        summary.epochs,
        summary.seconds,
    );
}

/// An objective as printed: 15 significant digits at every magnitude (what an f64 holds
/// exactly), in plain notation from 1e-3 up and scientific below, so a printed objective
/// can be checked against a reference to 1e-12 whatever the data's scale. (Ten decimals
/// kept only 8 digits of an objective of 1.4e-3.)
fn objective_text(value: f64) -> String {
    const SIGNIFICANT: i32 = 15;
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let exponent = value.abs().log10().floor() as i32;
    if exponent < -3 {
        format!("{value:.*e}", (SIGNIFICANT - 1) as usize)
    } else {
        format!("{value:.*}", (SIGNIFICANT - 1 - exponent).max(0) as usize)
    }
}

/// The valid values of every option that has a bound, in one place. clap checks types when
/// it parses the command line; [`parse`] then checks each value against this table before
/// anything runs, and each option's `--help` ends with its range, generated from here. A
/// new option joins with one line; options not listed take any value of their type.
const RANGES: &[(&str, Range)] = &[
    ("rows_per_shard", Range::Int { min: 1, max: u32::MAX as u64 }),
    ("epochs", Range::Int { min: 1, max: 1_000_000 }),
    ("l2", Range::NonNegative),
    ("l1", Range::NonNegative),
    ("tolerance", Range::Float { min: 0.0, max: 1.0 }),
    ("threads", Range::Int { min: 1, max: 256 }),
    ("workers", Range::Int { min: 0, max: 256 }),
    ("cache_mb", Range::Int { min: 0, max: 1 << 24 }),
    ("reconnect_for", Range::Int { min: 0, max: 604_800 }),
    ("wait_for_workers_timeout", Range::Int { min: 0, max: 604_800 }),
    ("late_workers_for", Range::Int { min: 0, max: 3_600 }),
    ("drain_timeout", Range::Int { min: 0, max: 3_600 }),
    ("slots", Range::Int { min: 1, max: 4_096 }),
    ("local_passes", Range::Int { min: 1, max: 1_000 }),
    ("gap_tolerance", Range::Float { min: 0.0, max: 1.0 }),
    ("elastic_min_slots", Range::Int { min: 1, max: 4_096 }),
    ("elastic_factor", Range::Int { min: 2, max: 4_096 }),
    ("elastic_window", Range::Int { min: 1, max: 1_000 }),
    ("elastic_threshold", Range::Float { min: 1.0, max: 1_000.0 }),
    ("kappa", Range::Float { min: 1e-9, max: 1e15 }),
    ("memory", Range::Int { min: 1, max: 1_000 }),
    ("lbfgs_precondition_refresh", Range::Int { min: 0, max: 1_000_000 }),
    ("gradient_tolerance", Range::Float { min: 0.0, max: 0.999_999 }),
    ("sgd_rate", Range::Float { min: 1e-9, max: 100.0 }),
    ("speculate_factor", Range::Float { min: 1.0, max: 1_000.0 }),
    ("speculate_floor", Range::Float { min: 0.0, max: 3_600.0 }),
];

/// A range of valid values, as [`RANGES`] lists them.
#[derive(Debug, Clone, Copy)]
enum Range {
    /// An integer from `min` to `max`, both included.
    Int { min: u64, max: u64 },
    /// A finite number from `min` to `max`, both included.
    Float { min: f64, max: f64 },
    /// A finite number >= 0.
    NonNegative,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Range::Int { min, max } => write!(f, "an integer from {min} to {max}"),
            Range::Float { min, max } => write!(f, "a number from {min} to {max}"),
            Range::NonNegative => write!(f, "a finite number >= 0"),
        }
    }
}

impl Range {
    fn contains(&self, text: &str) -> bool {
        match *self {
            Range::Int { min, max } => text.trim().parse::<u64>().is_ok_and(|v| (min..=max).contains(&v)),
            Range::Float { min, max } => text.trim().parse::<f64>().is_ok_and(|v| (min..=max).contains(&v)),
            Range::NonNegative => text.trim().parse::<f64>().is_ok_and(|v| v.is_finite() && v >= 0.0),
        }
    }
}

/// The command line definition with each ranged option's range appended to its help.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        command = command.mut_subcommand(&name, |mut sub| {
            for (id, range) in RANGES {
                if sub.get_arguments().any(|a| a.get_id() == id) {
                    sub = sub.mut_arg(*id, |arg| {
                        let help = arg.get_help().map_or(String::new(), |h| format!("{h} "));
                        let long = arg.get_long_help().map(|h| format!("{h}\n\n[valid: {range}]"));
                        let arg = arg.help(format!("{help}[valid: {range}]"));
                        match long {
                            Some(long) => arg.long_help(long),
                            None => arg,
                        }
                    });
                }
            }
            sub
        });
    }
    command
}

/// Parses and validates a command line (`args` includes the program name). Every option is
/// checked here, once: nothing later sees a value outside its range.
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut command = command();
    let matches = command.try_get_matches_from_mut(args)?;
    if let Some((_, sub)) = matches.subcommand() {
        for (id, range) in RANGES {
            let Ok(Some(values)) = sub.try_get_raw(id) else { continue };
            for value in values {
                let text = value.to_string_lossy();
                if !range.contains(&text) {
                    let flag = id.replace('_', "-");
                    return Err(command.error(
                        clap::error::ErrorKind::ValueValidation,
                        format!("invalid value '{text}' for '--{flag}': must be {range}"),
                    ));
                }
            }
        }
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}

impl Cli {
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

#[cfg(test)]
mod tests {
    use super::objective_text;

    #[test]
    fn a_printed_objective_reads_back_to_1e_14_at_every_magnitude() {
        for value in [1.399859508898176e-3, 10546.674515094912, 7.123456789012345e-9, 0.5, 3.3e17, -2.5e-4] {
            let text = objective_text(value);
            let read: f64 = text.parse().unwrap();
            assert!((read - value).abs() <= 1e-14 * value.abs(), "{value:e} printed as {text}");
        }
        // The common case keeps its look: ten decimals at a9a's magnitude.
        assert_eq!(objective_text(10546.674515094912), "10546.6745150949");
        assert_eq!(objective_text(0.0), "0");
    }
}
