//! What every node of a dataset pipeline is: a source or an operation that yields the
//! [`Row`]s of one epoch ([`Node::open`]) and knows its columns and size.
//!
//! ```
//! use spore_data::{GeneratorDataset, Row};
//! // A source node with one column, "x": each row holds one tensor.
//! let ds = GeneratorDataset::from_iter(["x"], || (0..2).map(|i| spore_core::Tensor::scalar(i)))
//!     .build()
//!     .unwrap();
//! let first: Row = ds.create_tuple_iterator(1).next().unwrap().unwrap();
//! assert_eq!((ds.get_col_names(), first.len()), (vec!["x".to_string()], 1));
//! ```

use std::sync::Arc;

use spore_core::{Result, Tensor};

use crate::rng::mix;

/// One row: a tensor per column, in [`Dataset::get_col_names`] order.
pub type Row = Vec<Tensor>;

/// The rows of one epoch of a node.
pub(crate) type Rows = Box<dyn Iterator<Item = Result<Row>> + Send>;

/// Rows per epoch, as far as a node knows without running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    Known(usize),
    /// Only iterating tells (a generator without a length, a filter).
    Unknown,
    Infinite,
}

impl Size {
    pub(crate) fn map(self, f: impl FnOnce(usize) -> usize) -> Size {
        match self {
            Size::Known(n) => Size::Known(f(n)),
            other => other,
        }
    }
}

/// A node of the pipeline tree.
pub(crate) trait Node: Send + Sync {
    /// For errors and `Debug`: `MnistDataset`, `Map(image: Resize, Rescale)`, ...
    fn name(&self) -> String;
    fn columns(&self) -> &[String];
    fn size(&self) -> Size;
    /// Nodes in this subtree; salts the seeds of random nodes so that two shuffles (or
    /// two random maps) of one pipeline do not make the same choices.
    fn depth(&self) -> usize;
    /// The rows of one epoch. `key` differs per epoch (and per repetition under
    /// `repeat`), and is all the randomness a node may use besides its own seed.
    fn open(self: Arc<Self>, key: u64) -> Result<Rows>;
    /// A map node offers itself (to be downcast) so that a `map` right above it can fuse
    /// with it; other nodes offer nothing.
    fn as_map(&self) -> Option<&dyn std::any::Any> {
        None
    }
    /// Whether a source below reads one shard of its data (`num_shards`/`shard_id`).
    fn is_sharded(&self) -> bool {
        false
    }
}

/// The key of epoch `epoch` at the root of a tree.
pub(crate) fn epoch_key(epoch: u64) -> u64 {
    mix(0x5eed_0fe9, epoch)
}
