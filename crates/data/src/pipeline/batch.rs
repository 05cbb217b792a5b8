//! `batch(batch_size, drop_remainder)`: stacks consecutive rows column by column (every
//! tensor gains a leading axis of length `batch_size`). Rows of a batch must agree in
//! shape and dtype per column; the error names the column and the two shapes.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec((0..10i32).collect(), &[5, 2]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let shapes: Vec<Vec<usize>> = ds.batch(2, false).unwrap().create_tuple_iterator(1)
//!     .map(|r| r.unwrap()[0].shape().to_vec()).collect();
//! assert_eq!(shapes, vec![vec![2, 2], vec![2, 2], vec![1, 2]]);
//! ```

use std::sync::Arc;

use spore_core::{Error, Result, Tensor};

use crate::node::{Node, Row, Rows, Size};
use crate::tensors::stack;

pub(crate) struct BatchNode {
    child: Arc<dyn Node>,
    batch_size: usize,
    drop_remainder: bool,
}

impl BatchNode {
    pub(crate) fn new(
        child: Arc<dyn Node>,
        batch_size: usize,
        drop_remainder: bool,
    ) -> Result<BatchNode> {
        if batch_size == 0 {
            return Err(Error::invalid(
                "batch: batch_size must be at least 1, got 0",
            ));
        }
        Ok(BatchNode {
            child,
            batch_size,
            drop_remainder,
        })
    }
}

impl Node for BatchNode {
    fn name(&self) -> String {
        format!(
            "batch({}, drop_remainder={}) <- {}",
            self.batch_size,
            self.drop_remainder,
            self.child.name()
        )
    }
    fn columns(&self) -> &[String] {
        self.child.columns()
    }
    fn size(&self) -> Size {
        let (b, drop) = (self.batch_size, self.drop_remainder);
        self.child
            .size()
            .map(|n| if drop { n / b } else { n.div_ceil(b) })
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let mut upstream = self.child.clone().open(key)?;
        let node = self;
        let mut done = false;
        Ok(Box::new(std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut rows: Vec<Row> = Vec::with_capacity(node.batch_size);
            while rows.len() < node.batch_size {
                match upstream.next() {
                    Some(Ok(row)) => rows.push(row),
                    Some(Err(e)) => return Some(Err(e)),
                    None => {
                        done = true;
                        break;
                    }
                }
            }
            if rows.is_empty() || (node.drop_remainder && rows.len() < node.batch_size) {
                return None;
            }
            Some(node.stack(rows))
        })))
    }
}

impl BatchNode {
    fn stack(&self, rows: Vec<Row>) -> Result<Row> {
        let columns = self.child.columns();
        (0..columns.len())
            .map(|c| {
                let col: Vec<Tensor> = rows.iter().map(|r| r[c].clone()).collect();
                stack(&col, &columns[c])
            })
            .collect()
    }
}
