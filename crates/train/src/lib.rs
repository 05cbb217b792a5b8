//! Spore's training side: [`metrics`], [`callback`]s, and (with the nn crate) the
//! `Model` API with data and loop sinking.
//!
//! ```
//! use spore_train::metrics::{Accuracy, Metric};
//! let acc = Accuracy::new();
//! assert_eq!(acc.eval(), 0.0);
//! ```

pub mod callback;
pub mod metrics;
pub mod model;

pub use model::{Model, TrainConfig};
