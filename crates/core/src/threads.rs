//! The kernel thread pool: rayon's global pool, with the program's main thread as its
//! worker 0.
//!
//! ```
//! // In a program's `main`, before any kernel runs (`set_context` and the first Graph
//! // run call this too): the main thread becomes one of the pool's workers.
//! let joined = spore_core::threads::join_kernel_pool(None).unwrap();
//! if joined {
//!     assert_eq!(rayon::current_thread_index(), Some(0));
//! }
//! ```
//!
//! Why the main thread joins the pool: a thread outside the pool hands every parallel
//! call to the pool and sleeps until it is done. For a compiled step that hand-off is a
//! `rayon::scope` per run, and the pool's injection queue allocates a block of slots
//! every 63 of them (about 24 bytes per step, so a steady-state step would not be
//! allocation-free). For eager ops it is two context switches per op. As a worker, the
//! main thread runs the work itself and shares it through its own deque, as PyTorch's
//! OpenMP team includes the calling thread. It also leaves one thread per core: with 2
//! threads asked for, rayon starts one and the main thread is the other.
//!
//! Only the thread named `main` joins, and only into a pool of 2 or more threads, so that
//! there is always a worker that runs on its own: a thread that is not in the pool (a
//! test's thread, a data-loader thread) still gets its jobs run while the main thread
//! blocks on something else.

mod awake;

use std::sync::Once;

pub use awake::{AwakeGuard, LINGER, keep_workers_awake};

use crate::error::{Error, Result};

/// Completed once the global pool has been built (or the one attempt to build it made).
static BUILT: Once = Once::new();

/// Builds rayon's global pool with `num_threads` threads (when `None`, `RAYON_NUM_THREADS`
/// or else the CPU count, as rayon would), the calling thread among them when it is the
/// main thread and the pool has at least two. Returns whether the calling thread is a
/// worker of the pool it runs kernels on afterwards.
///
/// A pool that already exists is kept (rayon builds its global pool once): then this
/// changes nothing, and is an error when `num_threads` asks for a different size.
pub fn join_kernel_pool(num_threads: Option<usize>) -> Result<bool> {
    if num_threads == Some(0) {
        return Err(Error::invalid(
            "set_context: num_threads must be at least 1, got 0",
        ));
    }
    // A thread already in a pool (one of rayon's, or a local pool's under `install`)
    // stays there. `call_once` makes a second caller wait for the first one's pool:
    // asking rayon for its size in between would build the default pool instead.
    if rayon::current_thread_index().is_none() {
        BUILT.call_once(|| build_global(num_threads));
    }
    check_size(num_threads)?;
    Ok(rayon::current_thread_index().is_some())
}

/// Joins the pool with the default size if no pool was built yet; a no-op (one atomic
/// load) afterwards. Called where a compiled graph starts running.
pub fn join_kernel_pool_once() {
    if !BUILT.is_completed() {
        // The only error is a size mismatch, which a `None` request cannot have.
        let _ = join_kernel_pool(None);
    }
}

fn build_global(num_threads: Option<usize>) {
    // Rayon's own default when no size is asked: `RAYON_NUM_THREADS`, else the CPU count.
    let n = num_threads
        .or_else(|| {
            std::env::var("RAYON_NUM_THREADS")
                .ok()?
                .parse()
                .ok()
                .filter(|&n| n > 0)
        })
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
    let is_main = std::thread::current().name() == Some("main");
    let builder = rayon::ThreadPoolBuilder::new().num_threads(n);
    // An error means the pool exists already (some kernel ran first): it is kept.
    let _ = if is_main && n >= 2 {
        builder.use_current_thread().build_global()
    } else {
        builder.build_global()
    };
}

fn check_size(num_threads: Option<usize>) -> Result<()> {
    match num_threads {
        Some(n) if rayon::current_num_threads() != n => Err(Error::invalid(format!(
            "set_context: num_threads can only be set before the first parallel kernel runs (it is {}, asked {n})",
            rayon::current_num_threads()
        ))),
        _ => Ok(()),
    }
}
