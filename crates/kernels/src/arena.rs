//! Recycled kernel buffers: how a compiled graph runs without allocating in steady state.
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
//! decides reuse. After the first run every buffer a step needs is in the pool.
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
    CURRENT.with(|c| {
        if let Some(pool) = c.borrow_mut().as_mut() {
            pool.give(b);
        }
    });
}

fn take<T: Element>(len: usize) -> Option<Vec<T>> {
    CURRENT
        .with(|c| c.borrow_mut().as_mut()?.take(T::DTYPE, len))
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
