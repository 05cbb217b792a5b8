//! Fuzzing Spore's readers of outside bytes on stable Rust: IDX, CIFAR-10 batches, PNG and
//! JPEG images, safetensors checkpoints, Dump configurations, `.npy` files, Print files
//! and the `spore` command's arguments.
//!
//! ```no_run
//! // What the bounded test in the suite does for each target (a long run:
//! // `cargo run --release -p spore-fuzz -- --seconds 600`).
//! use spore_fuzz::{runner, targets};
//! for target in targets::all() {
//!     let report = runner::fuzz(&target, &runner::Budget::inputs(3000), 1);
//!     assert!(report.failures.is_empty(), "{report}");
//! }
//! ```
//!
//! Why not libFuzzer or AFL: both need nightly Rust or an instrumented build, and the
//! suite must run them on CI's stable toolchain. This engine mutates real files (see
//! [`seeds`]) with the edits that break parsers ([`mutate`]), and checks three outcomes
//! per input ([`runner`]): no panic, no single allocation beyond what the input's length
//! justifies, no run longer than the watchdog's limit. It has no coverage feedback; its
//! mutations aim at headers, lengths and counts instead, where these formats keep their
//! trust in the input.

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod guard;
pub mod mutate;
pub mod runner;
pub mod seeds;
pub mod targets;
