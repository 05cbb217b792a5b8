//! Spore's training side: [`metrics`], [`callback`]s, and (with the nn crate) the
//! `Model` API with data and loop sinking.
//!
//! ```
//! use spore_train::metrics::{Accuracy, Metric};
//! let acc = Accuracy::new();
//! assert_eq!(acc.eval(), 0.0);
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod callback;
pub mod metrics;
pub mod model;

pub use model::{Model, TrainConfig};
