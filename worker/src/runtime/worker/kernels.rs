//! The kernels a worker can run, behind one object-safe face: a worker learns the job's
//! algorithm from the master at run time, so it holds the kernel as a [`DynKernel`] and
//! unit state and phases as `Any`. This file is the one place on the worker side that
//! lists the algorithms.

use super::unit_grid::UnitGrid;
use crate::error::{LineaError, Result};
use linea_engine::algorithm::{Contribution, Kernel, UnitOutput, decode};
use linea_engine::cocoa::CocoaKernel;
use linea_engine::hybrid::LinearKernel;
use linea_engine::scd::kernel::ScdKernel;
use std::any::Any;
use std::sync::Arc;

pub type AnyPhase = Arc<dyn Any + Send + Sync>;
pub type AnyState = Box<dyn Any + Send>;

/// A [`Kernel`] with its types erased.
pub trait DynKernel: Send + Sync {
    fn decode_phase(&self, bytes: &[u8]) -> Result<AnyPhase>;
    fn fresh(&self, unit: usize, grid: &UnitGrid) -> Result<AnyState>;
    fn run(&self, phase: &AnyPhase, unit: usize, state: &mut AnyState, grid: &UnitGrid) -> Result<UnitOutput>;
    /// Hands a unit's added-up sums back to the kernel ([`Kernel::recycle`]).
    fn recycle(&self, sums: Contribution);
    fn restore(&self, unit: usize, base: &[u8], grid: &UnitGrid) -> Result<AnyState>;
    fn base_key(&self, unit: usize) -> usize;
    fn encode_state(&self, state: &AnyState) -> Vec<u8>;
    /// What a merge elsewhere needs of an old unit's state ([`Kernel::encode_part`]).
    fn encode_part(&self, state: &AnyState) -> Option<Vec<u8>>;
    fn decode_part(&self, bytes: &[u8]) -> Result<AnyState>;
    /// A merged unit from its base (encoded) and its old units' states, in order.
    fn merge(&self, unit: usize, base: &[u8], parts: Vec<AnyState>, grid: &UnitGrid) -> Result<AnyState>;
    fn decode_state(&self, unit: usize, bytes: &[u8], grid: &UnitGrid) -> Result<AnyState>;
}

/// The kernel of `algorithm`, from the configuration bytes the master sent.
pub fn kernel_for(algorithm: &str, config: &[u8]) -> Result<Arc<dyn DynKernel>> {
    let corrupt = |e| LineaError::Engine { object: format!("the master's {algorithm} kernel"), source: e };
    match algorithm {
        "scd" => Ok(Arc::new(Erased(decode::<ScdKernel>(config, "kernel").map_err(corrupt)?))),
        "cocoa" => Ok(Arc::new(Erased(decode::<CocoaKernel>(config, "kernel").map_err(corrupt)?))),
        "lbfgs" | "hybrid" | "ipm" => Ok(Arc::new(Erased(decode::<LinearKernel>(config, "kernel").map_err(corrupt)?))),
        other => {
            Err(LineaError::Usage(format!("the master runs algorithm {other:?}, which this worker does not know")))
        }
    }
}

struct Erased<K>(K);

fn mismatch() -> LineaError {
    LineaError::Usage("a phase or unit state of another algorithm".into())
}

impl<K: Kernel> Erased<K> {
    fn state<'a>(&self, state: &'a AnyState) -> Result<&'a K::UnitState> {
        state.downcast_ref().ok_or_else(mismatch)
    }
}

impl<K: Kernel> DynKernel for Erased<K> {
    fn decode_phase(&self, bytes: &[u8]) -> Result<AnyPhase> {
        Ok(Arc::new(decode::<K::Phase>(bytes, "phase")?))
    }

    fn fresh(&self, unit: usize, grid: &UnitGrid) -> Result<AnyState> {
        Ok(Box::new(self.0.fresh(unit, grid)?))
    }

    fn run(&self, phase: &AnyPhase, unit: usize, state: &mut AnyState, grid: &UnitGrid) -> Result<UnitOutput> {
        let phase = phase.downcast_ref::<K::Phase>().ok_or_else(mismatch)?;
        let state = state.downcast_mut::<K::UnitState>().ok_or_else(mismatch)?;
        self.0.run(phase, unit, state, grid)
    }

    fn recycle(&self, sums: Contribution) {
        self.0.recycle(sums)
    }

    fn restore(&self, unit: usize, base: &[u8], grid: &UnitGrid) -> Result<AnyState> {
        let base: K::UnitBase = decode(base, "unit base")?;
        Ok(Box::new(self.0.restore(unit, &base, grid)?))
    }

    fn base_key(&self, unit: usize) -> usize {
        self.0.base_key(unit)
    }

    fn encode_state(&self, state: &AnyState) -> Vec<u8> {
        self.state(state).map(|s| self.0.encode_state(s)).unwrap_or_default()
    }

    fn decode_state(&self, unit: usize, bytes: &[u8], grid: &UnitGrid) -> Result<AnyState> {
        Ok(Box::new(self.0.decode_state(unit, bytes, grid)?))
    }

    fn encode_part(&self, state: &AnyState) -> Option<Vec<u8>> {
        self.state(state).ok().and_then(|s| self.0.encode_part(s))
    }

    fn decode_part(&self, bytes: &[u8]) -> Result<AnyState> {
        Ok(Box::new(self.0.decode_part(bytes)?))
    }

    fn merge(&self, unit: usize, base: &[u8], parts: Vec<AnyState>, grid: &UnitGrid) -> Result<AnyState> {
        let base: K::UnitBase = decode(base, "unit base")?;
        let parts = parts.into_iter().map(|p| p.downcast::<K::UnitState>().map(|p| *p).map_err(|_| mismatch()));
        Ok(Box::new(self.0.merge(unit, &base, parts.collect::<Result<_>>()?, grid)?))
    }
}
