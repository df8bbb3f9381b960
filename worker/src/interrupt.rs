//! SIGTERM and SIGINT for `linea train`, in one process or with `--workers N`. The first
//! asks the run to stop at the next epoch boundary ([`crate::driver::drive`] checks between
//! epochs), so the model of the epochs done is written, with its trace, and the command says
//! it is not converged; `--workers N`'s embedded master then releases its worker processes,
//! which end. A second one ends the process at once (the exit code a shell gives a process
//! the signal ended), for a run whose epoch is too long to wait for; the worker processes,
//! in their own process group, then end as their standard input closes
//! (`linea worker --exit-with-stdin`).
//!
//! `linea train` has no checkpoint to resume from (`linea master --checkpoint` does), so the
//! model of the epochs done is all it can keep. `linea master` stops on signals through its
//! hub instead.

use crate::error::{LineaError, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether a stop was asked for, and by which signal.
#[derive(Clone, Default)]
pub struct Interrupt {
    /// The signal's number, 0 until one arrives.
    signal: Arc<AtomicUsize>,
}

impl Interrupt {
    /// Nothing stops the run but its own rule.
    pub fn none() -> Interrupt {
        Interrupt::default()
    }

    /// From now on the first SIGTERM or SIGINT of this process is recorded here instead of
    /// ending it; a second one ends it with 128 + its number.
    pub fn on_signals() -> Result<Interrupt> {
        let interrupt = Interrupt::default();
        let asked = Arc::new(AtomicBool::new(false));
        for signal in [SIGTERM, SIGINT] {
            let handler = |e| LineaError::io(format!("the handler of signal {signal}"))(e);
            // Registered first, so it runs before `asked` is set: it ends only a second signal.
            signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, asked.clone()).map_err(handler)?;
            signal_hook::flag::register(signal, asked.clone()).map_err(handler)?;
            signal_hook::flag::register_usize(signal, interrupt.signal.clone(), signal as usize).map_err(handler)?;
        }
        Ok(interrupt)
    }

    /// The signal that asked the run to stop, if one did.
    pub fn received(&self) -> Option<&'static str> {
        match self.signal.load(Ordering::SeqCst) as i32 {
            0 => None,
            SIGTERM => Some("SIGTERM"),
            SIGINT => Some("SIGINT"),
            _ => Some("a signal"),
        }
    }
}
