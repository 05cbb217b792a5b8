//! Iterators over a pipeline's rows for a number of epochs, as MindSpore's
//! `create_tuple_iterator` / `create_dict_iterator`. An epoch ends with one `None`;
//! calling `next` again starts the next epoch, until `num_epochs` are done. After an
//! error the iterator is finished.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let mut it = ds.create_dict_iterator(2);
//! for epoch in 0..2 {
//!     let rows: Vec<_> = (&mut it).collect::<Result<_, _>>().unwrap();
//!     assert_eq!(rows.len(), 3, "epoch {epoch}");
//!     assert_eq!(rows[0]["x"].item().unwrap(), 1.0);
//! }
//! assert!(it.next().is_none());
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use spore_core::{Result, Tensor};

use crate::node::{Node, Row, Rows, epoch_key};

/// Rows as `Vec<Tensor>`, column order as [`crate::Dataset::get_col_names`].
pub struct TupleIterator {
    node: Arc<dyn Node>,
    columns: Arc<[String]>,
    num_epochs: usize,
    epoch: usize,
    current: Option<Rows>,
    done: bool,
}

impl TupleIterator {
    pub(crate) fn new(node: Arc<dyn Node>, num_epochs: usize) -> TupleIterator {
        TupleIterator {
            columns: node.columns().into(),
            node,
            num_epochs,
            epoch: 0,
            current: None,
            done: num_epochs == 0,
        }
    }

    /// Starts at epoch `first` (0-based) instead of 0, so that a resumed training run sees
    /// the same shuffles as an uninterrupted one; `num_epochs` still counts from 0.
    pub fn starting_at_epoch(mut self, first: usize) -> TupleIterator {
        self.epoch = first;
        self.done = first >= self.num_epochs;
        self
    }

    /// The epoch the next row belongs to (0-based).
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    pub fn num_epochs(&self) -> usize {
        self.num_epochs
    }

    /// The column names of each row.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// True once every epoch has been delivered (or an error ended the iteration).
    pub fn is_finished(&self) -> bool {
        self.done
    }
}

impl Iterator for TupleIterator {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        if self.done {
            return None;
        }
        if self.current.is_none() {
            match self.node.clone().open(epoch_key(self.epoch as u64)) {
                Ok(rows) => self.current = Some(rows),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let item = self.current.as_mut().and_then(|rows| rows.next());
        match item {
            Some(Ok(row)) => Some(Ok(row)),
            Some(Err(e)) => {
                self.done = true;
                self.current = None;
                Some(Err(e))
            }
            None => {
                // End of this epoch: report it with one None, move on to the next.
                self.current = None;
                self.epoch += 1;
                if self.epoch >= self.num_epochs {
                    self.done = true;
                }
                None
            }
        }
    }
}

/// Rows as `HashMap<column name, Tensor>`.
pub struct DictIterator {
    inner: TupleIterator,
}

impl DictIterator {
    pub(crate) fn new(inner: TupleIterator) -> DictIterator {
        DictIterator { inner }
    }

    pub fn epoch(&self) -> usize {
        self.inner.epoch()
    }

    pub fn columns(&self) -> &[String] {
        self.inner.columns()
    }

    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }
}

impl Iterator for DictIterator {
    type Item = Result<HashMap<String, Tensor>>;

    fn next(&mut self) -> Option<Self::Item> {
        let row = self.inner.next()?;
        Some(row.map(|row| self.inner.columns.iter().cloned().zip(row).collect()))
    }
}
