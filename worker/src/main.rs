use std::io::{IsTerminal, Write};

/// Where Kubernetes reads a container's termination message; `LINEA_TERMINATION_LOG`
/// overrides it (tests, other runtimes).
const TERMINATION_LOG: &str = "/dev/termination-log";

fn main() {
    let cli = linea_worker::cli::parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if cli.bounds_memory() {
        return_big_buffers_to_the_kernel();
    }
    linea_worker::allocator::install(trim_heaps);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match linea_worker::cli::run(cli) {
        Ok(summary) => {
            if let Some(summary) = summary {
                write_termination_message(&summary);
            }
        }
        Err(e) => {
            // A master stopped on a signal did not fail: its message says what it kept.
            let label = if matches!(e, linea_worker::error::LineaError::Stopped(_)) { "stopped" } else { "error" };
            eprintln!("{label}: {e}");
            write_termination_message(&format!("{label}: {e}"));
            std::process::exit(e.exit_code());
        }
    }
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

/// Buffers of 128 KiB and more (a block's parameters, sums and phase bytes, decoded cells)
/// are mapped from the kernel and given back when freed. glibc's malloc starts so, but
/// raises that threshold to the size of any mapped buffer freed (up to 32 MiB), after which such
/// buffers come from its heaps, whose freed space it keeps: a block-sized buffer is freed every few
/// milliseconds here, and the job's resident memory grew by about 130 bytes per feature
/// (docs/benchmarks/past-the-memory-wall.md, "Bytes per feature"). Setting the threshold turns the
/// raising off. The cost is a page fault per 4 KiB of every fresh buffer: SCD's epochs on criteo-1m
/// (one thread) took about 25% longer with it (docs/benchmarks/past-the-memory-wall.md, "What the
/// allocator's threshold costs"), so only a process that runs under a memory bound sets it
/// ([`linea_worker::cli::Cli::bounds_memory`]). SCD's per-cell buffers are now reused
/// (linea_engine::scratch), which took most of that cost away; the threshold stays because the
/// block-sized buffers are still allocated per block, and without it a bounded job's peak was 42%
/// higher (docs/benchmarks/past-the-memory-wall.md, "Reused per-cell buffers").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_big_buffers_to_the_kernel() {
    // SAFETY: mallopt sets one parameter of the allocator and touches no memory of ours;
    // it runs in main right after the command line is parsed, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_big_buffers_to_the_kernel() {}

/// glibc keeps the free space of its heaps; `malloc_trim(0)` returns their free pages to the
/// kernel ([`linea_worker::allocator`]: after a run releases the grid's cells).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heaps() {
    // SAFETY: malloc_trim only hands whole free pages of the allocator's heaps back to the
    // kernel; it touches no memory in use and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heaps() {}
