//! Process-wide pipeline settings, as `mindspore.dataset.config`: the seed that every
//! random node (shuffles, shuffled sources, random transforms) captures when it is
//! created, and the default prefetch depth.
//!
//! ```
//! use spore_data::config;
//! config::set_seed(58);
//! assert_eq!(config::get_seed(), Some(58));
//! assert!(config::get_prefetch_size() > 0);
//! ```

use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::rng::mix;

static SEED: Mutex<Option<u64>> = Mutex::new(None);
static PREFETCH: AtomicUsize = AtomicUsize::new(16);
static FRESH: AtomicU64 = AtomicU64::new(0);

/// Seeds the pipeline: nodes created afterwards yield the same rows in the same order on
/// every run, whatever the number of workers.
pub fn set_seed(seed: u64) {
    if let Ok(mut s) = SEED.lock() {
        *s = Some(seed);
    }
}

/// The seed set by [`set_seed`], or `None` (then each random node draws a fresh seed,
/// like MindSpore when no seed is set).
pub fn get_seed() -> Option<u64> {
    SEED.lock().ok().and_then(|s| *s)
}

/// Forgets the seed set by [`set_seed`].
pub fn clear_seed() {
    if let Ok(mut s) = SEED.lock() {
        *s = None;
    }
}

/// Rows buffered by [`crate::Dataset::prefetch`] when no capacity is given (MindSpore's
/// default is 16).
pub fn set_prefetch_size(size: usize) {
    PREFETCH.store(size.max(1), Ordering::Relaxed);
}

pub fn get_prefetch_size() -> usize {
    PREFETCH.load(Ordering::Relaxed)
}

/// The seed a new random node uses: the configured seed mixed with a salt that tells
/// apart the node kinds and positions (so two shuffles in one pipeline do not make the
/// same choices), or fresh entropy when no seed is set.
pub(crate) fn node_seed(salt: u64) -> u64 {
    match get_seed() {
        Some(s) => mix(s, salt),
        // RandomState is randomly keyed per process (and per instance), which is all the
        // entropy an unseeded shuffle needs, without a dependency.
        None => RandomState::new().hash_one(FRESH.fetch_add(1, Ordering::Relaxed)),
    }
}
