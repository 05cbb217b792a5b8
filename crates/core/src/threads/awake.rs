//! Keeps the kernel pool's other workers spinning while compiled steps and eager ops run,
//! so that a parallel kernel finds them awake.
//!
//! ```
//! use spore_core::threads::keep_workers_awake;
//! // Only a pool worker starts spinners (the main thread is one once it joined the pool).
//! let joined = spore_core::threads::join_kernel_pool(None).unwrap();
//! let awake = keep_workers_awake();
//! assert_eq!(awake.is_some(), joined && rayon::current_num_threads() > 1);
//! // ... the step's kernels ...
//! drop(awake); // the others spin on for LINGER, then sleep as rayon's workers do
//! ```
//!
//! Why: a rayon worker with nothing to do yields a few dozen times and then sleeps, and
//! waking it takes longer than many of a small network's kernels. The serial ops between
//! two products (a loss, a bias gradient) last long enough for that: a 64x512x10 product
//! took longer after serial work than back to back, and longer still after more of it. A
//! spinning worker steals the product's second half at once, as an OpenMP team spins
//! between parallel regions (measured: BENCHMARKS.md, "Figures moved from code comments").
//!
//! A spinner is a job broadcast to the other workers that runs their pool's work
//! (`rayon::yield_now`) until no step has been running for [`LINGER`]. It never runs on a
//! thread that is itself inside a step: that step would wait for the spinner, and the
//! spinner for the step to end.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// How long workers keep spinning after the last step ended: long enough to bridge the
/// gap between one training step and the next, short enough that an idle program stops
/// using the other cores almost at once.
pub const LINGER: Duration = Duration::from_millis(1);

/// Steps running now, on any thread.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Spinners started and not yet finished (each worker but the starter runs one).
static SPINNERS: AtomicUsize = AtomicUsize::new(0);
/// When the last step ended, in nanoseconds since [`epoch`].
static LAST_END_NS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread is inside a step (holds a guard).
    static IN_STEP: Cell<usize> = const { Cell::new(0) };
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// Marks a step running on this thread until dropped; see [`keep_workers_awake`].
#[must_use = "the workers spin only while the guard lives (and LINGER after)"]
pub struct AwakeGuard(());

/// Starts spinners on the pool's other workers unless they run already, and marks a step
/// running until the returned guard drops. `None` (nothing started) when this thread is
/// not a worker of a pool of two or more threads: its parallel calls are handed to the
/// pool and it sleeps meanwhile, so there is no one to keep awake for.
pub fn keep_workers_awake() -> Option<AwakeGuard> {
    let me = rayon::current_thread_index()?;
    let others = rayon::current_num_threads()
        .checked_sub(1)
        .filter(|&n| n > 0)?;
    epoch();
    RUNNING.fetch_add(1, SeqCst);
    IN_STEP.with(|s| s.set(s.get() + 1));
    // One set of spinners at a time. Why not a fresh set per step: a step may start while
    // the last set still lingers, and two spinners on one worker would only nest.
    if SPINNERS.compare_exchange(0, others, SeqCst, SeqCst).is_ok() {
        rayon::spawn_broadcast(move |ctx| {
            if ctx.index() != me {
                spin();
                SPINNERS.fetch_sub(1, SeqCst);
            }
        });
    }
    Some(AwakeGuard(()))
}

impl Drop for AwakeGuard {
    fn drop(&mut self) {
        LAST_END_NS.store(now_ns(), SeqCst);
        IN_STEP.with(|s| s.set(s.get() - 1));
        RUNNING.fetch_sub(1, SeqCst);
    }
}

/// Runs the pool's work on this worker until no step has run for [`LINGER`].
fn spin() {
    let linger = LINGER.as_nanos() as u64;
    loop {
        // A worker inside a step of its own (this job was taken up while that step waited
        // for a stolen half) must get back to it.
        if IN_STEP.with(Cell::get) > 0 {
            return;
        }
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => continue,
            None => return,
            Some(rayon::Yield::Idle) => {}
        }
        if RUNNING.load(SeqCst) == 0 && now_ns() > LAST_END_NS.load(SeqCst) + linger {
            // A step that starts right now finds this spinner still counted and starts no
            // other: it runs with a sleeping worker, as without spinners. The next starts
            // a new set.
            return;
        }
        // As rayon's own idle rounds, without their sleep: any other thread that wants
        // this core (a data loader) gets it, and otherwise the next look comes at once.
        // (A loop of pause instructions instead measured the same, within noise.)
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
    }

    /// Waits up to `limit` for `done`.
    fn eventually(limit: Duration, done: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        done()
    }

    /// The spinner runs while a step does and stops once no step has run for LINGER, and
    /// a thread outside any pool starts none. (One test for the whole life cycle: the
    /// counters are global, and tests run side by side.)
    #[test]
    fn spinners_start_with_a_step_stop_after_it_and_never_deadlock_two_steps() {
        assert!(
            keep_workers_awake().is_none(),
            "a test thread is no pool worker"
        );
        let pool = pool();
        pool.install(|| {
            let guard = keep_workers_awake().expect("a worker of a 2-thread pool");
            assert!(eventually(Duration::from_secs(5), || SPINNERS.load(SeqCst) > 0));
            // Parallel work still completes while the other worker spins.
            let sum: u64 = rayon::join(|| (0..1000u64).sum::<u64>(), || 7).0;
            assert_eq!(sum, 499_500);
            drop(guard);
        });
        assert!(
            eventually(Duration::from_secs(5), || SPINNERS.load(SeqCst) == 0),
            "the spinner outlived its step by far more than LINGER"
        );
        // Both workers inside steps at once, each waiting on parallel work: a spinner
        // that reached a worker inside a step must return, or neither step would end.
        let total: u64 = pool.install(|| {
            let step = || {
                let _awake = keep_workers_awake();
                (0..200u64)
                    .map(|i| rayon::join(|| i, || 1).0 + rayon::join(|| 0, || 0).1)
                    .sum::<u64>()
            };
            let (a, b) = rayon::join(step, step);
            a + b
        });
        assert_eq!(total, 2 * 19_900);
        assert!(eventually(Duration::from_secs(5), || SPINNERS.load(SeqCst) == 0));
        assert_eq!(RUNNING.load(SeqCst), 0);
    }
}
