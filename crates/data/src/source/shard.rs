//! Sharding for distributed training: MindSpore's `num_shards`/`shard_id` options and
//! `DistributedSampler`. Every rank orders the whole dataset the same way (the same
//! seeded permutation when shuffling), then rank `i` of `k` takes rows `i, i + k,
//! i + 2k, ...`; when `k` divides the dataset the shards are disjoint and together are
//! the dataset. When it does not, every shard still gets `ceil(n / k)` rows (the last
//! ones wrap around to the start, as MindSpore and PyTorch do), so that the ranks run
//! the same number of steps and their collectives stay in step; up to `k - 1` rows are
//! then read twice per epoch (and counted twice by a sharded evaluation).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::{DistributedSampler, NumpySlicesDataset};
//! let x = Tensor::from_vec((0..10i32).collect(), &[10]).unwrap();
//! let shard = |id| NumpySlicesDataset::new(vec![("x", x.clone())]).unwrap()
//!     .sampler(DistributedSampler::new(2, id).shuffle(false)).build().unwrap();
//! assert_eq!(shard(1).get_dataset_size().unwrap(), 5);
//! // The same with MindSpore's keyword options:
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().num_shards(2).shard_id(1).build().unwrap();
//! assert_eq!(ds.get_dataset_size().unwrap(), 5);
//! ```

use spore_core::{Error, Result};

/// MindSpore's `DistributedSampler(num_shards, shard_id, shuffle=True, num_samples=None)`
/// with its seed (default 0, the same on every rank, so the shards are disjoint).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistributedSampler {
    pub num_shards: usize,
    pub shard_id: usize,
    pub shuffle: bool,
    pub num_samples: Option<usize>,
    pub seed: u64,
}

impl DistributedSampler {
    pub fn new(num_shards: usize, shard_id: usize) -> DistributedSampler {
        DistributedSampler {
            num_shards,
            shard_id,
            shuffle: true,
            num_samples: None,
            seed: 0,
        }
    }
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }
    /// At most this many rows per shard and epoch.
    pub fn num_samples(mut self, n: usize) -> Self {
        self.num_samples = Some(n);
        self
    }
    /// The permutation's seed; it must be the same on every rank.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// Checks `num_shards`/`shard_id` as given to a source; `Some((k, i))` when sharded.
pub(crate) fn check_shards(
    label: &str,
    num_shards: Option<usize>,
    shard_id: Option<usize>,
) -> Result<Option<(usize, usize)>> {
    match (num_shards, shard_id) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::invalid(format!(
            "{label}: num_shards is specified and currently requires shard_id as well"
        ))),
        (None, Some(_)) => Err(Error::invalid(format!(
            "{label}: shard_id is specified but num_shards is not"
        ))),
        (Some(0), _) => Err(Error::invalid(format!(
            "{label}: num_shards must be at least 1, got 0"
        ))),
        (Some(k), Some(i)) if i >= k => Err(Error::invalid(format!(
            "{label}: shard_id {i} is out of range: it must be in [0, {}] for num_shards {k}",
            k - 1
        ))),
        (Some(k), Some(i)) => Ok(Some((k, i))),
    }
}

/// How many rows each of `k` shards of `n` rows gets.
pub(crate) fn shard_len(n: usize, k: usize) -> usize {
    if n == 0 { 0 } else { n.div_ceil(k) }
}

/// Shard `i` of `k` of `order` (the whole dataset's row order for this epoch).
pub(crate) fn take_shard(order: &[usize], k: usize, i: usize) -> Vec<usize> {
    let n = order.len();
    (0..shard_len(n, k))
        .map(|j| order[(j * k + i) % n])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_rows_and_pad_to_equal_length() {
        let order: Vec<usize> = (0..12).rev().collect();
        let shards: Vec<Vec<usize>> = (0..4).map(|i| take_shard(&order, 4, i)).collect();
        let mut all = shards.concat();
        all.sort();
        assert_eq!(all, (0..12).collect::<Vec<_>>());
        let order: Vec<usize> = (0..10).collect();
        let shards: Vec<Vec<usize>> = (0..4).map(|i| take_shard(&order, 4, i)).collect();
        assert!(shards.iter().all(|s| s.len() == 3));
        assert_eq!(shards[3], vec![3, 7, 1], "the last rows wrap around");
    }

    #[test]
    fn bad_shard_options_are_errors() {
        let e = check_shards("ds", Some(2), None).unwrap_err().to_string();
        assert!(e.contains("requires shard_id"), "{e}");
        let e = check_shards("ds", Some(2), Some(2))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shard_id 2 is out of range: it must be in [0, 1]"),
            "{e}"
        );
        assert!(check_shards("ds", Some(0), Some(0)).is_err());
        assert_eq!(check_shards("ds", Some(3), Some(1)).unwrap(), Some((3, 1)));
    }
}
