//! What the kernel micro-benchmarks share: the kernel threads as Spore starts them, and
//! timing a kernel whose outputs go back to a buffer pool, as in a compiled graph.

use std::time::Instant;

use spore_kernels::Buffer;
use spore_kernels::arena::{self, BufferPool};

/// `threads` kernel threads, the main thread as worker 0 (as `spore_core::threads` runs
/// kernels); the count is the first command-line argument, 2 by default.
pub fn start_threads() -> usize {
    let threads = std::env::args()
        .nth(1)
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .use_current_thread()
        .build_global()
        .ok();
    threads
}

/// Best of `calls` calls of `f` after `warm_up` more, in ms, each output recycled.
pub fn best_ms(warm_up: usize, calls: usize, mut f: impl FnMut() -> Buffer) -> f64 {
    let mut pool = BufferPool::default();
    arena::with_pool(&mut pool, || {
        let mut f = || arena::recycle(f());
        for _ in 0..warm_up {
            f();
        }
        (0..calls)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .fold(f64::INFINITY, f64::min)
    })
}
