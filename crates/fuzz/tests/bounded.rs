//! The suite's fuzz run: every target, a few thousand inputs each from a fixed seed (so a
//! failure reproduces), one after another in this process. It fails on any panic, hang
//! or oversized allocation; `SPORE_FUZZ_INPUTS` raises the count per target.

use spore_fuzz::runner::{Budget, fuzz};
use spore_fuzz::targets;

#[global_allocator]
static ALLOC: spore_fuzz::guard::TrackingAllocator = spore_fuzz::guard::TrackingAllocator;

fn main() {
    let inputs = std::env::var("SPORE_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut budget = Budget::inputs(inputs);
    budget.failures_dir =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let mut failed = vec![];
    for target in targets::all() {
        let report = fuzz(&target, &budget, 2026);
        println!("{report}");
        if !report.failures.is_empty() {
            failed.push(target.name);
        } else {
            assert!(
                report.inputs >= inputs,
                "{}: ran only {} inputs",
                target.name,
                report.inputs
            );
        }
    }
    assert!(
        failed.is_empty(),
        "fuzz failures in {failed:?} (inputs saved as listed above)"
    );
    println!("test fuzz_targets_bounded_run ... ok");
}
