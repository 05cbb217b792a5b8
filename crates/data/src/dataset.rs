//! [`Dataset`]: an immutable description of a pipeline (a tree of nodes: sources at the
//! leaves, operations above), built with MindSpore's method names. Nothing runs until an
//! iterator is created; each epoch opens the tree afresh with an epoch key from which the
//! shuffles and random transforms derive their seeds.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec((0..10i32).collect(), &[10]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let ds = ds.batch(4, true).unwrap().repeat(2).unwrap();
//! assert_eq!(ds.get_dataset_size().unwrap(), 4); // 2 full batches, twice
//! let first = ds.create_tuple_iterator(1).next().unwrap().unwrap();
//! assert_eq!(first[0].to_vec::<i32>().unwrap(), vec![0, 1, 2, 3]);
//! ```

use std::fmt;
use std::sync::Arc;

use spore_core::{Error, Result};

use crate::iterator::{DictIterator, TupleIterator};
pub use crate::node::Row;
use crate::node::{Node, Size, epoch_key};
use crate::pipeline::batch::BatchNode;
use crate::pipeline::columns::{ConcatNode, ProjectNode, RenameNode, ZipNode};
use crate::pipeline::map::{Map, MapNode};
use crate::pipeline::repeat::{RepeatNode, SkipNode, TakeNode};
use crate::pipeline::shuffle::ShuffleNode;
use crate::transforms::Transform;

/// A dataset pipeline. Cloning is cheap (the tree is shared); every method returns a new
/// pipeline and leaves this one usable.
#[derive(Clone)]
pub struct Dataset {
    pub(crate) node: Arc<dyn Node>,
}

fn names<C, S>(columns: C) -> Vec<String>
where
    C: IntoIterator<Item = S>,
    S: Into<String>,
{
    columns.into_iter().map(Into::into).collect()
}

impl Dataset {
    pub(crate) fn from_node(node: impl Node + 'static) -> Dataset {
        Dataset {
            node: Arc::new(node),
        }
    }

    /// The column names of each row, in order.
    pub fn get_col_names(&self) -> Vec<String> {
        self.node.columns().to_vec()
    }

    /// Whether this pipeline reads one shard of its data (a source below it has
    /// `num_shards`/`shard_id` or a `DistributedSampler`).
    pub fn is_sharded(&self) -> bool {
        self.node.is_sharded()
    }

    /// Rows (or batches) per epoch. Computed from the sizes of the sources when they are
    /// known; otherwise (a generator without a length) by running one epoch, as MindSpore
    /// does. An endless `repeat` has no size and gives an error.
    pub fn get_dataset_size(&self) -> Result<usize> {
        match self.node.size() {
            Size::Known(n) => Ok(n),
            Size::Infinite => Err(Error::invalid(format!(
                "get_dataset_size: {} repeats forever, so it has no size",
                self.node.name()
            ))),
            Size::Unknown => {
                let mut n = 0;
                for row in self.node.clone().open(epoch_key(0))? {
                    row?;
                    n += 1;
                }
                Ok(n)
            }
        }
    }

    /// Applies `operations` in order to `input_columns` of every row, with
    /// `num_parallel_workers` threads (the output order is the input order whatever the
    /// count). The results replace the input columns. For other output columns use
    /// [`Dataset::map_with`].
    pub fn map<C, S>(
        &self,
        input_columns: C,
        operations: Vec<Transform>,
        num_parallel_workers: usize,
    ) -> Result<Dataset>
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.map_with(
            Map::new(input_columns, operations).num_parallel_workers(num_parallel_workers),
        )
    }

    /// `map` with every option (output columns, workers).
    pub fn map_with(&self, map: Map) -> Result<Dataset> {
        Ok(Dataset::from_node(MapNode::new(self.node.clone(), map)?))
    }

    /// Buffer shuffle: keeps `buffer_size` rows and emits a random one each time a new
    /// row comes in (so `buffer_size >= dataset size` is a full shuffle). Reshuffled each
    /// epoch, from the seed of [`crate::config::set_seed`] when one is set.
    pub fn shuffle(&self, buffer_size: usize) -> Result<Dataset> {
        Ok(Dataset::from_node(ShuffleNode::new(
            self.node.clone(),
            buffer_size,
        )?))
    }

    /// Stacks `batch_size` consecutive rows into one (each column gains a leading
    /// axis); the last, smaller batch is dropped when `drop_remainder` is set.
    pub fn batch(&self, batch_size: usize, drop_remainder: bool) -> Result<Dataset> {
        Ok(Dataset::from_node(BatchNode::new(
            self.node.clone(),
            batch_size,
            drop_remainder,
        )?))
    }

    /// The rows of this dataset `count` times per epoch (shuffles below reshuffle for
    /// each repetition).
    pub fn repeat(&self, count: usize) -> Result<Dataset> {
        Ok(Dataset::from_node(RepeatNode::new(
            self.node.clone(),
            Some(count),
        )?))
    }

    /// Repeats without end (MindSpore's `repeat()` / `repeat(-1)`).
    pub fn repeat_forever(&self) -> Dataset {
        Dataset::from_node(RepeatNode::forever(self.node.clone()))
    }

    /// The first `count` rows of each epoch.
    pub fn take(&self, count: usize) -> Result<Dataset> {
        Ok(Dataset::from_node(TakeNode::new(self.node.clone(), count)?))
    }

    /// Each epoch without its first `count` rows.
    pub fn skip(&self, count: usize) -> Result<Dataset> {
        Ok(Dataset::from_node(SkipNode::new(self.node.clone(), count)))
    }

    /// Keeps only `columns`, in that order.
    pub fn project<C, S>(&self, columns: C) -> Result<Dataset>
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Ok(Dataset::from_node(ProjectNode::new(
            self.node.clone(),
            names(columns),
        )?))
    }

    /// Renames `input_columns[i]` to `output_columns[i]`.
    pub fn rename<C, S, D, T>(&self, input_columns: C, output_columns: D) -> Result<Dataset>
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
        D: IntoIterator<Item = T>,
        T: Into<String>,
    {
        Ok(Dataset::from_node(RenameNode::new(
            self.node.clone(),
            names(input_columns),
            names(output_columns),
        )?))
    }

    /// Rows side by side: this dataset's columns, then each other's (names must not
    /// repeat); as long as the shortest.
    pub fn zip(&self, others: &[Dataset]) -> Result<Dataset> {
        let mut all = vec![self.node.clone()];
        all.extend(others.iter().map(|d| d.node.clone()));
        Ok(Dataset::from_node(ZipNode::new(all)?))
    }

    /// This dataset's rows, then each other's (same column names required).
    pub fn concat(&self, others: &[Dataset]) -> Result<Dataset> {
        let mut all = vec![self.node.clone()];
        all.extend(others.iter().map(|d| d.node.clone()));
        Ok(Dataset::from_node(ConcatNode::new(all)?))
    }

    /// Rows as `Vec<Tensor>` for `num_epochs` epochs. Each epoch ends with one `None`;
    /// calling `next` again starts the next epoch (as a Python loop over MindSpore's
    /// iterator does), so `for row in &mut it` walks one epoch.
    pub fn create_tuple_iterator(&self, num_epochs: usize) -> TupleIterator {
        TupleIterator::new(self.node.clone(), num_epochs)
    }

    /// Rows as `HashMap<column name, Tensor>`, with the epoch behaviour of
    /// [`Dataset::create_tuple_iterator`].
    pub fn create_dict_iterator(&self, num_epochs: usize) -> DictIterator {
        DictIterator::new(self.create_tuple_iterator(num_epochs))
    }

    /// The shapes of the first row's columns (runs the pipeline up to that row).
    pub fn output_shapes(&self) -> Result<Vec<Vec<usize>>> {
        Ok(self
            .first_row()?
            .iter()
            .map(|t| t.shape().to_vec())
            .collect())
    }

    /// The dtypes of the first row's columns (runs the pipeline up to that row).
    pub fn output_types(&self) -> Result<Vec<spore_core::DType>> {
        Ok(self.first_row()?.iter().map(|t| t.dtype()).collect())
    }

    fn first_row(&self) -> Result<Row> {
        match self.node.clone().open(epoch_key(0))?.next() {
            Some(row) => row,
            None => Err(Error::invalid(format!(
                "{} yields no rows",
                self.node.name()
            ))),
        }
    }
}

impl fmt::Debug for Dataset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {:?}", self.node.name(), self.node.columns())
    }
}
