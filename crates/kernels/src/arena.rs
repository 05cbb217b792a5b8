//! Recycled kernel buffers: how a compiled graph reuses its tensor buffers from run to run.
//!
//! ```
//! use spore_kernels::arena::{self, BufferPool};
//! use spore_kernels::Buffer;
//! let mut pool = BufferPool::default();
//! pool.give(Buffer::F32(vec![7.0; 4096]));
//! let v: Vec<f32> = arena::with_pool(&mut pool, || arena::zeroed(4096));
//! assert!(v.iter().all(|&x| x == 0.0)); // the recycled vector, cleared
//! assert_eq!(pool.stats().hits, 1);
//! ```
//!
//! Kernels get their output and scratch vectors from [`zeroed`] or [`for_overwrite`]. With
//! no pool installed (eager mode) those are plain allocations. The graph executor owns a
//! [`BufferPool`], installs it on its thread for the run ([`with_pool`]), and gives every
//! value's buffer back to it after the value's last use (the liveness plan says when), so
//! the next op of the same size and dtype reuses it: the pool is the arena, and liveness
//! decides reuse. After the first run every buffer a step's kernels take from the pool is
//! there ([`BufferPool::end_run`] keeps exactly what a run asked for); kernels that still
//! allocate their own outputs (random draws, gathers, arg-reductions, custom ops) are
//! listed in ARCHITECTURE.md.
//!
//! Why a per-thread slot and not an argument: kernels stay plain functions returning
//! vectors, eager mode pays nothing, and a pool is only ever touched by the thread that
//! runs its graph (parallel kernels take their scratch on that thread before forking).

use std::cell::RefCell;
use std::collections::HashMap;

use crate::buffer::Buffer;
use crate::dtype::{DType, Element};

/// Buffers smaller than this are not worth keeping (the allocator's small bins are fast).
pub const MIN_RECYCLED_BYTES: usize = 1024;

/// Free buffers by (dtype, length), with counters.
#[derive(Default, Debug)]
pub struct BufferPool {
    free: HashMap<(DType, usize), Vec<Buffer>>,
    /// Requests per (dtype, length) since the last [`BufferPool::end_run`].
    demand: HashMap<(DType, usize), usize>,
    stats: PoolStats,
}

/// How a pool has served requests since it was made.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests served from the pool.
    pub hits: u64,
    /// Requests of a recyclable size that had to allocate.
    pub misses: u64,
    /// Bytes currently held free in the pool.
    pub held_bytes: usize,
}

impl BufferPool {
    /// Keeps `b` for reuse (small buffers are dropped).
    pub fn give(&mut self, b: Buffer) {
        let bytes = b.len() * b.dtype().size_in_bytes();
        if bytes < MIN_RECYCLED_BYTES {
            return;
        }
        self.stats.held_bytes += bytes;
        self.free.entry((b.dtype(), b.len())).or_default().push(b);
    }

    fn take(&mut self, dtype: DType, len: usize) -> Option<Buffer> {
        if len * dtype.size_in_bytes() < MIN_RECYCLED_BYTES {
            return None;
        }
        *self.demand.entry((dtype, len)).or_default() += 1;
        match self.free.get_mut(&(dtype, len)).and_then(Vec::pop) {
            Some(b) => {
                self.stats.hits += 1;
                self.stats.held_bytes -= len * dtype.size_in_bytes();
                Some(b)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Ends one run of the owner's graph: keeps, per (dtype, length), at most as many free
    /// buffers as the run asked for, and drops the rest. The next identical run then finds
    /// every buffer it needs, and buffers that only ever arrive (made by a kernel that does
    /// not take from the pool, or by a sub-graph) cannot pile up run after run.
    pub fn end_run(&mut self) {
        let demand = std::mem::take(&mut self.demand);
        let mut held = 0;
        self.free.retain(|key, list| {
            list.truncate(demand.get(key).copied().unwrap_or(0));
            held += list.len() * key.1 * key.0.size_in_bytes();
            !list.is_empty()
        });
        self.stats.held_bytes = held;
    }
}

thread_local! {
    static CURRENT: RefCell<Option<BufferPool>> = const { RefCell::new(None) };
}

/// Runs `f` with `pool` serving this thread's kernel allocations; nested calls install
/// their own pool and restore the outer one after (also when `f` panics).
pub fn with_pool<R>(pool: &mut BufferPool, f: impl FnOnce() -> R) -> R {
    struct Restore<'a> {
        pool: &'a mut BufferPool,
        outer: Option<BufferPool>,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let mine = CURRENT.with(|c| c.replace(self.outer.take()));
            *self.pool = mine.unwrap_or_default();
        }
    }
    let installed = std::mem::take(pool);
    let outer = CURRENT.with(|c| c.replace(Some(installed)));
    let _restore = Restore { pool, outer };
    f()
}

/// Gives `b` to this thread's pool, if one is installed (else it is freed).
pub fn recycle(b: Buffer) {
    // `try_with`: during thread teardown the slot may be gone; the buffer is then freed.
    let _ = CURRENT.try_with(|c| {
        if let Some(pool) = c.borrow_mut().as_mut() {
            pool.give(b);
        }
    });
}

fn take<T: Element>(len: usize) -> Option<Vec<T>> {
    CURRENT
        .try_with(|c| c.borrow_mut().as_mut()?.take(T::DTYPE, len))
        .ok()
        .flatten()
        .and_then(T::vec_of)
}

/// `len` zeros: a recycled vector cleared, or a fresh one.
pub fn zeroed<T: Element>(len: usize) -> Vec<T> {
    match take::<T>(len) {
        Some(mut v) => {
            v.fill(T::zero());
            v
        }
        None => vec![T::zero(); len],
    }
}

/// `len` elements the caller overwrites entirely before reading: a recycled vector as is
/// (old values), or a fresh zeroed one.
pub fn for_overwrite<T: Element>(len: usize) -> Vec<T> {
    take::<T>(len).unwrap_or_else(|| vec![T::zero(); len])
}

/// Collects exactly `len` items into a recycled vector when one is available.
pub fn collect_exact<T: Element>(len: usize, items: impl Iterator<Item = T>) -> Vec<T> {
    match take::<T>(len) {
        Some(mut v) => {
            let mut n = 0;
            for (d, x) in v.iter_mut().zip(items) {
                *d = x;
                n += 1;
            }
            debug_assert_eq!(n, len, "collect_exact: iterator shorter than promised");
            v
        }
        None => items.collect(),
    }
}
