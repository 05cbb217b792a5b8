//! Training summaries, MindInsight's other half: [`SummaryRecord`] writes scalars,
//! histograms, images and graphs into TensorBoard's event-file format, and
//! [`SummaryCollector`] is the training callback that fills it (loss, learning rate,
//! metrics, parameter and gradient histograms, sample images, the graph). The files are
//! what `tensorboard --logdir DIR` reads.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_summary::{Plugin, SummaryRecord};
//! let dir = std::env::temp_dir().join(format!("spore_summary_lib_{}", std::process::id()));
//! let mut r = SummaryRecord::new(&dir).unwrap();
//! r.add_scalar("accuracy", 0.97);
//! r.record(100).unwrap();
//! r.close().unwrap();
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod collector;
pub mod event_file;
pub mod histogram;
pub mod image;
pub mod proto;
pub mod record;

pub use collector::SummaryCollector;
pub use record::{Plugin, SummaryRecord};
