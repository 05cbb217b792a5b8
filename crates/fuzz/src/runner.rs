//! Runs one target on mutated inputs and reports what went wrong: a panic, an allocation
//! larger than the input justifies, or (through the watchdog) a hang. Every failing input
//! is saved so that `spore-fuzz --replay FILE` reproduces it.
//!
//! ```no_run
//! use spore_fuzz::runner::{Budget, fuzz};
//! let target = spore_fuzz::targets::by_name("npy").unwrap();
//! let report = fuzz(&target, &Budget::inputs(1000), 7);
//! assert!(report.failures.is_empty(), "{report}");
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::guard::save_failure;
use crate::guard::{self, Watchdog};
use crate::mutate::{Mutator, Rng};
use crate::targets::Target;

/// How long a target runs.
#[derive(Clone, Debug)]
pub struct Budget {
    pub max_inputs: u64,
    pub max_time: Option<Duration>,
    /// An input that runs longer than this is a hang.
    pub hang_after: Duration,
    /// Where failing inputs are saved.
    pub failures_dir: PathBuf,
}

impl Budget {
    pub fn inputs(n: u64) -> Budget {
        Budget {
            max_inputs: n,
            max_time: None,
            hang_after: Duration::from_secs(10),
            failures_dir: PathBuf::from("target/fuzz-failures"),
        }
    }
}

/// One failing input.
#[derive(Debug)]
pub struct Failure {
    pub kind: &'static str,
    pub message: String,
    pub saved_to: PathBuf,
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    pub inputs: u64,
    /// Inputs the parser accepted (the rest were errors, as most mutations should be).
    pub accepted: u64,
    pub elapsed: Duration,
    /// The largest allocation of any input, against that input's length.
    pub largest_alloc: (usize, usize),
    pub failures: Vec<Failure>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<14} {:>9} inputs in {:>6.1} s, {:>7} accepted, largest allocation {} B (input {} B), {} failures",
            self.target,
            self.inputs,
            self.elapsed.as_secs_f64(),
            self.accepted,
            self.largest_alloc.0,
            self.largest_alloc.1,
            self.failures.len()
        )?;
        for fail in &self.failures {
            write!(
                f,
                "\n  {}: {} (input saved to {})",
                fail.kind,
                fail.message,
                fail.saved_to.display()
            )?;
        }
        Ok(())
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs `input` through `target` under the guards; `Some` when it fails.
pub fn check_one(target: &Target, input: &[u8], failures_dir: &Path) -> (Option<Failure>, bool) {
    guard::reset_largest();
    let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    let largest = guard::largest();
    let limit = (target.alloc_limit)(input.len());
    match outcome {
        Err(payload) => (
            Some(Failure {
                kind: "panic",
                message: panic_message(&*payload),
                saved_to: save_failure(failures_dir, target.name, "panic", input),
            }),
            false,
        ),
        Ok(_) if largest > limit => (
            Some(Failure {
                kind: "oversized allocation",
                message: format!(
                    "one allocation of {largest} bytes for an input of {} bytes (limit {limit})",
                    input.len()
                ),
                saved_to: save_failure(failures_dir, target.name, "alloc", input),
            }),
            false,
        ),
        Ok(result) => (None, result.is_ok()),
    }
}

/// Fuzzes `target` within `budget`, inputs drawn from `seed`.
pub fn fuzz(target: &Target, budget: &Budget, seed: u64) -> Report {
    let start = Instant::now();
    let mut report = Report {
        target: target.name,
        inputs: 0,
        accepted: 0,
        elapsed: Duration::ZERO,
        largest_alloc: (0, 0),
        failures: vec![],
    };
    if !guard::tracking_installed() {
        report.failures.push(Failure {
            kind: "setup",
            message: "the global allocator is not spore_fuzz::guard::TrackingAllocator, so allocations cannot be checked".into(),
            saved_to: PathBuf::new(),
        });
        return report;
    }
    let seeds = (target.seeds)();
    let mut mutator = Mutator::new(Rng::new(seed), target.dictionary);
    let watchdog = Watchdog::start(budget.hang_after, budget.failures_dir.clone());
    // Panics are caught and reported with their input; the default hook would also print
    // each one's backtrace.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    while report.inputs < budget.max_inputs
        && budget.max_time.is_none_or(|t| start.elapsed() < t)
        && report.failures.len() < 20
    {
        // Every seed once as it is, then mutations.
        let input = match seeds.get(report.inputs as usize) {
            Some(s) => s.clone(),
            None => mutator.mutate(&seeds),
        };
        watchdog.begin(target.name, &input);
        let (failure, accepted) = check_one(target, &input, &budget.failures_dir);
        watchdog.end();
        let largest = guard::largest();
        if largest > report.largest_alloc.0 {
            report.largest_alloc = (largest, input.len());
        }
        report.inputs += 1;
        report.accepted += accepted as u64;
        report.failures.extend(failure);
    }
    std::panic::set_hook(hook);
    report.elapsed = start.elapsed();
    report
}
