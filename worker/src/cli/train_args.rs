//! The training flags `linea train` and `linea master` share, and how they become a run's
//! [`train::TrainOptions`]: every flag that does not apply to the chosen algorithm is refused
//! with a message rather than ignored.

use crate::driver::AlgorithmName;
use crate::error::{LineaError, Result};
use crate::train;
use linea_engine::Loss;
use linea_engine::cocoa::{AccelerateConfig, Clock, ElasticConfig};
use linea_engine::hybrid::{BatchSolver, Mixing, Precondition};

/// A `clap::ValueEnum` copy of an engine enum, and its conversion. The engine is the pure
/// training math (its manifest says no I/O) and stays free of CLI crates; its variants' doc
/// comments also say how the math works, where `--help` wants one line for a user. So the
/// worker keeps these copies, written once here: the variants are listed once, and the
/// check below each fails to compile when the engine gains a variant the CLI does not name.
macro_rules! value_enum_of {
    ($(#[$meta:meta])* $arg:ident => $real:ident { $($(#[doc = $doc:literal])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
        enum $arg {
            $($(#[doc = $doc])* $variant,)+
        }

        impl From<$arg> for $real {
            fn from(arg: $arg) -> $real {
                match arg {
                    $($arg::$variant => $real::$variant,)+
                }
            }
        }

        const _: fn($real) = |real| match real {
            $($real::$variant => (),)+
        };
    };
}

/// The batch solver's form of [`Precondition`], whose refresh period is its own flag: not a
/// [`value_enum_of!`] copy, since the engine's variants carry data.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PreconditionArg {
    /// The scalar s.y / y.y of the newest pair.
    None,
    /// The inverse of the objective's Hessian diagonal.
    Diagonal,
    /// The diagonal scaled by s.y / y'Dy of the newest pair.
    Scaled,
}

value_enum_of!(BatchSolverArg => BatchSolver {
    /// L-BFGS with a strong-Wolfe line search.
    Lbfgs,
    /// Truncated Newton: preconditioned CG on the exact Hessian (one batch pass per CG
    /// step), a backtracking line search (LIBLINEAR's newton.cpp).
    Newton,
});

value_enum_of!(MixingArg => Mixing {
    /// Every slot's model counts the same.
    Uniform,
    /// A slot's model counts by its share of the examples.
    Examples,
});

value_enum_of!(ClockArg => Clock {
    /// Seconds, as Chicle measures: decisions depend on how fast epochs ran.
    Wall,
    /// Epochs: the same data and parameters give the same decisions and model bytes.
    Epochs,
});

value_enum_of!(LossArg => Loss {
    Logistic,
    Squared,
    /// Linear SVM (CoCoA only).
    Hinge,
});

/// What to train: shared by `train` and `master`.
#[derive(clap::Args)]
pub(super) struct TrainArgs {
    /// The prepared grid: a folder or s3://bucket/prefix.
    #[arg(long)]
    data: String,
    /// Where to write the model: a file or an s3:// object.
    #[arg(long)]
    model: String,
    /// [default: auto for `linea train`, scd for `linea master`]
    #[arg(long, value_enum)]
    pub(super) algorithm: Option<AlgorithmName>,
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
    /// Stop once a certified bound on the objective's distance to its optimum, relative to
    /// the objective, is at most this: CoCoA's duality gap; for lbfgs, hybrid and ipm
    /// |gradient|^2 / (4 l2) (strong convexity). 0: only the other rules stop the run. SCD has
    /// no certificate and stops on --tolerance.
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
    /// A local file gets each line when its epoch ends, so a stopped run keeps its epochs;
    /// an s3:// one is written at the end.
    #[arg(long)]
    trace: Option<String>,
    /// Serve the master's Prometheus metrics (epoch, objective, gap, rows/s, workers,
    /// checkpoint age) on http://ADDRESS/metrics, e.g. 0.0.0.0:9090 (port 0: any free port).
    /// Plain HTTP without the job secret: it shows progress only. `train` needs --workers.
    #[arg(long, value_name = "ADDRESS")]
    pub(super) metrics_listen: Option<String>,
}

impl TrainArgs {
    /// The options of a run; `default` is the algorithm when `--algorithm` is not given.
    pub(super) fn options(self, threads: usize, workers: usize, default: AlgorithmName) -> Result<train::TrainOptions> {
        let loss = Loss::from(self.loss);
        let algorithm = self.algorithm.unwrap_or(default);
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
        let solver = self.batch_solver.map_or(BatchSolver::Lbfgs, BatchSolver::from);
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
        let mixing = self.mixing.map_or(Mixing::Uniform, Mixing::from);
        let (memory, gradient_tolerance, rate) =
            (self.memory.unwrap_or(15), self.gradient_tolerance.unwrap_or(1e-10), self.sgd_rate.unwrap_or(0.5));
        let slots = self.slots.unwrap_or(workers.max(1));
        let clock = Clock::from(self.elastic_clock);
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
            stop_on_signals: false,
        })
    }
}
