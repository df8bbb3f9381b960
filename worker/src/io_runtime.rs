//! A tokio runtime owned by a synchronous object (an S3 storage, the master's server) that
//! may be dropped anywhere.
//!
//! Dropping a [`tokio::runtime::Runtime`] waits for its blocking threads, and tokio panics
//! ("Cannot drop a runtime in a context where blocking is not allowed") when that happens on
//! a thread that runs async tasks. Objects that own a runtime end up dropped there whenever
//! the last reference to them is held by a task: a worker's grid (and its S3 storage) is
//! shared with the tasks of the worker's own runtime, which drops them as it shuts down.
//! [`IoRuntime`] shuts its runtime down in the background instead of waiting, which is
//! allowed everywhere; the owners only ever `block_on` it, so nothing is left running.

use std::ops::Deref;

/// A runtime whose drop never blocks (see the module comment).
pub struct IoRuntime(Option<tokio::runtime::Runtime>);

impl IoRuntime {
    /// A multi-threaded runtime with `threads` workers named `name`, I/O and timers enabled.
    pub fn new(threads: usize, name: &str) -> std::io::Result<IoRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()?;
        Ok(IoRuntime(Some(runtime)))
    }

    /// Stops the runtime, giving its tasks up to `timeout` to finish (call it from
    /// synchronous code only, like [`tokio::runtime::Runtime::shutdown_timeout`]).
    pub fn shutdown_timeout(mut self, timeout: std::time::Duration) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_timeout(timeout);
        }
    }
}

impl Deref for IoRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime is only taken by shutdown_timeout and drop")
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defect this type exists for: a runtime's owner dropped by a task of another
    /// runtime, as a worker's grid is when the worker's runtime shuts down.
    #[test]
    fn an_owner_dropped_inside_another_runtimes_task_does_not_panic() {
        let inner = IoRuntime::new(1, "inner").unwrap();
        assert_eq!(inner.block_on(async { 1 + 1 }), 2);
        let outer = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let dropped = outer.block_on(async move { tokio::spawn(async move { drop(inner) }).await });
        assert!(dropped.is_ok(), "dropping the runtime inside a task panicked");
    }

    #[test]
    fn a_plain_runtime_dropped_there_panics() {
        // The same drop without IoRuntime: tokio refuses it, which is why the type exists.
        let inner = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let outer = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let dropped = outer.block_on(async move { tokio::spawn(async move { drop(inner) }).await });
        assert!(dropped.is_err_and(|e| e.is_panic()));
    }
}
