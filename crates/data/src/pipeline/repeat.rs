//! Operations that change how many rows an epoch has: `repeat(count)` (and
//! `repeat_forever`), `take(count)`, `skip(count)`. Each repetition opens the child with
//! its own key, so shuffles below a repeat reshuffle every time, as in MindSpore.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec((0..3i32).collect(), &[3]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let ds = ds.repeat(3).unwrap().skip(2).unwrap().take(5).unwrap();
//! let xs: Vec<f64> = ds.create_tuple_iterator(1).map(|r| r.unwrap()[0].item().unwrap()).collect();
//! assert_eq!(xs, vec![2.0, 0.0, 1.0, 2.0, 0.0]);
//! assert_eq!(ds.get_dataset_size().unwrap(), 5);
//! ```

use std::sync::Arc;

use spore_core::{Error, Result};

use crate::node::{Node, Rows, Size};
use crate::rng::mix;

pub(crate) struct RepeatNode {
    child: Arc<dyn Node>,
    /// `None`: forever.
    count: Option<usize>,
}

impl RepeatNode {
    pub(crate) fn new(child: Arc<dyn Node>, count: Option<usize>) -> Result<RepeatNode> {
        if count == Some(0) {
            return Err(Error::invalid(
                "repeat: count must be at least 1 (use repeat_forever for an endless dataset)",
            ));
        }
        Ok(RepeatNode { child, count })
    }

    pub(crate) fn forever(child: Arc<dyn Node>) -> RepeatNode {
        RepeatNode { child, count: None }
    }
}

impl Node for RepeatNode {
    fn name(&self) -> String {
        match self.count {
            Some(n) => format!("repeat({n}) <- {}", self.child.name()),
            None => format!("repeat_forever <- {}", self.child.name()),
        }
    }
    fn columns(&self) -> &[String] {
        self.child.columns()
    }
    fn size(&self) -> Size {
        match (self.count, self.child.size()) {
            (Some(n), s) => s.map(|m| m.saturating_mul(n)),
            (None, Size::Known(0)) => Size::Known(0),
            (None, _) => Size::Infinite,
        }
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let node = self;
        let mut rep = 0usize;
        let mut current: Option<Rows> = None;
        let mut rows_this_rep = 0usize;
        Ok(Box::new(std::iter::from_fn(move || {
            loop {
                if current.is_none() {
                    if node.count.is_some_and(|n| rep >= n) {
                        return None;
                    }
                    match node.child.clone().open(mix(key, rep as u64)) {
                        Ok(rows) => current = Some(rows),
                        Err(e) => return Some(Err(e)),
                    }
                    rows_this_rep = 0;
                }
                match current.as_mut().and_then(|c| c.next()) {
                    Some(r) => {
                        rows_this_rep += 1;
                        return Some(r);
                    }
                    None => {
                        current = None;
                        rep += 1;
                        // An empty child would make an endless repeat spin forever.
                        if rows_this_rep == 0 && node.count.is_none() {
                            return None;
                        }
                    }
                }
            }
        })))
    }
}

pub(crate) struct TakeNode {
    child: Arc<dyn Node>,
    count: usize,
}

impl TakeNode {
    pub(crate) fn new(child: Arc<dyn Node>, count: usize) -> Result<TakeNode> {
        if count == 0 {
            return Err(Error::invalid("take: count must be at least 1, got 0"));
        }
        Ok(TakeNode { child, count })
    }
}

impl Node for TakeNode {
    fn name(&self) -> String {
        format!("take({}) <- {}", self.count, self.child.name())
    }
    fn columns(&self) -> &[String] {
        self.child.columns()
    }
    fn size(&self) -> Size {
        match self.child.size() {
            Size::Known(n) => Size::Known(n.min(self.count)),
            Size::Infinite => Size::Known(self.count),
            Size::Unknown => Size::Unknown,
        }
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        Ok(Box::new(self.child.clone().open(key)?.take(self.count)))
    }
}

pub(crate) struct SkipNode {
    child: Arc<dyn Node>,
    count: usize,
}

impl SkipNode {
    pub(crate) fn new(child: Arc<dyn Node>, count: usize) -> SkipNode {
        SkipNode { child, count }
    }
}

impl Node for SkipNode {
    fn name(&self) -> String {
        format!("skip({}) <- {}", self.count, self.child.name())
    }
    fn columns(&self) -> &[String] {
        self.child.columns()
    }
    fn size(&self) -> Size {
        self.child.size().map(|n| n.saturating_sub(self.count))
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let mut rows = self.child.clone().open(key)?;
        let mut to_skip = self.count;
        Ok(Box::new(std::iter::from_fn(move || {
            // Skipped rows still surface their errors rather than hiding them.
            while to_skip > 0 {
                to_skip -= 1;
                match rows.next()? {
                    Ok(_) => {}
                    Err(e) => return Some(Err(e)),
                }
            }
            rows.next()
        })))
    }
}
