//! `shuffle(buffer_size)`: MindSpore's buffer shuffle. The first `buffer_size` rows fill
//! a buffer; then each step emits a random buffered row and puts the next incoming row in
//! its place, and the remainder drains in random order. A buffer at least as large as the
//! dataset gives a uniform shuffle; a smaller one only mixes rows that are near each other.
//! The generator is seeded from (node seed, epoch key): each epoch is shuffled anew.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! spore_data::config::set_seed(58);
//! let x = Tensor::from_vec((0..8i32).collect(), &[8]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let ds = ds.shuffle(8).unwrap();
//! let mut xs: Vec<f64> = ds.create_tuple_iterator(1).map(|r| r.unwrap()[0].item().unwrap()).collect();
//! xs.sort_by(f64::total_cmp);
//! assert_eq!(xs, (0..8).map(f64::from).collect::<Vec<_>>()); // a permutation
//! ```

use std::sync::Arc;

use spore_core::{Error, Result};

use crate::config::node_seed;
use crate::node::{Node, Row, Rows, Size};
use crate::rng::{Rng, mix};

pub(crate) struct ShuffleNode {
    child: Arc<dyn Node>,
    buffer_size: usize,
    seed: u64,
}

impl ShuffleNode {
    pub(crate) fn new(child: Arc<dyn Node>, buffer_size: usize) -> Result<ShuffleNode> {
        if buffer_size < 2 {
            return Err(Error::invalid(format!(
                "shuffle: buffer_size must be at least 2, got {buffer_size}"
            )));
        }
        Ok(ShuffleNode {
            seed: node_seed(mix(0x5f1, child.depth() as u64 + 1)),
            child,
            buffer_size,
        })
    }
}

impl Node for ShuffleNode {
    fn name(&self) -> String {
        format!("shuffle({}) <- {}", self.buffer_size, self.child.name())
    }
    fn columns(&self) -> &[String] {
        self.child.columns()
    }
    fn size(&self) -> Size {
        self.child.size()
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        Ok(Box::new(Shuffler {
            upstream: self.child.clone().open(key)?,
            upstream_done: false,
            // Grows as rows arrive, so a huge buffer_size over a small dataset costs nothing.
            buffer: Vec::new(),
            capacity: self.buffer_size,
            rng: Rng::new(mix(self.seed, key)),
        }))
    }
}

struct Shuffler {
    upstream: Rows,
    upstream_done: bool,
    buffer: Vec<Row>,
    capacity: usize,
    rng: Rng,
}

impl Shuffler {
    /// The next upstream row, or `None` at the end; errors pass straight through.
    fn pull(&mut self) -> Option<Result<Row>> {
        if self.upstream_done {
            return None;
        }
        let r = self.upstream.next();
        if r.is_none() {
            self.upstream_done = true;
        }
        r
    }
}

impl Iterator for Shuffler {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        while self.buffer.len() < self.capacity {
            match self.pull() {
                Some(Ok(row)) => self.buffer.push(row),
                Some(Err(e)) => return Some(Err(e)),
                None => break,
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let i = self.rng.below(self.buffer.len() as u64) as usize;
        match self.pull() {
            Some(Ok(row)) => Some(Ok(std::mem::replace(&mut self.buffer[i], row))),
            Some(Err(e)) => Some(Err(e)),
            None => Some(Ok(self.buffer.swap_remove(i))),
        }
    }
}
