//! What the fuzz runner watches besides panics: the largest single allocation an input
//! caused (through [`TrackingAllocator`], which a fuzzing binary installs as its global
//! allocator) and inputs that run too long (a watchdog thread).
//!
//! ```
//! // In a fuzzing binary (the `spore-fuzz` command and the bounded test do this):
//! #[global_allocator]
//! static ALLOC: spore_fuzz::guard::TrackingAllocator = spore_fuzz::guard::TrackingAllocator;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest allocation request since the last [`reset_largest`].
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, noting the largest request. Why not refuse large requests here:
/// an allocator must not unwind, and returning null aborts the process without naming the
/// input; the runner checks the note after each input instead (a request the machine
/// cannot meet aborts before that, which fails the run loudly too).
pub struct TrackingAllocator;

fn note(size: usize) {
    LARGEST.fetch_max(size, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments.
unsafe impl GlobalAlloc for TrackingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

pub fn reset_largest() {
    LARGEST.store(0, Ordering::Relaxed);
}

pub fn largest() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

/// Whether this process's global allocator is the [`TrackingAllocator`]: an allocation
/// of a known size must show up. Without it the allocation check would pass unseen.
pub fn tracking_installed() -> bool {
    reset_largest();
    let probe: Vec<u8> = Vec::with_capacity(12_345);
    let seen = largest() >= 12_345;
    drop(std::hint::black_box(probe));
    seen
}

/// A thread that ends the process when one input runs longer than `limit`, after saving
/// that input, so that a hang is a failure with a file to reproduce it, not a stuck run.
pub struct Watchdog {
    started_ms: Arc<AtomicU64>,
    current: Arc<Mutex<(String, Vec<u8>)>>,
    stop: Arc<AtomicBool>,
    epoch: Instant,
}

/// No input is running.
const IDLE: u64 = u64::MAX;

impl Watchdog {
    pub fn start(limit: Duration, failures_dir: PathBuf) -> Watchdog {
        let started_ms = Arc::new(AtomicU64::new(IDLE));
        let current = Arc::new(Mutex::new((String::new(), Vec::new())));
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let (s, c, st) = (started_ms.clone(), current.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let started = s.load(Ordering::Relaxed);
                let now = epoch.elapsed().as_millis() as u64;
                if started != IDLE && now.saturating_sub(started) > limit.as_millis() as u64 {
                    let (target, input) = c.lock().map(|g| g.clone()).unwrap_or_default();
                    let path = save_failure(&failures_dir, &target, "hang", &input);
                    eprintln!(
                        "FUZZ FAILURE: target {target}: an input ran for more than {limit:?} (saved to {}); ending the process",
                        path.display()
                    );
                    std::process::abort();
                }
            }
        });
        Watchdog {
            started_ms,
            current,
            stop,
            epoch,
        }
    }

    /// Marks the start of `input`'s run.
    pub fn begin(&self, target: &str, input: &[u8]) {
        if let Ok(mut g) = self.current.lock() {
            g.0.clear();
            g.0.push_str(target);
            g.1.clear();
            g.1.extend_from_slice(input);
        }
        self.started_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub fn end(&self) {
        self.started_ms.store(IDLE, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Saves a failing input as `<dir>/<target>-<kind>-<hash>.bin`; returns the path.
pub fn save_failure(dir: &Path, target: &str, kind: &str, input: &[u8]) -> PathBuf {
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("{target}-{kind}-{hash:016x}.bin"));
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(&path, input);
    path
}
