//! The subcommands and their flags, and the flag groups several of them share.

use super::train_args::TrainArgs;
use crate::error::Result;
use crate::input::{Format, NumericMode};
use crate::runtime::auth::JobSecret;
use crate::runtime::master;
use crate::runtime::speculation::Speculation;
use clap::Subcommand;
use linea_proto::tls::{Role, Transport};
use std::time::Duration;

#[derive(Subcommand)]
pub(super) enum Command {
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
        #[command(flatten)]
        master: MasterAddress,
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
        /// End (exit 1) when standard input closes: for a worker whose starter holds the
        /// other end (`linea train --workers N`), so it never outlives that process, however
        /// it ends (a second signal, a kill), instead of retrying for --reconnect-for.
        #[arg(long)]
        exit_with_stdin: bool,
    },
    /// Print a distributed job's status (JSON) from its master.
    Status {
        #[command(flatten)]
        master: MasterAddress,
    },
    /// Ask the master to drain one worker (by id or address): it hands its shards over and exits 0.
    Drain {
        #[command(flatten)]
        master: MasterAddress,
        /// The worker's id or address, as `linea status` lists it.
        #[arg(long)]
        worker: String,
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

/// Speculative execution on the master (docs/algorithms.md): an item that runs far longer
/// than the others of its phase is started on an idle worker too; the first result counts.
#[derive(clap::Args)]
pub(super) struct SpeculationArgs {
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
    pub(super) fn speculation(&self) -> Speculation {
        match self.no_speculation {
            true => Speculation::OFF,
            false => Speculation {
                factor: Some(self.speculate_factor),
                floor: Duration::from_secs_f64(self.speculate_floor),
            },
        }
    }
}

/// How a member of a running job (`worker`, `status`, `drain`) reaches its master: where,
/// by which certificate name, with which secret and transport.
#[derive(clap::Args)]
pub(super) struct MasterAddress {
    /// The master's address (host:port or http://host:port).
    #[arg(long = "master", value_name = "MASTER")]
    address: String,
    /// Name the master's certificate carries, when --master is not one of them (an IP, or
    /// a `kubectl port-forward` on localhost): one of the master Service's names, e.g.
    /// `<job>-master.<namespace>.svc`. Default: the host of --master.
    #[arg(long)]
    pub(super) master_name: Option<String>,
    /// File holding the job secret; default: $LINEA_JOB_SECRET.
    #[arg(long)]
    secret_file: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
}

impl MasterAddress {
    /// The address as given (what a worker's log shows).
    pub(super) fn address(&self) -> &str {
        &self.address
    }

    /// `host:port` or a URL, as a URL.
    pub(super) fn url(&self) -> String {
        match self.address.contains("://") {
            true => self.address.clone(),
            false => format!("http://{}", self.address),
        }
    }

    pub(super) fn secret(&self) -> Result<JobSecret> {
        Ok(JobSecret::load(self.secret_file.as_deref())?)
    }

    /// The transport of a member (a worker or a client): the job's member certificate.
    pub(super) fn transport(&self) -> Result<Transport> {
        self.tls.transport(Role::Member)
    }
}

/// How a process of a distributed job reaches the others: shared by `master`, `worker`,
/// `status` and `drain`.
#[derive(clap::Args)]
pub(super) struct TlsArgs {
    /// Folder of the job's certificates (ca.crt, and master.crt/master.key for the master,
    /// client.crt/client.key for workers and clients): its mounted Secret, `linea certs`'s
    /// output, or the folder a master without one printed. Default: $LINEA_TLS_DIR.
    #[arg(long)]
    pub(super) tls_dir: Option<String>,
    /// Plain text instead of TLS, for local debugging only: anyone on the network can read
    /// the traffic and the job secret in it. The operator never runs jobs this way.
    #[arg(long)]
    pub(super) insecure: bool,
}

impl TlsArgs {
    pub(super) fn transport(&self, role: Role) -> Result<Transport> {
        Ok(Transport::require(self.tls_dir.as_deref(), self.insecure, role)?)
    }
}
