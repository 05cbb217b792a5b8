//! Spore's data side: dataset sources and transforms. So far: the IDX/MNIST reader and a
//! bilinear resize; the full pipeline (map/shuffle/batch/repeat, parallel workers,
//! prefetch) is the dataset issue's work.
//!
//! ```no_run
//! let mnist = spore_data::mnist::Mnist::load("data/mnist/test", spore_data::mnist::Usage::Test).unwrap();
//! println!("{} test digits", mnist.len());
//! ```

pub mod idx;
pub mod mnist;
pub mod vision;
