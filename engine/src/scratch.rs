//! Buffers a kernel reuses from one unit to the next instead of allocating one per cell.
//!
//! A kernel's per-cell working vectors (SCD's statistics of a cell's features, the sparse sums it
//! returns) are as long as the cell's features: up to a few hundred KiB on criteo-1m. Allocated and
//! freed per cell, each one of 128 KiB or more is a fresh mapping wherever glibc maps such buffers
//! (worker/src/main.rs sets that in memory-bounded processes): a page fault per 4 KiB touched,
//! every cell (docs/benchmarks/past-the-memory-wall.md, "What the allocator's threshold costs"). A
//! [`Scratch`] keeps the vectors its users hand back, so a thread takes one that has already grown
//! to the largest cell it met.
//!
//! The pool belongs to the kernel, which lives as long as the loop over units (the
//! in-process runner's, a worker's): nothing global. It never holds more vectors than were
//! in use at once — one per thread running the kernel — and each only as long as the
//! largest cell's features (SCD: 16 bytes per feature of a cell for its sums, 64 for its
//! sparse exact sums; 1.3 MiB a thread on criteo-1m), which is why a worker's cell-cache
//! bound does not count them.

use std::sync::Mutex;

/// A pool of vectors to reuse. Cloning a kernel gives the clone an empty pool of its own;
/// pools compare equal, so a kernel's equality is its configuration's.
#[derive(Debug)]
pub struct Scratch<T>(Mutex<Vec<Vec<T>>>);

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch(Mutex::new(Vec::new()))
    }
}

impl<T> Clone for Scratch<T> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<T> PartialEq for Scratch<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Scratch<T> {
    /// An empty vector, with the capacity of one handed back earlier if there is one.
    pub fn take(&self) -> Vec<T> {
        // A poisoned lock (a thread panicked while pushing) only costs the reuse.
        self.0.lock().ok().and_then(|mut pool| pool.pop()).unwrap_or_default()
    }

    /// Keeps `v`'s memory for a later [`Scratch::take`].
    pub fn give(&self, mut v: Vec<T>) {
        v.clear();
        if v.capacity() > 0
            && let Ok(mut pool) = self.0.lock()
        {
            pool.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vector handed back comes out again, empty and with its memory; a clone starts empty.
    #[test]
    fn a_given_vector_is_taken_again_empty_with_its_capacity() {
        let pool = Scratch::<u64>::default();
        assert_eq!(pool.take().capacity(), 0);
        let mut v = pool.take();
        v.extend(0..1000);
        let at = v.as_ptr();
        pool.give(v);
        assert_eq!(pool.clone().take().capacity(), 0);
        let again = pool.take();
        assert!(again.is_empty());
        assert!(again.capacity() >= 1000);
        assert_eq!(again.as_ptr(), at);
        // Taken once, so the pool is empty again.
        assert_eq!(pool.take().capacity(), 0);
    }
}
