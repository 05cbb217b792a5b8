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
//! there ([`BufferPool::end_run`] keeps exactly what a run asked for); custom ops'
//! kernels may still allocate their own outputs (Spore's own whole operators, such as
//! LayerNorm, take them from the pool; see ARCHITECTURE.md).
//!
//! Why a per-thread slot and not an argument: kernels stay plain functions returning
//! vectors, eager mode pays nothing, and a pool is only ever touched by the thread that
//! runs its graph (parallel kernels take their scratch on that thread before forking).

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::buffer::Element;
use crate::dtype::DType;

/// Free buffers by (dtype, length), with counters.
///
/// Every size is kept, down to one element: a compiled step is meant to allocate nothing
/// at all, and the bias gradients and scalars of a step are small buffers too.
#[derive(Default, Debug)]
pub struct BufferPool {
    free: HashMap<(DType, usize), Vec<Buffer>>,
    /// Requests per (dtype, length) since the last [`BufferPool::end_run`]. Keys stay
    /// (counting from zero again) so that the next run inserts nothing.
    demand: HashMap<(DType, usize), usize>,
    /// Emptied `Arc<Buffer>` allocations, refilled by [`share`]: a tensor's storage is an
    /// `Arc`, and reusing its allocation with the buffer keeps a step off the allocator.
    shells: Vec<Arc<Buffer>>,
    /// Shells handed out since the last [`BufferPool::end_run`] (how many to keep).
    shells_taken: usize,
    /// The owner's own per-value allocations, opaque here (spore-core keeps its tensor
    /// headers in them), so that one installed pool serves everything a step recycles.
    headers: Vec<Arc<dyn Any + Send + Sync>>,
    headers_taken: usize,
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
    /// Keeps `b` for reuse (an empty one is dropped).
    pub fn give(&mut self, b: Buffer) {
        if b.is_empty() {
            // A buffer lent to an in-place op leaves its value empty: nothing to keep.
            return;
        }
        let bytes = b.len() * b.dtype().size_in_bytes();
        self.stats.held_bytes += bytes;
        self.free.entry((b.dtype(), b.len())).or_default().push(b);
    }

    fn take(&mut self, dtype: DType, len: usize) -> Option<Buffer> {
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

    /// Sets every value of every f32 buffer held free to `value`. For tests: a kernel that
    /// reads a recycled buffer before writing it then sees `value` (say NaN), where a
    /// buffer recycled by the same kernel would often still hold what it needs (zeros
    /// where it never writes).
    pub fn poison_f32(&mut self, value: f32) {
        for buffer in self.free.values_mut().flatten() {
            if let Buffer::F32(v) = buffer {
                v.fill(value);
            }
        }
    }

    /// Ends one run of the owner's graph: keeps, per (dtype, length), at most as many free
    /// buffers as the run asked for, and drops the rest. The next identical run then finds
    /// every buffer it needs, and buffers that only ever arrive (made by a kernel that does
    /// not take from the pool, or by a sub-graph) cannot pile up run after run.
    pub fn end_run(&mut self) {
        let demand = &mut self.demand;
        let mut held = 0;
        // Sizes this run asked for keep their (possibly empty) lists, so refilling them
        // next run allocates nothing; sizes it did not ask for go.
        self.free.retain(|key, list| {
            let wanted = demand.get(key).copied().unwrap_or(0);
            list.truncate(wanted);
            held += list.len() * key.1 * key.0.size_in_bytes();
            wanted > 0
        });
        demand.retain(|_, n| std::mem::take(n) > 0);
        self.shells.truncate(std::mem::take(&mut self.shells_taken));
        self.headers
            .truncate(std::mem::take(&mut self.headers_taken));
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

/// Runs `f` on this thread's installed pool; `None` when there is none. (`try_with`: during
/// thread teardown the slot may be gone; whatever `f` would have kept is then freed.)
fn with_current<R>(f: impl FnOnce(&mut BufferPool) -> R) -> Option<R> {
    CURRENT
        .try_with(|c| c.borrow_mut().as_mut().map(f))
        .ok()
        .flatten()
}

/// Gives `b` to this thread's pool, if one is installed (else it is freed).
pub fn recycle(b: Buffer) {
    with_current(|pool| pool.give(b));
}

/// Releases a tensor's shared storage: when `shared` is its buffer's only handle, the buffer
/// goes to this thread's pool and the emptied `Arc` is kept for [`share`] (else the handle
/// is just dropped).
pub fn recycle_shared(mut shared: Arc<Buffer>) {
    let Some(buffer) = Arc::get_mut(&mut shared) else {
        return;
    };
    // An empty `Vec` does not allocate: the shell holds nothing while it waits.
    let b = std::mem::replace(buffer, Buffer::F32(Vec::new()));
    with_current(|pool| {
        pool.give(b);
        pool.shells.push(shared);
    });
}

/// Keeps `header` (which the caller holds uniquely) in this thread's pool for
/// [`take_header`]; without a pool it is dropped.
pub fn recycle_header(header: Arc<dyn Any + Send + Sync>) {
    with_current(|pool| pool.headers.push(header));
}

/// A header kept by [`recycle_header`], if this thread's pool has one.
pub fn take_header() -> Option<Arc<dyn Any + Send + Sync>> {
    with_current(|pool| {
        pool.headers_taken += 1;
        pool.headers.pop()
    })
    .flatten()
}

/// `b` behind an `Arc`, reusing a shell from this thread's pool when there is one.
pub fn share(b: Buffer) -> Arc<Buffer> {
    let shell = with_current(|pool| {
        pool.shells_taken += 1;
        pool.shells.pop()
    })
    .flatten();
    // Kept shells are unique, so `get_mut` succeeds; otherwise allocate rather than fail.
    if let Some(mut shell) = shell
        && let Some(slot) = Arc::get_mut(&mut shell)
    {
        *slot = b;
        return shell;
    }
    Arc::new(b)
}

/// Whether [`tune_system_allocator`] may run: 0 = not decided yet (read
/// `SPORE_MALLOC_TUNING` on first use), 1 = no, 2 = yes.
static MALLOC_TUNING: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Turns glibc tuning on or off for this process (`set_context(malloc_tuning=...)`); on
/// takes effect at once. Off cannot undo thresholds already set.
pub fn set_malloc_tuning(on: bool) {
    MALLOC_TUNING.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
    if on {
        tune_system_allocator();
    }
}

/// Whether glibc tuning is on: set by [`set_malloc_tuning`], else `SPORE_MALLOC_TUNING=1`
/// (or `on`/`true`), else off.
pub fn malloc_tuning() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    match MALLOC_TUNING.load(Relaxed) {
        0 => {
            let on = matches!(
                std::env::var("SPORE_MALLOC_TUNING").as_deref(),
                Ok("1" | "on" | "true")
            );
            // Only the first decision sticks: a concurrent `set_malloc_tuning` wins.
            let _ = MALLOC_TUNING.compare_exchange(0, if on { 2 } else { 1 }, Relaxed, Relaxed);
            MALLOC_TUNING.load(Relaxed) == 2
        }
        state => state == 2,
    }
}

fn take<T: Element>(len: usize) -> Option<Vec<T>> {
    let pooled = with_current(|pool| pool.take(T::DTYPE, len));
    if pooled.is_none() && malloc_tuning() {
        tune_system_allocator();
    }
    pooled.flatten().and_then(T::vec_of)
}

/// Fixes glibc's malloc thresholds for the whole process, once: buffers under 32 MiB come
/// from the heap instead of fresh `mmap`s, and up to 256 MiB of freed heap is kept instead
/// of being returned to the system. Only when asked for ([`set_malloc_tuning`],
/// `SPORE_MALLOC_TUNING=1`): it changes the allocator of every library in the process,
/// and keeps up to 256 MiB of freed memory from going back to the system.
///
/// Why it helps eager mode, which allocates every kernel's output from the system: glibc
/// adapts its `mmap` threshold to the largest block freed so far, so whether an eager
/// step's 0.1-1 MB buffers are mapped and unmapped (and their pages faulted in again) on
/// every call depends on which sizes happened to be freed first. Its measured effect is
/// in BENCHMARKS.md ("Allocator tuning in eager mode"). Compiled graphs take their
/// buffers from the pool and do not depend on it.
pub fn tune_system_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: `mallopt` only changes allocator parameters; both values are in the
            // documented ranges (the mmap threshold's maximum is 32 MiB on 64-bit).
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
            }
        });
    }
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

/// Calls the generic function `$f::<T>($args)` for the element type `T` of `$dtype`.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident($($arg:expr),*)) => {
        match $dtype {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
            DType::F16 => $f::<half::f16>($($arg),*),
            DType::BF16 => $f::<half::bf16>($($arg),*),
            DType::I32 => $f::<i32>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
            DType::U8 => $f::<u8>($($arg),*),
            DType::Bool => $f::<bool>($($arg),*),
        }
    };
}

/// A buffer of `len` copies of `value` (converted as [`Buffer::filled`] converts), in a
/// recycled vector when the installed pool has one of that dtype and length.
///
/// Why not [`Buffer::filled`] in a compiled graph: a fresh zeroed vector comes from
/// `calloc`, whose pages the system maps on first write. An op that writes only part of
/// it (a slice's gradient writes its slice) hands the pool a buffer whose other pages are
/// still unmapped, and the next op to take it page-faults through them on every step,
/// while the buffer that op would have reused is freed as the pool's surplus.
pub fn filled_buffer(dtype: DType, len: usize, value: f64) -> Buffer {
    fn go<T: Element>(len: usize, value: f64) -> Buffer {
        let mut v = for_overwrite::<T>(len);
        v.fill(T::from_f64(value));
        T::into_buffer(v)
    }
    by_dtype!(dtype, go(len, value))
}

/// A buffer of `len` values of `dtype` that the caller overwrites entirely before
/// reading ([`for_overwrite`] for a dtype known only at run time).
pub fn buffer_for_overwrite(dtype: DType, len: usize) -> Buffer {
    fn go<T: Element>(len: usize) -> Buffer {
        T::into_buffer(for_overwrite::<T>(len))
    }
    by_dtype!(dtype, go(len))
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
