//! Telling the allocator that freed memory may go back to the kernel. The crate has no
//! unsafe code; `main.rs`, which has the allocator's calls, installs the one that does it.

use std::sync::OnceLock;

static GIVE_BACK: OnceLock<fn()> = OnceLock::new();

/// Installs `give_back` (glibc: `malloc_trim(0)`), once, from `main`.
pub fn install(give_back: fn()) {
    let _ = GIVE_BACK.set(give_back);
}

/// Returns the free pages of the allocator's heaps to the kernel, where `main` installed a
/// way to: after a run frees a large part of what it loaded (the grid's cells, released
/// once CoCoA's slots hold their rows), whose thousands of cell-sized buffers sit in the
/// heaps below what is still in use, so freeing them alone did not lower the resident set.
pub fn give_back_freed_memory() {
    if let Some(give_back) = GIVE_BACK.get() {
        give_back();
    }
}
